//! The `uplinks` and `impair` commands: the uplinks with their counters, and an uplink's
//! impairment shown, replaced or switched off (`crate::net::impair`). No device lock is
//! taken: each uplink has its own.
//!
//! ```text
//! {"cmd":"uplinks"}
//!   -> {"uplinks":[{"name":"up0","kind":"tap","ifname":"vrnic0","port":0,
//!       "counters":{"rx_frames":..,..},"impair":"loss rate=1%"|null}]}
//! {"cmd":"impair","uplink":"up0"}                          shown
//! {"cmd":"impair","uplink":"up0","spec":"loss every=5"}    replaced (fresh counts)
//! {"cmd":"impair","uplink":"up0","spec":"off"}             off
//!   -> {"uplink":"up0","counters":{..},"spec":"loss every=5","rules":[{"rule":"loss every=5",
//!       "egress":{"seen":..,"applied":..,"short":0},"ingress":{..}}],"held_egress":0,..}
//! ```
//!
//! Replacing or switching off lets out at once the frames the old spec held. A bad spec
//! changes nothing.

use super::handlers::encode;
use super::protocol::RequestError;
use crate::fabric::Fabric;
use crate::net::impair::{self, Spec};
use crate::net::uplink::{Counters, Uplink};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UplinkView {
    pub name: String,
    /// `tap` or `dev`.
    pub kind: String,
    pub ifname: String,
    pub port: usize,
    pub counters: Counters,
    pub impair: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UplinksReply {
    pub uplinks: Vec<UplinkView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImpairReply {
    pub uplink: String,
    pub counters: Counters,
    #[serde(flatten)]
    pub status: impair::Status,
}

fn find(fabric: &Fabric, name: &str) -> Result<Arc<Uplink>, RequestError> {
    fabric
        .uplinks
        .find(name)
        .ok_or_else(|| RequestError::UnknownUplink {
            name: name.chars().take(64).collect(),
            known: fabric
                .uplinks
                .all()
                .iter()
                .map(|u| u.config().name.clone())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

pub fn uplinks(fabric: &Fabric) -> Result<Vec<u8>, RequestError> {
    encode(&UplinksReply {
        uplinks: fabric
            .uplinks
            .all()
            .iter()
            .map(|u| UplinkView {
                name: u.config().name.clone(),
                kind: u.config().kind.kind_name().into(),
                ifname: u.config().kind.ifname().into(),
                port: u.id(),
                counters: u.counters(),
                impair: u.impairment().spec,
            })
            .collect(),
    })
}

pub fn impair(fabric: &Fabric, name: &str, spec: Option<&str>) -> Result<Vec<u8>, RequestError> {
    let uplink = find(fabric, name)?;
    match spec {
        None => {}
        Some("off") => fabric.uplinks.set_impairment(&uplink, None),
        Some(text) => {
            let spec = Spec::parse(text).map_err(|e| RequestError::BadImpair(e.to_string()))?;
            fabric.uplinks.set_impairment(&uplink, Some(spec));
        }
    }
    encode(&ImpairReply {
        uplink: uplink.config().name.clone(),
        counters: uplink.counters(),
        status: uplink.impairment(),
    })
}

fn counter_rows(c: &Counters) -> Vec<Vec<String>> {
    [
        ("rx_frames", c.rx_frames),
        ("rx_bytes", c.rx_bytes),
        ("rx_too_long", c.rx_too_long),
        ("rx_errors", c.rx_errors),
        ("tx_frames", c.tx_frames),
        ("tx_bytes", c.tx_bytes),
        ("tx_dropped", c.tx_dropped),
        ("tx_errors", c.tx_errors),
    ]
    .iter()
    .map(|(n, v)| vec![n.to_string(), v.to_string()])
    .collect()
}

/// `vrnic ctl uplinks` as text.
pub fn render_uplinks(reply: &UplinksReply) -> String {
    let rows: Vec<Vec<String>> = reply
        .uplinks
        .iter()
        .map(|u| {
            let c = &u.counters;
            vec![
                u.name.clone(),
                format!("{}={}", u.kind, u.ifname),
                u.port.to_string(),
                format!("{}/{}", c.rx_frames, c.tx_frames),
                format!(
                    "{}/{}/{}",
                    c.rx_too_long + c.rx_errors,
                    c.tx_dropped,
                    c.tx_errors
                ),
                u.impair.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    super::render::table(
        &[
            "UPLINK",
            "INTERFACE",
            "PORT",
            "RX/TX",
            "RXDROP/TXDROP/TXERR",
            "IMPAIR",
        ],
        &rows,
    )
}

/// `vrnic ctl impair` as text: the spec, each rule's counts per direction, the hold,
/// then the uplink's counters.
pub fn render_impair(reply: &ImpairReply) -> String {
    let s = &reply.status;
    let mut out = format!(
        "{} impairment {}\n",
        reply.uplink,
        s.spec.as_deref().unwrap_or("off")
    );
    if !s.rules.is_empty() {
        let rows: Vec<Vec<String>> = s
            .rules
            .iter()
            .map(|r| {
                let c = |v: &impair::RuleCountsView| match v.short {
                    0 => format!("{}/{}", v.applied, v.seen),
                    short => format!("{}/{} ({short} short)", v.applied, v.seen),
                };
                vec![r.rule.clone(), c(&r.egress), c(&r.ingress)]
            })
            .collect();
        out += &super::render::table(
            &["RULE", "EGRESS APPLIED/SEEN", "INGRESS APPLIED/SEEN"],
            &rows,
        );
        out += &format!(
            "held now {} egress, {} ingress; dropped for lack of room {} egress, {} ingress\n",
            s.held_egress, s.held_ingress, s.overflow_egress, s.overflow_ingress
        );
    }
    out + &super::render::table(&["COUNTER", "VALUE"], &counter_rows(&reply.counters))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Request;

    #[test]
    fn impair_requests_name_an_uplink_and_unknown_ones_list_the_known() {
        let fabric = crate::fabric::Fabric::new(vec![], &Default::default()).unwrap();
        let e = impair(&fabric, "up9", None).unwrap_err();
        assert!(e.to_string().contains("unknown uplink `up9`"), "{e}");
        let reply: UplinksReply = serde_json::from_slice(&uplinks(&fabric).unwrap()).unwrap();
        assert!(reply.uplinks.is_empty());
        assert_eq!(
            crate::control::protocol::parse_request(
                br#"{"cmd":"impair","uplink":"u","spec":"off"}"#
            ),
            Ok(Request::Impair {
                uplink: "u".into(),
                spec: Some("off".into())
            })
        );
    }

    #[test]
    fn the_impair_reply_renders_each_rule_per_direction() {
        let spec = Spec::parse("loss every=2 dir=egress; corrupt every=1 offset=99").unwrap();
        let imp = impair::Impairment::default();
        imp.set(Some(spec));
        for _ in 0..4 {
            imp.egress(&[0; 20], std::time::Instant::now(), &mut |_| {});
        }
        let reply = ImpairReply {
            uplink: "up0".into(),
            counters: Counters::default(),
            status: imp.status(),
        };
        let line = serde_json::to_string(&reply).unwrap();
        let back: ImpairReply = serde_json::from_str(&line).unwrap();
        assert_eq!(back, reply);
        let text = render_impair(&back);
        assert!(
            text.starts_with("up0 impairment loss every=2 dir=egress; corrupt"),
            "{text}"
        );
        let loss = text.lines().find(|l| l.starts_with("loss")).unwrap();
        assert_eq!(
            loss.split_whitespace().collect::<Vec<_>>(),
            ["loss", "every=2", "dir=egress", "2/4", "0/0"]
        );
        assert!(text.contains("0/2 (2 short)"), "{text}");
        assert!(text.contains("tx_dropped"), "{text}");
    }
}
