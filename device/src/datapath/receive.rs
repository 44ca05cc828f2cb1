//! The head of a QP's receive queue, shared by the RC responder and datagram delivery:
//! whether a WQE is posted, its checked scatter list, and its completion.

use super::sge;
use crate::guest_memory::RamSnapshot;
use crate::objects::Qp;
use crate::rnic::notify::post_cqe;
use crate::rnic::{Rnic, RnicState};
use vrnic_hw::{Access, Cqe, DbQpSlot, RecvWqeHeader, Sge, VendorErr, WcStatus, CQE_FLAG_RECV};

/// The driver has posted a receive WQE the device has not consumed.
pub fn posted(rnic: &Rnic, st: &RnicState, qpn: u32) -> bool {
    st.objects.qp(qpn).is_some_and(|qp| {
        rnic.doorbells
            .slot_word(qp.db_page, qp.db_slot, DbQpSlot::RQ_PI_OFF)
            != qp.rq.ci
    })
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

/// The head receive WQE's SGEs, checked against their MRs for local write, and their total
/// length; or the WQE's own fault (the receiver's completion status and reason).
pub fn head(
    st: &RnicState,
    mem: &RamSnapshot,
    qpn: u32,
) -> Result<(Vec<Sge>, u64), (WcStatus, VendorErr)> {
    let bad_wqe = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    let dma_fault = (WcStatus::LocQpOpErr, VendorErr::DmaFault);
    let qp = st.objects.qp(qpn).ok_or(bad_wqe)?;
    let addr = qp.rq.ring.entry_addr(qp.rq.ci).ok_or(bad_wqe)?;
    let hdr: RecvWqeHeader = mem.read_obj(addr).map_err(|_| dma_fault)?;
    let stride = 1usize << qp.rq.ring.entry_shift;
    let n = usize::from(hdr.num_sge);
    if hdr.nonzero_reserved().is_some()
        || n > usize::from(qp.max_recv_sge)
        || RecvWqeHeader::SIZE + n * Sge::SIZE > stride
    {
        return Err(bad_wqe);
    }
    let sges = sge::read(mem, addr + RecvWqeHeader::SIZE as u64, n).map_err(|_| dma_fault)?;
    let owner = sge::Owner::of(qp);
    let capacity = sge::check(&st.objects, owner, &sges, u32::from(Access::LocalWrite))?;
    Ok((sges, capacity))
}

/// Consumes the head receive WQE of QP `qpn` and posts `cqe` for it (wr_id, QPN, index and
/// the RECV flag filled in). False if the CQ is broken.
pub fn complete_head(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    mut cqe: Cqe,
) -> bool {
    let Some(qp) = st.objects.qp_mut(qpn) else {
        return false;
    };
    let index = qp.rq.ci;
    qp.rq.ci = index.wrapping_add(1);
    let wr_id = qp
        .rq
        .ring
        .entry_addr(index)
        .and_then(|addr| mem.read_obj::<RecvWqeHeader>(addr).ok())
        .map_or(0, |h| h.wr_id.to_native());
    cqe.wr_id = wr_id.into();
    cqe.qpn = qpn.into();
    cqe.wqe_index = ((index & (qp.rq.ring.depth() - 1)) as u16).into();
    cqe.flags |= CQE_FLAG_RECV as u8;
    let cqn = qp.recv_cqn;
    post_cqe(rnic, st, mem, cqn, &cqe).is_ok()
}
