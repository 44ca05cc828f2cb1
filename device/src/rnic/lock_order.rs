//! The lock rules of the device core, checked in debug builds.
//!
//! 1. A thread holds at most one device lock (`Rnic::lock`) at a time: the data path
//!    resolves a transfer under the requester's lock, drops it, then takes the target's.
//!    No rule about which device comes first is needed because two are never held.
//! 2. Leaf locks (interrupt lines, the DMA fence, a GuestRam table) are taken for a few
//!    instructions and nothing is locked while they are held.
//! 3. Nothing blocks while a device lock is held: interrupts are signalled, and the DMA
//!    fence is waited for, only after the device lock is released.

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
