//! A tap device (`/dev/net/tun`, `IFF_TAP | IFF_NO_PI`): vrnic's frames appear on a host
//! interface that the host can address, bridge or move into a network namespace. A tap of
//! that name is created, or attached to when it exists (a persistent tap made with `ip
//! tuntap add`, owned by this user); it is brought up, and a tap vrnic created goes away
//! when vrnic closes it.
//!
//! No `IFF_VNET_HDR`: the tap offers no offloads, so the kernel hands it complete frames
//! (checksummed, segmented to the MTU).

use super::UplinkError;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A `struct ifreq` with a name and the flags (the only union member used here).
#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const _: () = assert!(std::mem::size_of::<IfReqFlags>() == 40);

impl IfReqFlags {
    fn new(ifname: &str, flags: libc::c_short) -> IfReqFlags {
        let mut req = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags,
            _pad: [0; 22],
        };
        for (d, s) in req.name.iter_mut().zip(ifname.bytes()) {
            *d = s as libc::c_char;
        }
        req
    }
}

/// Checks an interface name: 1..15 bytes, no '/', no whitespace, no NUL, not `.`/`..`.
pub fn check_name(ifname: &str) -> Result<(), String> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(format!(
            "interface name `{}` is not 1..{} bytes",
            ifname.chars().take(32).collect::<String>(),
            libc::IFNAMSIZ - 1
        ));
    }
    if ifname == "."
        || ifname == ".."
        || ifname
            .bytes()
            .any(|b| b == b'/' || b == 0 || b.is_ascii_whitespace() || b == b':')
    {
        return Err(format!("`{ifname}` is not a valid interface name"));
    }
    Ok(())
}

/// Opens (creating or attaching to) tap `ifname`, nonblocking, and brings it up.
pub fn open(ifname: &str) -> Result<OwnedFd, UplinkError> {
    let err = |what: &'static str, source: std::io::Error| UplinkError::Os {
        ifname: ifname.into(),
        what,
        source,
    };
    check_name(ifname).map_err(UplinkError::BadName)?;
    let path = CString::new("/dev/net/tun").expect("no NUL");
    // SAFETY: a NUL-terminated path; the returned fd is checked and owned below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(err("open /dev/net/tun", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReqFlags::new(ifname, (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short);
    // SAFETY: TUNSETIFF reads and writes a struct ifreq; `req` is one (40 bytes).
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
        return Err(err(
            "TUNSETIFF (create or attach the tap)",
            std::io::Error::last_os_error(),
        ));
    }
    set_up(ifname).map_err(|e| err("bring the tap up", e))?;
    Ok(fd)
}

/// Sets IFF_UP on interface `ifname` (SIOCGIFFLAGS, SIOCSIFFLAGS on a datagram socket).
fn set_up(ifname: &str) -> std::io::Result<()> {
    // SAFETY: plain socket creation; the fd is owned below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `s` is a fresh descriptor nothing else owns.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    let mut req = IfReqFlags::new(ifname, 0);
    // SAFETY: both ioctls read/write a struct ifreq; `req` is one.
    unsafe {
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if req.flags & libc::IFF_UP as libc::c_short == 0 {
            req.flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked_before_the_kernel_sees_them() {
        assert!(check_name("vrnic0").is_ok());
        assert!(check_name("abcdefghijklmno").is_ok());
        for bad in [
            "",
            "abcdefghijklmnop",
            "a/b",
            "a b",
            ".",
            "..",
            "a:1",
            "a\0b",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
