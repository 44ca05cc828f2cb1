//! Receiving file descriptors passed with `SCM_RIGHTS`. The only `unsafe`
//! code of the server lives here: `recvmsg`, taking ownership of the
//! descriptors the kernel installed, and `fcntl` on them.
//!
//! When the kernel cannot hand over every descriptor sent with a message
//! (more than fit in the control buffer, or this process is at its fd limit),
//! it closes the rest and sets `MSG_CTRUNC`; the message is then still read
//! whole (the stream stays in sync), the descriptors that did arrive are
//! closed with it, and the session refuses it with EINVAL.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;

use vmm_sys_util::eventfd::EventFd;

use super::protocol::MAX_MSG_FDS;

/// Bytes of control buffer for `MAX_MSG_FDS` descriptors.
// SAFETY: CMSG_SPACE is plain arithmetic on its argument.
const CMSG_BUF_LEN: usize =
    unsafe { libc::CMSG_SPACE((MAX_MSG_FDS * size_of::<libc::c_int>()) as u32) } as usize;

/// Control-message buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_BUF_LEN]);

/// The descriptors received with one message, at most `MAX_MSG_FDS`.
#[derive(Debug, Default)]
pub(crate) struct ReceivedFds {
    fds: Vec<OwnedFd>,
    overflowed: bool,
}

impl ReceivedFds {
    /// Keeps `fd`, or closes it and records the overflow when full.
    fn push(&mut self, fd: OwnedFd) {
        if self.fds.len() < MAX_MSG_FDS {
            self.fds.push(fd);
        } else {
            self.overflowed = true;
        }
    }

    /// Not every descriptor sent could be kept: more arrived than allowed,
    /// or the kernel could not install them all (`MSG_CTRUNC`). Those that
    /// did not fit were closed.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Takes the descriptors.
    pub(crate) fn into_vec(self) -> Vec<OwnedFd> {
        self.fds
    }
}

/// One `recvmsg` into `buf`, collecting any passed descriptors into `fds`.
/// Returns the number of bytes read (0 at end of stream). Non-blocking:
/// `WouldBlock` when nothing is pending.
pub(crate) fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut ReceivedFds,
) -> io::Result<usize> {
    let mut cmsg = CmsgBuf([0; CMSG_BUF_LEN]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_BUF_LEN as _;

    // SAFETY: msg points at `iov` (covering `buf`, writable for its length)
    // and at `cmsg` (writable for CMSG_BUF_LEN bytes); both outlive the call.
    let n = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }

    let control_start = cmsg.0.as_ptr() as usize;
    let control_end = control_start.saturating_add(CMSG_BUF_LEN);
    // SAFETY: msg was filled by recvmsg; CMSG_FIRSTHDR only reads its
    // control pointer and length.
    let mut hdr = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !hdr.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR return either null or a pointer
        // to a complete, aligned cmsghdr inside the control buffer.
        let (level, kind, len) = unsafe {
            (
                (*hdr).cmsg_level,
                (*hdr).cmsg_type,
                (*hdr).cmsg_len as usize,
            )
        };
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            // SAFETY: hdr is a valid cmsghdr (see above).
            let data = unsafe { libc::CMSG_DATA(hdr) }
                .cast::<libc::c_int>()
                .cast_const();
            let hdr_end = (hdr as usize).saturating_add(len).min(control_end);
            let count = hdr_end.saturating_sub(data as usize) / size_of::<libc::c_int>();
            for i in 0..count {
                // SAFETY: entry `i` lies inside this SCM_RIGHTS payload, which
                // lies inside the control buffer; the kernel wrote a c_int there.
                let raw = unsafe { std::ptr::read_unaligned(data.add(i)) };
                if raw >= 0 {
                    // SAFETY: the kernel installed this descriptor in our
                    // table for us; nothing else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
        // SAFETY: msg and hdr are valid as above.
        hdr = unsafe { libc::CMSG_NXTHDR(&msg, hdr) };
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        fds.overflowed = true;
    }
    // n >= 0 was checked above.
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Why a descriptor passed for an interrupt was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IrqFdError {
    /// What the descriptor is could not be found out.
    #[error("cannot inspect the fd: {0}")]
    Inspect(#[source] io::Error),
    /// The descriptor is not an eventfd.
    #[error("the fd is {0:?}, not an eventfd")]
    NotAnEventfd(PathBuf),
    /// Making it non-blocking failed.
    #[error("cannot make the eventfd non-blocking: {0}")]
    NonBlocking(#[source] io::Error),
}

/// What `/proc/self/fd/N` links to for an eventfd.
const EVENTFD_LINK: &str = "anon_inode:[eventfd]";

/// Takes a descriptor passed for an interrupt: it must be an eventfd (as
/// `/proc/self/fd/N` tells), and it is switched to `O_NONBLOCK`, so that
/// signalling it can never block: a saturated counter makes the write fail
/// with `EAGAIN`, which means an interrupt is already pending. The flag
/// belongs to the open file, so the client's copy becomes non-blocking too;
/// QEMU's event notifiers are non-blocking anyway.
pub(crate) fn into_eventfd(fd: OwnedFd) -> Result<EventFd, IrqFdError> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(IrqFdError::Inspect)?;
    if link.as_os_str() != EVENTFD_LINK {
        return Err(IrqFdError::NotAnEventfd(link));
    }
    // SAFETY: F_GETFL takes no argument and only reads the file's flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(IrqFdError::NonBlocking(io::Error::last_os_error()));
    }
    // SAFETY: F_SETFL takes an int of status flags; the result is checked.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(IrqFdError::NonBlocking(io::Error::last_os_error()));
    }
    // SAFETY: `fd` is owned and open; ownership moves into the EventFd,
    // which closes it on drop.
    Ok(unsafe { EventFd::from_raw_fd(fd.into_raw_fd()) })
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use vmm_sys_util::sock_ctrl_msg::ScmSocket;

    use super::*;

    /// This process's open fds that name `path`. Counting only those keeps the count
    /// exact while other tests of the binary open and close fds in parallel.
    fn open_fds_to(path: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target == path)
            .count()
    }

    fn dev_null() -> File {
        File::open("/dev/null").unwrap()
    }

    #[test]
    fn too_many_fds_are_closed_flagged_and_the_bytes_still_arrive() {
        let (a, b) = UnixStream::pair().unwrap();
        let path = std::env::temp_dir().join(format!("vrnic-scm-test-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let path = std::path::PathBuf::from(format!("{} (deleted)", path.display()));
        let files: Vec<File> = (0..MAX_MSG_FDS + 4)
            .map(|_| file.try_clone().unwrap())
            .collect();
        let raw: Vec<_> = files.iter().map(AsRawFd::as_raw_fd).collect();
        a.send_with_fds(&[&b"payload"[..]], &raw).unwrap();
        (&a).write_all(b"next").unwrap();
        let open_fds = || open_fds_to(&path);
        let before = open_fds();
        let mut fds = ReceivedFds::default();
        let mut buf = [0u8; 7];

        let n = recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap();

        assert_eq!((n, &buf), (7, b"payload"));
        assert!(fds.overflowed());
        let kept = fds.into_vec();
        assert!(kept.len() <= MAX_MSG_FDS, "{} fds kept", kept.len());
        assert_eq!(open_fds(), before + kept.len(), "the extra fds were closed");
        drop(kept);
        assert_eq!(open_fds(), before);
        let mut next = [0u8; 4];
        (&b).read_exact(&mut next).unwrap();
        assert_eq!(&next, b"next");
    }

    #[test]
    fn an_eventfd_is_made_non_blocking() {
        let efd = EventFd::new(0).unwrap();
        let dup = efd.try_clone().unwrap();
        // SAFETY: `dup` is an open eventfd; its ownership moves into the OwnedFd.
        let fd = unsafe { OwnedFd::from_raw_fd(dup.into_raw_fd()) };

        let taken = into_eventfd(fd).unwrap();

        // SAFETY: F_GETFL takes no argument and only reads the file's flags.
        let flags = unsafe { libc::fcntl(efd.as_raw_fd(), libc::F_GETFL) };
        assert_ne!(flags & libc::O_NONBLOCK, 0);
        efd.write(u64::MAX - 1).unwrap();
        let saturated = taken.write(1).unwrap_err();
        assert_eq!(saturated.raw_os_error(), Some(libc::EAGAIN));
    }

    #[test]
    fn other_fds_are_not_taken_for_interrupts() {
        let (sock, _peer) = UnixStream::pair().unwrap();

        let file = into_eventfd(OwnedFd::from(dev_null())).unwrap_err();
        let socket = into_eventfd(OwnedFd::from(sock)).unwrap_err();

        assert!(matches!(file, IrqFdError::NotAnEventfd(_)), "{file}");
        assert!(matches!(socket, IrqFdError::NotAnEventfd(_)), "{socket}");
    }
}
