//! A guest's virtio-net interface served over vhost-user (QEMU's `-netdev vhost-user`),
//! one socket per guest: rust-vmm's vhost-user-backend speaks the protocol and runs a
//! worker thread per connection; `backend` is the device behind it, `queues` its two
//! virtqueues.
//!
//! Frames flow both ways without blocking anyone: what the guest transmits goes to the
//! switch from the worker thread; what the switch hands this port (`Port::transmit`, on
//! the sender's thread) is queued here (at most `BACKLOG` frames) and the worker is woken
//! to copy it into the guest's receive buffers. A frame finding the queue full, or no
//! guest driver, is dropped and counted, as a NIC with a full ring drops.
//!
//! The peer (QEMU, or anything connecting to the socket) and the guest are hostile: bad
//! messages end the connection, bad descriptor chains are dropped and counted, and after
//! any disconnect (guest shut down or rebooted, QEMU restarted) the port listens again.

mod backend;
pub mod queues;

pub use backend::{features, protocol_features};

use super::port::{Ingress, Port, PortId};
use crate::addr::Mac;
use crate::ratelimit::WarnLimiter;
use backend::{Connection, WAKE_EVENT};
use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use vhost::vhost_user::Listener;
use vhost_user_backend::{ShutdownHandle, VhostUserDaemon};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::EventFd;

/// Frames waiting for the guest's receive buffers, at most.
pub const BACKLOG: usize = 256;

/// A port's figures; rx is toward the guest, tx from it (the guest's view, as its own
/// interface counts them).
#[derive(Debug, Default)]
pub struct NetCounters {
    pub tx_frames: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// Transmit chains dropped as malformed (see `queues::ChainError`).
    pub tx_errors: AtomicU64,
    pub rx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    /// Frames dropped because the guest had no room (its receive queue and the backlog full).
    pub rx_dropped: AtomicU64,
    /// Frames dropped because no guest driver was running the queue.
    pub rx_not_ready: AtomicU64,
    /// Frames larger than a receive buffer (a guest without MRG_RXBUF) or than `MAX_FRAME`.
    pub rx_oversize: AtomicU64,
    /// Receive chains returned unused as malformed.
    pub rx_errors: AtomicU64,
    /// vhost-user connections accepted.
    pub connections: AtomicU64,
}

#[derive(Default)]
struct Backlog {
    frames: VecDeque<Vec<u8>>,
    /// The connected worker's wake-up; None while no VMM is connected.
    wake: Option<Arc<EventFd>>,
}

/// One guest interface: a port of the switch, served on a vhost-user socket.
pub struct VhostNetPort {
    name: String,
    mac: Mac,
    id: PortId,
    ingress: Arc<dyn Ingress>,
    rx: Mutex<Backlog>,
    pub counters: NetCounters,
    limiter: Mutex<WarnLimiter>,
    shutdown: Mutex<Option<ShutdownHandle>>,
}

impl VhostNetPort {
    pub fn new(name: &str, mac: Mac, id: PortId, ingress: Arc<dyn Ingress>) -> VhostNetPort {
        VhostNetPort {
            name: name.into(),
            mac,
            id,
            ingress,
            rx: Mutex::default(),
            counters: NetCounters::default(),
            limiter: Mutex::default(),
            shutdown: Mutex::default(),
        }
    }

    pub fn id(&self) -> PortId {
        self.id
    }

    pub fn mac(&self) -> Mac {
        self.mac
    }

    fn backlog(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_waiting(&self) -> Option<Vec<u8>> {
        self.backlog().frames.pop_front()
    }

    fn put_back(&self, frame: Vec<u8>) {
        self.backlog().frames.push_front(frame);
    }

    /// Drops every frame waiting; how many.
    fn drop_waiting(&self) -> u64 {
        let mut b = self.backlog();
        let n = b.frames.len() as u64;
        b.frames.clear();
        n
    }

    fn connected(&self, wake: Option<Arc<EventFd>>) {
        let mut b = self.backlog();
        b.wake = wake;
        let n = b.frames.len() as u64;
        b.frames.clear();
        self.counters.rx_not_ready.fetch_add(n, Relaxed);
    }

    /// Ends the connection now (at shutdown): its thread then sees the stop.
    pub fn disconnect(&self) {
        if let Some(h) = self
            .shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            h.shutdown();
        }
    }
}

impl Port for VhostNetPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn transmit(&self, frame: &[u8]) {
        let c = &self.counters;
        if frame.len() > queues::MAX_FRAME {
            c.rx_oversize.fetch_add(1, Relaxed);
            return;
        }
        let mut b = self.backlog();
        let Some(wake) = b.wake.clone() else {
            c.rx_not_ready.fetch_add(1, Relaxed);
            return;
        };
        if b.frames.len() >= BACKLOG {
            c.rx_dropped.fetch_add(1, Relaxed);
            return;
        }
        let was_empty = b.frames.is_empty();
        b.frames.push_back(frame.to_vec());
        drop(b);
        if was_empty {
            let _ = wake.write(1);
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: exists and is not a socket")]
    NotASocket { path: PathBuf },
    #[error("{path}: another server is listening there")]
    InUse { path: PathBuf },
}

/// Listens on `path`, replacing a stale socket (one nobody accepts on); any other file
/// there, or a live server, is an error.
pub fn listen(path: &Path) -> Result<UnixListener, ListenError> {
    let bind = |source| ListenError::Bind {
        path: path.into(),
        source,
    };
    use crate::unix_socket::{clear_stale, Occupied};
    clear_stale(path, "vhost-user-net socket").map_err(|o| match o {
        Occupied::NotASocket => ListenError::NotASocket { path: path.into() },
        Occupied::InUse => ListenError::InUse { path: path.into() },
        Occupied::Io(e) => bind(e),
    })?;
    UnixListener::bind(path).map_err(bind)
}

/// Waits for `listener` or `stop` to be readable; true for a connection.
fn wait_for_connection(listener: &Listener, stop: &EventFd) -> bool {
    crate::unix_socket::wait_for_connection(listener, stop).unwrap_or_else(|e| {
        log::error!("vhost-user-net: poll failed: {e}");
        false
    })
}

fn stopped(stop: &EventFd) -> bool {
    let mut fd = libc::pollfd {
        fd: stop.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut fd, 1, 0) > 0 }
}

/// Serves `port` on `listener` until `stop` is signalled: one connection at a time, and
/// after each disconnect the next. Removes the socket file at the end.
pub fn serve(port: Arc<VhostNetPort>, listener: UnixListener, path: PathBuf, stop: Arc<EventFd>) {
    let mut listener = Listener::from(listener);
    while wait_for_connection(&listener, &stop) {
        if let Err(e) = serve_one(&port, &mut listener, &stop) {
            log::warn!("{}: vhost-user connection: {e}", port.name);
        }
        port.connected(None);
        *port.shutdown.lock().unwrap_or_else(|e| e.into_inner()) = None;
        log::info!(
            "{}: vhost-user peer gone; listening on {} again",
            port.name,
            path.display()
        );
    }
    let _ = std::fs::remove_file(&path);
}

fn serve_one(
    port: &Arc<VhostNetPort>,
    listener: &mut Listener,
    stop: &EventFd,
) -> Result<(), String> {
    let conn = Connection::new(port.clone()).map_err(|e| e.to_string())?;
    let mut daemon = VhostUserDaemon::new(port.name.clone(), conn.clone(), conn.mem.clone())
        .map_err(|e| e.to_string())?;
    for h in daemon.get_epoll_handlers() {
        h.register_listener(conn.wake.as_raw_fd(), EventSet::IN, u64::from(WAKE_EVENT))
            .map_err(|e| format!("wake-up event: {e}"))?;
    }
    daemon.start(listener).map_err(|e| e.to_string())?;
    port.connected(Some(conn.wake.clone()));
    port.counters.connections.fetch_add(1, Relaxed);
    log::info!("{}: vhost-user peer connected", port.name);
    *port.shutdown.lock().unwrap_or_else(|e| e.into_inner()) = daemon.shutdown_handle();
    if stopped(stop) {
        daemon.request_shutdown();
    }
    match daemon.wait() {
        // The VMM closed the socket (shut down, or stopped by us): nothing went wrong.
        Err(vhost_user_backend::Error::HandleRequest(
            vhost::vhost_user::Error::Disconnected | vhost::vhost_user::Error::PartialMessage,
        )) => Ok(()),
        r => r.map_err(|e| e.to_string()),
    }
}
