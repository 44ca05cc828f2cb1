//! Anonymous shared memory (memfd) for device-owned memory the VMM maps too.

use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;

/// Creates a memfd of `size` bytes, zero-filled.
pub fn create(name: &std::ffi::CStr, size: u64) -> io::Result<File> {
    // SAFETY: memfd_create reads a NUL-terminated name and flags; the result is checked.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size)?;
    Ok(file)
}
