//! Device-side tracing: decoded events (admin commands, doorbells, WQEs, CQEs, EQEs,
//! interrupts, state changes) of one device, for whoever subscribes (`vrnic ctl trace`, a
//! `trace=PATH` file).
//!
//! Cost: each hook in the device is `Tracer::emit` and friends, inlined to one relaxed load
//! of the union of the subscribers' kinds; the event is decoded only when some subscriber
//! wants its kind. A subscriber gets a bounded queue (`queue`): the device never waits for
//! it, and what does not fit is dropped and counted, so a slow reader loses events, never
//! the device's time.
//!
//! Locks (lock rule 2: leaves, taken under a device lock for a few instructions): the
//! subscriber list, then one subscriber's queue. A subscriber takes only its queue's.
//!
//! Adding an event kind is a variant of `event::Body` and of `event::Kind`, a hook here,
//! and its text in `render`.

pub mod cli;
pub mod clock;
pub mod decode;
pub mod event;
pub mod file;
pub mod filter;
pub mod queue;
pub mod render;

pub use event::{Body, Event, Kind, StreamItem};
pub use filter::{Filter, KindSet};

use crate::guest_memory::RamSnapshot;
use queue::Queue;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use vrnic_hw::{AqCompletion, CqArm, Cqe, Eqe, FatalCode, QpState, QpType, SendWqeHeader};

struct Subscribers {
    queues: Vec<Arc<Queue>>,
    /// The last sequence number given.
    seq: u64,
}

struct Shared {
    device: String,
    /// Union of the subscribers' kinds (`Kind::bit`): 0 while nobody traces.
    mask: AtomicU32,
    subscribers: Mutex<Subscribers>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Subscribers> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Builds and queues an event for the subscribers that want it (the slow path).
    #[cold]
    #[inline(never)]
    fn emit(&self, kind: Kind, qpn: Option<u32>, body: impl FnOnce() -> Option<Body>) {
        let mut subs = self.lock();
        if !subs.queues.iter().any(|q| q.filter.wants(kind, qpn)) {
            return;
        }
        let Some(body) = body() else {
            return;
        };
        subs.seq += 1;
        let event = Event {
            seq: subs.seq,
            ts_ns: clock::now_ns(),
            device: self.device.clone().into(),
            qpn,
            body,
        };
        let wanting: Vec<&Arc<Queue>> = subs
            .queues
            .iter()
            .filter(|q| q.filter.passes(&event))
            .collect();
        if let Some((last, others)) = wanting.split_last() {
            for q in others {
                q.push(event.clone());
            }
            last.push(event);
        }
    }

    /// Recomputes the mask (under the list lock, so it matches the list).
    fn update_mask(&self, subs: &Subscribers) {
        let mask = subs.queues.iter().fold(0, |acc, q| acc | q.filter.kinds.0);
        self.mask.store(mask, Ordering::Relaxed);
    }
}

/// A handle that emits into a device's tracer, for the parts of the device that keep their
/// own state beside `Rnic` (the fault plan, the hostile-device mode). Cheap to clone.
#[derive(Clone)]
pub struct Emitter {
    shared: Arc<Shared>,
}

impl Emitter {
    /// As `Tracer::emit`.
    #[inline(always)]
    pub fn emit(&self, kind: Kind, qpn: Option<u32>, body: impl FnOnce() -> Option<Body>) {
        if self.shared.mask.load(Ordering::Relaxed) & kind.bit() != 0 {
            self.shared.emit(kind, qpn, body);
        }
    }
}

/// One device's tracer (`Rnic::trace`).
pub struct Tracer {
    shared: Arc<Shared>,
    /// The `trace=PATH` writer, if the device has one.
    file: Mutex<Option<file::TraceFile>>,
}

/// A subscriber's end: its events come out of `take`. Dropping it unsubscribes.
pub struct Subscription {
    shared: Arc<Shared>,
    queue: Arc<Queue>,
}

impl Subscription {
    /// Everything waiting (events and lost counts, in order), waiting up to `wait`; None
    /// once the device is gone.
    pub fn take(&self, wait: Duration) -> Option<Vec<StreamItem>> {
        self.queue.take(wait)
    }

    pub fn filter(&self) -> Filter {
        self.queue.filter
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut subs = self.shared.lock();
        subs.queues.retain(|q| !Arc::ptr_eq(q, &self.queue));
        self.shared.update_mask(&subs);
    }
}

impl Tracer {
    pub fn new(device: &str) -> Tracer {
        Tracer {
            shared: Arc::new(Shared {
                device: device.into(),
                mask: AtomicU32::new(0),
                subscribers: Mutex::new(Subscribers {
                    queues: Vec::new(),
                    seq: 0,
                }),
            }),
            file: Mutex::new(None),
        }
    }

    /// Traces every event into `path` from now on (`trace=PATH`), as JSON lines.
    pub fn trace_to_file(&self, path: &Path) -> std::io::Result<()> {
        let subscription = self.subscribe(file::filter(), file::CAPACITY);
        let writer = file::TraceFile::start(path, subscription, &self.shared.device)?;
        *self.file.lock().unwrap_or_else(PoisonError::into_inner) = Some(writer);
        Ok(())
    }

    /// Writes out what the trace file's queue holds and stops it (clean shut-down).
    pub fn finish_file(&self) {
        let writer = self
            .file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut writer) = writer {
            writer.finish();
        }
    }

    /// A new subscriber of the events `filter` passes, holding at most `capacity` unread.
    pub fn subscribe(&self, filter: Filter, capacity: usize) -> Subscription {
        let queue = Arc::new(Queue::new(filter, capacity));
        let mut subs = self.shared.lock();
        subs.queues.push(queue.clone());
        self.shared.update_mask(&subs);
        Subscription {
            shared: self.shared.clone(),
            queue,
        }
    }

    /// Subscribers now.
    pub fn subscribers(&self) -> usize {
        self.shared.lock().queues.len()
    }

    /// Whether someone wants events of `kind` (the hooks' one relaxed load).
    #[inline(always)]
    pub fn on(&self, kind: Kind) -> bool {
        self.shared.mask.load(Ordering::Relaxed) & kind.bit() != 0
    }

    /// An event of `kind` about `qpn`, made by `body` only if someone wants it (`body` may
    /// find nothing to say).
    #[inline(always)]
    pub fn emit(&self, kind: Kind, qpn: Option<u32>, body: impl FnOnce() -> Option<Body>) {
        if self.on(kind) {
            self.shared.emit(kind, qpn, body);
        }
    }

    /// An emitter into this tracer.
    pub fn emitter(&self) -> Emitter {
        Emitter {
            shared: self.shared.clone(),
        }
    }

    /// Where an admin command's duration starts (None while admin commands are not traced).
    #[inline(always)]
    pub fn admin_start(&self) -> Option<std::time::Instant> {
        self.on(Kind::Admin).then(std::time::Instant::now)
    }

    /// An admin command `cmd` whose completion `done` was published.
    #[inline(always)]
    pub fn admin(&self, started: Option<std::time::Instant>, cmd: &[u8], done: &AqCompletion) {
        if let (true, Some(t0)) = (self.on(Kind::Admin), started) {
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let (qpn, body) = decode::admin(cmd, done, ns);
            self.emit(Kind::Admin, qpn, || Some(body));
        }
    }

    /// The admin queue's doorbell register was written with producer index `pi`.
    #[inline(always)]
    pub fn admin_doorbell(&self, pi: u32) {
        self.emit(Kind::Doorbell, None, || {
            Some(Body::Doorbell {
                target: "AQ".into(),
                page: None,
                slot: None,
                pi: Some(pi),
                sq_pi: None,
                rq_pi: None,
            })
        });
    }

    /// A flagged doorbell slot of QP `qpn`; `word` reads a field of the slot.
    #[inline(always)]
    pub fn qp_doorbell(&self, qpn: u32, page: u32, slot: u32, word: impl Fn(usize) -> u32) {
        self.emit(Kind::Doorbell, Some(qpn), || {
            Some(Body::Doorbell {
                target: "QP".into(),
                page: Some(page),
                slot: Some(slot),
                pi: None,
                sq_pi: Some(word(vrnic_hw::DbQpSlot::SQ_PI_OFF)),
                rq_pi: Some(word(vrnic_hw::DbQpSlot::RQ_PI_OFF)),
            })
        });
    }

    /// The send WQE at `addr` of QP `qpn` was read; `index` says at which free-running
    /// index it starts, or None for a later chunk of a WQE already traced.
    #[inline(always)]
    pub fn wqe(
        &self,
        qpn: u32,
        kind: QpType,
        mem: &RamSnapshot,
        addr: u64,
        wqe: &SendWqeHeader,
        index: impl FnOnce() -> Option<u32>,
    ) {
        self.emit(Kind::Wqe, Some(qpn), || {
            index().map(|i| decode::wqe(mem, addr, wqe, kind, i))
        });
    }

    /// A CQE written to CQ `cqn`.
    #[inline(always)]
    pub fn cqe(&self, cqn: u32, cqe: &Cqe) {
        if self.on(Kind::Cqe) {
            let qpn = cqe.qpn.to_native();
            self.emit(Kind::Cqe, Some(qpn), || Some(decode::cqe(cqn, cqe)));
        }
    }

    /// An EQE written to EQ `eqn`.
    #[inline(always)]
    pub fn eqe(&self, eqn: u32, eqe: &Eqe) {
        if self.on(Kind::Eqe) {
            let qpn = decode::eqe_qpn(eqe.event_type, eqe.obj.to_native());
            self.emit(Kind::Eqe, qpn, || Some(decode::eqe(eqn, eqe)));
        }
    }

    /// The MSI-X vectors of `vectors` (one bit each) were signalled.
    #[inline(always)]
    pub fn irqs(&self, vectors: u32) {
        if vectors != 0 && self.on(Kind::Irq) {
            for vector in (0..32u16).filter(|v| vectors & (1 << v) != 0) {
                self.emit(Kind::Irq, None, || Some(Body::Irq { vector }));
            }
        }
    }

    /// QP `qpn` moves from the state `from` reads (None: no such QP) to `to`.
    #[inline(always)]
    pub fn qp_state(&self, qpn: u32, from: impl FnOnce() -> Option<QpState>, to: QpState) {
        self.emit(Kind::State, Some(qpn), || {
            from().filter(|f| *f != to).map(|f| Body::QpState {
                from: f.name().into(),
                to: to.name().into(),
            })
        });
    }

    /// The device was enabled ("ENABLED"), reset ("RESET") or failed ("FATAL", with its code).
    #[inline(always)]
    pub fn device_state(&self, state: &'static str, fatal: Option<FatalCode>) {
        self.emit(Kind::State, None, || {
            Some(Body::Device {
                state: state.into(),
                fatal_code: fatal.map(|c| c.name().into()),
            })
        });
    }

    /// CQ `cqn`, armed with the ARM word `arm`, fired its completion event.
    #[inline(always)]
    pub fn cq_fired(&self, cqn: u32, arm: u32) {
        self.emit(Kind::State, None, || {
            let cmd = arm & vrnic_hw::CQ_ARM_CMD_MASK;
            Some(Body::CqArm {
                cqn,
                arm: CqArm::try_from(cmd)
                    .map_or_else(|_| format!("{cmd:#x}").into(), |a| a.name().into()),
                seq: arm >> vrnic_hw::CQ_ARM_SEQ_SHIFT,
            })
        });
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        for q in &self.shared.lock().queues {
            q.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn irq_events(items: &[StreamItem]) -> Vec<u16> {
        items
            .iter()
            .filter_map(|i| match i {
                StreamItem::Event(e) => match e.body {
                    Body::Irq { vector } => Some(vector),
                    _ => None,
                },
                StreamItem::Lost { .. } => None,
            })
            .collect()
    }

    fn take_now(s: &Subscription) -> Vec<StreamItem> {
        s.take(Duration::ZERO).expect("device still there")
    }

    #[test]
    fn with_nobody_subscribed_nothing_is_made_or_recorded() {
        let t = Tracer::new("d");
        assert!(Kind::ALL.iter().all(|k| !t.on(*k)));
        let mut made = false;
        t.emit(Kind::Admin, None, || {
            made = true;
            None
        });
        assert!(!made, "the body is not even built");
        let late = t.subscribe(Filter::default(), 16);
        assert!(take_now(&late).is_empty(), "nothing was kept from before");
        drop(late);
        assert!(
            !t.on(Kind::Admin),
            "the last unsubscribe switches tracing off"
        );
    }

    #[test]
    fn subscribers_get_only_the_kinds_and_qp_they_asked_for() {
        let t = Tracer::new("d");
        let irqs = t.subscribe(
            Filter {
                kinds: KindSet::of(&[Kind::Irq]),
                qpn: None,
            },
            16,
        );
        let qp7 = t.subscribe(
            Filter {
                kinds: KindSet::of(&[Kind::State]),
                qpn: Some(7),
            },
            16,
        );
        assert!(!t.on(Kind::Wqe));
        t.irqs(0b101);
        t.qp_state(7, || Some(QpState::Rts), QpState::Err);
        t.qp_state(8, || Some(QpState::Rts), QpState::Err);
        t.qp_state(7, || Some(QpState::Err), QpState::Err);

        assert_eq!(irq_events(&take_now(&irqs)), vec![0, 2]);
        let states = take_now(&qp7);
        assert_eq!(states.len(), 1, "{states:?}");
        let StreamItem::Event(e) = &states[0] else {
            panic!("{states:?}")
        };
        assert_eq!(e.qpn, Some(7));
        assert_eq!(
            e.body,
            Body::QpState {
                from: "RTS".into(),
                to: "ERR".into()
            }
        );
        assert_eq!(e.seq, 3, "seq counts every event made for any subscriber");
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_says_where() {
        let t = Tracer::new("d");
        let s = t.subscribe(Filter::default(), 3);
        for v in 0..10 {
            t.irqs(1 << v);
        }
        let first = take_now(&s);
        assert_eq!(irq_events(&first), vec![0, 1, 2]);
        assert_eq!(first.last(), Some(&StreamItem::Lost { lost: 7 }));
        t.irqs(1 << 20);
        t.irqs(1 << 21);
        t.irqs(1 << 22);
        t.irqs(1 << 23);
        let second = take_now(&s);
        assert_eq!(irq_events(&second), vec![20, 21, 22]);
        assert_eq!(second.last(), Some(&StreamItem::Lost { lost: 1 }));
        t.irqs(1 << 24);
        t.irqs(1 << 25);
        let third = take_now(&s);
        assert_eq!(irq_events(&third), vec![24, 25], "room again: nothing lost");
        assert_eq!(third.len(), 2);
    }

    #[test]
    fn a_dropped_tracer_ends_its_subscriptions() {
        let t = Tracer::new("d");
        let s = t.subscribe(Filter::default(), 4);
        t.irqs(1);
        drop(t);
        assert_eq!(s.take(Duration::ZERO).map(|i| i.len()), Some(1));
        assert_eq!(s.take(Duration::from_secs(5)), None);
    }
}
