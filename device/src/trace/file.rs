//! `trace=PATH`: a device traced from start-up into a file, one JSON event per line (and
//! `{"lost":N}` where the writer fell behind). A thread of its own writes, from a bounded
//! queue like any subscriber's, so a slow disk costs events, never the device's time.

use super::filter::Filter;
use super::{StreamItem, Subscription};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Events the file writer may have waiting (some 16 MB at most).
pub const CAPACITY: usize = 1 << 16;

/// How often the writer looks for the stop request while no event comes.
const POLL: Duration = Duration::from_millis(100);

/// The writer thread of one trace file.
pub struct TraceFile {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TraceFile {
    /// Creates (or truncates) `path` and starts writing what `subscription` gets into it.
    pub fn start(path: &Path, subscription: Subscription, device: &str) -> io::Result<TraceFile> {
        let file = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("trace file {}: {e}", path.display())))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            let who = format!("{device}: trace file {}", path.display());
            std::thread::Builder::new()
                .name(format!("vrnic-trace-{device}"))
                .spawn(move || write_all(BufWriter::new(file), &subscription, &stop, &who))?
        };
        Ok(TraceFile {
            stop,
            thread: Some(thread),
        })
    }

    /// Writes what is queued, then stops (a clean shut-down: nothing is lost after it).
    pub fn finish(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The default filter of a trace file: everything.
pub fn filter() -> Filter {
    Filter::default()
}

fn write_all(mut out: BufWriter<File>, sub: &Subscription, stop: &AtomicBool, who: &str) {
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let Some(items) = sub.take(if stopping { Duration::ZERO } else { POLL }) else {
            break;
        };
        if items.is_empty() && stopping {
            break;
        }
        if let Err(e) = write_items(&mut out, &items) {
            // The subscription ends with the thread: the device stops tracing for it.
            log::error!("{who}: cannot write ({e}); tracing into it stops");
            return;
        }
    }
    if let Err(e) = out.flush() {
        log::error!("{who}: cannot write ({e})");
    }
}

fn write_items(out: &mut BufWriter<File>, items: &[StreamItem]) -> io::Result<()> {
    for item in items {
        serde_json::to_writer(&mut *out, item)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}
