//! Uplinks: the switch's ports to the host's network. Two kinds:
//!
//! - **tap** (`tap=IFNAME`, `tap`): vrnic owns a tap device; the host sees an interface
//!   it can address (the host itself then talks to the guests), bridge to a NIC, or move
//!   into a network namespace. Complete frames only (no offloads), the usual way for a
//!   VMM's network. Needs CAP_NET_ADMIN, or a persistent tap owned by vrnic's user.
//! - **dev** (`dev=IFNAME`, `packet`): an existing interface through an `AF_PACKET`
//!   socket, promiscuous, as a bridge port would be; nothing to configure on the host, but
//!   the host's own traffic on that interface does not reach the guests, and GRO and a
//!   local sender's offloads must be off on it (`packet`). Needs CAP_NET_RAW.
//!
//! Each uplink has one reader thread: it polls the uplink's fd and a wake eventfd,
//! delivers what it reads to the `Ingress` (the switch), and lets out the frames its
//! impairment holds when their time comes (a timer: the poll's timeout). A packet socket
//! is read up to 32 frames per system call (`recvmmsg`, `rx`); a tap one per `read`. `transmit` never
//! blocks: a kernel with no room drops the frame, counted. `stop` wakes the thread and
//! joins it (the thread holds the uplink, so dropping the other handles does not). A
//! read error (the interface deleted or down) is counted and the thread rests 100 ms
//! before reading again, so a dead interface never spins it.
//!
//! Frames longer than `MAX_FRAME` (a 9216-byte jumbo payload with its Ethernet header and
//! a VLAN tag) are dropped on receive and counted.

pub mod config;
pub mod packet;
pub mod rx;
pub mod tap;

pub use config::{Kind, UplinkConfig};

use super::impair::{self, Impairment, Spec};
use super::port::{Ingress, Port, PortId};
use crate::ratelimit::WarnLimiter;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// The longest frame taken from an uplink: 9216 bytes of payload, the Ethernet header
/// and one VLAN tag.
pub const MAX_FRAME: usize = 9216 + 14 + 4;
/// A tap's read buffer: larger than any frame a tap gives, so that a frame too long is
/// seen whole (and counted), never cut. A packet socket's slots are one byte longer than
/// MAX_FRAME: the kernel reports a longer frame's real length (MSG_TRUNC).
const TAP_BUFFER: usize = 65536 + 64;
/// Frames read per wake-up before the thread looks at its timer and its stop flag again.
const RX_BATCH: usize = 256;
/// How long the thread rests after a read error, so a broken fd cannot spin it.
const ERROR_BACKOFF_MS: libc::c_int = 100;

#[derive(Debug, thiserror::Error)]
pub enum UplinkError {
    #[error("uplink: {0}")]
    BadName(String),
    #[error("uplink interface {0}: no such interface")]
    NoInterface(String),
    #[error("uplink interface {ifname}: {what}: {source}")]
    Os {
        ifname: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("uplink {name}: cannot start its thread: {source}")]
    Thread {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// An uplink's counters, as `vrnic ctl uplinks` shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Frames read from the uplink and handed on (before ingress impairment).
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames longer than MAX_FRAME, dropped.
    pub rx_too_long: u64,
    /// Reads that failed (the interface went away or down).
    pub rx_errors: u64,
    /// Frames written to the uplink (after egress impairment).
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames dropped because the kernel had no room (EAGAIN, ENOBUFS).
    pub tx_dropped: u64,
    /// Frames the kernel refused (interface down, frame too long or too short).
    pub tx_errors: u64,
}

#[derive(Default)]
struct AtomicCounters {
    rx_frames: AtomicU64,
    rx_bytes: AtomicU64,
    rx_too_long: AtomicU64,
    rx_errors: AtomicU64,
    tx_frames: AtomicU64,
    tx_bytes: AtomicU64,
    tx_dropped: AtomicU64,
    tx_errors: AtomicU64,
}

fn bump(c: &AtomicU64, by: u64) {
    c.fetch_add(by, Ordering::Relaxed);
}

/// One uplink.
pub struct Uplink {
    config: UplinkConfig,
    id: PortId,
    fd: OwnedFd,
    counters: AtomicCounters,
    impair: Impairment,
    /// Wakes the thread: to stop, or to look at an earlier deadline.
    wake: EventFd,
    stopping: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    tx_warn: Mutex<WarnLimiter>,
}

impl Uplink {
    /// Opens the uplink of `config` as port `id` and starts its thread, which delivers
    /// what it receives to `ingress`.
    pub fn start(
        config: UplinkConfig,
        id: PortId,
        ingress: Arc<dyn Ingress>,
    ) -> Result<Arc<Uplink>, UplinkError> {
        let fd = match &config.kind {
            Kind::Tap(ifname) => tap::open(ifname)?,
            Kind::Dev(ifname) => packet::open(ifname)?.0,
        };
        let os = |what, source| UplinkError::Os {
            ifname: config.kind.ifname().into(),
            what,
            source,
        };
        let wake = EventFd::new(EFD_NONBLOCK).map_err(|e| os("eventfd", e))?;
        let impair = Impairment::default();
        impair.set(config.impair.clone());
        let uplink = Arc::new(Uplink {
            config,
            id,
            fd,
            counters: AtomicCounters::default(),
            impair,
            wake,
            stopping: AtomicBool::new(false),
            thread: Mutex::new(None),
            tx_warn: Mutex::new(WarnLimiter::default()),
        });
        let me = uplink.clone();
        let thread = std::thread::Builder::new()
            .name(format!("uplink-{}", uplink.config.name))
            .spawn(move || me.run(&*ingress))
            .map_err(|source| UplinkError::Thread {
                name: uplink.config.name.clone(),
                source,
            })?;
        *uplink.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        log::info!(
            "uplink {} on {} {} (port {id}){}",
            uplink.config.name,
            uplink.config.kind.kind_name(),
            uplink.config.kind.ifname(),
            match &uplink.config.impair {
                Some(s) => format!(", impaired: {s}"),
                None => String::new(),
            }
        );
        Ok(uplink)
    }

    pub fn config(&self) -> &UplinkConfig {
        &self.config
    }

    pub fn id(&self) -> PortId {
        self.id
    }

    pub fn counters(&self) -> Counters {
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            rx_frames: r(&c.rx_frames),
            rx_bytes: r(&c.rx_bytes),
            rx_too_long: r(&c.rx_too_long),
            rx_errors: r(&c.rx_errors),
            tx_frames: r(&c.tx_frames),
            tx_bytes: r(&c.tx_bytes),
            tx_dropped: r(&c.tx_dropped),
            tx_errors: r(&c.tx_errors),
        }
    }

    /// Puts `spec` in force (fresh counts), or none; frames the old spec held go out now.
    /// `ingress` gets the held incoming ones.
    pub fn set_impairment(&self, spec: Option<Spec>, ingress: &dyn Ingress) {
        let text = spec.as_ref().map(Spec::to_string);
        let (egress, incoming) = self.impair.set(spec);
        if let Some(mut p) = egress {
            p.flush(&mut |f| self.send(f));
        }
        if let Some(mut p) = incoming {
            p.flush(&mut |f| ingress.receive(self.id, f));
        }
        match text {
            Some(t) => log::info!("uplink {}: impairment {t}", self.config.name),
            None => log::info!("uplink {}: impairment off", self.config.name),
        }
    }

    pub fn impairment(&self) -> impair::Status {
        self.impair.status()
    }

    /// Stops the thread and waits for it (idempotent).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.wake.write(1);
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = thread {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// Writes frames, never waiting: a packet socket takes them in as few `sendmmsg`
    /// calls as it will (a tap, one `write` each).
    fn send_many(&self, frames: &[Vec<u8>]) {
        if matches!(self.config.kind, Kind::Tap(_)) {
            frames.iter().for_each(|f| self.send(f));
            return;
        }
        let fd = self.fd.as_raw_fd();
        let mut iovs: Vec<libc::iovec> = frames
            .iter()
            .map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            })
            .collect();
        // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
        let mut hdrs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; frames.len()];
        for (h, iov) in hdrs.iter_mut().zip(iovs.iter_mut()) {
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
        }
        let c = &self.counters;
        let mut at = 0;
        while at < hdrs.len() {
            let left = u32::try_from(hdrs.len() - at).unwrap_or(u32::MAX);
            // SAFETY: `hdrs[at..]` are initialised headers whose iovecs point into `frames`,
            // which outlive the call; the fd is ours and open.
            let n =
                unsafe { libc::sendmmsg(fd, hdrs[at..].as_mut_ptr(), left, libc::MSG_DONTWAIT) };
            match usize::try_from(n) {
                Ok(0) => {
                    bump(&c.tx_dropped, 1);
                    at += 1;
                }
                Ok(n) => {
                    let bytes = frames[at..at + n].iter().map(|f| f.len() as u64).sum();
                    bump(&c.tx_frames, n as u64);
                    bump(&c.tx_bytes, bytes);
                    at += n;
                }
                // The first frame left was refused: it is dropped, as `send` would.
                Err(_) => {
                    self.sent_or_not(-1, &frames[at]);
                    at += 1;
                }
            }
        }
    }

    /// Writes one frame, never waiting.
    fn send(&self, frame: &[u8]) {
        let fd = self.fd.as_raw_fd();
        // SAFETY: `frame` is readable for its length; the fd is ours and open.
        let n = unsafe {
            match self.config.kind {
                Kind::Tap(_) => libc::write(fd, frame.as_ptr().cast(), frame.len()),
                Kind::Dev(_) => {
                    libc::send(fd, frame.as_ptr().cast(), frame.len(), libc::MSG_DONTWAIT)
                }
            }
        };
        self.sent_or_not(n, frame);
    }

    /// Counts `frame` sent (`n`, what the system call returned, is not negative), or
    /// dropped or failed with the error it left.
    fn sent_or_not(&self, n: isize, frame: &[u8]) {
        let c = &self.counters;
        if n >= 0 {
            bump(&c.tx_frames, 1);
            bump(&c.tx_bytes, frame.len() as u64);
            return;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::ENOBUFS) => bump(&c.tx_dropped, 1),
            _ => {
                bump(&c.tx_errors, 1);
                let mut w = self.tx_warn.lock().unwrap_or_else(PoisonError::into_inner);
                let who = format!("uplink {}", self.config.name);
                crate::ratelimit::client_warn!(w, &who, "{}-byte frame not sent: {e}", frame.len());
            }
        }
    }

    /// A batch to read into: many frames at once from a packet socket, one from a tap.
    fn rx_batch(&self) -> rx::RxBatch {
        match self.config.kind {
            Kind::Dev(_) => rx::RxBatch::new(packet::RECV_SLOTS, MAX_FRAME + 1),
            Kind::Tap(_) => rx::RxBatch::new(1, TAP_BUFFER),
        }
    }

    /// Reads what is queued into `batch` (at least one frame, or an error).
    fn recv(&self, batch: &mut rx::RxBatch) -> std::io::Result<()> {
        match self.config.kind {
            Kind::Dev(_) => packet::recv(&self.fd, batch),
            Kind::Tap(_) => {
                batch.clear();
                let buf = batch.slot_mut(0);
                // SAFETY: `buf` is writable for its length; the fd is ours and open.
                let n =
                    unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                batch.push(Some(n as usize));
                Ok(())
            }
        }
    }

    /// The thread: read, deliver, release held frames, until stopped.
    fn run(&self, ingress: &dyn Ingress) {
        let mut batch = self.rx_batch();
        let mut resting = false;
        // Logged once per run of failed reads (a deleted tap fails every time).
        let mut failing = false;
        let who = format!("uplink {}", self.config.name);
        let deliver = |f: &[u8]| ingress.receive(self.id, f);
        while !self.stopping.load(Ordering::Acquire) {
            let timeout = if resting {
                ERROR_BACKOFF_MS
            } else {
                self.impair.next_deadline().map_or(-1, |d| {
                    let left = d.saturating_duration_since(Instant::now());
                    // Rounded up: waking before the deadline would only spin.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
                })
            };
            let mut fds = [
                libc::pollfd {
                    fd: self.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let nfds = if resting { 1 } else { 2 };
            // SAFETY: `fds` holds `nfds` initialised pollfds.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout) };
            if r < 0 && std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
                log::error!("{who}: poll failed: {}", std::io::Error::last_os_error());
                resting = true;
                continue;
            }
            if fds[0].revents != 0 {
                let _ = self.wake.read();
            }
            resting = false;
            if self.impair.is_on() {
                self.impair
                    .release_due(Instant::now(), &mut |f| deliver(f), &mut |f| self.send(f));
            }
            if fds[1].revents == 0 {
                continue;
            }
            let mut taken = 0;
            while taken < RX_BATCH {
                match self.recv(&mut batch) {
                    Ok(()) => {
                        if std::mem::take(&mut failing) {
                            log::info!("{who}: reading again");
                        }
                        taken += batch.len();
                        for (n, frame) in batch.frames().flatten() {
                            if n > MAX_FRAME {
                                bump(&self.counters.rx_too_long, 1);
                                continue;
                            }
                            bump(&self.counters.rx_frames, 1);
                            bump(&self.counters.rx_bytes, n as u64);
                            if self.impair.is_on() {
                                self.impair
                                    .ingress(frame, Instant::now(), &mut |f| deliver(f));
                            } else {
                                deliver(frame);
                            }
                        }
                        if batch.len() < batch.slots() {
                            break; // the queue is empty: no read just to hear EAGAIN
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        bump(&self.counters.rx_errors, 1);
                        if !failing {
                            log::warn!("{who}: read failed: {e}; retrying every 100 ms");
                            failing = true;
                        }
                        resting = true;
                        break;
                    }
                }
            }
        }
    }
}

impl Port for Uplink {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn transmit(&self, frame: &[u8]) {
        if self.impair.is_on() {
            if self
                .impair
                .egress(frame, Instant::now(), &mut |f| self.send(f))
            {
                // A frame is held: the thread's timer may have to fire earlier.
                let _ = self.wake.write(1);
            }
        } else {
            self.send(frame);
        }
    }

    fn transmit_batch(&self, frames: Vec<Vec<u8>>) {
        match self.impair.is_on() {
            true => frames.iter().for_each(|f| self.transmit(f)),
            false => self.send_many(&frames),
        }
    }
}

impl Drop for Uplink {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The uplinks of a running service, by name (for the control socket).
#[derive(Default)]
pub struct Uplinks {
    list: RwLock<Vec<Arc<Uplink>>>,
    /// Where frames an uplink's impairment held are delivered when it is switched off.
    ingress: RwLock<Option<Arc<dyn Ingress>>>,
}

impl Uplinks {
    /// Opens the uplinks of `configs` as ports `first_id`, `first_id + 1`, ..., each
    /// delivering to `ingress`, and keeps them here. On an error those opened are stopped.
    pub fn start(
        &self,
        configs: &[UplinkConfig],
        first_id: PortId,
        ingress: Arc<dyn Ingress>,
    ) -> Result<Vec<Arc<Uplink>>, UplinkError> {
        let mut started = Vec::new();
        for (i, c) in configs.iter().enumerate() {
            match Uplink::start(c.clone(), first_id + i, ingress.clone()) {
                Ok(u) => started.push(u),
                Err(e) => {
                    started.iter().for_each(|u: &Arc<Uplink>| u.stop());
                    return Err(e);
                }
            }
        }
        self.list
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(started.iter().cloned());
        *self.ingress.write().unwrap_or_else(PoisonError::into_inner) = Some(ingress);
        Ok(started)
    }

    pub fn find(&self, name: &str) -> Option<Arc<Uplink>> {
        self.all().into_iter().find(|u| u.config.name == name)
    }

    pub fn all(&self) -> Vec<Arc<Uplink>> {
        self.list
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Switches `uplink`'s impairment (`Uplink::set_impairment`), frames it held going to
    /// the ingress the uplinks deliver to.
    pub fn set_impairment(&self, uplink: &Uplink, spec: Option<Spec>) {
        let ingress = self
            .ingress
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match ingress {
            Some(i) => uplink.set_impairment(spec, &*i),
            // Not started: nothing is held that would need somewhere to go.
            None => uplink.set_impairment(spec, &Nowhere),
        }
    }

    /// Stops every uplink and forgets them.
    pub fn stop(&self) {
        let list = std::mem::take(&mut *self.list.write().unwrap_or_else(PoisonError::into_inner));
        for u in &list {
            u.stop();
        }
        *self.ingress.write().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The ingress of uplinks not started yet: takes nothing anywhere.
struct Nowhere;

impl Ingress for Nowhere {
    fn receive(&self, _from: PortId, _frame: &[u8]) {}
}
