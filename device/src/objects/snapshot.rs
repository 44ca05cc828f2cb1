//! Read-only views of the objects, for the control socket (`vrnic ctl`): plain values
//! copied out under the device lock, serialized after it is released.
//!
//! A view holds what the device keeps (states, its own indices, PSNs) and, where the
//! driver owns an index (a producer index in a doorbell slot), what the doorbell slot holds
//! at that moment: the caller passes `DoorbellRead` so this layer needs no doorbell BAR.
//!
//! Views are taken in chunks of table indices (`Chunk`): the caller holds the device lock
//! for one chunk at a time, so a listing of 64K QPs never holds the data path for long.
//! Each object is consistent in itself; objects created or destroyed between two chunks may
//! be missing from a listing, as they would be a moment later or earlier.

use super::keys::Mkey;
use super::table::Table;
use super::Objects;
use serde::{Deserialize, Serialize};
use std::net::Ipv6Addr;
use vrnic_hw::{
    Access, CqArm, DbCqSlot, DbEqSlot, DbQpSlot, DbSrqSlot, QpType, CQ_ARM_CMD_MASK,
    CQ_ARM_SEQ_SHIFT,
};

/// Reads the 32-bit field at byte offset `field` of doorbell slot (`page`, `slot`).
pub type DoorbellRead<'a> = &'a dyn Fn(u32, u32, usize) -> u32;

/// Objects of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    Qps,
    Cqs,
    Mrs,
    Eqs,
    Srqs,
}

impl ObjectKind {
    /// Every kind, in listing order.
    pub const ALL: [ObjectKind; 5] = [
        ObjectKind::Qps,
        ObjectKind::Cqs,
        ObjectKind::Mrs,
        ObjectKind::Eqs,
        ObjectKind::Srqs,
    ];

    /// The kind's name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Qps => "qps",
            ObjectKind::Cqs => "cqs",
            ObjectKind::Mrs => "mrs",
            ObjectKind::Eqs => "eqs",
            ObjectKind::Srqs => "srqs",
        }
    }

    pub fn from_name(name: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// How many objects of each kind a device holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectCounts {
    pub uctxs: usize,
    pub pds: usize,
    /// Key table entries: MRs, fast-registration MRs and memory windows.
    pub mrs: usize,
    pub cqs: usize,
    pub eqs: usize,
    pub qps: usize,
    pub srqs: usize,
    pub xrcds: usize,
}

/// A ring the driver produces into and the device consumes (or the other way round).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueView {
    pub depth: u32,
    /// Producer index (free-running).
    pub pi: u32,
    /// Consumer index (free-running).
    pub ci: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpView {
    pub qpn: u32,
    /// QP type (spec name: RC, UC, UD, GSI, XRC_INI, XRC_TGT).
    #[serde(rename = "type")]
    pub kind: String,
    /// QP state (spec name: RESET, INIT, RTR, RTS, SQD, SQE, ERR).
    pub state: String,
    pub uctx: u32,
    /// None for XRC_TGT (no PD).
    pub pdn: Option<u32>,
    /// None for XRC_TGT.
    pub send_cqn: Option<u32>,
    /// None for XRC_INI and XRC_TGT.
    pub recv_cqn: Option<u32>,
    pub srqn: Option<u32>,
    pub xrcdn: Option<u32>,
    /// Send queue: pi from the doorbell slot, ci the WQEs the device finished. None for
    /// XRC_TGT.
    pub sq: Option<QueueView>,
    /// Receive queue, if the QP has its own (not with an SRQ, not XRC).
    pub rq: Option<QueueView>,
    /// PSN of the next request this QP sends.
    pub sq_psn: u32,
    /// PSN the responder expects next.
    pub rq_psn: u32,
    pub dest_qpn: u32,
    /// Destination LID (IB mode).
    pub dlid: u16,
    /// Destination GID, if the address has a GRH (RoCE mode: always).
    pub dgid: Option<String>,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Why the send queue waits for a retry: "RNR" or "UNREACHABLE".
    pub waiting: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CqView {
    pub cqn: u32,
    pub uctx: u32,
    pub eqn: u32,
    pub depth: u32,
    /// CQEs written (free-running).
    pub pi: u32,
    /// The driver's consumer index (doorbell slot).
    pub ci: u32,
    /// The arm request in the doorbell slot (NONE, NEXT, SOLICITED; an undefined value as
    /// its number).
    pub arm: String,
    pub arm_seq: u32,
    /// The request is one the device has not fired for yet: the next matching CQE posts a
    /// completion event.
    pub armed: bool,
    /// Overflowed or unwritable: the CQ takes no more CQEs.
    pub error: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrView {
    pub key: u32,
    /// MR (REG_MR), FRMR (ALLOC_MR) or MW (ALLOC_MW).
    pub kind: String,
    pub uctx: u32,
    pub pdn: u32,
    /// VALID (an MR, a registered FRMR, a bound MW) or FREE.
    pub state: String,
    /// The range it covers (an MW: its binding's), if VALID.
    pub iova: Option<u64>,
    pub length: Option<u64>,
    /// Access bits (spec names), if VALID.
    pub access: Vec<String>,
    /// MW: TYPE_1 or TYPE_2.
    pub mw_type: Option<String>,
    /// A bound MW: the MR it is bound to.
    pub mr_key: Option<u32>,
    /// A bound type 2 MW: the QP it is bound to.
    pub qpn: Option<u32>,
    /// FRMR: most pages one registration may give it.
    pub max_pages: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EqView {
    pub eqn: u32,
    pub vector: u16,
    #[serde(rename = "async")]
    pub is_async: bool,
    pub depth: u32,
    /// EQEs written (free-running).
    pub pi: u32,
    /// The driver's consumer index (doorbell slot).
    pub ci: u32,
    /// Events waiting for room in the ring.
    pub pending: usize,
    /// Events dropped because even the pending list was full.
    pub dropped: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SrqView {
    pub srqn: u32,
    pub uctx: u32,
    pub pdn: u32,
    pub depth: u32,
    /// The driver's producer index (doorbell slot).
    pub pi: u32,
    /// WQEs taken by QPs (free-running).
    pub ci: u32,
    /// The armed limit (0: not armed).
    pub limit: u32,
    pub max_sge: u8,
    pub error: bool,
    /// XRC SRQs: their domain and CQ.
    pub xrcdn: Option<u32>,
    pub cqn: Option<u32>,
}

/// Views of the objects at table indices `from..`, and where the next chunk starts (None:
/// the listing is complete).
#[derive(Debug)]
pub struct Chunk<V> {
    pub views: Vec<V>,
    pub next: Option<u32>,
}

/// Up to `max` views of `table`'s objects from index `from` on.
fn chunk<T, V>(table: &Table<T>, from: u32, max: usize, view: impl Fn(u32, &T) -> V) -> Chunk<V> {
    let mut views = Vec::new();
    let mut it = table.iter_from(from);
    for (index, object) in it.by_ref().take(max.max(1)) {
        views.push(view(index, object));
    }
    Chunk {
        next: it.next().map(|(index, _)| index),
        views,
    }
}

fn access_names(bits: u32) -> Vec<String> {
    Access::ALL
        .iter()
        .filter(|a| bits & u32::from(**a) != 0)
        .map(|a| a.name().to_string())
        .collect()
}

impl Objects {
    pub fn counts(&self) -> ObjectCounts {
        ObjectCounts {
            uctxs: self.uctxs.len(),
            pds: self.pds.len(),
            mrs: self.keys.len(),
            cqs: self.cqs.len(),
            eqs: self.eqs.len(),
            qps: self.qps.len(),
            srqs: self.srqs.len(),
            xrcds: self.xrcds.len(),
        }
    }

    pub fn qp_views(&self, from: u32, max: usize, db: DoorbellRead<'_>) -> Chunk<QpView> {
        chunk(&self.qps, from, max, |_, qp| {
            let word = |field| db(qp.db_page, qp.db_slot, field);
            let tgt = qp.kind == QpType::XrcTgt;
            QpView {
                qpn: qp.qpn,
                kind: qp.kind.name().into(),
                state: qp.state.name().into(),
                uctx: qp.uctx,
                pdn: (!tgt).then_some(qp.pdn),
                send_cqn: (!tgt).then_some(qp.send_cqn),
                recv_cqn: (!matches!(qp.kind, QpType::XrcIni | QpType::XrcTgt))
                    .then_some(qp.recv_cqn),
                // An XRC_TGT QP names an SRQ only while it receives a message into it.
                srqn: qp.srq.filter(|s| !tgt || s.taken.is_some()).map(|s| s.srqn),
                xrcdn: qp.xrcdn,
                sq: qp.has_doorbell().then(|| QueueView {
                    depth: qp.sq.ring.depth(),
                    pi: word(DbQpSlot::SQ_PI_OFF),
                    ci: qp.sq.ci,
                }),
                rq: qp.has_own_rq().then(|| QueueView {
                    depth: qp.rq.ring.depth(),
                    pi: word(DbQpSlot::RQ_PI_OFF),
                    ci: qp.rq.ci,
                }),
                sq_psn: qp.next_psn,
                rq_psn: qp.expected_psn,
                dest_qpn: qp.attr.dest_qp_num.to_native(),
                dlid: qp.attr.dlid.to_native(),
                dgid: (qp.attr.is_global != 0).then(|| Ipv6Addr::from(qp.attr.dgid).to_string()),
                mtu: qp.mtu_bytes(),
                waiting: qp.waiting.map(|w| {
                    match w.reason {
                        super::qp::WaitReason::Rnr => "RNR",
                        super::qp::WaitReason::Unreachable => "UNREACHABLE",
                    }
                    .into()
                }),
            }
        })
    }

    pub fn cq_views(&self, from: u32, max: usize, db: DoorbellRead<'_>) -> Chunk<CqView> {
        chunk(&self.cqs, from, max, |cqn, cq| {
            let arm = db(cq.db_page, cq.db_slot, DbCqSlot::ARM_OFF);
            let cmd = CqArm::try_from(arm & CQ_ARM_CMD_MASK);
            let seq = arm >> CQ_ARM_SEQ_SHIFT;
            CqView {
                cqn,
                uctx: cq.uctx,
                eqn: cq.eqn,
                depth: cq.ring.depth(),
                pi: cq.pi,
                ci: db(cq.db_page, cq.db_slot, DbCqSlot::CI_OFF),
                arm: match cmd {
                    Ok(c) => c.name().into(),
                    Err(v) => v.to_string(),
                },
                arm_seq: seq,
                armed: matches!(cmd, Ok(CqArm::Next | CqArm::Solicited)) && seq != cq.fired_seq,
                error: cq.error,
            }
        })
    }

    pub fn mr_views(&self, from: u32, max: usize) -> Chunk<MrView> {
        chunk(&self.keys, from, max, |_, entry| {
            let mut v = MrView {
                key: entry.key(),
                kind: String::new(),
                uctx: entry.uctx(),
                pdn: entry.pdn(),
                state: "FREE".into(),
                iova: None,
                length: None,
                access: Vec::new(),
                mw_type: None,
                mr_key: None,
                qpn: None,
                max_pages: None,
            };
            let region = match entry {
                Mkey::Mr(mr) => {
                    v.kind = "MR".into();
                    Some(mr)
                }
                Mkey::FastReg(f) => {
                    v.kind = "FRMR".into();
                    v.max_pages = Some(f.max_pages);
                    f.valid.as_ref()
                }
                Mkey::Window(w) => {
                    v.kind = "MW".into();
                    v.mw_type = Some(w.kind.name().into());
                    if let Some(b) = w.binding {
                        v.state = "VALID".into();
                        v.iova = Some(b.addr);
                        v.length = Some(b.length);
                        v.access = access_names(b.access);
                        v.mr_key = Some(b.mr_key);
                        v.qpn = b.qpn;
                    }
                    None
                }
            };
            if let Some(mr) = region {
                v.state = "VALID".into();
                v.iova = Some(mr.iova);
                v.length = Some(mr.length);
                v.access = access_names(mr.access);
            }
            v
        })
    }

    pub fn eq_views(&self, from: u32, max: usize, db: DoorbellRead<'_>) -> Chunk<EqView> {
        chunk(&self.eqs, from, max, |eqn, eq| EqView {
            eqn,
            vector: eq.vector,
            is_async: eq.is_async,
            depth: eq.ring.depth(),
            pi: eq.pi,
            ci: db(eq.db_page, eq.db_slot, DbEqSlot::CI_OFF),
            pending: eq.pending.len(),
            dropped: eq.dropped,
        })
    }

    pub fn srq_views(&self, from: u32, max: usize, db: DoorbellRead<'_>) -> Chunk<SrqView> {
        chunk(&self.srqs, from, max, |srqn, srq| SrqView {
            srqn,
            uctx: srq.uctx,
            pdn: srq.pdn,
            depth: srq.ring.depth(),
            pi: db(srq.db_page, srq.db_slot, DbSrqSlot::PI_OFF),
            ci: srq.ci,
            limit: srq.limit,
            max_sge: srq.max_sge,
            error: srq.error,
            xrcdn: srq.xrc.map(|x| x.xrcdn),
            cqn: srq.xrc.map(|x| x.cqn),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_resume_at_the_next_live_index_and_end_with_none() {
        let mut t = Table::new(16);
        for i in [0usize, 3, 4, 9] {
            t.insert_at(i, i as u32 * 10);
        }
        let first = chunk(&t, 0, 2, |i, v| (i, *v));
        assert_eq!((first.views, first.next), (vec![(0, 0), (3, 30)], Some(4)));
        let second = chunk(&t, 4, 2, |i, v| (i, *v));
        assert_eq!((second.views, second.next), (vec![(4, 40), (9, 90)], None));
        let empty = chunk(&Table::<u32>::new(4), 0, 2, |i, v| (i, *v));
        assert_eq!((empty.views, empty.next), (vec![], None));
    }

    #[test]
    fn object_kinds_are_named_as_on_the_command_line() {
        for kind in ObjectKind::ALL {
            assert_eq!(ObjectKind::from_name(kind.name()), Some(kind));
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{}\"", kind.name())
            );
        }
        assert_eq!(ObjectKind::from_name("pds"), None);
    }
}
