//! The process-wide budget of DMA mappings with a file descriptor.
//!
//! Every DMA map with an fd holds that fd open and one mmap of it until the
//! last snapshot containing it is dropped. Without a bound shared by all
//! clients, one client could fill the process's fd table (RLIMIT_NOFILE) and
//! make every other device's `accept()` fail. The budget is half of the
//! soft RLIMIT_NOFILE at the first map (the rest is for sockets, eventfds,
//! epoll sets and everything else), and at most [`MAX_PROCESS_MAPS`], so
//! that mappings also stay well below the kernel's default
//! `vm.max_map_count` (65530) that the whole process shares.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The most fd-backed DMA maps of the whole process, whatever RLIMIT_NOFILE.
pub const MAX_PROCESS_MAPS: usize = 32768;

/// A budget of fd-backed mappings, shared by every [`GuestRam`](super::GuestRam)
/// that uses it.
#[derive(Debug)]
pub(crate) struct MapBudget {
    limit: usize,
    used: AtomicUsize,
}

impl MapBudget {
    /// A budget of `limit` mappings.
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// The budget every `GuestRam` of this process shares, sized on first
    /// use (so raise RLIMIT_NOFILE before the first map).
    pub(crate) fn process() -> &'static Arc<Self> {
        static PROCESS: OnceLock<Arc<MapBudget>> = OnceLock::new();
        PROCESS.get_or_init(|| Self::new(process_limit()))
    }

    /// The number of mappings this budget allows.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Mappings currently held.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes one mapping from the budget, or `None` when it is exhausted.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Slot> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.limit).then(|| used.saturating_add(1))
            })
            .ok()?;
        Some(Slot(Arc::clone(self)))
    }
}

/// One mapping taken from a [`MapBudget`]; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<MapBudget>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Half of the soft RLIMIT_NOFILE, at most `MAX_PROCESS_MAPS`.
fn process_limit() -> usize {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `rl`, which is valid for writes.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur
    } else {
        // The traditional default soft limit.
        1024
    };
    usize::try_from(soft / 2)
        .unwrap_or(usize::MAX)
        .min(MAX_PROCESS_MAPS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_refused_when_exhausted_and_come_back_when_dropped() {
        let budget = MapBudget::new(2);

        let a = budget.take().unwrap();
        let b = budget.take().unwrap();
        assert!(budget.take().is_none());
        drop(a);
        let c = budget.take();

        assert!(c.is_some());
        assert_eq!(budget.used(), 2);
        drop((b, c));
        assert_eq!(budget.used(), 0);
    }
}
