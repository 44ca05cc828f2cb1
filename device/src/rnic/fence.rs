//! The DMA fence of a device: transfers register here before they touch guest memory
//! outside the device lock; a command that revokes access (DEREG_MR, DESTROY_QP, reset)
//! waits for every transfer that started before it, as hardware completes such a command
//! only after its in-flight DMA.

use super::lock_order;
use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

#[derive(Default)]
pub struct DmaFence {
    state: Mutex<Tickets>,
    ended: Condvar,
}

#[derive(Default)]
struct Tickets {
    next: u64,
    active: BTreeSet<u64>,
    /// Threads in `wait`: only then does the end of a transfer need a wake-up (a futex
    /// call per transfer otherwise).
    waiters: usize,
}

/// A transfer in flight; dropping it ends the transfer.
pub struct InFlight {
    fence: Arc<DmaFence>,
    ticket: u64,
}

impl DmaFence {
    /// Registers a transfer (taken under the device lock, so it orders with commands).
    pub fn enter(self: &Arc<Self>) -> InFlight {
        let mut t = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let ticket = t.next;
        t.next += 1;
        t.active.insert(ticket);
        InFlight {
            fence: self.clone(),
            ticket,
        }
    }

    /// Waits until every transfer registered before this call has ended. Transfers are
    /// bounded (one chunk), so this is too.
    pub fn wait(&self) {
        lock_order::assert_no_device_lock("waiting for the DMA fence");
        let mut t = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let barrier = t.next;
        t.waiters += 1;
        while t.active.first().is_some_and(|&oldest| oldest < barrier) {
            t = self.ended.wait(t).unwrap_or_else(PoisonError::into_inner);
        }
        t.waiters -= 1;
    }

    /// Transfers in flight now.
    pub fn in_flight(&self) -> usize {
        let t = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        t.active.len()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut t = self
            .fence
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        t.active.remove(&self.ticket);
        let waiters = t.waiters;
        drop(t);
        if waiters > 0 {
            self.fence.ended.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn wait_returns_only_after_earlier_transfers_end() {
        let fence = Arc::new(DmaFence::default());
        let transfer = fence.enter();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let fence = fence.clone();
            std::thread::spawn(move || {
                fence.wait();
                tx.send(()).unwrap();
            })
        };
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        drop(transfer);
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        waiter.join().unwrap();
    }

    #[test]
    fn wait_ignores_transfers_that_start_after_it() {
        let fence = Arc::new(DmaFence::default());
        fence.wait();
        let _later = fence.enter();
        assert_eq!(fence.in_flight(), 1);
    }
}
