//! A poller shard's thread: polls the doorbells of its devices while there is work and
//! sleeps when idle (SPEC "Posting work").

use super::Fabric;
use crate::datapath::{poll_device, Progress};
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

/// How the pollers behave between bursts of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollerConfig {
    /// How long a poller keeps looking after the last work before it sleeps until kicked.
    pub idle: Duration,
    /// Give up idle polling while the host has no core to spare for it (see `STARVED`).
    pub give_way: bool,
    /// Poller threads; None: one per core (never more than devices).
    pub threads: Option<usize>,
}

impl Default for PollerConfig {
    fn default() -> Self {
        PollerConfig {
            idle: Duration::from_micros(1000),
            give_way: true,
            threads: None,
        }
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

fn poll_shard(fabric: &Fabric, shard: usize) -> Progress {
    let now = Instant::now();
    let mut progress = Progress::default();
    for rnic in &fabric.shards[shard].1 {
        progress.merge(crate::faults::act::release_due(rnic, now));
        progress.merge(poll_device(fabric, rnic, now));
    }
    progress
}

fn set_polling(fabric: &Fabric, shard: usize, polling: bool) {
    for rnic in &fabric.shards[shard].1 {
        rnic.doorbells.set_polling(polling);
    }
}

/// The loop of shard `shard`: poll while there is work; for `idle` after it keep looking
/// (spinning briefly, then napping), then announce sleep through POLL_STATE, look once
/// more, and sleep until kicked.
pub(super) fn run(fabric: &Fabric, shard: usize, config: PollerConfig) {
    tighten_timer_slack();
    let waker = fabric.shards[shard].0.clone();
    let mut last_work = Instant::now();
    set_polling(fabric, shard, false);
    let mut polling = false;
    let mut starved_at: Option<Instant> = None;
    while !waker.stopping() {
        let progress = poll_shard(fabric, shard);
        if progress.worked {
            if !polling {
                set_polling(fabric, shard, true);
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
                "poller {shard} starved for {:?}; sleeping until kicked",
                look.elapsed()
            );
            starved_at = Some(Instant::now());
        }
        set_polling(fabric, shard, false);
        // Pairs with the drivers' barrier between the doorbell store and the POLL_STATE load.
        fence(Ordering::SeqCst);
        waker.arm();
        let progress = poll_shard(fabric, shard);
        // Woken while busy: more is likely to come soon; poll on for `idle` again.
        match progress.worked || waker.woken_since() {
            true => waker.disarm(),
            false => waker.sleep(progress.retry_at),
        }
        set_polling(fabric, shard, true);
        polling = true;
        last_work = Instant::now();
    }
    set_polling(fabric, shard, false);
}
