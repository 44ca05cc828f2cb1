//! The `wire` command: each RoCE device's wire port, the switch port its RoCEv2 frames to
//! and from other hosts go through, with what it dropped and why. No device lock is
//! taken: the counters are atomics, and the QPs on the wire are counted with a look at
//! the wire's own map.
//!
//! ```text
//! {"cmd":"wire"}
//!   -> {"wire":[{"device":"r0","mac":"02:00:00:00:00:01","port":1,"qps":1,
//!       "counters":{"rx_frames":..,"rx_queue_full":0,"rx_bad":0,"rx_bad_icrc":0,
//!       "rx_unknown_qp":0,"tx_frames":..}}]}
//! ```
//!
//! Empty when the process serves no guest interface and has no uplink (no `net=`, `--net`
//! or `--uplink`): every route then ends at a device of the process.

use super::handlers::encode;
use super::protocol::RequestError;
use crate::datapath::wire::port::WirePortCounters;
use crate::fabric::Fabric;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WirePortView {
    pub device: String,
    pub mac: String,
    pub port: usize,
    /// QPs whose peer is on another host, now.
    pub qps: usize,
    pub counters: WirePortCounters,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireReply {
    pub wire: Vec<WirePortView>,
}

pub fn wire(fabric: &Fabric) -> Result<Vec<u8>, RequestError> {
    encode(&WireReply {
        wire: fabric
            .wires()
            .iter()
            .map(|(rnic, w)| WirePortView {
                device: rnic.name().to_string(),
                mac: w.port.mac().to_string(),
                port: w.port.id(),
                qps: w.qp_count(),
                counters: w.port.counters.read(),
            })
            .collect(),
    })
}

/// `vrnic ctl wire` as text: a row per device; drops as queue full / undecodable / bad
/// ICRC / no such QP.
pub fn render(reply: &WireReply) -> String {
    if reply.wire.is_empty() {
        return "no wire ports (no guest interface or uplink: every peer is a device of this process)\n"
            .into();
    }
    let rows: Vec<Vec<String>> = reply
        .wire
        .iter()
        .map(|w| {
            let c = &w.counters;
            vec![
                w.device.clone(),
                w.mac.clone(),
                w.port.to_string(),
                w.qps.to_string(),
                format!("{}/{}", c.rx_frames, c.tx_frames),
                format!(
                    "{}/{}/{}/{}",
                    c.rx_queue_full, c.rx_bad, c.rx_bad_icrc, c.rx_unknown_qp
                ),
            ]
        })
        .collect();
    super::render::table(
        &[
            "DEVICE",
            "MAC",
            "PORT",
            "QPS",
            "RX/TX FRAMES",
            "DROPPED FULL/BAD/ICRC/NO-QP",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reply_round_trips_and_renders_a_row_per_device() {
        let fabric = crate::fabric::Fabric::new(vec![], &Default::default()).unwrap();
        let reply: WireReply = serde_json::from_slice(&wire(&fabric).unwrap()).unwrap();
        assert!(reply.wire.is_empty());
        assert!(render(&reply).starts_with("no wire ports"));
        let reply = WireReply {
            wire: vec![WirePortView {
                device: "r0".into(),
                mac: "02:00:00:00:00:01".into(),
                port: 3,
                qps: 2,
                counters: WirePortCounters {
                    rx_frames: 10,
                    rx_queue_full: 1,
                    rx_bad: 2,
                    rx_bad_icrc: 3,
                    rx_unknown_qp: 4,
                    tx_frames: 20,
                    tx_burst_max: 5,
                },
            }],
        };
        let back: WireReply =
            serde_json::from_str(&serde_json::to_string(&reply).unwrap()).unwrap();
        assert_eq!(back, reply);
        let text = render(&back);
        let row = text.lines().nth(1).unwrap();
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            ["r0", "02:00:00:00:00:01", "3", "2", "10/20", "1/2/3/4"]
        );
    }
}
