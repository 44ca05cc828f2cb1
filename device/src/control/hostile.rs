//! The `hostile` command: a device's hostile-device mode shown, or switched on or off
//! (`crate::hostile`). Its own lock only, never the device lock.

use super::handlers::encode;
use super::protocol::{HostileReply, RequestError};
use crate::hostile::Settings;
use crate::rnic::Rnic;

/// Switches (`on` Some) and reports the mode of `rnic`. Bad settings change nothing.
pub fn handle(
    rnic: &Rnic,
    on: Option<bool>,
    settings: Option<&str>,
) -> Result<Vec<u8>, RequestError> {
    let parsed = settings
        .map(Settings::parse)
        .transpose()
        .map_err(RequestError::BadHostile)?;
    match (on, parsed) {
        (Some(true), s) => {
            let s = rnic.hostile.switch_on(s);
            log::info!("{}: hostile-device mode on ({s})", rnic.name());
        }
        (Some(false), None) => {
            rnic.hostile.switch_off();
            log::info!("{}: hostile-device mode off", rnic.name());
        }
        (Some(false), Some(_)) | (None, Some(_)) => {
            return Err(RequestError::BadHostile(
                "settings go with \"on\":true only".into(),
            ))
        }
        (None, None) => {}
    }
    let status = rnic.hostile.status();
    encode(&HostileReply {
        device: rnic.name().into(),
        on: status.on,
        settings: status.settings.map(|s| s.to_string()),
        written: status
            .counts
            .iter()
            .map(|(k, n)| (k.name().to_string(), *n))
            .collect(),
    })
}

/// `vrnic ctl hostile` as text: the state line, then the kinds written (those with a
/// count; every kind with --json).
pub fn render(reply: &HostileReply) -> String {
    let mut out = format!(
        "{} hostile {} ({})\n",
        reply.device,
        if reply.on { "on" } else { "off" },
        reply.settings.as_deref().unwrap_or("never set")
    );
    let mut total = 0;
    for (kind, n) in reply.written.iter().filter(|(_, n)| **n > 0) {
        out.push_str(&format!("  {kind:<20} {n}\n"));
        total += n;
    }
    out.push_str(&format!("  {:<20} {total}\n", "total written"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Request;
    use crate::rnic::testing::device_with_ram;

    #[test]
    fn the_command_switches_the_mode_and_bad_settings_change_nothing() {
        let (rnic, _mem) = device_with_ram(0x1000);
        let reply = |line: Vec<u8>| -> HostileReply { serde_json::from_slice(&line).unwrap() };

        let r = reply(handle(&rnic, Some(true), Some("cqe-phase+irq:5:50")).unwrap());
        assert!(r.on && rnic.hostile.is_on());
        assert_eq!(r.settings.as_deref(), Some("cqe-phase+irq:5:50"));
        assert_eq!(r.written.len(), crate::hostile::Kind::COUNT);
        assert!(matches!(
            handle(&rnic, Some(true), Some("cqe:1:0")),
            Err(RequestError::BadHostile(_))
        ));
        assert!(handle(&rnic, Some(false), Some("cqe:1")).is_err());
        assert!(rnic.hostile.is_on(), "refused requests changed nothing");
        let r = reply(handle(&rnic, Some(false), None).unwrap());
        assert!(!r.on && !rnic.hostile.is_on());

        let text = crate::control::render::render(
            &Request::Hostile {
                device: "t".into(),
                on: None,
                settings: None,
            },
            &serde_json::to_string(&r).unwrap(),
        )
        .unwrap();
        assert!(
            text.starts_with("t hostile off (cqe-phase+irq:5:50)"),
            "{text}"
        );
        assert!(text.contains("total written"), "{text}");
    }
}
