//! Counters of what the inputs reached (admin statuses, CQE statuses...), printed by the
//! seeded runner so a run shows whether deep paths were hit, not just how many inputs ran.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
/// Off unless the seeded runner turns it on: under libFuzzer the string keys would only
/// cost time and feed the comparison tracer.
static ENABLED: AtomicBool = AtomicBool::new(false);

pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Counts one occurrence of `key` under `target`.
pub fn count(target: &str, key: impl std::fmt::Display) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let mut map = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    *map.entry(format!("{target}: {key}")).or_default() += 1;
}

/// The counters of `target`, one `key=n` per entry.
pub fn report(target: &str) -> String {
    let map = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let prefix = format!("{target}: ");
    map.iter()
        .filter_map(|(k, v)| Some(format!("{}={v}", k.strip_prefix(&prefix)?)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many distinct counters `target` has (grows when an input reaches something new).
pub fn distinct(target: &str) -> usize {
    let map = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let prefix = format!("{target}: ");
    map.keys().filter(|k| k.starts_with(&prefix)).count()
}
