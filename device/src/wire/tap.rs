//! A device's packet tap: while on, the data path hands it the packets of each transfer
//! and a writer thread of its own encodes them into a pcap file. The data path never
//! waits for it, nor wakes it: batches go into a bounded queue (`QUEUE_BATCHES`,
//! `QUEUE_BYTES`) that the writer empties every `WRITER_PERIOD`, and are dropped, and
//! counted, when it is full. Off, the data path's check is one relaxed load of `ACTIVE`
//! (no tap of the process is on) per hook.
//!
//! Locks: `running`, `msn` and a queue's batches are leaf locks (lock_order rule 2), held
//! for an Arc clone, a map update or a push, never one inside another; `stop` joins the
//! writer with none held, and is never called under a device lock (it waits for the
//! writer to write out the queue).

use super::packet::Packet;
use super::pcap::PcapWriter;
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// Batches (one per transfer) waiting for the writer, at most.
pub const QUEUE_BATCHES: usize = 4096;
/// Bytes waiting for the writer, at most (one 1 MiB chunk is about 1 MiB of frames).
pub const QUEUE_BYTES: usize = 64 << 20;
/// What a packet costs the queue beyond its payload (headers, bookkeeping).
const PACKET_OVERHEAD: usize = 128;
/// How often the writer looks at its queue.
const WRITER_PERIOD: Duration = Duration::from_millis(1);

/// Taps switched on in this process: the data path's one check while all are off.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether any tap of the process is on (one relaxed load).
#[inline]
pub fn any_on() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0} is neither a regular file nor a character device")]
    NotAFile(PathBuf),
    #[error("cannot start the pcap writer: {0}")]
    Thread(#[source] io::Error),
}

/// What a capture wrote so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapStats {
    pub path: PathBuf,
    /// Frames written to the file.
    pub packets: u64,
    /// Frames dropped: the queue was full, or the file could not be written.
    pub dropped: u64,
}

/// The packets of one transfer, seen at one time (shared by the taps of both ends).
struct Batch {
    at: SystemTime,
    packets: Arc<Vec<Packet>>,
    bytes: usize,
}

/// Between the data path and one writer.
#[derive(Default)]
struct Queue {
    batches: Mutex<VecDeque<Batch>>,
    bytes: AtomicUsize,
    /// No more batches: the writer writes out what is queued and ends.
    closed: AtomicBool,
    written: AtomicU64,
    dropped: AtomicU64,
}

impl Queue {
    fn push(&self, batch: Batch) {
        let n = batch.packets.len() as u64;
        let bytes = batch.bytes;
        let mut q = self.batches.lock().unwrap_or_else(|p| p.into_inner());
        let room = q.len() < QUEUE_BATCHES
            && self.bytes.load(Ordering::Relaxed) + bytes <= QUEUE_BYTES
            && !self.closed.load(Ordering::Relaxed);
        if room {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
            q.push_back(batch);
        } else {
            drop(q);
            self.dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn take(&self) -> VecDeque<Batch> {
        std::mem::take(&mut *self.batches.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

struct Running {
    path: PathBuf,
    queue: Arc<Queue>,
    writer: JoinHandle<()>,
}

impl Running {
    fn stats(&self) -> TapStats {
        TapStats {
            path: self.path.clone(),
            packets: self.queue.written.load(Ordering::Relaxed),
            dropped: self.queue.dropped.load(Ordering::Relaxed),
        }
    }
}

#[derive(Default)]
pub struct Tap {
    on: AtomicBool,
    running: Mutex<Option<Running>>,
    /// Per responder QP: the MSN of the last message it completed (AETH, §9.7.5).
    msn: Mutex<HashMap<u32, u32>>,
}

impl Tap {
    /// This tap is on (one relaxed load).
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Captures into `path` (created mode 0600, or truncated if it is a regular file, or a
    /// character device such as /dev/null; never through a symlink), replacing the
    /// capture running, whose final figures it returns. `device` names the writer thread
    /// and its log lines.
    pub fn start(&self, path: &Path, device: &str) -> Result<Option<TapStats>, TapError> {
        let file = open(path)?;
        let out = PcapWriter::new(BufWriter::with_capacity(1 << 20, file)).map_err(|source| {
            TapError::Open {
                path: path.into(),
                source,
            }
        })?;
        let queue = Arc::new(Queue::default());
        let (q, name, shown) = (
            queue.clone(),
            device.to_string(),
            path.display().to_string(),
        );
        let writer = std::thread::Builder::new()
            .name(format!("pcap-{device}"))
            .spawn(move || write_all(&q, out, &name, &shown))
            .map_err(TapError::Thread)?;
        let new = Running {
            path: path.into(),
            queue,
            writer,
        };
        let old = {
            let mut running = self.lock_running();
            if running.is_none() {
                ACTIVE.fetch_add(1, Ordering::Relaxed);
                self.on.store(true, Ordering::Relaxed);
            }
            running.replace(new)
        };
        Ok(old.map(finish))
    }

    /// Stops the capture (the queue is written out first); its final figures.
    pub fn stop(&self) -> Option<TapStats> {
        let old = {
            let mut running = self.lock_running();
            let old = running.take()?;
            self.on.store(false, Ordering::Relaxed);
            ACTIVE.fetch_sub(1, Ordering::Relaxed);
            old
        };
        Some(finish(old))
    }

    /// The running capture's figures so far.
    pub fn status(&self) -> Option<TapStats> {
        self.lock_running().as_ref().map(Running::stats)
    }

    /// Queues the packets of one transfer, or drops and counts them if the queue is full.
    pub fn record(&self, packets: &Arc<Vec<Packet>>) {
        if packets.is_empty() {
            return;
        }
        let Some(queue) = self.lock_running().as_ref().map(|r| r.queue.clone()) else {
            return;
        };
        let bytes = packets
            .iter()
            .map(|p| p.payload.len() + PACKET_OVERHEAD)
            .sum::<usize>();
        queue.push(Batch {
            at: SystemTime::now(),
            packets: packets.clone(),
            bytes,
        });
    }

    /// The MSN a responder QP's acknowledgement carries: one more than before when
    /// `completes` (the request ends a message), else the same (§9.7.5). Starts at 0
    /// when the capture first sees the QP.
    pub fn msn(&self, qpn: u32, completes: bool) -> u32 {
        let mut map = self.msn.lock().unwrap_or_else(|p| p.into_inner());
        let msn = map.entry(qpn).or_insert(0);
        if completes {
            *msn = (*msn + 1) & 0xFF_FFFF;
        }
        *msn
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Ends a capture: closes its queue, waits for the writer to write it out.
fn finish(run: Running) -> TapStats {
    run.queue.closed.store(true, Ordering::Release);
    run.writer.thread().unpark();
    let _ = run.writer.join();
    TapStats {
        path: run.path,
        packets: run.queue.written.load(Ordering::Relaxed),
        dropped: run.queue.dropped.load(Ordering::Relaxed),
    }
}

fn open(path: &Path) -> Result<File, TapError> {
    let err = |source| TapError::Open {
        path: path.into(),
        source,
    };
    // Non-blocking, so a FIFO at `path` cannot hold the caller in open().
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(err)?;
    let kind = file.metadata().map_err(err)?.file_type();
    if kind.is_file() {
        file.set_len(0).map_err(err)?;
    } else if !kind.is_char_device() {
        // A FIFO or socket could block the writer; a character device (/dev/null: the
        // cost of a capture without the disk) cannot.
        return Err(TapError::NotAFile(path.into()));
    }
    Ok(file)
}

/// The writer thread: every WRITER_PERIOD, encodes and writes what is queued and flushes;
/// ends once the queue is closed and written out.
fn write_all(queue: &Queue, mut out: PcapWriter<BufWriter<File>>, device: &str, path: &str) {
    let mut failed = false;
    let mut frame = Vec::new();
    loop {
        // Closed before the last look: nothing can be queued after it.
        let closed = queue.closed.load(Ordering::Acquire);
        let batches = queue.take();
        if batches.is_empty() {
            if closed {
                return;
            }
            std::thread::park_timeout(WRITER_PERIOD);
            continue;
        }
        for batch in batches {
            for p in batch.packets.iter() {
                let written = match p.encode_into(&mut frame) {
                    Ok(()) if failed => false,
                    Ok(()) => {
                        match out.frame(batch.at, &frame) {
                            Ok(()) => true,
                            Err(e) => {
                                log::error!("{device}: pcap: writing {path} failed ({e}); dropping from now on");
                                failed = true;
                                false
                            }
                        }
                    }
                    Err(e) => {
                        log::warn!("{device}: pcap: a packet could not be encoded: {e}");
                        false
                    }
                };
                let count = if written {
                    &queue.written
                } else {
                    &queue.dropped
                };
                count.fetch_add(1, Ordering::Relaxed);
            }
            queue.bytes.fetch_sub(batch.bytes, Ordering::Relaxed);
        }
        if let Err(e) = out.flush() {
            if !failed {
                log::error!("{device}: pcap: writing {path} failed ({e}); dropping from now on");
            }
            failed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Mac;
    use crate::wire::bth::{Bth, Op, Opcode, Transport};
    use crate::wire::Network;
    use vmm_sys_util::tempdir::TempDir;

    fn send(payload: usize) -> Packet {
        let net = Network::V4 {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            tos: 0,
            ttl: 64,
            ident: 0,
            dont_fragment: true,
        };
        let bth = Bth {
            opcode: Opcode::new(Transport::Rc, Op::SendMiddle).unwrap(),
            solicited: false,
            migreq: true,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qpn: 1,
            ack_req: false,
            psn: 0,
        };
        Packet {
            payload: vec![0; payload],
            ..Packet::new(
                Mac([2, 0, 0, 0, 0, 1]),
                Mac([2, 0, 0, 0, 0, 2]),
                net,
                0xc000,
                bth,
            )
        }
    }

    #[test]
    fn a_batch_beyond_the_queue_is_dropped_and_counted_and_the_rest_written() {
        let dir = TempDir::new().unwrap();
        let path = dir.as_path().join("t.pcap");
        let tap = Tap::default();
        assert!(!tap.is_on());
        assert_eq!(tap.start(&path, "t").unwrap(), None);
        assert!(tap.is_on() && any_on());

        tap.record(&Arc::new(vec![send(100), send(200)]));
        // More bytes than the queue holds at once: never queued, whatever the writer does.
        let huge = QUEUE_BYTES / 4096 + 1;
        tap.record(&Arc::new((0..huge).map(|_| send(4096)).collect()));
        tap.record(&Arc::new(vec![send(4)]));
        let stats = tap.stop().unwrap();

        assert_eq!((stats.packets, stats.dropped), (3, huge as u64));
        assert!(!tap.is_on() && tap.stop().is_none());
        // Header, then three records of the frames' lengths.
        let file = std::fs::read(&path).unwrap();
        let frames: usize = [100, 200, 4]
            .iter()
            .map(|&n| 16 + send(n).encode().unwrap().len())
            .sum();
        assert_eq!(file.len(), 24 + frames);
    }

    #[test]
    fn starting_again_replaces_the_capture_and_reports_the_old_one() {
        let dir = TempDir::new().unwrap();
        let (a, b) = (dir.as_path().join("a"), dir.as_path().join("b"));
        let tap = Tap::default();
        tap.start(&a, "t").unwrap();
        tap.record(&Arc::new(vec![send(1)]));

        let old = tap.start(&b, "t").unwrap().unwrap();

        assert_eq!((old.path, old.packets, old.dropped), (a, 1, 0));
        assert_eq!(tap.status().unwrap().path, b);
        tap.stop();
    }

    #[test]
    fn an_msn_counts_completed_messages_per_qp() {
        let tap = Tap::default();
        assert_eq!(tap.msn(5, false), 0);
        assert_eq!(tap.msn(5, true), 1);
        assert_eq!(tap.msn(5, false), 1);
        assert_eq!(tap.msn(6, true), 1);
    }
}
