//! Deterministic impairment of an uplink, for tests and the sandbox (this host's kernel has
//! no netem): loss, duplication, reordering, corruption and delay, each by seeded rate or
//! by pattern, per direction, of all frames or of RoCEv2 frames only (the grammar is in
//! `spec`).
//!
//! Each uplink has one `Impairment`: off (one relaxed atomic load per frame), or a spec
//! compiled into an egress and an ingress `Pipeline`. Held frames (delay, reorder) are let
//! out by the uplink's own thread at their deadlines, never by sleeping in a sender.
//!
//! Locks: egress and ingress have a mutex each. Ingress is taken only by the uplink's
//! thread, and it delivers to the switch under it, which may transmit on another uplink
//! and so take that uplink's egress lock; an egress lock is held only around writes to the
//! uplink's own socket. So the order is ingress, then egress (of any uplink), never the
//! reverse, and two uplinks forwarding to each other cannot deadlock.

pub mod pipeline;
pub mod spec;

pub use pipeline::{Pipeline, RuleCounts};
pub use spec::{Dir, Spec, SpecError};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere leaves the pipeline usable: it holds frames and counts only.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one rule did, both directions (as `vrnic ctl impair` shows it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuleStatus {
    /// The rule, as the spec would write it.
    pub rule: String,
    pub egress: RuleCountsView,
    pub ingress: RuleCountsView,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuleCountsView {
    pub seen: u64,
    pub applied: u64,
    pub short: u64,
}

impl From<RuleCounts> for RuleCountsView {
    fn from(c: RuleCounts) -> Self {
        RuleCountsView {
            seen: c.seen,
            applied: c.applied,
            short: c.short,
        }
    }
}

/// An impairment's state: its spec, what each rule did, what is held and what the hold's
/// cap dropped, per direction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Status {
    pub spec: Option<String>,
    pub rules: Vec<RuleStatus>,
    pub held_egress: usize,
    pub held_ingress: usize,
    pub overflow_egress: u64,
    pub overflow_ingress: u64,
}

/// One uplink's impairment.
#[derive(Default)]
pub struct Impairment {
    on: AtomicBool,
    spec: Mutex<Option<Spec>>,
    egress: Mutex<Option<Pipeline>>,
    ingress: Mutex<Option<Pipeline>>,
}

impl Impairment {
    /// Whether a spec is in force (the hot path's one check).
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Puts `spec` in force (fresh counts and generators), or none; returns the
    /// pipelines it replaced, whose held frames the caller lets out.
    pub fn set(&self, spec: Option<Spec>) -> (Option<Pipeline>, Option<Pipeline>) {
        let mut ingress = lock(&self.ingress);
        let mut egress = lock(&self.egress);
        let old = (egress.take(), ingress.take());
        if let Some(s) = &spec {
            *egress = Some(Pipeline::new(s, Dir::Egress));
            *ingress = Some(Pipeline::new(s, Dir::Ingress));
        }
        self.on.store(spec.is_some(), Ordering::Relaxed);
        *lock(&self.spec) = spec;
        old
    }

    /// A frame going out: through the egress rules; `send` gets what leaves now. Returns
    /// whether a frame was held (so the thread's timer may need to wake earlier); when
    /// off (a race with `set`), the frame goes straight out.
    pub fn egress(&self, frame: &[u8], now: Instant, send: &mut dyn FnMut(&[u8])) -> bool {
        Self::through(&self.egress, frame, now, send)
    }

    /// A frame coming in: through the ingress rules (the uplink's thread only).
    pub fn ingress(&self, frame: &[u8], now: Instant, deliver: &mut dyn FnMut(&[u8])) -> bool {
        Self::through(&self.ingress, frame, now, deliver)
    }

    fn through(
        p: &Mutex<Option<Pipeline>>,
        frame: &[u8],
        now: Instant,
        out: &mut dyn FnMut(&[u8]),
    ) -> bool {
        match lock(p).as_mut() {
            Some(p) => p.process(frame, now, out),
            None => {
                out(frame);
                false
            }
        }
    }

    /// Lets out the frames whose time has come (the uplink's thread, ingress first).
    pub fn release_due(
        &self,
        now: Instant,
        deliver: &mut dyn FnMut(&[u8]),
        send: &mut dyn FnMut(&[u8]),
    ) {
        if let Some(p) = lock(&self.ingress).as_mut() {
            p.release_due(now, deliver);
        }
        if let Some(p) = lock(&self.egress).as_mut() {
            p.release_due(now, send);
        }
    }

    /// The earliest deadline of a held frame, either direction.
    pub fn next_deadline(&self) -> Option<Instant> {
        let i = lock(&self.ingress)
            .as_ref()
            .and_then(Pipeline::next_deadline);
        let e = lock(&self.egress)
            .as_ref()
            .and_then(Pipeline::next_deadline);
        i.into_iter().chain(e).min()
    }

    pub fn status(&self) -> Status {
        let spec = lock(&self.spec).clone();
        let ingress = lock(&self.ingress);
        let egress = lock(&self.egress);
        let counts = |p: &Option<Pipeline>, index: usize| -> RuleCountsView {
            p.as_ref()
                .and_then(|p| p.counts().find(|(i, _)| *i == index))
                .map(|(_, c)| c.into())
                .unwrap_or_default()
        };
        let rules = spec
            .iter()
            .flat_map(|s| s.rules.iter().enumerate())
            .map(|(i, r)| RuleStatus {
                rule: r.to_string(),
                egress: counts(&egress, i),
                ingress: counts(&ingress, i),
            })
            .collect();
        Status {
            spec: spec.map(|s| s.to_string()),
            rules,
            held_egress: egress.as_ref().map_or(0, Pipeline::held),
            held_ingress: ingress.as_ref().map_or(0, Pipeline::held),
            overflow_egress: egress.as_ref().map_or(0, Pipeline::overflow),
            overflow_ingress: ingress.as_ref().map_or(0, Pipeline::overflow),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impairment_is_off_until_set_and_its_status_counts_per_rule_and_direction() {
        let imp = Impairment::default();
        assert!(!imp.is_on());
        assert_eq!(imp.status().spec, None);
        let spec = Spec::parse("loss every=2 dir=egress; delay every=1 ms=50 dir=ingress").unwrap();
        imp.set(Some(spec));
        assert!(imp.is_on());
        let now = Instant::now();
        let (mut sent, mut got) = (0, 0);
        for _ in 0..4 {
            imp.egress(&[0; 20], now, &mut |_| sent += 1);
        }
        assert!(imp.ingress(&[0; 20], now, &mut |_| got += 1));
        assert_eq!((sent, got), (2, 0));
        let s = imp.status();
        assert_eq!(
            s.spec.as_deref(),
            Some("loss every=2 dir=egress; delay every=1 ms=50 dir=ingress")
        );
        assert_eq!((s.rules[0].egress.seen, s.rules[0].egress.applied), (4, 2));
        assert_eq!(s.rules[0].ingress, RuleCountsView::default());
        assert_eq!((s.rules[1].ingress.applied, s.held_ingress), (1, 1));
        assert_eq!(
            imp.next_deadline(),
            Some(now + std::time::Duration::from_millis(50))
        );
        imp.release_due(now, &mut |_| got += 1, &mut |_| sent += 1);
        assert_eq!(got, 0);
        let (_, mut old_ingress) = imp.set(None);
        assert!(!imp.is_on());
        old_ingress.as_mut().unwrap().flush(&mut |_| got += 1);
        assert_eq!(got, 1, "switching off hands the held frames back");
        imp.egress(&[0; 20], now, &mut |_| sent += 1);
        assert_eq!(sent, 3, "off: frames pass");
    }
}
