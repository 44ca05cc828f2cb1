//! The listening socket and the accept loop.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use log::{info, warn};
use vmm_sys_util::eventfd::EventFd;

use super::connection::{ConnError, Connection, Poller};
use super::model::DeviceModel;
use super::session::Session;

/// Why a server could not start or had to stop. Client misbehaviour never
/// shows up here: it only ends that client's session.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Another process listens on the socket path.
    #[error("{path}: another server is listening there")]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// The path exists and is not a socket; it is left alone.
    #[error("{path}: exists and is not a socket")]
    NotASocket {
        /// The socket path.
        path: PathBuf,
    },
    /// Creating the listening socket failed.
    #[error("{path}: cannot listen: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Setting up epoll failed.
    #[error("{path}: cannot poll: {source}")]
    Poll {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// accept() failed in a way that only a bug of this process explains
    /// (EBADF, EINVAL, ENOTSOCK, EOPNOTSUPP, EFAULT). Lack of resources
    /// (EMFILE, ENFILE, ENOBUFS, ENOMEM) and anything a client can cause are
    /// retried after a back-off instead.
    #[error("{path}: accept failed: {source}")]
    Accept {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// A vfio-user server for one device: a listening UNIX socket and the
/// device model behind it.
///
/// ```text
/// let server = Server::bind("/run/vrnic/rnic0.sock", model)?;
/// std::thread::spawn(move || server.run(&stop));   // one thread per device
/// ```
///
/// Clients are served one at a time; a second concurrent connection is
/// accepted and closed at once. When a client leaves (or is dropped for a
/// protocol violation), its DMA maps are removed, the model's
/// [`disconnected`](DeviceModel::disconnected) runs, and the next client can
/// connect. The socket file is removed when the server is dropped (which
/// `run` does on return), if it is still the one this server created.
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
    name: String,
    /// (device, inode) of the socket file this server created.
    socket_id: (u64, u64),
    model: Arc<Mutex<dyn DeviceModel>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Listens on `path`. A stale socket file (nothing accepts on it) is
    /// removed first; a live one is an error, as is any other kind of file.
    pub fn bind(
        path: impl AsRef<Path>,
        model: Arc<Mutex<dyn DeviceModel>>,
    ) -> Result<Self, ServerError> {
        let path = path.as_ref().to_path_buf();
        remove_stale_socket(&path)?;
        let bind_err = |source| ServerError::Bind {
            path: path.clone(),
            source,
        };
        let listener = UnixListener::bind(&path).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let meta = fs::metadata(&path).map_err(bind_err)?;
        let name = format!("vfio-user {}", path.display());
        info!("{name}: listening");
        Ok(Self {
            listener,
            path,
            name,
            socket_id: (meta.dev(), meta.ino()),
            model,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves clients until `stop` becomes readable (it is never read, so
    /// one eventfd may stop many servers). Consumes the server: the socket
    /// file is gone when this returns.
    pub fn run(self, stop: &EventFd) -> Result<(), ServerError> {
        let poll_err = |source| ServerError::Poll {
            path: self.path.clone(),
            source,
        };
        let poller = Poller::new(&self.listener, stop, &self.name).map_err(poll_err)?;
        loop {
            let ready = poller.wait().map_err(poll_err)?;
            if ready.stop {
                info!("{}: stopping", self.name);
                return Ok(());
            }
            if !ready.listener {
                continue;
            }
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if is_nothing_to_accept(&e) => continue,
                Err(source) if is_accept_bug(&source) => {
                    return Err(ServerError::Accept {
                        path: self.path.clone(),
                        source,
                    })
                }
                Err(e) => {
                    poller.pause_listener(&e);
                    continue;
                }
            };
            if let ConnError::Stopped = self.serve(stream, &poller) {
                info!("{}: stopping", self.name);
                return Ok(());
            }
        }
    }

    /// Runs one client's session to its end.
    fn serve(&self, stream: UnixStream, poller: &Poller<'_>) -> ConnError {
        let conn = match Connection::new(stream, poller) {
            Ok(conn) => conn,
            Err(e) => {
                warn!("{}: cannot set up the client socket: {e}", self.name);
                return ConnError::Io(e);
            }
        };
        info!("{}: client connected", self.name);
        let end = {
            let mut session = Session::start(&self.name, &conn, &*self.model);
            let end = session.run();
            session.finish();
            end
        };
        // The client's fds are closed before its end is logged, so whoever watches the
        // log (the fd-limit test) sees them free.
        drop(conn);
        match &end {
            ConnError::Closed => info!("{}: client disconnected", self.name),
            ConnError::Stopped => info!("{}: dropping the client, server stopping", self.name),
            other => warn!("{}: dropping the client: {other}", self.name),
        }
        end
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let ours = fs::symlink_metadata(&self.path)
            .map(|m| (m.dev(), m.ino()) == self.socket_id)
            .unwrap_or(false);
        if ours {
            if let Err(e) = fs::remove_file(&self.path) {
                warn!("{}: cannot remove the socket file: {e}", self.name);
            }
        }
    }
}

/// accept() found no connection to hand out (or lost it): just wait again.
fn is_nothing_to_accept(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
    )
}

/// accept() failed because this process misuses it: retrying cannot help.
fn is_accept_bug(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP | libc::EFAULT)
    )
}

/// Removes `path` if it is a socket nobody listens on.
fn remove_stale_socket(path: &Path) -> Result<(), ServerError> {
    use crate::unix_socket::{clear_stale, Occupied};
    let path_buf = || path.to_path_buf();
    clear_stale(path, "vfio-user socket").map_err(|o| match o {
        Occupied::NotASocket => ServerError::NotASocket { path: path_buf() },
        Occupied::InUse => ServerError::InUse { path: path_buf() },
        Occupied::Io(source) => ServerError::Bind {
            path: path_buf(),
            source,
        },
    })
}
