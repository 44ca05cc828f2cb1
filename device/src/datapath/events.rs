//! Event queue entries: completion events and async events, each followed by its MSI-X
//! vector (SPEC "Event queue").

use crate::guest_memory::RamSnapshot;
use crate::rnic::{Rnic, RnicState};
use std::sync::atomic::Ordering;
use vm_memory::ByteValued;
use vrnic_hw::{Eqe, EventType, KERNEL_UCTX};

/// Posts an event to EQ `eqn` and signals its vector. A full or missing EQ drops the event
/// (logged): events must never block the data path.
pub fn post_eqe(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    eqn: u32,
    event: EventType,
    obj: u32,
    data: u32,
) {
    let Some(eq) = st.objects.eqs.get_mut(eqn) else {
        log::warn!(
            "{}: event {event:?} for {obj} dropped: EQ {eqn} does not exist",
            rnic.name()
        );
        return;
    };
    let ci = rnic.doorbells.slot_word(KERNEL_UCTX, eq.db_slot, 0);
    if eq.pi.wrapping_sub(ci) >= eq.ring.depth() {
        log::warn!(
            "{}: EQ {eqn} full; event {event:?} for {obj} dropped",
            rnic.name()
        );
        return;
    }
    let eqe = Eqe {
        event_type: event.into(),
        obj: obj.into(),
        data: data.into(),
        ..Default::default()
    };
    let written = eq.ring.entry_addr(eq.pi).ok_or(()).and_then(|addr| {
        mem.write(addr, &eqe.as_slice()[..Eqe::OWNER_OFF])
            .map_err(|_| ())?;
        mem.store_u8(
            addr + Eqe::OWNER_OFF as u64,
            eq.ring.phase(eq.pi),
            Ordering::Release,
        )
        .map_err(|_| ())
    });
    if written.is_err() {
        log::warn!(
            "{}: EQ {eqn} ring is not writable; event {event:?} for {obj} dropped",
            rnic.name()
        );
        return;
    }
    eq.pi = eq.pi.wrapping_add(1);
    let vector = eq.vector;
    st.irqs.signal(vector);
}

/// Posts an async event to the async EQ, if the driver created one.
pub fn post_async(rnic: &Rnic, st: &mut RnicState, event: EventType, obj: u32, data: u32) {
    log::debug!("{}: async event {event:?} for {obj}", rnic.name());
    let (Some(eqn), Some(mem)) = (st.objects.async_eq(), st.mem()) else {
        return;
    };
    post_eqe(rnic, st, &mem, eqn, event, obj, data);
}
