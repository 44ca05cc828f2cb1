//! A subscriber's bounded queue: the device pushes without waiting, the subscriber takes
//! everything at once. A full queue drops new events and counts them; the count follows
//! the events taken with it (`StreamItem::Lost`), which is where the gap was.
//!
//! Lock: the queue's mutex is a leaf (lock rule 2). The device side holds it for one push;
//! the subscriber side for one swap of the whole queue, so neither waits on the other for
//! long, and the subscriber never holds it while it writes.

use super::event::{Event, StreamItem};
use super::filter::Filter;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Events a subscriber may have waiting when it asks for none (`ctl trace`).
pub const DEFAULT_CAPACITY: usize = 8192;

/// How often a waiting subscriber looks at its queue. The device wakes it only when the
/// queue is a quarter full, not per event: a wake-up is a system call on the data path.
const LOOK_EVERY: Duration = Duration::from_millis(5);

#[derive(Default)]
struct Inner {
    items: VecDeque<StreamItem>,
    /// Dropped since the subscriber last took its events.
    lost: u64,
    /// The tracer is gone (the device was dropped): nothing more will come.
    closed: bool,
}

pub struct Queue {
    pub filter: Filter,
    capacity: usize,
    inner: Mutex<Inner>,
    ready: Condvar,
}

impl Queue {
    pub fn new(filter: Filter, capacity: usize) -> Queue {
        Queue {
            filter,
            capacity: capacity.max(1),
            inner: Mutex::default(),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Device side: never waits beyond the push itself.
    pub fn push(&self, event: Event) {
        let mut inner = self.lock();
        // Once full, nothing is queued until the subscriber takes everything: the events
        // lost always come after every queued one.
        if inner.items.len() >= self.capacity {
            inner.lost = inner.lost.saturating_add(1);
            return;
        }
        inner.items.push_back(StreamItem::Event(Box::new(event)));
        let wake = inner.items.len() == self.capacity.div_ceil(4);
        drop(inner);
        if wake {
            self.ready.notify_one();
        }
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Subscriber side: everything waiting, waiting up to `wait` for something to arrive.
    /// Empty after `wait`; None once closed and drained.
    pub fn take(&self, wait: Duration) -> Option<Vec<StreamItem>> {
        let deadline = Instant::now() + wait;
        let mut inner = self.lock();
        while inner.items.is_empty() && inner.lost == 0 && !inner.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            inner = self
                .ready
                .wait_timeout(inner, left.min(LOOK_EVERY))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if inner.closed && inner.items.is_empty() && inner.lost == 0 {
            return None;
        }
        let mut items: Vec<StreamItem> = std::mem::take(&mut inner.items).into();
        let lost = std::mem::take(&mut inner.lost);
        drop(inner);
        if lost != 0 {
            items.push(StreamItem::Lost { lost });
        }
        Some(items)
    }
}
