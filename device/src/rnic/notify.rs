//! Telling the driver: CQEs (owner bit last, never over an unconsumed entry), completion
//! events for armed CQs, and EQEs with their interrupt (SPEC "Completion queue",
//! "Completion events", "Event queue").
//!
//! An event that finds its EQ full waits in the EQ's pending list and is delivered as soon
//! as the driver makes room, so no context can make another lose its events by flooding a
//! shared EQ; it can only make them wait for the driver.

use super::{Rnic, RnicState};
use crate::guest_memory::{DmaError, RamSnapshot};
use crate::hostile;
use crate::objects::queues::PendingEvent;
use std::sync::atomic::{fence, Ordering};
use vm_memory::ByteValued;
use vrnic_hw::{
    ContractRule, Counter, CqArm, Cqe, DbCqSlot, DbEqSlot, EventType, WcStatus, CQE_FLAG_SOLICITED,
    CQ_ARM_CMD_MASK, CQ_ARM_SEQ_SHIFT,
};

/// Events one EQ may hold back while full; beyond, new ones are dropped (and counted). Each
/// CQ has at most one completion event outstanding per arm, so this covers every CQ.
pub const MAX_PENDING_EVENTS: usize = 1 << 17;

/// Writes `entry` at `addr` the way every ring of the device publishes: all bytes but the
/// owner byte at `owner_off` first, then the owner byte with release ordering.
pub fn publish<T: ByteValued>(
    mem: &RamSnapshot,
    addr: u64,
    entry: &T,
    owner_off: usize,
    phase: u8,
) -> Result<(), DmaError> {
    let bytes = entry.as_slice();
    mem.write(addr, &bytes[..owner_off])?;
    mem.write(
        addr + owner_off as u64 + 1,
        &bytes[(owner_off + 1).min(bytes.len())..],
    )?;
    mem.store_u8(addr + owner_off as u64, phase, Ordering::Release)
}

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
    let bad = rnic.hostile.cqe(&st.objects, &rnic.doorbells, cqn, cqe);
    let Some(cq) = st.objects.cqs.get_mut(cqn) else {
        return Err(CqBroken);
    };
    if cq.error {
        return Err(CqBroken);
    }
    let ci = rnic
        .doorbells
        .slot_word(cq.db_page, cq.db_slot, DbCqSlot::CI_OFF);
    let overflow = cq.pi.wrapping_sub(ci) >= cq.ring.depth();
    let written = !overflow
        && cq.ring.entry_addr(cq.pi).is_some_and(|addr| {
            let phase = hostile::cqe::phase(&bad, cq.ring.phase(cq.pi));
            publish(
                mem,
                addr,
                hostile::cqe::entry(&bad, cqe),
                Cqe::OWNER_OFF,
                phase,
            )
            .is_ok()
        });
    if !written {
        // More than a ring ahead of its consumer: the consumer index is beyond the producer.
        let beyond = cq.pi.wrapping_sub(ci) > cq.ring.depth();
        cq.error = true;
        if overflow {
            rnic.counters.inc(Counter::CqOverflows);
        }
        let why = if overflow {
            "overflowed"
        } else {
            "ring is not writable"
        };
        st.warn(rnic, format_args!("CQ {cqn} {why}; it is now in error"));
        if beyond {
            super::contract::report(
                rnic,
                st,
                ContractRule::CqCiBeyondProducer,
                format_args!("CQ {cqn}: consumer index {ci} beyond the CQEs written"),
            );
        }
        // SPEC: the CQ's QPs move to ERR (not only the one whose completion overflowed).
        let hit: Vec<u32> = st
            .objects
            .qps
            .iter()
            .filter(|(_, qp)| qp.uses_cq(cqn))
            .map(|(_, qp)| qp.qpn)
            .collect();
        for qpn in hit {
            let from = || st.objects.qp(qpn).map(|qp| qp.state);
            rnic.trace.qp_state(qpn, from, vrnic_hw::QpState::Err);
            st.objects.qp_to_error(qpn);
        }
        post_async(rnic, st, EventType::CqErr, cqn, 0);
        // Those QPs get flushed by the device's poller, which may be asleep.
        rnic.wake();
        return Err(CqBroken);
    }
    cq.pi = cq.pi.wrapping_add(1);
    rnic.trace.cqe(cqn, cqe);
    cq.pi = cq
        .pi
        .wrapping_add(hostile::cqe::duplicate(&bad, mem, &cq.ring, cq.pi, ci));
    rnic.hostile.irq(&mut st.pending_irqs);
    // Pairs with the driver's barrier between storing `arm` and re-polling the CQ.
    fence(Ordering::SeqCst);
    let arm = rnic
        .doorbells
        .slot_word(cq.db_page, cq.db_slot, DbCqSlot::ARM_OFF);
    let seq = arm >> CQ_ARM_SEQ_SHIFT;
    let wanted = match CqArm::try_from(arm & CQ_ARM_CMD_MASK) {
        Ok(CqArm::Next) => true,
        Ok(CqArm::Solicited) => {
            u32::from(cqe.flags) & CQE_FLAG_SOLICITED != 0
                || cqe.status != u8::from(WcStatus::Success)
        }
        _ => false,
    };
    let fire = wanted && seq != cq.fired_seq;
    if fire {
        cq.fired_seq = seq;
        rnic.trace.cq_fired(cqn, arm);
    }
    let eqn = cq.eqn;
    rnic.counters.completion(cqe.status);
    if let Some(qp) = st.objects.qp(cqe.qpn.to_native()) {
        qp.counters.completion(cqe.status);
    }
    if fire {
        post_event(rnic, st, mem, eqn, EventType::Completion, cqn, 0);
    }
    Ok(())
}

/// Posts an event to EQ `eqn` and raises its vector; a full EQ keeps it pending.
pub fn post_event(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    eqn: u32,
    event: EventType,
    obj: u32,
    data: u32,
) {
    let Some(eq) = st.objects.eqs.get_mut(eqn) else {
        st.warn(
            rnic,
            format_args!("event {event:?} for {obj} dropped: EQ {eqn} does not exist"),
        );
        return;
    };
    let pending = PendingEvent {
        event: event.into(),
        obj,
        data,
    };
    if eq.pending.len() >= MAX_PENDING_EVENTS {
        eq.dropped += 1;
        rnic.counters.inc(Counter::EqOverflows);
        st.warn(
            rnic,
            format_args!("EQ {eqn}: too many events held back; {event:?} for {obj} dropped"),
        );
        return;
    }
    eq.pending.push_back(pending);
    if deliver(rnic, st, mem, eqn) {
        // Still held back (the queue is FIFO): this EQE found its EQ full.
        rnic.counters.inc(Counter::EqOverflows);
        // Not for the DEVICE_FATAL a strict check raises itself (it would count twice).
        if event != EventType::DeviceFatal {
            eq_ci_check(rnic, st, eqn);
        }
    }
}

/// An EQ found full: is its consumer index beyond what the device wrote (a contract rule)?
fn eq_ci_check(rnic: &Rnic, st: &mut RnicState, eqn: u32) {
    let Some(eq) = st.objects.eqs.get(eqn) else {
        return;
    };
    let ci = rnic
        .doorbells
        .slot_word(eq.db_page, eq.db_slot, DbEqSlot::CI_OFF);
    if eq.pi.wrapping_sub(ci) > eq.ring.depth() {
        super::contract::report(
            rnic,
            st,
            ContractRule::EqCiBeyondProducer,
            format_args!("EQ {eqn}: consumer index {ci} beyond the EQEs written"),
        );
    }
}

/// Moves held-back events of EQ `eqn` into its ring while it has room. Returns whether
/// some are still waiting.
fn deliver(rnic: &Rnic, st: &mut RnicState, mem: &RamSnapshot, eqn: u32) -> bool {
    let hints = rnic.hostile.eqe_hints(&st.objects, eqn);
    let Some(eq) = st.objects.eqs.get_mut(eqn) else {
        return false;
    };
    let ci = rnic
        .doorbells
        .slot_word(eq.db_page, eq.db_slot, DbEqSlot::CI_OFF);
    let mut delivered = false;
    while let Some(next) = eq.pending.front() {
        if eq.pi.wrapping_sub(ci) >= eq.ring.depth() {
            break;
        }
        let eqe = vrnic_hw::Eqe {
            event_type: next.event,
            obj: next.obj.into(),
            data: next.data.into(),
            ..Default::default()
        };
        let eqe = rnic.hostile.eqe(&hints, eqe, &mut eq.pending);
        let written = eq.ring.entry_addr(eq.pi).is_some_and(|addr| {
            publish(
                mem,
                addr,
                &eqe,
                vrnic_hw::Eqe::OWNER_OFF,
                eq.ring.phase(eq.pi),
            )
            .is_ok()
        });
        if !written {
            let n = eq.pending.len();
            eq.pending.clear();
            st.warn(
                rnic,
                format_args!("EQ {eqn} ring is not writable; {n} events dropped"),
            );
            return false;
        }
        eq.pending.pop_front();
        rnic.trace.eqe(eqn, &eqe);
        eq.pi = eq.pi.wrapping_add(1);
        delivered = true;
    }
    let (vector, waiting) = (eq.vector, !eq.pending.is_empty());
    if delivered {
        st.pending_irqs.raise(vector);
    }
    waiting
}

/// Delivers what every EQ holds back, as far as there is room. Returns whether events are
/// still waiting (the poller then looks again soon: drivers do not kick for EQ space).
pub fn deliver_held_back(rnic: &Rnic, st: &mut RnicState, mem: &RamSnapshot) -> bool {
    let eqns: Vec<u32> = st
        .objects
        .eqs
        .iter()
        .filter(|(_, eq)| !eq.pending.is_empty())
        .map(|(n, _)| n)
        .collect();
    let mut waiting = false;
    for eqn in eqns {
        waiting |= deliver(rnic, st, mem, eqn);
    }
    waiting
}

/// Posts an async event to the async EQ, if the driver created one.
pub fn post_async(rnic: &Rnic, st: &mut RnicState, event: EventType, obj: u32, data: u32) {
    log::debug!("{}: async event {event:?} for {obj}", rnic.name());
    let (Some(eqn), Some(mem)) = (st.objects.async_eq(), st.mem()) else {
        return;
    };
    post_event(rnic, st, &mem, eqn, event, obj, data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::page_list::GuestPages;
    use crate::objects::{Eq, Ring};
    use std::sync::Arc;
    use vrnic_hw::Eqe;

    const RAM: u64 = crate::rnic::testing::RAM_BASE;

    /// A device with guest RAM and an EQ of two entries at its start.
    fn device_with_small_eq() -> (Arc<Rnic>, RamSnapshot) {
        let (rnic, mem) = crate::rnic::testing::device_with_ram(0x10000);
        let ring = Ring {
            pages: GuestPages::list(vec![RAM], 12),
            depth_log2: 1,
            entry_shift: Eqe::SIZE.trailing_zeros() as u8,
        };
        rnic.lock().objects.eqs.insert_at(
            0,
            Eq {
                ring,
                vector: 1,
                is_async: false,
                db_page: 0,
                db_slot: 0,
                pi: 0,
                pending: Default::default(),
                dropped: 0,
            },
        );
        (rnic, mem)
    }

    fn owner(mem: &RamSnapshot, index: u64) -> u8 {
        mem.load_u8(
            RAM + index * Eqe::SIZE as u64 + Eqe::OWNER_OFF as u64,
            Ordering::Acquire,
        )
        .unwrap()
    }

    #[test]
    fn an_event_that_finds_its_eq_full_waits_for_room_instead_of_being_lost() {
        let (rnic, mem) = device_with_small_eq();
        let mut st = rnic.lock();
        for cq in [10, 11] {
            post_event(&rnic, &mut st, &mem, 0, EventType::Completion, cq, 0);
        }

        post_event(&rnic, &mut st, &mem, 0, EventType::Completion, 12, 0);

        assert_eq!(st.objects.eqs.get(0).unwrap().pending.len(), 1);
        assert!(deliver_held_back(&rnic, &mut st, &mem), "no room yet");
        // The driver consumes one entry and says so in the EQ's doorbell slot.
        rnic.doorbells.set_slot_word(0, 0, DbEqSlot::CI_OFF, 1);
        assert!(!deliver_held_back(&rnic, &mut st, &mem), "delivered");
        let third: Eqe = mem.read_obj(RAM).unwrap();
        assert_eq!((third.obj.to_native(), owner(&mem, 0)), (12, 0));
        assert_eq!(st.objects.eqs.get(0).unwrap().dropped, 0);
    }
}
