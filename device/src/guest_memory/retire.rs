//! Waiting for the device to let go of an unmapped range.
//!
//! `DMA_UNMAP` may only be answered once the device can no longer touch the
//! range: the client may reuse or free that memory as soon as it has the
//! reply. Tables are immutable and shared with [`RamSnapshot`]s, so a removed
//! mapping lives on in every older table a snapshot still holds. Each
//! fd-backed mapping therefore carries a [`RetireSignal`] that fires when its
//! last holder drops it (after the munmap), and the unmap waits for it.
//!
//! [`RamSnapshot`]: super::RamSnapshot

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use log::warn;

/// After this long, a waiting unmap says what it waits for (once).
const SLOW_UNMAP: Duration = Duration::from_secs(1);

/// Whether one mapping is gone, and a condition variable to wait for it.
#[derive(Debug, Default)]
pub(super) struct Retired {
    gone: Mutex<bool>,
    cond: Condvar,
}

impl Retired {
    /// Blocks until the mapping is gone. `what` names it in the warning
    /// logged if that takes longer than `SLOW_UNMAP`.
    pub(super) fn wait(&self, what: &dyn Fn() -> String) {
        let started = Instant::now();
        let mut warned = false;
        let mut gone = self.gone.lock().unwrap_or_else(PoisonError::into_inner);
        while !*gone {
            let (guard, _) = self
                .cond
                .wait_timeout(gone, SLOW_UNMAP)
                .unwrap_or_else(PoisonError::into_inner);
            gone = guard;
            if !*gone && !warned && started.elapsed() >= SLOW_UNMAP {
                warned = true;
                warn!(
                    "{}: the device still uses it after {SLOW_UNMAP:?}; the unmap waits",
                    what()
                );
            }
        }
    }
}

/// Held by a mapping; marks it gone when dropped.
#[derive(Debug, Default)]
pub(super) struct RetireSignal(Arc<Retired>);

impl RetireSignal {
    /// The state to wait on.
    pub(super) fn handle(&self) -> Arc<Retired> {
        Arc::clone(&self.0)
    }
}

impl Drop for RetireSignal {
    fn drop(&mut self) {
        *self.0.gone.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.0.cond.notify_all();
    }
}
