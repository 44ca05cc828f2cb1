//! Writing CQEs (owner bit last, never over an unconsumed entry) and firing armed
//! completion events (SPEC "Completion queue", "Completion events").

use super::events::{post_async, post_eqe};
use crate::guest_memory::RamSnapshot;
use crate::rnic::{Rnic, RnicState};
use std::sync::atomic::{fence, Ordering};
use vm_memory::ByteValued;
use vrnic_hw::{
    CqArm, Cqe, EventType, WcStatus, CQE_FLAG_SOLICITED, CQ_ARM_CMD_MASK, CQ_ARM_SEQ_SHIFT,
};

/// The CQ cannot take the entry (overflow, unwritable ring, missing CQ): it is in error.
#[derive(Debug, PartialEq, Eq)]
pub struct CqBroken;

/// Appends `cqe` to CQ `cqn`, then posts a completion event if the CQ is armed for it.
pub fn post_cqe(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    cqn: u32,
    cqe: &Cqe,
) -> Result<(), CqBroken> {
    let Some(cq) = st.objects.cqs.get_mut(cqn) else {
        return Err(CqBroken);
    };
    if cq.error {
        return Err(CqBroken);
    }
    let ci = rnic.doorbells.slot_word(cq.uctx, cq.db_slot, 0);
    let overflow = cq.pi.wrapping_sub(ci) >= cq.ring.depth();
    let written = !overflow
        && cq.ring.entry_addr(cq.pi).is_some_and(|addr| {
            mem.write(addr, &cqe.as_slice()[..Cqe::OWNER_OFF]).is_ok()
                && mem
                    .store_u8(
                        addr + Cqe::OWNER_OFF as u64,
                        cq.ring.phase(cq.pi),
                        Ordering::Release,
                    )
                    .is_ok()
        });
    if !written {
        cq.error = true;
        let why = if overflow {
            "overflowed"
        } else {
            "ring is not writable"
        };
        log::warn!("{}: CQ {cqn} {why}; it is now in error", rnic.name());
        // SPEC: the CQ's QPs move to ERR (not only the one whose completion overflowed).
        for (_, qp) in st.objects.qps.iter_mut() {
            if qp.send_cqn == cqn || qp.recv_cqn == cqn {
                qp.enter_error();
            }
        }
        post_async(rnic, st, EventType::CqErr, cqn, 0);
        return Err(CqBroken);
    }
    cq.pi = cq.pi.wrapping_add(1);
    // Pairs with the driver's barrier between storing `arm` and re-polling the CQ.
    fence(Ordering::SeqCst);
    let arm = rnic.doorbells.slot_word(cq.uctx, cq.db_slot, 1);
    let seq = arm >> CQ_ARM_SEQ_SHIFT;
    let wanted = match CqArm::try_from(arm & CQ_ARM_CMD_MASK) {
        Ok(CqArm::Next) => true,
        Ok(CqArm::Solicited) => {
            u32::from(cqe.flags) & CQE_FLAG_SOLICITED != 0
                || cqe.status != u8::from(WcStatus::Success)
        }
        _ => false,
    };
    if wanted && seq != cq.fired_seq {
        cq.fired_seq = seq;
        let eqn = cq.eqn;
        post_eqe(rnic, st, mem, eqn, EventType::Completion, cqn, 0);
    }
    Ok(())
}
