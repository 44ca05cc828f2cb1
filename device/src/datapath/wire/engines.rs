//! The reliability engines of one wire QP, made from the QP's attributes and kept with
//! the QP's epoch, so that ERR, RESET or a recreated QP drops them.

use super::frames::Path;
use crate::datapath::copy::Pieces;
use crate::datapath::sge::{self, Owner};
use crate::objects::Objects;
use crate::transport::{
    Requester, RequesterConfig, Responder, ResponderConfig, TransportError, WqeId,
};
use crate::wire::bth::DEFAULT_PKEY;
use crate::wire::Transport;
use std::collections::{HashMap, VecDeque};
use vrnic_hw::{QpAttr, QpType, SendWqeHeader, Sge, VendorErr, WcStatus};

/// The transport a QP of type `kind` speaks on the wire (None: not a connected QP).
pub fn transport_of(kind: QpType) -> Option<Transport> {
    match kind {
        QpType::Rc => Some(Transport::Rc),
        QpType::Uc => Some(Transport::Uc),
        QpType::XrcIni | QpType::XrcTgt => Some(Transport::Xrc),
        _ => None,
    }
}

fn transport(kind: QpType) -> Result<Transport, TransportError> {
    transport_of(kind).ok_or(TransportError::Transport(Transport::Ud))
}

/// PSNs a wire QP's requester keeps outstanding at most: rxe's `RXE_MAX_UNACKED_PSNS`.
/// A deeper burst overruns a slower peer's receive path: against a Soft-RoCE guest under
/// TCG (its virtio-net ring and vrnic's port backlog of `net::vhost::BACKLOG` frames),
/// the default 1024 had more than half of the frames toward it dropped, each loss then
/// resending everything sent after it (go-back-N).
pub const WINDOW: u32 = 128;

/// The requester of a QP going to RTS: `mtu` is `Qp::mtu_bytes`.
pub fn requester_config(
    kind: QpType,
    attr: &QpAttr,
    mtu: u32,
) -> Result<RequesterConfig, TransportError> {
    Ok(RequesterConfig {
        transport: transport(kind)?,
        dest_qpn: attr.dest_qp_num.to_native(),
        pkey: DEFAULT_PKEY,
        mtu,
        sq_psn: attr.sq_psn.to_native(),
        timeout: attr.timeout,
        retry_cnt: attr.retry_cnt,
        rnr_retry: attr.rnr_retry,
        max_rd_atomic: attr.max_rd_atomic,
        window: WINDOW,
        ..RequesterConfig::default()
    })
}

/// The responder of a QP going to RTR.
pub fn responder_config(
    kind: QpType,
    attr: &QpAttr,
    mtu: u32,
) -> Result<ResponderConfig, TransportError> {
    Ok(ResponderConfig {
        transport: transport(kind)?,
        dest_qpn: attr.dest_qp_num.to_native(),
        pkey: DEFAULT_PKEY,
        mtu,
        rq_psn: attr.rq_psn.to_native(),
        max_dest_rd_atomic: attr.max_dest_rd_atomic,
        min_rnr_timer: attr.min_rnr_timer,
        ..ResponderConfig::default()
    })
}

/// A send WQE posted to the requester engine, kept until it completes: its header (for
/// the CQE) and its local buffers (payload source, READ target, atomic result), named by
/// keys and offsets and resolved at each use.
pub struct Kept {
    pub index: u32,
    pub wqe: SendWqeHeader,
    pub local: LocalBuffers,
    /// Its local buffers could not be reached at some use: nothing more is read from or
    /// written to them, and the WQE completes LOC_PROT_ERR whatever the peer answered.
    pub fault: bool,
}

/// Where a kept WQE's message bytes are, as the guest named them: never guest addresses
/// resolved once and kept, so memory revoked meanwhile (DEREG_MR, REREG_MR, DMA_UNMAP,
/// invalidation) is never touched: the next use finds the key gone or changed.
pub enum LocalBuffers {
    /// None (memory operations, zero-length messages).
    None,
    /// The WQE's SGEs, checked for `access` (key, PD, rights, bounds) at every use.
    Sges {
        sges: Vec<Sge>,
        owner: Owner,
        access: u32,
    },
    /// Inline data in the WQE itself, in the send queue's ring.
    Inline { addr: u64, len: u64 },
}

impl LocalBuffers {
    /// `sges` checked for `access` now (as at every later use), with the message length.
    pub fn checked(
        objects: &Objects,
        owner: Owner,
        sges: Vec<Sge>,
        access: u32,
    ) -> Result<(u64, LocalBuffers), (WcStatus, VendorErr)> {
        let len = sge::check(objects, owner, &sges, access)?;
        let local = LocalBuffers::Sges {
            sges,
            owner,
            access,
        };
        Ok((len, local))
    }

    /// The guest pieces of message bytes `[offset, offset + len)` as the keys name them
    /// now; None if a key no longer allows it or the range is not the message's.
    pub fn resolve(&self, objects: &Objects, offset: u64, len: u64) -> Option<Pieces> {
        let end = offset.checked_add(len)?;
        match self {
            LocalBuffers::None => (len == 0).then(Pieces::new),
            LocalBuffers::Inline { addr, len: n } => {
                (end <= *n).then(|| vec![(addr + offset, len)])
            }
            LocalBuffers::Sges {
                sges,
                owner,
                access,
            } => {
                let total = sge::check(objects, *owner, sges, *access).ok()?;
                if end > total {
                    return None;
                }
                Some(sge::pieces(objects, sges, offset, len))
            }
        }
    }
}

/// One wire QP's engines, for the QP's `epoch`.
pub struct QpEngines {
    pub epoch: u32,
    pub path: Path,
    pub responder: Responder,
    /// From RTS on (an XRC_TGT QP never has one).
    pub requester: Option<Requester>,
    /// The SQ index of the next WQE to post to the requester.
    pub posted: u32,
    /// The posted WQEs not completed yet, in queue order.
    pub kept: VecDeque<Kept>,
    /// The configurations the engines run with (MODIFY_QP changes reach them through
    /// `state::reconfigure`).
    pub responder_cfg: ResponderConfig,
    pub requester_cfg: Option<RequesterConfig>,
    /// A memory operation that revoked access and completes once the DMA fence has
    /// passed (waited for with no device lock held: `local::after_fence`).
    pub fenced: Option<WqeId>,
}

/// The wire QPs of one device, by QPN (device state: touched under the device lock).
#[derive(Default)]
pub struct WireQps {
    qps: HashMap<u32, QpEngines>,
    /// QPs found not to be wire QPs (each is looked at once per epoch): by QP table
    /// index, so QPs that come and go cannot grow it, the QPN and epoch found there.
    local: HashMap<u32, (u32, u32)>,
}

/// Where QP `qpn` lives in the device's QP table.
fn table_index(qpn: u32) -> u32 {
    qpn & ((1 << crate::objects::QPN_INDEX_BITS) - 1)
}

impl WireQps {
    /// The engines of QP `qpn` at `epoch`; engines of an older epoch are dropped.
    pub fn get(&mut self, qpn: u32, epoch: u32) -> Option<&mut QpEngines> {
        if self.qps.get(&qpn).is_some_and(|e| e.epoch != epoch) {
            self.qps.remove(&qpn);
        }
        self.qps.get_mut(&qpn)
    }

    /// Whether QP `qpn` at `epoch` was found to be an in-process QP.
    pub fn is_local(&self, qpn: u32, epoch: u32) -> bool {
        self.local.get(&table_index(qpn)) == Some(&(qpn, epoch))
    }

    /// QP `qpn` at `epoch` is an in-process QP.
    pub fn set_local(&mut self, qpn: u32, epoch: u32) {
        self.local.insert(table_index(qpn), (qpn, epoch));
    }

    /// QP `qpn` is gone: its engines, or that it was in-process.
    pub fn forget(&mut self, qpn: u32) {
        self.qps.remove(&qpn);
        if self
            .local
            .get(&table_index(qpn))
            .is_some_and(|&(q, _)| q == qpn)
        {
            self.local.remove(&table_index(qpn));
        }
    }

    /// The engines of QP `qpn`, whatever its epoch.
    pub fn get_any(&self, qpn: u32) -> Option<&QpEngines> {
        self.qps.get(&qpn)
    }

    /// Makes the responder of QP `qpn` (at RTR).
    pub fn open(
        &mut self,
        qpn: u32,
        epoch: u32,
        cfg: ResponderConfig,
        path: Path,
    ) -> Result<&mut QpEngines, TransportError> {
        let responder = Responder::new(cfg)?;
        let e = self.qps.entry(qpn).or_insert(QpEngines {
            epoch,
            path,
            responder,
            requester: None,
            posted: 0,
            kept: VecDeque::new(),
            responder_cfg: cfg,
            requester_cfg: None,
            fenced: None,
        });
        Ok(e)
    }

    /// Adds the requester of QP `qpn` (at RTS), whose first WQE is SQ index `sq_ci`;
    /// false if the QP has no responder yet.
    pub fn start(
        &mut self,
        qpn: u32,
        epoch: u32,
        cfg: RequesterConfig,
        sq_ci: u32,
    ) -> Result<bool, TransportError> {
        let Some(e) = self.get(qpn, epoch) else {
            return Ok(false);
        };
        e.requester = Some(Requester::new(cfg)?);
        e.requester_cfg = Some(cfg);
        e.posted = sq_ci;
        Ok(true)
    }

    /// The QPNs of the wire QPs.
    pub fn qpns(&self) -> Vec<u32> {
        self.qps.keys().copied().collect()
    }

    /// Drops QP `qpn`'s engines (ERR, RESET, destroy).
    pub fn drop_qp(&mut self, qpn: u32) {
        self.qps.remove(&qpn);
    }

    pub fn len(&self) -> usize {
        self.qps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.qps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr() -> QpAttr {
        QpAttr {
            dest_qp_num: 0x12.into(),
            sq_psn: 0x100.into(),
            rq_psn: 0x200.into(),
            timeout: 14,
            retry_cnt: 3,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 2,
            ..Default::default()
        }
    }

    #[test]
    fn in_process_qps_are_kept_per_table_index_and_forgotten_when_gone() {
        let mut q = WireQps::default();
        let (old, new) = (5, 1 << crate::objects::QPN_INDEX_BITS | 5); // one index, two generations
        q.set_local(old, 1);
        assert!(q.is_local(old, 1) && !q.is_local(old, 2));
        q.set_local(new, 1);
        assert!(q.is_local(new, 1) && !q.is_local(old, 1));
        assert_eq!(
            q.local.len(),
            1,
            "a QP of the same index takes the old one's place"
        );
        q.forget(old); // not the QP the index holds now
        assert!(q.is_local(new, 1));
        q.forget(new);
        assert!(q.local.is_empty());
    }

    #[test]
    fn the_engines_take_the_qp_attributes() {
        let r = requester_config(QpType::Rc, &attr(), 1024).unwrap();
        assert_eq!(
            (r.transport, r.dest_qpn, r.sq_psn, r.mtu, r.timeout),
            (Transport::Rc, 0x12, 0x100, 1024, 14)
        );
        assert_eq!((r.retry_cnt, r.rnr_retry, r.max_rd_atomic), (3, 7, 4));
        let s = responder_config(QpType::Uc, &attr(), 4096).unwrap();
        assert_eq!(
            (s.transport, s.dest_qpn, s.rq_psn, s.mtu),
            (Transport::Uc, 0x12, 0x200, 4096)
        );
        assert_eq!((s.max_dest_rd_atomic, s.min_rnr_timer), (2, 12));
        assert_eq!(
            requester_config(QpType::Ud, &attr(), 1024).err(),
            Some(TransportError::Transport(Transport::Ud))
        );
        assert!(transport_of(QpType::Gsi).is_none());
    }

    #[test]
    fn a_wire_requester_sends_no_more_than_rxes_window_before_an_ack() {
        use crate::transport::requester::Message;
        use crate::transport::{MsgOp, WqeId};
        let mut rq = Requester::new(requester_config(QpType::Rc, &attr(), 1024).unwrap()).unwrap();
        // four 64 KiB WRITEs: 64 packets each at MTU 1024
        for i in 0..4 {
            rq.post(
                WqeId(i),
                Message::new(MsgOp::Write, 65536).remote(0x1000, 7),
            )
            .unwrap();
        }
        let now = std::time::Instant::now();
        let mut actions = Vec::new();
        let mut sent = 0;
        while rq.poll_transmit(now, &mut actions).is_some() {
            sent += 1;
        }
        assert_eq!(sent, WINDOW);
    }

    fn path() -> Path {
        use crate::addr::{Gid, Mac};
        Path::new(
            Mac([2; 6]),
            Mac([4; 6]),
            Gid([1; 16]),
            Gid([3; 16]),
            1,
            2,
            (0, 0, 0),
        )
    }

    #[test]
    fn a_qp_of_a_new_epoch_has_no_engines_of_the_old_one() {
        let mut qps = WireQps::default();
        let cfg = responder_config(QpType::Rc, &attr(), 1024).unwrap();
        qps.open(5, 1, cfg, path()).unwrap();
        let rq = requester_config(QpType::Rc, &attr(), 1024).unwrap();
        assert!(qps.start(5, 1, rq, 9).unwrap());
        assert!(qps
            .get(5, 1)
            .is_some_and(|e| e.requester.is_some() && e.posted == 9));
        assert_eq!(qps.qpns(), vec![5]);
        assert!(qps.get(5, 2).is_none()); // ERR/RESET moved the epoch: dropped
        assert!(qps.is_empty());
        assert!(!qps.start(5, 2, rq, 0).unwrap()); // no responder, no requester
        let bad = ResponderConfig { mtu: 1000, ..cfg };
        assert_eq!(
            qps.open(6, 1, bad, path()).err(),
            Some(TransportError::Mtu(1000))
        );
        qps.open(
            7,
            1,
            responder_config(QpType::Rc, &attr(), 256).unwrap(),
            path(),
        )
        .unwrap();
        qps.drop_qp(7);
        assert_eq!(qps.len(), 0);
        qps.set_local(8, 3);
        assert!(qps.is_local(8, 3) && !qps.is_local(8, 4) && !qps.is_local(9, 3));
    }
}
