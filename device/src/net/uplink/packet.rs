//! An existing interface through an `AF_PACKET` raw socket: bound to its ifindex, a
//! promiscuous membership (so frames for the guests' MACs arrive; the kernel drops it when
//! the socket closes), outgoing frames not looped back (`PACKET_IGNORE_OUTGOING`, and
//! `PACKET_OUTGOING` skipped on receive for older kernels). Frames to the interface's own
//! MAC are the host's and are skipped too; broadcast and multicast go to both.
//!
//! The socket sees frames as the interface delivers them to the stack: on an interface
//! with GRO, aggregated frames larger than the receive buffer (dropped and counted), and
//! from a local sender with checksum offload, frames whose checksums are not filled in.
//! Turn those off on the interface (`ethtool -K IF gro off`; for a veth, `tx off` on the
//! sending end), or use a tap. The host's own traffic through this interface does not
//! reach the guests (as with macvlan): it leaves by the wire, vrnic sees only what comes in.

use super::rx::RxBatch;
use super::UplinkError;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The receive buffer asked for (the kernel caps it at net.core.rmem_max unless root).
const RCVBUF: libc::c_int = 4 << 20;

/// The interface's index, or an error naming it.
pub fn ifindex(ifname: &str) -> Result<libc::c_int, UplinkError> {
    super::tap::check_name(ifname).map_err(UplinkError::BadName)?;
    let name = CString::new(ifname).map_err(|_| UplinkError::BadName(ifname.into()))?;
    // SAFETY: a NUL-terminated name; the call only reads it.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(UplinkError::NoInterface(ifname.into())),
        i => Ok(i as libc::c_int),
    }
}

fn sockaddr(ifindex: libc::c_int) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sa.sll_ifindex = ifindex;
    sa
}

fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> std::io::Result<()> {
    // SAFETY: `value` points to a T of the size passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A nonblocking packet socket on interface `ifname`.
pub fn open(ifname: &str) -> Result<(OwnedFd, libc::c_int), UplinkError> {
    let err = |what: &'static str, source: std::io::Error| UplinkError::Os {
        ifname: ifname.into(),
        what,
        source,
    };
    let index = ifindex(ifname)?;
    // Protocol 0: nothing is queued until bind names the interface, so no frame of
    // another interface slips in between.
    // SAFETY: plain socket creation; the fd is checked and owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(err("open a packet socket", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Before bind, so that none of our own frames is ever queued.
    let one: libc::c_int = 1;
    setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
        .map_err(|e| err("PACKET_IGNORE_OUTGOING", e))?;
    if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &RCVBUF).is_err() {
        // Not root: what rmem_max allows.
        let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &RCVBUF);
    }
    let sa = sockaddr(index);
    // SAFETY: `sa` is a sockaddr_ll of the size passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(err(
            "bind the packet socket",
            std::io::Error::last_os_error(),
        ));
    }
    let mreq = libc::packet_mreq {
        mr_ifindex: index,
        mr_type: libc::PACKET_MR_PROMISC as u16,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
        .map_err(|e| err("promiscuous membership", e))?;
    Ok((fd, index))
}

/// The most frames one `recv` takes.
pub const RECV_SLOTS: usize = 32;

/// Reads the frames queued, up to one per slot of `batch`, with one `recvmmsg`: each
/// frame's real length (larger than its slot when it was cut), or None when it was one of
/// ours going out or one for the host (its own MAC). `Err(WouldBlock)` when nothing is
/// queued.
pub fn recv(fd: &OwnedFd, batch: &mut RxBatch) -> std::io::Result<()> {
    batch.clear();
    let slots = batch.slots().min(RECV_SLOTS);
    let slot_len = batch.slot_len();
    // SAFETY: sockaddr_ll, iovec and mmsghdr (below) are plain data; all-zero is a valid
    // value of each (null pointers, zero lengths).
    let mut from: [libc::sockaddr_ll; RECV_SLOTS] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut iov: [libc::iovec; RECV_SLOTS] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; RECV_SLOTS] = unsafe { std::mem::zeroed() };
    for i in 0..slots {
        iov[i] = libc::iovec {
            iov_base: batch.slot_mut(i).as_mut_ptr().cast(),
            iov_len: slot_len,
        };
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = (&mut from[i] as *mut libc::sockaddr_ll).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
    }
    // SAFETY: each of the `slots` headers names its own iovec, which points into its own
    // slot of `batch` (writable for `slot_len` bytes, not otherwise borrowed until this
    // returns), and its own sockaddr_ll; MSG_TRUNC makes each msg_len the frame's real
    // length while the kernel still writes at most `slot_len` bytes.
    let n = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            slots as libc::c_uint,
            libc::MSG_TRUNC | libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    for (h, from) in hdrs.iter().zip(&from).take(n as usize) {
        // Ours going out, or for the interface's own MAC: the host's, never a guest's (so
        // the switch never floods the host's unicast traffic to the guests).
        let skip =
            from.sll_pkttype == libc::PACKET_OUTGOING || from.sll_pkttype == libc::PACKET_HOST;
        batch.push((!skip).then_some(h.msg_len as usize));
    }
    Ok(())
}
