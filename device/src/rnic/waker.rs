//! Wakes a sleeping poller: kicks, admin commands, trapped doorbell writes, shutdown.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::Instant;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// The poller arms it before its last look for work and sleeps only if that look found
/// none and nothing woke it since it last slept; a wake-up writes the eventfd only while
/// it is armed (the first one, once), so the work handed to a poller that is busy anyway
/// (a frame, a kick) costs no system call: the poller finds it in its next pass, and
/// polls on for a while rather than sleep (the traffic it says is likely to go on).
pub struct Waker {
    fd: EventFd,
    stopping: AtomicBool,
    armed: AtomicBool,
    woken: AtomicBool,
}

impl Waker {
    pub fn new() -> std::io::Result<Self> {
        Ok(Waker {
            fd: EventFd::new(EFD_NONBLOCK)?,
            stopping: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            woken: AtomicBool::new(false),
        })
    }

    /// Wakes the poller if it is asleep or about to sleep (call after the work is in
    /// place, so that a poller not yet armed finds it in its last look).
    pub fn wake(&self) {
        // With the fence in `arm`: either this sees the poller armed, or the poller's last
        // look sees the work put in place before this call (Dekker's pattern).
        self.woken.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.armed.swap(false, Ordering::SeqCst) {
            self.signal();
        }
    }

    fn signal(&self) {
        // EAGAIN only means the counter is saturated: a wake-up is pending anyway.
        if let Err(e) = self.fd.write(1) {
            if e.kind() != std::io::ErrorKind::WouldBlock {
                log::error!("poller wake-up failed: {e}");
            }
        }
    }

    /// Asks the poller thread to exit.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.signal();
    }

    /// The poller is about to look for work a last time and then sleep: from now on a
    /// wake-up signals it.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The last look found work: the poller does not sleep.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    /// Whether a wake-up came since the poller last slept (and forgets it).
    pub fn woken_since(&self) -> bool {
        self.woken.swap(false, Ordering::Relaxed)
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Sleeps until woken or `deadline`.
    pub fn sleep(&self, deadline: Option<Instant>) {
        let timeout_ms = deadline.map_or(-1, |d| {
            let left = d.saturating_duration_since(Instant::now());
            i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX)
        });
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.fd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd for the duration of the call; the count is 1.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        self.disarm();
        self.woken.store(false, Ordering::Relaxed);
        let _ = self.fd.read();
    }
}
