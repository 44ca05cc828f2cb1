//! A decoded trace event: what happened on a device, with names from hw-spec.
//!
//! Adding an event kind (an injected fault, a contract violation) is one variant of `Body`
//! and one of `Kind` (`Body::kind` then says which is which); the text form is one arm in
//! `render`.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A name: hw-spec's `name()` (static) when the device makes the event, owned when read
/// back from JSON.
pub type Name = Cow<'static, str>;

/// The kinds of event, each selectable on its own (`--kinds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Admin,
    Doorbell,
    Wqe,
    Cqe,
    Eqe,
    Irq,
    State,
    /// A hw-spec contract rule the driver broke (`rnic::contract`).
    Contract,
    /// An injected fault that fired (`faults`).
    Fault,
    /// A malformed write of the hostile-device mode (`hostile`).
    Hostile,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Admin,
        Kind::Doorbell,
        Kind::Wqe,
        Kind::Cqe,
        Kind::Eqe,
        Kind::Irq,
        Kind::State,
        Kind::Contract,
        Kind::Fault,
        Kind::Hostile,
    ];

    /// The kind's bit in a `KindSet`.
    pub const fn bit(self) -> u32 {
        1 << self as u32
    }

    pub const fn name(self) -> &'static str {
        match self {
            Kind::Admin => "admin",
            Kind::Doorbell => "doorbell",
            Kind::Wqe => "wqe",
            Kind::Cqe => "cqe",
            Kind::Eqe => "eqe",
            Kind::Irq => "irq",
            Kind::State => "state",
            Kind::Contract => "contract",
            Kind::Fault => "fault",
            Kind::Hostile => "hostile",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One event as a subscriber receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Per device, from 1, one per event made (a gap is an event some subscriber did not
    /// want or lost).
    pub seq: u64,
    /// Monotonic nanoseconds since the process's first trace event (`clock::now_ns`).
    pub ts_ns: u64,
    pub device: Name,
    /// The QP the event concerns, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qpn: Option<u32>,
    #[serde(flatten)]
    pub body: Body,
}

/// What happened. Optional fields are left out of the JSON when absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Body {
    /// An admin command completed (SPEC "Admin queue").
    Admin {
        /// `AqOpcode::name()`, or the number for an unknown opcode.
        opcode: Name,
        cmd_id: u32,
        /// The command's fields that name objects or sizes, by their hw-spec names.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        fields: BTreeMap<Name, u64>,
        /// `AqStatus::name()`.
        status: Name,
        /// result0..result3 of a successful command (none for a failed one).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        results: Vec<u32>,
        /// From reading the command to publishing its completion.
        duration_ns: u64,
    },
    /// The device saw a doorbell: the admin queue's register, or a flagged slot.
    Doorbell {
        /// "AQ" (the AQ_DOORBELL register), "QP", or "slot" (a flagged slot of no QP).
        target: Name,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        page: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slot: Option<u32>,
        /// The admin queue's producer index.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pi: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sq_pi: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rq_pi: Option<u32>,
    },
    /// The device took a send WQE (its first chunk; SPEC "Send queue processing").
    Wqe {
        /// Free-running send queue index.
        index: u32,
        /// `WrOpcode::name()`, or the number.
        opcode: Name,
        /// `SendFlags` names set in the WQE.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        flags: Vec<Name>,
        wr_id: u64,
        /// Inline length or the sum of the SGE lengths.
        length: u64,
        sges: u8,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remote_addr: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rkey: Option<u32>,
    },
    /// A CQE written (SPEC "Completion queue").
    Cqe {
        cqn: u32,
        wqe_index: u16,
        /// `WcOpcode::name()`.
        opcode: Name,
        /// `WcStatus::name()`.
        status: Name,
        byte_len: u32,
        /// `VendorErr::name()`.
        vendor_err: Name,
        wr_id: u64,
    },
    /// An EQE written (SPEC "Event queue").
    Eqe {
        eqn: u32,
        /// `EventType::name()`.
        event: Name,
        obj: u32,
        data: u32,
    },
    /// An MSI-X vector signalled.
    Irq { vector: u16 },
    /// A QP changed state (`QpState::name()`).
    QpState { from: Name, to: Name },
    /// The device was enabled, reset, or failed (`FatalCode::name()`).
    Device {
        state: Name,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fatal_code: Option<Name>,
    },
    /// An armed CQ fired its completion event and is disarmed (`CqArm::name()`).
    CqArm { cqn: u32, arm: Name, seq: u32 },
    /// The driver broke a contract rule (`ContractRule::name()`, its number and SPEC.md
    /// section) and what the device saw.
    Contract {
        rule: Name,
        number: u16,
        section: Name,
        what: String,
    },
    /// Fault `id` (its rule, as armed) fired, and what it hit.
    Fault { id: u32, rule: String, what: String },
    /// The hostile-device mode wrote a malformed entry of this corruption kind.
    Hostile { corruption: Name, what: String },
}

impl Body {
    pub fn kind(&self) -> Kind {
        match self {
            Body::Admin { .. } => Kind::Admin,
            Body::Doorbell { .. } => Kind::Doorbell,
            Body::Wqe { .. } => Kind::Wqe,
            Body::Cqe { .. } => Kind::Cqe,
            Body::Eqe { .. } => Kind::Eqe,
            Body::Irq { .. } => Kind::Irq,
            Body::QpState { .. } | Body::Device { .. } | Body::CqArm { .. } => Kind::State,
            Body::Contract { .. } => Kind::Contract,
            Body::Fault { .. } => Kind::Fault,
            Body::Hostile { .. } => Kind::Hostile,
        }
    }
}

/// A line of a trace stream: an event, or how many the subscriber's queue had to drop
/// just before the next one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StreamItem {
    Lost { lost: u64 },
    Event(Box<Event>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_round_trips_through_its_json_line_with_its_kind_named() {
        let e = Event {
            seq: 3,
            ts_ns: 99,
            device: "rnic0".into(),
            qpn: Some(0x10000),
            body: Body::Wqe {
                index: 4,
                opcode: "RDMA_WRITE".into(),
                flags: vec!["SIGNALED".into()],
                wr_id: 7,
                length: 65536,
                sges: 1,
                remote_addr: Some(0x1000),
                rkey: Some(0x300),
            },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert!(line.contains(r#""kind":"wqe""#), "{line}");
        assert!(line.contains(r#""opcode":"RDMA_WRITE""#), "{line}");
        let back: StreamItem = serde_json::from_str(&line).unwrap();
        assert_eq!(back, StreamItem::Event(Box::new(e)));
        let lost: StreamItem = serde_json::from_str(r#"{"lost":12}"#).unwrap();
        assert_eq!(lost, StreamItem::Lost { lost: 12 });
    }

    #[test]
    fn kinds_have_distinct_bits_and_names_that_parse_back() {
        let all = Kind::ALL.iter().fold(0, |acc, k| {
            assert_eq!(acc & k.bit(), 0);
            acc | k.bit()
        });
        assert_eq!(all.count_ones() as usize, Kind::ALL.len());
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        assert_eq!(Kind::from_name("pcap"), None);
    }
}
