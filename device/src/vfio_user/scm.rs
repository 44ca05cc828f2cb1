//! Receiving file descriptors passed with `SCM_RIGHTS`. The only `unsafe`
//! code of the server lives here: `recvmsg` and taking ownership of the
//! descriptors the kernel installed.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};

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

    /// More descriptors arrived than allowed (the extra ones were closed).
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

/// Wraps a received descriptor as an `EventFd`. The descriptor is not
/// checked to be an eventfd: writing 8 bytes to something else is the
/// client's problem, not ours.
pub(crate) fn into_eventfd(fd: OwnedFd) -> EventFd {
    // SAFETY: `fd` is owned and open; ownership moves into the EventFd,
    // which closes it on drop.
    unsafe { EventFd::from_raw_fd(fd.into_raw_fd()) }
}
