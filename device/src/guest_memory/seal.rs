//! What vrnic requires of a DMA map's fd: a file whose size cannot shrink.
//!
//! The device mmaps the client's fd and touches it from its own threads. If
//! the client could truncate the file afterwards, the next access to the
//! vanished tail would raise SIGBUS and kill the whole process, every device
//! with it. A size check at map time is not enough; the kernel must forbid
//! shrinking for good, which only a seal does:
//!
//! - a file sealed with `F_SEAL_SHRINK` is accepted. QEMU's
//!   `memory-backend-memfd` is created that way by default (`seal=on`: QEMU's
//!   backends/hostmem-memfd.c asks util/memfd.c's qemu_memfd_create() for
//!   `F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL`);
//! - a memfd that still allows sealing (created with `MFD_ALLOW_SEALING`,
//!   no `F_SEAL_SEAL` yet) gets `F_SEAL_SHRINK` from vrnic, logged at debug
//!   level. The client's file keeps that seal: it can still grow, never shrink;
//! - anything else is refused with `EPERM`: a regular file (including tmpfs
//!   and hugetlbfs files, e.g. `memory-backend-file`), a memfd created
//!   without `MFD_ALLOW_SEALING` or sealed with `F_SEAL_SEAL` but not
//!   `F_SEAL_SHRINK` (`memory-backend-memfd,seal=off`), a pipe, a socket, a
//!   device node... The remedy is QEMU's `memory-backend-memfd` with its
//!   default `seal=on`.

use std::fs::File;
use std::io;

use log::debug;

use crate::memfd;

/// Why a DMA map's fd could shrink under the device.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The file does not support seals at all (`F_GET_SEALS` failed).
    #[error("is not a memfd (it cannot be sealed: {0})")]
    NotSealable(#[source] io::Error),
    /// The memfd is sealed against further seals, but not against shrinking.
    #[error("is a memfd sealed with F_SEAL_SEAL but without F_SEAL_SHRINK")]
    SealedWithoutShrink,
    /// Adding `F_SEAL_SHRINK` failed (e.g. the fd is open read-only).
    #[error("is a memfd that refused F_SEAL_SHRINK ({0})")]
    AddFailed(#[source] io::Error),
}

/// Makes sure `file` can never shrink: accepts it if it is sealed with
/// `F_SEAL_SHRINK`, adds that seal if it may, refuses it otherwise.
pub(crate) fn forbid_shrinking(file: &File, addr: u64, size: u64) -> Result<(), SealError> {
    let seals = memfd::seals(file).map_err(SealError::NotSealable)?;
    if seals & libc::F_SEAL_SHRINK != 0 {
        return Ok(());
    }
    if seals & libc::F_SEAL_SEAL != 0 {
        return Err(SealError::SealedWithoutShrink);
    }
    memfd::add_seals(file, libc::F_SEAL_SHRINK).map_err(SealError::AddFailed)?;
    debug!("DMA map {addr:#x}+{size:#x}: sealed the client's memfd with F_SEAL_SHRINK");
    Ok(())
}
