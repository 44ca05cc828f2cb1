//! Malformed EQEs: unknown event types, object numbers out of range, of no object or of
//! someone else's object, and event storms.

use super::{Class, Hostile, Kind};
use crate::objects::queues::PendingEvent;
use crate::objects::Objects;
use std::collections::VecDeque;
use vrnic_hw::{bar0, Eqe, EventType, MAX_SRQ, QPN_MAX, QPN_MIN};

/// Most events one EQ holds back because of storms (real ones are never dropped for them).
const STORM_BACKLOG: usize = 4096;

/// The objects an EQE may name, copied before the EQ is borrowed for delivery.
#[derive(Debug, Default)]
pub struct EqeHints {
    eqn: u32,
    /// (cqn, its EQ, its context)
    cqs: Vec<(u32, u32, u32)>,
    /// (qpn, its context)
    qps: Vec<(u32, u32)>,
    /// (srqn, its context)
    srqs: Vec<(u32, u32)>,
}

/// What an event's `obj` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    Cq,
    Qp,
    Srq,
    Port,
    Nothing,
}

fn names(event: u8) -> Names {
    use EventType::*;
    match EventType::try_from(event) {
        Ok(Completion | CqErr) => Names::Cq,
        Ok(QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | QpLastWqeReached) => Names::Qp,
        Ok(SrqLimitReached | SrqErr) => Names::Srq,
        Ok(PortActive | PortErr) => Names::Port,
        _ => Names::Nothing,
    }
}

impl Hostile {
    /// The objects EQEs of EQ `eqn` may be made to name, when the mode is on.
    pub fn eqe_hints(&self, objects: &Objects, eqn: u32) -> Option<EqeHints> {
        if !self.is_on() {
            return None;
        }
        Some(EqeHints {
            eqn,
            cqs: objects
                .cqs
                .iter()
                .map(|(n, cq)| (n, cq.eqn, cq.uctx))
                .collect(),
            qps: objects.qps.iter().map(|(_, q)| (q.qpn, q.uctx)).collect(),
            srqs: objects.srqs.iter().map(|(n, s)| (n, s.uctx)).collect(),
        })
    }

    /// The EQE to write instead of `eqe`; a storm queues copies of the event in `pending`.
    pub fn eqe(
        &self,
        hints: &Option<EqeHints>,
        mut eqe: Eqe,
        pending: &mut VecDeque<PendingEvent>,
    ) -> Eqe {
        let Some(h) = hints else { return eqe };
        let Some(mut st) = self.active() else {
            return eqe;
        };
        // A storm's copies pass as they are (a storm of storms would never end).
        if st.storm_copies > 0 {
            st.storm_copies -= 1;
            return eqe;
        }
        let Some(kind) = st.draw(Class::Eqe) else {
            return eqe;
        };
        let rng = &mut st.rng;
        let obj = eqe.obj.to_native();
        let of = names(eqe.event_type);
        let new_obj = match (kind, of) {
            (Kind::EqeType, _) => {
                // event_type ends at SRQ_ERR (12).
                eqe.event_type = rng.range(13, 0xff) as u8;
                None
            }
            (Kind::EqeObjRange, Names::Cq) => {
                Some(bar0::MAX_CQ_RESET + rng.below(0x1000_0000) as u32)
            }
            (Kind::EqeObjRange, Names::Qp) => Some(QPN_MAX + 1 + rng.below(0x1000_0000) as u32),
            (Kind::EqeObjRange, Names::Srq) => Some(MAX_SRQ + rng.below(0x1000_0000) as u32),
            (Kind::EqeObjRange, Names::Port) => Some(rng.range(2, 0xff)),
            (Kind::EqeObjFree, Names::Cq) => (0..16)
                .map(|_| rng.below(u64::from(bar0::MAX_CQ_RESET)) as u32)
                .find(|n| !h.cqs.iter().any(|c| c.0 == *n)),
            (Kind::EqeObjFree, Names::Qp) => (0..16)
                .map(|_| rng.range(QPN_MIN, QPN_MAX))
                .find(|n| !h.qps.iter().any(|q| q.0 == *n)),
            (Kind::EqeObjFree, Names::Srq) => (0..16)
                .map(|_| rng.below(u64::from(MAX_SRQ)) as u32)
                .find(|n| !h.srqs.iter().any(|s| s.0 == *n)),
            (Kind::EqeObjForeign, Names::Cq)
                if eqe.event_type == u8::from(EventType::Completion) =>
            {
                // A CQ bound to another EQ: its events never come here.
                let other: Vec<u32> = h.cqs.iter().filter(|c| c.1 != h.eqn).map(|c| c.0).collect();
                rng.pick(&other).copied()
            }
            (Kind::EqeObjForeign, Names::Cq) => {
                let owner = h.cqs.iter().find(|c| c.0 == obj).map(|c| c.2);
                let other: Vec<u32> = h
                    .cqs
                    .iter()
                    .filter(|c| Some(c.2) != owner)
                    .map(|c| c.0)
                    .collect();
                rng.pick(&other).copied()
            }
            (Kind::EqeObjForeign, Names::Qp) => {
                let owner = h.qps.iter().find(|q| q.0 == obj).map(|q| q.1);
                let other: Vec<u32> = h
                    .qps
                    .iter()
                    .filter(|q| Some(q.1) != owner)
                    .map(|q| q.0)
                    .collect();
                rng.pick(&other).copied()
            }
            (Kind::EqeObjForeign, Names::Srq) => {
                let owner = h.srqs.iter().find(|s| s.0 == obj).map(|s| s.1);
                let other: Vec<u32> = h
                    .srqs
                    .iter()
                    .filter(|s| Some(s.1) != owner)
                    .map(|s| s.0)
                    .collect();
                rng.pick(&other).copied()
            }
            (Kind::EqeStorm, _) => {
                if pending.len() >= STORM_BACKLOG {
                    return eqe;
                }
                let n = rng.range(16, 64);
                let copy = PendingEvent {
                    event: eqe.event_type,
                    obj,
                    data: eqe.data.to_native(),
                };
                pending.extend(std::iter::repeat_n(copy, n as usize));
                st.storm_copies += n;
                st.written(
                    &self.device,
                    kind,
                    format_args!(
                        "EQ {}: event {} for {obj} repeated {n} times",
                        h.eqn, eqe.event_type
                    ),
                );
                return eqe;
            }
            _ => return eqe,
        };
        match new_obj {
            Some(n) => eqe.obj = n.into(),
            None if kind != Kind::EqeType => return eqe,
            None => {}
        }
        st.written(
            &self.device,
            kind,
            format_args!(
                "EQ {}: event {} obj {} (was obj {obj})",
                h.eqn,
                eqe.event_type,
                eqe.obj.to_native()
            ),
        );
        eqe
    }
}
