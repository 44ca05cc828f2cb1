//! The fake-driver harness: plays the guest driver of vrnic devices over a real vfio-user
//! socket, with memfd-backed guest RAM, an mmapped doorbell BAR and eventfd interrupts.
//! It knows the device only through the hardware interface (`vrnic_hw`); the only device
//! code it calls is what `vrnic serve` calls to start devices (`devices`).
//!
//! It is the one test-support library of the device crate: every test binary includes it
//! (`mod harness;`), and so does the benchmark (`examples/bench.rs`, through `#[path]`).
//!
//! Layout:
//! - `cable`: two test hosts' switches joined by a seeded lossy, duplicating, reordering
//!   cable (the wire-path tests);
//! - `devices`: N devices in-process (temp sockets, a server thread each, one poller);
//! - `vfio`: the vfio-user client, in two layers on one framing: `RawClient` (any message,
//!   malformed ones included) and `VfioClient` on it (typed: VERSION, DMA_MAP, REGION_*,
//!   SET_IRQS, DEVICE_RESET...);
//! - `memory`: guest RAM (memfd) and a guest-physical allocator; memfds of every sealing
//!   (the device's own `vrnic::memfd`);
//! - `test_model`: a fake device model served by the real vfio-user server, for the
//!   server's own tests;
//! - `driver`: `FakeDriver`: bring-up, registers, the admin queue, doorbells, interrupts;
//! - `commands`: admin command builders and typed wrappers (contexts, PDs, MRs, CQs, EQs, QPs);
//! - `keys`: fast-registration MRs, memory windows and the work requests on them;
//! - `queues`: work requests, posting (SPEC doorbell protocol), CQ/EQ polling and arming;
//! - `pair`: two connected QPs, on two devices or on one (loopback), for data-path tests;
//! - `srq`: shared receive queues and the QPs that take their receives from them;
//! - `ud`: datagram QPs (UD, GSI) brought to RTS, and their address vectors;
//! - `xrc`: XRC domains, XRC SRQs, XRC_INI and XRC_TGT QPs.
//!
//! Every wait has a deadline (`TIMEOUT`): a broken device fails a test, never hangs it.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod cable;
pub mod commands;
pub mod devices;
pub mod driver;
pub mod keys;
pub mod memory;
pub mod pair;
pub mod queues;
pub mod srq;
pub mod test_model;
pub mod ud;
pub mod vfio;
pub mod xrc;

pub use commands::*;
pub use devices::TestDevices;
pub use driver::{AdminResult, FakeDriver};
pub use keys::*;
pub use memory::GuestMemory;
pub(crate) use pair::on_both_topologies;
pub use pair::{Pair, Topology, Which};
pub use queues::*;
pub use srq::*;
pub use ud::*;
pub use xrc::*;

use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest any single wait may take before the test fails. Generous: only a hung or broken
/// device gets near it.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Calls `f` until it returns `Some`, failing the test with `what` after `TIMEOUT`.
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    let mut spins = 0u32;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {TIMEOUT:?} waiting for {what}"
        );
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
}

/// A new pipe: its read end and its write end.
pub fn pipe() -> [File; 2] {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array; the result is checked.
    let rc = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(rc, 0, "pipe: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just created and nothing else owns them.
    unsafe { [File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])] }
}

/// Joins a thread, failing the test if it takes longer than `TIMEOUT`.
pub fn join_with_guard<T: Send + 'static>(t: JoinHandle<T>) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(t.join());
    });
    match rx.recv_timeout(TIMEOUT) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("thread did not finish within {TIMEOUT:?}"),
    }
}

/// Runs `f` on another thread, failing the test if it hangs (for clients without socket
/// timeouts, like the `vfio_user` crate's).
pub fn with_hang_guard<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    join_with_guard(std::thread::spawn(f))
}

/// `len` bytes of a deterministic pseudo-random pattern (xorshift) chosen by `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Asserts two buffers are equal, reporting the first differing offset instead of dumping
/// megabytes.
#[track_caller]
pub fn assert_same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} of {}: got {:#04x}, want {:#04x}",
            want.len(),
            got[i],
            want[i]
        );
    }
}
