//! The lock rules of the device core, checked in debug builds.
//!
//! 1. A thread holds at most one device lock (`Rnic::lock`) at a time: the data path
//!    resolves a transfer under the requester's lock, drops it, then takes the target's.
//!    No rule about which device comes first is needed because two are never held.
//!    An SRQ is state of its device like a CQ: the QPs sharing it are that device's, so
//!    taking an SRQ WQE needs only the device lock the receive path already holds.
//! 2. Leaf locks (interrupt lines, the DMA fence, a GuestRam table, the fabric's GID
//!    directory, the process-wide atomics lock of `datapath::atomic`, the control socket's
//!    client list, a tracer's subscriber list and then one subscriber's queue, a packet
//!    tap's queue handle and MSN map, a device's fault plan) are taken for a few
//!    instructions and nothing is locked while they are held. SET_GID and reset update the
//!    GID directory under their device lock; route look-ups read it with no device lock
//!    held. An atomic's read-modify-write takes the atomics lock with no device lock held
//!    (between the target's accept and complete, where other transfers copy); on the
//!    RoCEv2 wire the responder runs it under its device lock (a packet is placed there).
//! 3. Nothing blocks while a device lock is held: interrupts are signalled, and the DMA
//!    fence is waited for, only after the device lock is released. The control socket
//!    copies views under one device lock at a time (`rnic::snapshot`) and does its socket
//!    I/O with none held.

#[cfg(debug_assertions)]
thread_local! {
    static DEVICE_LOCKS_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Called before taking a device lock.
pub fn before_device_lock() {
    #[cfg(debug_assertions)]
    DEVICE_LOCKS_HELD.with(|held| {
        assert_eq!(held.get(), 0, "lock rule 1: device locks never nest");
        held.set(1);
    });
}

/// Called after releasing a device lock.
pub fn after_device_unlock() {
    #[cfg(debug_assertions)]
    DEVICE_LOCKS_HELD.with(|held| held.set(0));
}

/// Called where a thread may block (fence waits, interrupt delivery).
pub fn assert_no_device_lock(what: &str) {
    #[cfg(debug_assertions)]
    DEVICE_LOCKS_HELD.with(|held| {
        assert_eq!(held.get(), 0, "lock rule 3: {what} under a device lock");
    });
    #[cfg(not(debug_assertions))]
    let _ = what;
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use crate::rnic::testing::device_with_ram;

    #[test]
    #[should_panic(expected = "lock rule 1")]
    fn taking_a_second_device_lock_breaks_rule_1() {
        let (a, _) = device_with_ram(0x1000);
        let (b, _) = device_with_ram(0x1000);
        let _first = a.lock();
        let _second = b.lock();
    }

    #[test]
    #[should_panic(expected = "lock rule 3")]
    fn waiting_for_the_fence_under_a_device_lock_breaks_rule_3() {
        let (a, _) = device_with_ram(0x1000);
        let _held = a.lock();
        a.fence.wait();
    }

    #[test]
    fn one_device_lock_after_another_is_fine() {
        let (a, _) = device_with_ram(0x1000);
        let (b, _) = device_with_ram(0x1000);
        drop(a.lock());
        drop(b.lock());
        a.fence.wait();
    }
}
