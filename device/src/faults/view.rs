//! What `vrnic ctl fault DEVICE list` shows: the rules armed and fired, and the state the
//! faults left (port, stall, held admin command).

use super::plan::Plan;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use vrnic_hw::AqOpcode;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleView {
    pub id: u32,
    /// The rule in its canonical text.
    pub rule: String,
    /// "armed" or "fired".
    pub state: String,
    /// Occurrences counted so far.
    pub seen: u32,
    /// `qp=new:K`: the QP it bound to, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qpn: Option<u32>,
    /// What it hit, and how long ago (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_ms_ago: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldView {
    /// Its admin queue index and opcode name.
    pub index: u32,
    pub opcode: String,
    pub ms_left: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultsView {
    /// The port state QUERY_PORT reports: "active" or "down".
    pub port: String,
    /// A stall of the data path still running: ms left.
    pub stall_ms_left: Option<u64>,
    /// The admin command a delay holds.
    pub admin_held: Option<HeldView>,
    pub rules: Vec<RuleView>,
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl FaultsView {
    pub fn of(plan: &Plan, now: Instant) -> Self {
        FaultsView {
            port: if plan.port_down { "down" } else { "active" }.into(),
            stall_ms_left: plan.stall_until.filter(|&u| u > now).map(|u| ms(u - now)),
            admin_held: plan.held.map(|h| HeldView {
                index: h.index,
                opcode: AqOpcode::try_from(h.opcode)
                    .map_or_else(|_| format!("{:#x}", h.opcode), |o| o.name().into()),
                ms_left: ms(h.until.saturating_duration_since(now)),
            }),
            rules: plan
                .entries
                .iter()
                .map(|e| RuleView {
                    id: e.id,
                    rule: e.rule.to_string(),
                    state: if e.fired.is_some() { "fired" } else { "armed" }.into(),
                    seen: e.seen,
                    qpn: e.bound,
                    fired: e.fired.as_ref().map(|(_, what)| what.clone()),
                    fired_ms_ago: e
                        .fired
                        .as_ref()
                        .map(|(at, _)| ms(now.saturating_duration_since(*at))),
                })
                .collect(),
        }
    }
}
