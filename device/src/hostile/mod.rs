//! Hostile-device mode: the device feeds its driver malformed completions, events and
//! command answers, for hardening drivers. Per device, off by default; switched by the
//! device spec (`hostile=KINDS:SEED[:RATE]`, see `settings`) or the control socket
//! (`vrnic ctl hostile DEVICE on|off`). Deterministic from its seed: the same writes in
//! the same order get the same corruptions.
//!
//! Only what a buggy or malicious device could do through the hw-spec interface: it
//! changes what the device *writes* into the memory the driver gave it (CQ and EQ rings,
//! the admin completion ring, query response buffers) and raises interrupts. The device's
//! own state (object tables, producer indices, counters) stays what the real work made
//! it, so turning the mode off gives correct behaviour again; a duplicated CQE takes a
//! ring entry of its own and is counted in the CQ's producer index, like any entry.
//!
//! Layering: beside `rnic` (whose notifications and admin completions call it), it reads
//! the object tables (layer 2) and the doorbell slots (`rnic::doorbells`, a leaf) and
//! nothing that calls it back. Its lock is a leaf (lock rule 2): taken under the device
//! lock by the hooks, for a few instructions; off, a hook is one relaxed atomic load.

pub mod admin;
pub mod cqe;
pub mod eqe;
pub mod irq;
pub mod kinds;
pub mod settings;

pub use kinds::{Class, Kind, KindSet};
pub use settings::Settings;

use crate::rng::Rng;
use crate::trace::{self, Emitter};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// One device's hostile mode.
/// Where a corruption is reported.
struct Device {
    name: String,
    trace: Emitter,
}

pub struct Hostile {
    /// The device's name (logs) and tracer (a `hostile` event per corruption).
    device: Device,
    on: AtomicBool,
    state: Mutex<State>,
}

struct State {
    /// The settings in force, or last in force (what `on` without settings resumes).
    settings: Option<Settings>,
    rng: Rng,
    counts: [u64; Kind::COUNT],
    /// Storm copies queued and not yet written: they are written as they are.
    storm_copies: u32,
}

/// What `status` reports: whether it is on, with which settings, and the corruptions
/// written since it was last switched on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub on: bool,
    pub settings: Option<Settings>,
    pub counts: Vec<(Kind, u64)>,
}

/// Settings of `on` without any, when none was ever given.
pub const DEFAULT_SETTINGS: Settings = Settings {
    kinds: KindSet::ALL,
    seed: 0,
    rate: settings::DEFAULT_RATE,
};

impl Hostile {
    /// Off, or on with `settings` (the device spec's `hostile=`).
    pub fn new(device: &str, trace: Emitter, settings: Option<Settings>) -> Hostile {
        let h = Hostile {
            device: Device {
                name: device.into(),
                trace,
            },
            on: AtomicBool::new(false),
            state: Mutex::new(State {
                settings: None,
                rng: Rng::new(0),
                counts: [0; Kind::COUNT],
                storm_copies: 0,
            }),
        };
        if let Some(s) = settings {
            h.switch_on(Some(s));
        }
        h
    }

    /// On with `settings` (or the last ones, or DEFAULT_SETTINGS): the generator restarts
    /// from the seed and the counts from zero. Returns the settings now in force.
    pub fn switch_on(&self, settings: Option<Settings>) -> Settings {
        let mut st = self.lock();
        let s = settings.or(st.settings).unwrap_or(DEFAULT_SETTINGS);
        st.settings = Some(s);
        st.rng = Rng::new(s.seed);
        st.counts = [0; Kind::COUNT];
        st.storm_copies = 0;
        self.on.store(true, Ordering::Relaxed);
        s
    }

    /// Off: the device writes what it should from now on.
    pub fn switch_off(&self) {
        let _st = self.lock();
        self.on.store(false, Ordering::Relaxed);
    }

    pub fn status(&self) -> Status {
        let st = self.lock();
        Status {
            on: self.on.load(Ordering::Relaxed),
            settings: st.settings,
            counts: Kind::ALL
                .iter()
                .map(|&k| (k, st.counts[k as usize]))
                .collect(),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The mode's state when it is on (the one relaxed load every hook costs when off).
    fn active(&self) -> Option<MutexGuard<'_, State>> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let st = self.lock();
        // Switched off between the load and the lock: nothing to do.
        self.on.load(Ordering::Relaxed).then_some(st)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// Whether this write of `class` is corrupted, and by which of the enabled kinds of
    /// that class (each write draws from the generator the same way, on or not hit).
    fn draw(&mut self, class: Class) -> Option<Kind> {
        let s = self.settings?;
        let enabled: Vec<Kind> = s.kinds.iter().filter(|k| k.class() == class).collect();
        if enabled.is_empty() {
            return None;
        }
        let hit = self.rng.below(100) < u64::from(s.rate);
        let kind = *self.rng.pick(&enabled)?;
        hit.then_some(kind)
    }

    /// A corruption of `kind` was written.
    fn written(&mut self, device: &Device, kind: Kind, what: std::fmt::Arguments<'_>) {
        self.counts[kind as usize] += 1;
        trace_corruption(device, kind, what);
    }
}

/// Every corruption written passes here: logged, and a `hostile` trace event (device,
/// kind, what was written instead of what).
fn trace_corruption(device: &Device, kind: Kind, what: std::fmt::Arguments<'_>) {
    log::debug!("{}: hostile {}: {what}", device.name, kind.name());
    device.trace.emit(trace::Kind::Hostile, None, || {
        Some(trace::Body::Hostile {
            corruption: kind.name().into(),
            what: what.to_string(),
        })
    });
}
