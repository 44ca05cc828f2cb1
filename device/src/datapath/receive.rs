//! The head of a QP's receives, shared by the RC/UC responder and datagram delivery:
//! claiming a WQE (from the QP's receive queue, or taken from its SRQ), its checked scatter
//! list, its completion, and, in ERR, the flush of a WQE taken from an SRQ (SPEC "Shared
//! receive queues").
//!
//! A QP with an SRQ takes the SRQ's next WQE when a message needs one and keeps it until
//! the message completes, so a message of several chunks fills one WQE while other QPs
//! take the WQEs after it. An XRC_TGT QP works the same way with the XRC SRQ each request
//! names (the responder sets it), and completes on that SRQ's CQ. The SRQ is in the same device's state as its QPs: the device
//! lock the caller holds covers it.

use super::sge;
use crate::guest_memory::RamSnapshot;
use crate::objects::srq::Take;
use crate::objects::{Qp, Ring};
use crate::rnic::contract;
use crate::rnic::notify::{post_async, post_cqe};
use crate::rnic::{Rnic, RnicState};
use vrnic_hw::{
    Access, ContractRule, Cqe, DbQpSlot, DbSrqSlot, EventType, RecvWqeHeader, Sge, VendorErr,
    WcOpcode, WcStatus, CQE_FLAG_RECV, CQE_FLAG_SRQ, KERNEL_UCTX,
};

/// Makes sure QP `qpn` has a receive WQE for the next message: one posted to its receive
/// queue, or (with an SRQ) the one it holds or the SRQ's next, which it then takes. False
/// if none is posted (RNR for RC; a drop for UC and datagrams).
pub fn claim(rnic: &Rnic, st: &mut RnicState, qpn: u32) -> bool {
    let Some(qp) = st.objects.qp(qpn) else {
        return false;
    };
    let Some(qp_srq) = qp.srq else {
        let rq_pi = rnic
            .doorbells
            .slot_word(qp.db_page, qp.db_slot, DbQpSlot::RQ_PI_OFF);
        return rq_pi != qp.rq.ci;
    };
    if qp_srq.taken.is_some() {
        return true;
    }
    let srqn = qp_srq.srqn;
    let mem = st.mem();
    let Some(srq) = st.objects.srqs.get_mut(srqn) else {
        return false;
    };
    let pi = rnic
        .doorbells
        .slot_word(srq.db_page, srq.db_slot, DbSrqSlot::PI_OFF);
    // The WQE must be readable before a QP takes it: a ring the device cannot read fails
    // the SRQ (SRQ_ERR), not the QP that happened to need it.
    let stride = 1usize << srq.ring.entry_shift;
    let readable = |at: Option<u64>| {
        at.zip(mem.as_ref())
            .is_some_and(|(at, mem)| mem.check_read(at, stride).is_ok())
    };
    if !srq.error && pi != srq.ci && !readable(srq.ring.entry_addr(srq.ci)) {
        srq.error = true;
        st.warn(
            rnic,
            format_args!("SRQ {srqn}: ring not readable; SRQ in error"),
        );
        post_async(rnic, st, EventType::SrqErr, srqn, 0);
        return false;
    }
    match srq.take(pi) {
        Take::Taken {
            index,
            limit_reached,
        } => {
            if let Some(s) = st.objects.qp_mut(qpn).and_then(|qp| qp.srq.as_mut()) {
                s.taken = Some(index);
            }
            if limit_reached {
                post_async(rnic, st, EventType::SrqLimitReached, srqn, 0);
            }
            true
        }
        Take::Empty | Take::Failed => false,
        Take::Overflow => {
            contract::report(
                rnic,
                st,
                ContractRule::SrqPiBeyondRing,
                format_args!("SRQ {srqn}: producer index {pi} beyond the ring; SRQ in error"),
            );
            post_async(rnic, st, EventType::SrqErr, srqn, 0);
            false
        }
    }
}

/// Where the WQE at the head of a QP's receives is, and what it is checked against.
struct Head<'a> {
    ring: &'a Ring,
    /// Free-running index in `ring`.
    index: u32,
    max_sge: u8,
    owner: sge::Owner,
}

/// The claimed head WQE of `qp`: the head of its receive queue, or the SRQ WQE it took
/// (checked against the SRQ's PD and max_sge).
fn head_of<'a>(st: &'a RnicState, qp: &'a Qp) -> Option<Head<'a>> {
    match qp.srq {
        None => Some(Head {
            ring: &qp.rq.ring,
            index: qp.rq.ci,
            max_sge: qp.max_recv_sge,
            owner: sge::Owner::of(qp),
        }),
        Some(s) => {
            let srq = st.objects.srqs.get(s.srqn)?;
            Some(Head {
                ring: &srq.ring,
                index: s.taken?,
                max_sge: srq.max_sge,
                owner: sge::Owner {
                    pdn: srq.pdn,
                    // The SRQ's context posted the WQE (an XRC SRQ's is not its TGT QP's).
                    kernel: srq.uctx == KERNEL_UCTX,
                },
            })
        }
    }
}

/// The target QP `qpn` once a copy into it has ended: no receive is in flight any more.
/// None if the QP is gone, or went through ERR or RESET while the bytes moved (its
/// `epoch` changed since `accepted_epoch`): the message is lost, as on a wire, and the
/// flush that waited for the receive may go on.
pub fn copy_ended<'st>(
    rnic: &Rnic,
    st: &'st mut RnicState,
    qpn: u32,
    accepted_epoch: u32,
) -> Option<&'st mut Qp> {
    let qp = st.objects.qp_mut(qpn)?;
    qp.receive_in_flight = false;
    if qp.epoch != accepted_epoch {
        // The flush runs on the target's own poller, which may sleep on another shard.
        rnic.wake();
        return None;
    }
    Some(qp)
}

/// The claimed head receive WQE's SGEs, checked against their MRs for local write, and
/// their total length; or the WQE's own fault (the receiver's completion status and reason).
pub fn head(
    st: &RnicState,
    mem: &RamSnapshot,
    qpn: u32,
) -> Result<(Vec<Sge>, u64), (WcStatus, VendorErr)> {
    let bad_wqe = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    let dma_fault = (WcStatus::LocQpOpErr, VendorErr::DmaFault);
    let qp = st.objects.qp(qpn).ok_or(bad_wqe)?;
    let head = head_of(st, qp).ok_or(bad_wqe)?;
    let addr = head.ring.entry_addr(head.index).ok_or(bad_wqe)?;
    let hdr: RecvWqeHeader = mem.read_obj(addr).map_err(|_| dma_fault)?;
    let stride = 1usize << head.ring.entry_shift;
    let n = usize::from(hdr.num_sge);
    if hdr.nonzero_reserved().is_some()
        || n > usize::from(head.max_sge)
        || RecvWqeHeader::SIZE + n * Sge::SIZE > stride
    {
        return Err(bad_wqe);
    }
    let sges = sge::read(mem, addr + RecvWqeHeader::SIZE as u64, n).map_err(|_| dma_fault)?;
    let capacity = sge::check(
        &st.objects,
        head.owner,
        &sges,
        u32::from(Access::LocalWrite),
    )?;
    Ok((sges, capacity))
}

/// Retires the claimed head receive WQE of QP `qpn`: (wqe_index in its ring, wr_id).
fn retire_head(st: &mut RnicState, mem: &RamSnapshot, qpn: u32) -> Option<(u16, u64)> {
    let qp = st.objects.qp(qpn)?;
    let head = head_of(st, qp)?;
    let wr_id = head
        .ring
        .entry_addr(head.index)
        .and_then(|addr| mem.read_obj::<RecvWqeHeader>(addr).ok())
        .map_or(0, |h| h.wr_id.to_native());
    let wqe_index = (head.index & (head.ring.depth() - 1)) as u16;
    let qp = st.objects.qp_mut(qpn)?;
    match qp.srq.as_mut() {
        None => qp.rq.ci = qp.rq.ci.wrapping_add(1),
        Some(s) => s.taken = None,
    }
    Some((wqe_index, wr_id))
}

/// Consumes the claimed head receive WQE of QP `qpn` and posts `cqe` for it (wr_id, QPN,
/// index and the RECV flag filled in). False if the CQ is broken.
pub fn complete_head(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    mut cqe: Cqe,
) -> bool {
    let Some(qp) = st.objects.qp(qpn) else {
        return false;
    };
    // An XRC SRQ completes on its own CQ (the TGT QP has none), a basic one on the QP's.
    let (cqn, srqn) = match qp.srq {
        None => (qp.recv_cqn, None),
        Some(s) => match st.objects.srqs.get(s.srqn).map(|srq| srq.xrc) {
            Some(Some(xrc)) => (xrc.cqn, Some(s.srqn)),
            Some(None) => (qp.recv_cqn, Some(s.srqn)),
            // The SRQ is gone (an XRC SRQ is destroyed without waiting): nothing to complete.
            None => return false,
        },
    };
    let Some((wqe_index, wr_id)) = retire_head(st, mem, qpn) else {
        return false;
    };
    cqe.wr_id = wr_id.into();
    cqe.qpn = qpn.into();
    cqe.wqe_index = wqe_index.into();
    cqe.flags |= CQE_FLAG_RECV as u8;
    if let Some(srqn) = srqn {
        // SPEC "Shared receive queues": every completion of an SRQ WQE names the SRQ.
        cqe.flags |= CQE_FLAG_SRQ as u8;
        cqe.srqn = srqn.into();
    }
    post_cqe(rnic, st, mem, cqn, &cqe).is_ok()
}

/// An SRQ QP in ERR still owes its flush: the WQE it took, then QP_LAST_WQE_REACHED.
pub fn srq_flush_due(qp: &Qp) -> bool {
    qp.srq.is_some_and(|s| s.last_wqe_due)
}

/// In ERR, once no message is being placed: the SRQ WQE the QP took and did not complete
/// completes with WR_FLUSH_ERR, then QP_LAST_WQE_REACHED is posted (once per entry into
/// ERR). Returns whether it did so.
pub fn flush_srq(rnic: &Rnic, st: &mut RnicState, mem: &RamSnapshot, qpn: u32) -> bool {
    let Some(qp) = st.objects.qp(qpn) else {
        return false;
    };
    if !srq_flush_due(qp) || qp.receive_in_flight {
        return false;
    }
    if qp.srq.is_some_and(|s| s.taken.is_some()) {
        let cqe = Cqe {
            opcode: WcOpcode::Recv.into(),
            status: WcStatus::WrFlushErr.into(),
            vendor_err: VendorErr::Flush.into(),
            ..Default::default()
        };
        // A broken CQ loses the completion; the event still follows.
        complete_head(rnic, st, mem, qpn, cqe);
    }
    if let Some(s) = st.objects.qp_mut(qpn).and_then(|qp| qp.srq.as_mut()) {
        s.last_wqe_due = false;
    }
    post_async(rnic, st, EventType::QpLastWqeReached, qpn, 0);
    true
}
