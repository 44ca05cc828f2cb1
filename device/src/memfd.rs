//! Anonymous shared memory (memfd) for device-owned memory the VMM maps too.
//!
//! Such a memfd is handed to the client (the doorbell BAR goes out with
//! REGION_INFO), and a client that could `ftruncate()` it would make the
//! device's next access to it raise SIGBUS. So the size is fixed for good:
//! the memfd is created with `MFD_ALLOW_SEALING`, sized, then sealed with
//! `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`: exactly the seals QEMU's
//! `memory-backend-memfd` puts on guest RAM (`seal=on`, its default; see
//! QEMU's backends/hostmem-memfd.c, which passes them to qemu_memfd_create()
//! in util/memfd.c). Writes stay allowed: the client writes doorbells there.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};

/// The seals every memfd of this module carries.
pub const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// Creates a memfd of `size` bytes, zero-filled, whose size can never change
/// (sealed with [`SIZE_SEALS`]).
pub fn create(name: &std::ffi::CStr, size: u64) -> io::Result<File> {
    create_sealed(name, size, Sealing::Size)
}

/// How [`create_sealed`] seals a new memfd. The device makes only
/// [`Sealing::Size`] memfds; the other two are what a VMM may hand it as
/// guest RAM, for the tests that play such a VMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealing {
    /// Sealed with [`SIZE_SEALS`], as [`create`] makes it and as QEMU's
    /// `memory-backend-memfd` (`seal=on`) makes guest RAM.
    Size,
    /// `MFD_ALLOW_SEALING` and no seal yet: whoever holds it may still seal
    /// it (and resize it until then).
    Sealable,
    /// Without `MFD_ALLOW_SEALING`, so the kernel sets `F_SEAL_SEAL` at once:
    /// it can be resized and never sealed, as `memory-backend-memfd,seal=off`
    /// makes guest RAM.
    Unsealable,
}

/// Creates a memfd of `size` bytes, zero-filled, sealed as `sealing` says.
pub fn create_sealed(name: &std::ffi::CStr, size: u64, sealing: Sealing) -> io::Result<File> {
    let flags = match sealing {
        Sealing::Size | Sealing::Sealable => libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        Sealing::Unsealable => libc::MFD_CLOEXEC,
    };
    // SAFETY: memfd_create reads a NUL-terminated name and flags; the result is checked.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size)?;
    if sealing == Sealing::Size {
        add_seals(&file, SIZE_SEALS)?;
    }
    Ok(file)
}

/// The seals of `file` (`F_GET_SEALS`). Fails with `EINVAL` for a file that
/// does not support sealing (anything but a memfd or another shmem/hugetlbfs
/// file).
pub fn seals(file: &File) -> io::Result<libc::c_int> {
    // SAFETY: F_GET_SEALS takes no argument and only reads the file's seals.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(seals)
}

/// Adds `seals` to `file` (`F_ADD_SEALS`). Fails with `EPERM` once
/// `F_SEAL_SEAL` is set or when `file` is not open for writing.
pub fn add_seals(file: &File, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: F_ADD_SEALS takes an int of seal bits; the result is checked.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_memfd_cannot_be_resized_or_resealed() {
        let file = create(c"vrnic-test", 8192).unwrap();

        let shrink = file.set_len(4096).unwrap_err();
        let grow = file.set_len(16384).unwrap_err();
        let reseal = add_seals(&file, libc::F_SEAL_WRITE).unwrap_err();

        assert_eq!(shrink.raw_os_error(), Some(libc::EPERM));
        assert_eq!(grow.raw_os_error(), Some(libc::EPERM));
        assert_eq!(reseal.raw_os_error(), Some(libc::EPERM));
        assert_eq!(file.metadata().unwrap().len(), 8192);
        assert_eq!(seals(&file).unwrap(), SIZE_SEALS);
    }

    #[test]
    fn sealable_memfd_carries_no_seal_until_one_is_added() {
        let file = create_sealed(c"vrnic-test", 8192, Sealing::Sealable).unwrap();

        let unsealed = seals(&file).unwrap();
        file.set_len(4096).unwrap();
        add_seals(&file, SIZE_SEALS).unwrap();
        let shrink = file.set_len(0).unwrap_err();

        assert_eq!(unsealed, 0);
        assert_eq!(shrink.raw_os_error(), Some(libc::EPERM));
        assert_eq!(seals(&file).unwrap(), SIZE_SEALS);
    }

    #[test]
    fn unsealable_memfd_can_be_resized_and_never_sealed() {
        let file = create_sealed(c"vrnic-test", 8192, Sealing::Unsealable).unwrap();

        let seal = add_seals(&file, libc::F_SEAL_SHRINK).unwrap_err();
        file.set_len(0).unwrap();

        assert_eq!(seal.raw_os_error(), Some(libc::EPERM));
        assert_eq!(seals(&file).unwrap(), libc::F_SEAL_SEAL);
        assert_eq!(file.metadata().unwrap().len(), 0);
    }
}
