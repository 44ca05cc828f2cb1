//! The control socket: a UNIX stream socket (mode 0600) whose clients get a thread each, up
//! to `Limits::max_clients`; the rest are answered with an error and closed.
//!
//! Only root and the server's own user may talk to it: the file mode keeps others from
//! connecting, and each peer's credentials (SO_PEERCRED) are checked as well, since the
//! mode is set just after bind.
//!
//! Locks: the client list (`Clients`) is a leaf lock of this module, taken for a few
//! instructions and never together with a device lock (lock rule 2).

use super::connection::{self, goodbye};
use super::protocol::{RequestError, MAX_REQUEST_LINE};
use crate::fabric::Fabric;
use crate::ratelimit::WarnLimiter;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use vmm_sys_util::eventfd::EventFd;

/// What one client may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line, newline included.
    pub max_line: usize,
    /// Clients served at once.
    pub max_clients: usize,
    /// A complete request line must arrive within this of the connection or of the last
    /// response; an idle or trickling client is then closed.
    pub request_timeout: Duration,
    /// A whole response must be written within this; a client that does not read is closed.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: MAX_REQUEST_LINE,
            max_clients: 16,
            request_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control socket {0}: another server is listening there")]
    InUse(PathBuf),
    #[error("control socket {0}: exists and is not a socket; not touching it")]
    NotASocket(PathBuf),
    #[error("control socket {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The clients being served: a clone of each socket, so that stopping can shut them down.
#[derive(Default)]
struct Clients {
    live: Mutex<HashMap<u64, UnixStream>>,
}

impl Clients {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, UnixStream>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Takes a client off the list when its thread ends, however it ends.
struct Registered {
    clients: Arc<Clients>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.clients.lock().remove(&self.id);
    }
}

pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file this server created.
    socket_id: (u64, u64),
    fabric: Arc<Fabric>,
    limits: Limits,
}

impl ControlServer {
    /// Listens on `path` (mode 0600). A stale socket there (nobody accepts) is replaced; a
    /// live one, or any other file, is an error.
    pub fn bind(
        path: &Path,
        fabric: Arc<Fabric>,
        limits: Limits,
    ) -> Result<ControlServer, ControlError> {
        let io_err = |source| ControlError::Io {
            path: path.to_path_buf(),
            source,
        };
        remove_stale_socket(path)?;
        let listener = UnixListener::bind(path).map_err(io_err)?;
        let server = ControlServer {
            socket_id: fs::metadata(path)
                .map(|m| (m.dev(), m.ino()))
                .map_err(io_err)?,
            listener,
            path: path.to_path_buf(),
            fabric,
            limits,
        };
        // On any error below, dropping `server` removes the socket again.
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io_err)?;
        server.listener.set_nonblocking(true).map_err(io_err)?;
        log::info!("control socket listening on {}", path.display());
        Ok(server)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves clients until `stop` becomes readable (it is never read, so one eventfd may
    /// stop many servers); then shuts every client down and joins its thread. The socket
    /// file is removed when this returns.
    pub fn run(self, stop: &EventFd) {
        let clients = Arc::new(Clients::default());
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let mut warn = WarnLimiter::default();
        let mut next_id = 0u64;
        while wait_readable(&self.listener, stop) {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if is_transient(&e) => continue,
                Err(e) => {
                    // Out of fds or memory: let clients finish before trying again.
                    if warn.allow("control socket") {
                        log::warn!("control socket: accept failed: {e}");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            threads.retain(|t| !t.is_finished());
            next_id = next_id.wrapping_add(1);
            if let Some(t) = self.admit(stream, next_id, &clients, &mut warn) {
                threads.push(t);
            }
        }
        log::info!("control socket: stopping");
        for stream in clients.lock().values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        for t in threads {
            let _ = t.join();
        }
    }

    /// Starts a thread for a new client, or refuses it with an error line.
    fn admit(
        &self,
        mut stream: UnixStream,
        id: u64,
        clients: &Arc<Clients>,
        warn: &mut WarnLimiter,
    ) -> Option<JoinHandle<()>> {
        let refuse = |stream: &mut UnixStream, e: RequestError, warn: &mut WarnLimiter| {
            if warn.allow("control socket") {
                log::warn!("control socket: client refused: {e}");
            }
            goodbye(stream, &e);
        };
        // The accepted socket inherits nothing from the listener on Linux, but be explicit.
        if stream.set_nonblocking(false).is_err() {
            return None;
        }
        match peer_uid(&stream) {
            Some(uid) if uid == 0 || uid == own_uid() => {}
            Some(uid) => {
                refuse(&mut stream, RequestError::NotPermitted(uid), warn);
                return None;
            }
            None => return None,
        }
        let registered = {
            let mut live = clients.lock();
            if live.len() >= self.limits.max_clients {
                None
            } else {
                match stream.try_clone() {
                    Ok(clone) => {
                        live.insert(id, clone);
                        Some(Registered {
                            clients: clients.clone(),
                            id,
                        })
                    }
                    Err(_) => return None,
                }
            }
        };
        let Some(registered) = registered else {
            refuse(
                &mut stream,
                RequestError::TooManyClients(self.limits.max_clients),
                warn,
            );
            return None;
        };
        let fabric = self.fabric.clone();
        let limits = self.limits;
        let who = format!("control client {id}");
        let spawned = std::thread::Builder::new()
            .name("vrnic-ctl".into())
            .spawn(move || {
                let _registered = registered;
                log::debug!("{who}: connected");
                connection::serve(stream, &fabric, &limits, &who);
            });
        match spawned {
            Ok(t) => Some(t),
            Err(e) => {
                if warn.allow("control socket") {
                    log::warn!("control socket: cannot start a client thread: {e}");
                }
                None
            }
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let ours = fs::symlink_metadata(&self.path)
            .map(|m| (m.dev(), m.ino()) == self.socket_id)
            .unwrap_or(false);
        if ours {
            if let Err(e) = fs::remove_file(&self.path) {
                log::warn!("control socket {}: cannot remove: {e}", self.path.display());
            }
        }
    }
}

/// Waits until the listener has a connection (true) or `stop` is readable (false).
fn wait_readable(listener: &UnixListener, stop: &EventFd) -> bool {
    crate::unix_socket::wait_for_connection(listener, stop).unwrap_or_else(|e| {
        log::error!("control socket: poll failed: {e}");
        false
    })
}

/// accept() found nothing to hand out (or lost it): wait again.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
    )
}

fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The user id of the process at the other end of `stream`.
fn peer_uid(stream: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`, a valid ucred, and sets
    // `len` to what it wrote; the result is checked.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some(cred.uid)
}

/// Removes `path` if it is a socket nobody listens on.
fn remove_stale_socket(path: &Path) -> Result<(), ControlError> {
    use crate::unix_socket::{clear_stale, Occupied};
    clear_stale(path, "control socket").map_err(|o| match o {
        Occupied::NotASocket => ControlError::NotASocket(path.to_path_buf()),
        Occupied::InUse => ControlError::InUse(path.to_path_buf()),
        Occupied::Io(source) => ControlError::Io {
            path: path.to_path_buf(),
            source,
        },
    })
}
