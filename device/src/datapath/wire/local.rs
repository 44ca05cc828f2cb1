//! Memory operations (REG_MR, LOCAL_INV, BIND_MW) on a wire QP: the requester engine
//! holds them in queue order (`post_local`) and asks for each with `Action::Local` once
//! every WQE before it has completed; they are executed by the in-process helpers of
//! `memory_ops` and reported with `local_done`. One that revokes access completes after
//! the DMA fence, which is waited for with no device lock held (lock rule 3), as the
//! in-process requester does.

use super::engines::QpEngines;
use super::{engines_for, send, take_turn, WireDevice};
use crate::datapath::memory_ops::{self, Done};
use crate::datapath::Peers;
use crate::guest_memory::RamSnapshot;
use crate::rnic::{Rnic, RnicState};
use crate::transport::requester::Action;
use crate::transport::WqeId;
use std::time::Instant;
use vrnic_hw::{VendorErr, WcStatus};

/// Executes memory operation `id` of QP `qpn` (the engine's `Action::Local`); the
/// actions its completion leads to go to `out`.
#[allow(clippy::too_many_arguments)]
pub fn execute(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    id: WqeId,
    now: Instant,
    out: &mut Vec<Action>,
) {
    let bad = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    let wqe = e.kept.iter().find(|k| k.index == id.0).map(|k| k.wqe);
    let addr = st
        .objects
        .qp(qpn)
        .and_then(|qp| qp.sq.ring.entry_addr(id.0));
    let result = match (wqe, addr) {
        (Some(wqe), Some(addr)) => memory_ops::execute(&mut st.objects, mem, qpn, addr, &wqe),
        _ => Err(bad),
    };
    let (status, why) = match result {
        Ok(Done::Now) => (WcStatus::Success, VendorErr::None),
        Ok(Done::AfterFence) => {
            // The next pass serves the QP's send side, which waits for the fence.
            e.fenced = Some(id);
            st.objects.mark_active(qpn);
            rnic.wake();
            return;
        }
        Err(failure) => failure,
    };
    done(rnic, e, qpn, id, status, why, now, out);
}

#[allow(clippy::too_many_arguments)]
fn done(
    rnic: &Rnic,
    e: &mut QpEngines,
    qpn: u32,
    id: WqeId,
    status: WcStatus,
    why: VendorErr,
    now: Instant,
    out: &mut Vec<Action>,
) {
    let Some(rq) = e.requester.as_mut() else {
        return;
    };
    if let Err(err) = rq.local_done(id, status, why, now, out) {
        log::warn!(
            "{}: QP {qpn}: memory operation {}: {err}",
            rnic.name(),
            id.0
        );
    }
}

/// Completes QP `qpn`'s fenced memory operation `id` once the transfers that were in
/// flight when it revoked access have ended (no device lock held on entry); returns the
/// frames that follow from it.
pub fn after_fence(
    peers: &dyn Peers,
    rnic: &Rnic,
    wire: &WireDevice,
    qpn: u32,
    id: WqeId,
    now: Instant,
) -> Vec<Vec<u8>> {
    rnic.fence.wait();
    let mut frames = Vec::new();
    let mut st = rnic.lock();
    let Some(mem) = st.mem() else {
        return frames;
    };
    let mut qps = wire.qps();
    // The QP may have failed, been reset or destroyed meanwhile: its engines are gone or
    // new, and the operation is flushed or forgotten with them.
    let Some(e) = engines_for(peers, rnic, &st, &mut qps, qpn).filter(|e| e.fenced == Some(id))
    else {
        return frames;
    };
    e.fenced = None;
    let mut actions = Vec::new();
    done(
        rnic,
        e,
        qpn,
        id,
        WcStatus::Success,
        VendorErr::None,
        now,
        &mut actions,
    );
    let mut failed = send::apply(rnic, &mut st, &mem, e, qpn, &mut actions, None, now);
    let budget = super::QP_PACKETS_PER_PASS;
    let turn = take_turn(
        rnic,
        &mut st,
        &mem,
        e,
        qpn,
        now,
        &mut actions,
        &mut frames,
        budget,
    );
    failed |= turn.1;
    if failed {
        qps.drop_qp(qpn);
    }
    frames
}
