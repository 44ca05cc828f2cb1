//! Framing of vfio-user messages on a non-blocking UNIX stream socket, with
//! file descriptors passed as `SCM_RIGHTS`.
//!
//! Every wait also watches the server's stop eventfd (so a stalled client
//! cannot keep the server from stopping) and the listening socket (so a
//! second client is turned away while one is served). When `accept()` fails
//! for lack of resources (fds, memory), the listener leaves the epoll set for
//! a short back-off instead of waking every wait at once; the stop eventfd
//! and the client's stream are still watched meanwhile.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use log::trace;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use super::protocol::{Header, HEADER_SIZE, MAX_MESSAGE_SIZE};
use super::ratelimit::{client_warn, WarnLimiter};
use super::scm::{self, ReceivedFds};

/// How long the listener rests after `accept()` failed for lack of resources.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

const TOKEN_STOP: u64 = 0;
const TOKEN_LISTENER: u64 = 1;
const TOKEN_STREAM: u64 = 2;

/// Why reading or writing a message failed. Every variant ends the client's
/// session; none affects the server or other clients.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// End of stream between messages.
    #[error("client closed the connection")]
    Closed,
    /// End of stream inside a message.
    #[error("client closed the connection in the middle of a message")]
    Truncated,
    /// The header claims fewer bytes than the header itself.
    #[error("message size {0} is smaller than the header")]
    Undersized(u32),
    /// The header claims more bytes than the server accepts.
    #[error("message size {size} exceeds the limit of {MAX_MESSAGE_SIZE}")]
    Oversized {
        /// The claimed size.
        size: u32,
        /// The header, to address an error reply.
        header: Header,
    },
    /// The client proposed a protocol version this server does not speak.
    #[error("client speaks an unsupported vfio-user version")]
    Incompatible,
    /// The stop eventfd fired.
    #[error("server is stopping")]
    Stopped,
    /// A socket or epoll call failed.
    #[error("socket I/O: {0}")]
    Io(#[source] io::Error),
}

/// One complete message as received.
#[derive(Debug)]
pub(crate) struct Message {
    pub(crate) header: Header,
    /// `message_size - HEADER_SIZE` bytes.
    pub(crate) payload: Vec<u8>,
    /// Descriptors passed with the message (closed when dropped).
    pub(crate) fds: Vec<OwnedFd>,
    /// More than `MAX_MSG_FDS` descriptors were passed; the extra were closed.
    pub(crate) fds_overflowed: bool,
}

/// What a wait returned.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Ready {
    pub(crate) stop: bool,
    pub(crate) listener: bool,
    pub(crate) stream: bool,
}

/// The epoll set of one server: its stop eventfd, its listener and the
/// current client's stream.
pub(crate) struct Poller<'a> {
    epoll: Epoll,
    listener: &'a UnixListener,
    name: &'a str,
    /// Set while the listener is out of the epoll set: when to put it back.
    listener_paused_until: Cell<Option<Instant>>,
    warn: RefCell<WarnLimiter>,
}

impl<'a> Poller<'a> {
    /// Watches `stop` and `listener` (level-triggered; `stop` is never read,
    /// so one eventfd can stop several servers). `name` prefixes warnings.
    pub(crate) fn new(
        listener: &'a UnixListener,
        stop: &EventFd,
        name: &'a str,
    ) -> io::Result<Self> {
        let epoll = Epoll::new()?;
        epoll.ctl(
            ControlOperation::Add,
            stop.as_raw_fd(),
            EpollEvent::new(EventSet::IN, TOKEN_STOP),
        )?;
        epoll.ctl(
            ControlOperation::Add,
            listener.as_raw_fd(),
            EpollEvent::new(EventSet::IN, TOKEN_LISTENER),
        )?;
        Ok(Self {
            epoll,
            listener,
            name,
            listener_paused_until: Cell::new(None),
            warn: RefCell::new(WarnLimiter::default()),
        })
    }

    /// Blocks until something is ready. A listener back-off that has
    /// expired reports the listener ready, so that accept is tried again.
    pub(crate) fn wait(&self) -> io::Result<Ready> {
        let mut events = [EpollEvent::default(); 3];
        let n = loop {
            let timeout = self.listener_paused_until.get().map_or(-1, |until| {
                let left = until.saturating_duration_since(Instant::now());
                i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX)
            });
            match self.epoll.wait(timeout, &mut events) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        let mut ready = Ready::default();
        for ev in events.iter().take(n) {
            match ev.data() {
                TOKEN_STOP => ready.stop = true,
                TOKEN_LISTENER => ready.listener = true,
                TOKEN_STREAM => ready.stream = true,
                _ => {}
            }
        }
        if self.resume_listener() {
            ready.listener = true;
        }
        Ok(ready)
    }

    /// Takes the listener out of the epoll set for [`ACCEPT_BACKOFF`]:
    /// `accept()` failed for lack of resources, and the pending connection
    /// would otherwise wake every wait at once. `why` is logged, rate-limited.
    pub(crate) fn pause_listener(&self, why: &io::Error) {
        client_warn!(
            self.warn.borrow_mut(),
            self.name,
            "accept failed ({why}); retrying in {ACCEPT_BACKOFF:?}"
        );
        if self.listener_paused_until.get().is_none() {
            // If this fails the listener stays in the set: waits then spin
            // until accept succeeds, which is still correct.
            let _ = self.epoll.ctl(
                ControlOperation::Delete,
                self.listener.as_raw_fd(),
                EpollEvent::default(),
            );
        }
        self.listener_paused_until
            .set(Some(Instant::now() + ACCEPT_BACKOFF));
    }

    /// Puts a paused listener back once its back-off has expired; true if
    /// it did.
    fn resume_listener(&self) -> bool {
        let Some(until) = self.listener_paused_until.get() else {
            return false;
        };
        if Instant::now() < until {
            return false;
        }
        let added = self.epoll.ctl(
            ControlOperation::Add,
            self.listener.as_raw_fd(),
            EpollEvent::new(EventSet::IN, TOKEN_LISTENER),
        );
        match added {
            Ok(()) => {
                self.listener_paused_until.set(None);
                true
            }
            Err(e) => {
                self.pause_listener(&e);
                false
            }
        }
    }

    /// Accepts and immediately closes every pending connection: the server
    /// serves one client at a time.
    pub(crate) fn turn_away_extra_clients(&self) {
        loop {
            match self.listener.accept() {
                Ok((extra, _)) => {
                    client_warn!(
                        self.warn.borrow_mut(),
                        self.name,
                        "refusing a second client while one is connected"
                    );
                    drop(extra);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.pause_listener(&e);
                    break;
                }
            }
        }
    }

    fn set_stream(&self, op: ControlOperation, fd: RawFd, write: bool) -> io::Result<()> {
        let events = if write { EventSet::OUT } else { EventSet::IN };
        self.epoll
            .ctl(op, fd, EpollEvent::new(events, TOKEN_STREAM))
    }
}

/// A connected client's socket.
pub(crate) struct Connection<'p, 'a> {
    stream: UnixStream,
    poller: &'p Poller<'a>,
}

impl<'p, 'a> Connection<'p, 'a> {
    /// Takes over an accepted stream: makes it non-blocking and watches it.
    pub(crate) fn new(stream: UnixStream, poller: &'p Poller<'a>) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        poller.set_stream(ControlOperation::Add, stream.as_raw_fd(), false)?;
        Ok(Self { stream, poller })
    }

    /// Waits until the stream is readable (or writable), watching stop and
    /// turning away extra clients meanwhile.
    fn wait_stream(&self, write: bool) -> Result<(), ConnError> {
        if write {
            self.poller
                .set_stream(ControlOperation::Modify, self.stream.as_raw_fd(), true)
                .map_err(ConnError::Io)?;
        }
        let result = loop {
            let ready = match self.poller.wait() {
                Ok(r) => r,
                Err(e) => break Err(ConnError::Io(e)),
            };
            if ready.stop {
                break Err(ConnError::Stopped);
            }
            // The stream first: if the client has just closed it, the read sees the end
            // of stream and a newcomer already waiting is served next, not turned away.
            if ready.stream {
                break Ok(());
            }
            if ready.listener {
                self.poller.turn_away_extra_clients();
            }
        };
        if write {
            self.poller
                .set_stream(ControlOperation::Modify, self.stream.as_raw_fd(), false)
                .map_err(ConnError::Io)?;
        }
        result
    }

    /// Fills `buf`, collecting descriptors. `at_boundary`: an end of stream
    /// before the first byte is a clean close.
    fn recv_exact(
        &self,
        buf: &mut [u8],
        fds: &mut ReceivedFds,
        at_boundary: bool,
    ) -> Result<(), ConnError> {
        let mut done = 0usize;
        while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
            match scm::recv_with_fds(self.stream.as_fd(), rest, fds) {
                Ok(0) if at_boundary && done == 0 => return Err(ConnError::Closed),
                Ok(0) => return Err(ConnError::Truncated),
                Ok(n) => done = done.saturating_add(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait_stream(false)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ConnError::Io(e)),
            }
        }
        Ok(())
    }

    /// Reads one whole message: header, then exactly `message_size - 16`
    /// bytes, so the next read starts at the next header whatever the
    /// command. Sizes beyond `MAX_MESSAGE_SIZE` are refused before any
    /// allocation.
    pub(crate) fn recv_message(&self) -> Result<Message, ConnError> {
        let mut fds = ReceivedFds::default();
        let mut raw = [0u8; HEADER_SIZE];
        self.recv_exact(&mut raw, &mut fds, true)?;
        let header = Header::decode(&raw);
        trace!(
            "vfio-user: <- id {} cmd {} size {} flags {:#x}",
            header.msg_id,
            header.command,
            header.message_size,
            header.flags
        );
        let size = header.message_size;
        if size > MAX_MESSAGE_SIZE {
            return Err(ConnError::Oversized { size, header });
        }
        let payload_len = usize::try_from(size)
            .ok()
            .and_then(|s| s.checked_sub(HEADER_SIZE))
            .ok_or(ConnError::Undersized(size))?;
        let mut payload = vec![0u8; payload_len];
        self.recv_exact(&mut payload, &mut fds, false)?;
        let fds_overflowed = fds.overflowed();
        Ok(Message {
            header,
            payload,
            fds: fds.into_vec(),
            fds_overflowed,
        })
    }

    /// Writes all of `bytes`, passing `fds` with the first byte.
    pub(crate) fn send(&self, bytes: &[u8], fds: &[RawFd]) -> Result<(), ConnError> {
        let mut done = 0usize;
        let mut pending_fds = fds;
        while let Some(rest) = bytes.get(done..).filter(|r| !r.is_empty()) {
            match self.stream.send_with_fds(&[rest], pending_fds) {
                Ok(n) => {
                    done = done.saturating_add(n);
                    pending_fds = &[];
                }
                Err(e) if e.errno() == libc::EAGAIN => self.wait_stream(true)?,
                Err(e) if e.errno() == libc::EINTR => {}
                Err(e) => return Err(ConnError::Io(io::Error::from_raw_os_error(e.errno()))),
            }
        }
        Ok(())
    }
}

impl Drop for Connection<'_, '_> {
    fn drop(&mut self) {
        let _ = self
            .poller
            .set_stream(ControlOperation::Delete, self.stream.as_raw_fd(), false);
    }
}
