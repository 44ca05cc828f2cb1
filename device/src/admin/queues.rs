//! CREATE/DESTROY of completion queues and event queues, and RESIZE_CQ.

use super::commands::{owned, uctx_exists};
use super::error::{
    bad_address, bad_field, bad_handle, bad_size, busy, no_resources, CmdError, CmdResult,
};
use super::prefetch::PageListReads;
use crate::guest_memory::RamSnapshot;
use crate::objects::{Cq, Eq, Qp, Ring};
use crate::rnic::notify::publish;
use crate::rnic::{Rnic, RnicState};
use std::time::{Duration, Instant};
use vrnic_hw::{
    bar0, AqStatus, CmdCreateCq, CmdCreateEq, CmdHandle, CmdResizeCq, ContractRule, Cqe, DbCqSlot,
    DbQpSlot, Eqe, PageList, QpState, EQ_FLAG_ASYNC, KERNEL_UCTX, MSIX_VECTORS,
};

/// Largest log2 depth of a CQ or EQ (also bounds QP rings: MAX_QP_WR is smaller).
pub const MAX_DEPTH_LOG2: u8 = bar0::MAX_CQE_RESET.trailing_zeros() as u8;

/// Bytes of a ring of 2^depth_log2 entries of `entry_size` (a power of two) bytes.
pub fn ring_bytes(depth_log2: u8, entry_size: usize) -> u64 {
    let entry_shift = entry_size.trailing_zeros();
    1u64 << (u32::from(depth_log2) + entry_shift)
}

/// A ring's page list (prefetched); `at` is the page list's offset in the command.
pub fn read_ring(
    reads: &mut PageListReads,
    mem: &RamSnapshot,
    pl: &PageList,
    at: usize,
    depth_log2: u8,
    entry_size: usize,
) -> CmdResult<Ring> {
    let entry_shift = entry_size.trailing_zeros() as u8;
    let pages = reads.read(mem, pl, at, 0, ring_bytes(depth_log2, entry_size))?;
    Ok(Ring {
        pages,
        depth_log2,
        entry_shift,
    })
}

/// Takes a doorbell slot in one of `uctx`'s pages (a new page from the pool when they are
/// full, SPEC "Doorbell pages") and zeroes it; returns (page, slot).
pub fn take_slot(rnic: &Rnic, st: &mut RnicState, uctx: u32) -> CmdResult<(u32, u32)> {
    let objects = &mut st.objects;
    let ctx = objects.uctxs.get_mut(uctx).ok_or_else(no_resources)?;
    let grant = ctx.take_slot(&mut objects.db_pages).map_err(|e| {
        log::debug!("{}: no doorbell slot for uctx {uctx}: {e}", rnic.name());
        no_resources()
    })?;
    if grant.new_page {
        rnic.doorbells.give_page(grant.page);
        log::debug!(
            "{}: uctx {uctx} got doorbell page {}",
            rnic.name(),
            grant.page
        );
    }
    rnic.doorbells.clear_slot(grant.page, grant.slot);
    Ok((grant.page, grant.slot))
}

pub fn release_slot(st: &mut RnicState, uctx: u32, page: u32, slot: u32) {
    if let Some(u) = st.objects.uctxs.get_mut(uctx) {
        u.release_slot(page, slot);
    }
}

pub fn create_cq(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    reads: &mut PageListReads,
    cmd: &CmdCreateCq,
) -> CmdResult<[u32; 4]> {
    let uctx = cmd.uctx.to_native();
    uctx_exists(st, uctx, CmdCreateCq::UCTX_OFF)?;
    let eqn = cmd.eqn.to_native();
    st.objects
        .eqs
        .get(eqn)
        .ok_or(bad_handle(CmdCreateCq::EQN_OFF))?;
    if !(1..=MAX_DEPTH_LOG2).contains(&cmd.depth_log2) {
        return Err(bad_size(CmdCreateCq::DEPTH_LOG2_OFF));
    }
    let ring = read_ring(
        reads,
        mem,
        &cmd.ring,
        CmdCreateCq::RING_OFF,
        cmd.depth_log2,
        Cqe::SIZE,
    )?;
    let cqn = st.objects.cqs.free_index(0).ok_or_else(no_resources)?;
    let (db_page, db_slot) = take_slot(rnic, st, uctx)?;
    st.objects.cqs.insert_at(
        cqn,
        Cq {
            uctx,
            eqn,
            ring,
            db_page,
            db_slot,
            pi: 0,
            fired_seq: 0,
            error: false,
        },
    );
    Ok([cqn as u32, db_slot, db_page, 0])
}

pub fn destroy_cq(_rnic: &Rnic, st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let cqn = cmd.handle.to_native();
    let cq = st
        .objects
        .cqs
        .get(cqn)
        .ok_or(bad_handle(CmdHandle::HANDLE_OFF))?;
    owned(cq.uctx, cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    let o = &st.objects;
    if o.qps.iter().any(|(_, qp)| qp.uses_cq(cqn))
        || o.srqs
            .iter()
            .any(|(_, srq)| srq.xrc.is_some_and(|x| x.cqn == cqn))
    {
        return Err(busy(CmdHandle::HANDLE_OFF));
    }
    let (uctx, page, slot) = (cq.uctx, cq.db_page, cq.db_slot);
    st.objects.cqs.remove(cqn);
    release_slot(st, uctx, page, slot);
    Ok([0; 4])
}

/// How long RESIZE_CQ waits for the sends posted before it (`take_up_posted_sends`).
const TAKE_UP_LIMIT: Duration = Duration::from_secs(1);
/// The pause between looks while it waits.
const TAKE_UP_NAP: Duration = Duration::from_micros(100);

/// Before RESIZE_CQ (SPEC "Resizing a CQ"): lets the data path take up the send WQEs that
/// the QPs using the CQ had posted when the command came, so their CQEs are in the old ring
/// and move (hardware would have run them long before its admin queue got to the command;
/// here the poller may not have had a core yet). Waits, without the device lock, until each
/// such QP's consumer index reaches the producer index its doorbell showed at the start, the
/// QP leaves RTS and ERR, or waits on a timer (RNR, retry), or `TAKE_UP_LIMIT` passes. The
/// QPs are marked active, so a doorbell whose flag the poller has not seen is found too.
pub fn take_up_posted_sends(rnic: &Rnic, cmd: &CmdResizeCq) {
    let cqn = cmd.cqn.to_native();
    // (QP, its sq_pi when the command came)
    let mut targets: Vec<(u32, u32)> = {
        let st = rnic.lock();
        let o = &st.objects;
        o.qps
            .iter()
            .filter(|(_, qp)| qp.uses_cq(cqn) && qp.has_doorbell())
            .map(|(_, qp)| {
                let pi = rnic
                    .doorbells
                    .slot_word(qp.db_page, qp.db_slot, DbQpSlot::SQ_PI_OFF);
                (qp.qpn, pi)
            })
            .collect()
    };
    let deadline = Instant::now() + TAKE_UP_LIMIT;
    loop {
        {
            let mut st = rnic.lock();
            targets.retain(|&(qpn, pi)| st.objects.qp(qpn).is_some_and(|qp| sends_due(qp, pi)));
            if targets.is_empty() {
                return;
            }
            for &(qpn, _) in &targets {
                st.objects.mark_active(qpn);
            }
        }
        if Instant::now() >= deadline {
            log::debug!(
                "{}: RESIZE_CQ of CQ {cqn} goes on with {} QP(s) still holding posted sends",
                rnic.name(),
                targets.len()
            );
            return;
        }
        rnic.wake();
        std::thread::sleep(TAKE_UP_NAP);
    }
}

/// Whether the data path still has to take up WQEs of `qp` before `pi`, and will without
/// the driver's help: the QP is in RTS (sending) or ERR (flushing) and waits on no timer.
fn sends_due(qp: &Qp, pi: u32) -> bool {
    let left = pi.wrapping_sub(qp.sq.ci);
    let runs = matches!(qp.state, QpState::Rts | QpState::Err);
    runs && qp.waiting.is_none() && left != 0 && left <= qp.sq.ring.depth()
}

/// RESIZE_CQ (SPEC "Resizing a CQ"): the CQEs from the driver's `ci` to the producer index
/// move, in order, to entries 0.. of the new ring with its first-pass phase, and the CQ goes
/// on there; its slot's `ci` word becomes 0, `arm` and the event sequence stay. All of it
/// happens under the device lock, which every CQE write takes, so no CQE lands in the old
/// ring after the copy and none is lost. A failure changes nothing of the CQ.
pub fn resize_cq(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    reads: &mut PageListReads,
    cmd: &CmdResizeCq,
) -> CmdResult<[u32; 4]> {
    let cqn = cmd.cqn.to_native();
    let cq = st
        .objects
        .cqs
        .get(cqn)
        .ok_or(bad_handle(CmdResizeCq::CQN_OFF))?;
    owned(cq.uctx, cmd.uctx.to_native(), CmdResizeCq::UCTX_OFF)?;
    if !(1..=MAX_DEPTH_LOG2).contains(&cmd.depth_log2) {
        return Err(bad_size(CmdResizeCq::DEPTH_LOG2_OFF));
    }
    if cq.error {
        return Err(CmdError::general(AqStatus::BadState));
    }
    // A ci ahead of the producer index wraps to a count beyond the old depth too.
    let moved = cq.pi.wrapping_sub(cmd.ci.to_native());
    if moved > cq.ring.depth() {
        return Err(bad_field(CmdResizeCq::CI_OFF).breaks(ContractRule::ResizeCqCiBeyondProducer));
    }
    if moved > 1 << cmd.depth_log2 {
        return Err(bad_size(CmdResizeCq::DEPTH_LOG2_OFF));
    }
    let ring = read_ring(
        reads,
        mem,
        &cmd.ring,
        CmdResizeCq::RING_OFF,
        cmd.depth_log2,
        Cqe::SIZE,
    )?;
    let old = &cq.ring;
    for i in 0..moved {
        let from = old.entry_addr(cmd.ci.to_native().wrapping_add(i));
        let mut cqe: Cqe = from
            .and_then(|a| mem.read_obj(a).ok())
            .ok_or(bad_address(CmdResizeCq::RING_OFF))?;
        cqe.owner = 0;
        let to = ring
            .entry_addr(i)
            .ok_or(bad_address(CmdResizeCq::RING_OFF))?;
        publish(mem, to, &cqe, Cqe::OWNER_OFF, ring.phase(i))
            .map_err(|_| bad_address(CmdResizeCq::RING_OFF))?;
    }
    let Some(cq) = st.objects.cqs.get_mut(cqn) else {
        return Err(bad_handle(CmdResizeCq::CQN_OFF));
    };
    cq.ring = ring;
    cq.pi = moved;
    rnic.doorbells
        .set_slot_word(cq.db_page, cq.db_slot, DbCqSlot::CI_OFF, 0);
    log::debug!(
        "{}: CQ {cqn} resized to 2^{}, {moved} CQEs moved",
        rnic.name(),
        cmd.depth_log2
    );
    Ok([moved, 0, 0, 0])
}

pub fn create_eq(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    reads: &mut PageListReads,
    cmd: &CmdCreateEq,
) -> CmdResult<[u32; 4]> {
    if !(1..=MAX_DEPTH_LOG2).contains(&cmd.depth_log2) {
        return Err(bad_size(CmdCreateEq::DEPTH_LOG2_OFF));
    }
    if u32::from(cmd.flags) & !EQ_FLAG_ASYNC != 0 {
        return Err(bad_field(CmdCreateEq::FLAGS_OFF));
    }
    let is_async = u32::from(cmd.flags) & EQ_FLAG_ASYNC != 0;
    if is_async && st.objects.async_eq().is_some() {
        return Err(busy(CmdCreateEq::FLAGS_OFF));
    }
    let vector = cmd.msix_vector.to_native();
    if u32::from(vector) >= MSIX_VECTORS {
        return Err(bad_field(CmdCreateEq::MSIX_VECTOR_OFF));
    }
    let ring = read_ring(
        reads,
        mem,
        &cmd.ring,
        CmdCreateEq::RING_OFF,
        cmd.depth_log2,
        Eqe::SIZE,
    )?;
    let eqn = st.objects.eqs.free_index(0).ok_or_else(no_resources)?;
    let (db_page, db_slot) = take_slot(rnic, st, KERNEL_UCTX)?;
    st.objects.eqs.insert_at(
        eqn,
        Eq {
            ring,
            vector,
            is_async,
            db_page,
            db_slot,
            pi: 0,
            pending: Default::default(),
            dropped: 0,
        },
    );
    Ok([eqn as u32, db_slot, db_page, 0])
}

pub fn destroy_eq(_rnic: &Rnic, st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let eqn = cmd.handle.to_native();
    let eq = st
        .objects
        .eqs
        .get(eqn)
        .ok_or(bad_handle(CmdHandle::HANDLE_OFF))?;
    owned(KERNEL_UCTX, cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    if st.objects.cqs.iter().any(|(_, cq)| cq.eqn == eqn) {
        return Err(busy(CmdHandle::HANDLE_OFF));
    }
    let (page, slot) = (eq.db_page, eq.db_slot);
    st.objects.eqs.remove(eqn);
    release_slot(st, KERNEL_UCTX, page, slot);
    Ok([0; 4])
}
