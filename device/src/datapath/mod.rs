//! The data path: one poller thread serves the doorbells of every device in the process,
//! executes work requests and sleeps when idle (SPEC "Posting work").

pub mod completion;
pub mod copy;
pub mod events;
pub mod requester;
pub mod responder;
pub mod sge;

use crate::fabric::Fabric;
use crate::rnic::Rnic;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// What one pass over some QPs achieved.
#[derive(Debug, Default, Clone, Copy)]
pub struct Progress {
    /// Some WQE was executed or completed.
    pub worked: bool,
    /// The earliest time a waiting WQE wants another try.
    pub retry_at: Option<Instant>,
}

impl Progress {
    pub fn worked() -> Self {
        Progress {
            worked: true,
            retry_at: None,
        }
    }

    fn merge(&mut self, other: Progress) {
        self.worked |= other.worked;
        self.retry_at = match (self.retry_at, other.retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Wakes the poller: kicks, admin commands, trapped doorbell writes, shutdown.
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
        if let Err(e) = self.fd.write(1) {
            log::error!("poller wake-up failed: {e}");
        }
    }

    /// Asks the poller thread to exit.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Sleeps until woken or `deadline`.
    fn sleep(&self, deadline: Option<Instant>) {
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

/// One pass over every QP of one device.
fn poll_device(fabric: &Fabric, rnic: &Arc<Rnic>, now: Instant) -> Progress {
    let mut st = rnic.lock();
    let Some(mem) = st.mem() else {
        return Progress::default();
    };
    if st.admin.is_none() {
        return Progress::default();
    }
    let qpns: Vec<u32> = st.objects.qps.iter().map(|(_, qp)| qp.qpn).collect();
    let mut progress = Progress::default();
    for qpn in qpns {
        progress.merge(requester::service_qp(fabric, rnic, &mut st, &mem, qpn, now));
    }
    progress
}

fn poll_all(fabric: &Fabric) -> Progress {
    let now = Instant::now();
    let mut progress = Progress::default();
    for rnic in fabric.devices() {
        progress.merge(poll_device(fabric, rnic, now));
    }
    progress
}

fn set_polling(fabric: &Fabric, polling: bool) {
    for rnic in fabric.devices() {
        rnic.doorbells.set_polling(polling);
    }
}

/// How long the poller spins after the last work before it naps between looks.
const SPIN: Duration = Duration::from_micros(20);
/// The nap between looks while still polling.
const NAP: Duration = Duration::from_micros(5);
/// A look that took this long means the poller is competing for a core.
const STARVED: Duration = Duration::from_micros(200);
/// How long the poller stops idle polling after it starved.
const STARVED_BACKOFF: Duration = Duration::from_millis(100);

/// Asks for precise short sleeps: the default 50 us timer slack would stretch every nap.
fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
    if rc != 0 {
        log::debug!(
            "PR_SET_TIMERSLACK failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// How the poller behaves between bursts of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollerConfig {
    /// How long it keeps looking after the last work before it sleeps until kicked.
    pub idle: Duration,
    /// Give up idle polling while the host has no core to spare for it (see `STARVED`).
    pub give_way: bool,
}

impl Default for PollerConfig {
    fn default() -> Self {
        PollerConfig {
            idle: Duration::from_micros(1000),
            give_way: true,
        }
    }
}

/// The poller thread's loop: poll while there is work; for `idle` after it keep looking
/// (spinning briefly, then napping), then announce sleep through POLL_STATE, look once
/// more, and sleep until kicked.
pub fn run_poller(fabric: Arc<Fabric>, config: PollerConfig) {
    tighten_timer_slack();
    let waker = fabric.waker().clone();
    let mut last_work = Instant::now();
    set_polling(&fabric, false);
    let mut polling = false;
    let mut starved_at: Option<Instant> = None;
    while !waker.stopping() {
        let progress = poll_all(&fabric);
        if progress.worked {
            if !polling {
                set_polling(&fabric, true);
                polling = true;
            }
            last_work = Instant::now();
            continue;
        }
        // After starving, poll only while there is work, for a while.
        let idle = match starved_at {
            Some(t) if t.elapsed() < STARVED_BACKOFF => Duration::ZERO,
            _ => config.idle,
        };
        if polling && last_work.elapsed() < idle {
            let look = Instant::now();
            if last_work.elapsed() < SPIN {
                std::thread::yield_now();
            } else {
                // Still polling (no kicks needed), but leave the cores to the VMs' vCPUs.
                std::thread::sleep(NAP);
            }
            // Waited far longer than asked: the host has no core to spare for polling, and
            // a doorbell would sit unseen for a scheduler slice. Sleep instead, so drivers
            // kick: a kick blocks the posting vCPU, which frees a core for this thread.
            if !config.give_way || look.elapsed() < STARVED {
                continue;
            }
            log::trace!(
                "poller starved for {:?}; sleeping until kicked",
                look.elapsed()
            );
            starved_at = Some(Instant::now());
        }
        set_polling(&fabric, false);
        // Pairs with the drivers' barrier between the doorbell store and the POLL_STATE load.
        fence(Ordering::SeqCst);
        let progress = poll_all(&fabric);
        if !progress.worked {
            waker.sleep(progress.retry_at);
        }
        set_polling(&fabric, true);
        polling = true;
        last_work = Instant::now();
    }
    set_polling(&fabric, false);
}
