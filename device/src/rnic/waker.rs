//! Wakes a sleeping poller: kicks, admin commands, trapped doorbell writes, shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

pub struct Waker {
    fd: EventFd,
    stopping: AtomicBool,
}

impl Waker {
    pub fn new() -> std::io::Result<Self> {
        Ok(Waker {
            fd: EventFd::new(EFD_NONBLOCK)?,
            stopping: AtomicBool::new(false),
        })
    }

    pub fn wake(&self) {
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
        self.wake();
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
        let _ = self.fd.read();
    }
}
