//! Errors of the DMA map table and of DMA accesses through it.

use std::io;

use super::seal::SealError;

/// Why a DMA access through a [`RamSnapshot`](super::RamSnapshot) failed.
///
/// Every variant names the requested range (`addr`, `len`) and, where it
/// differs, the first guest address `at` that could not be accessed. No
/// memory has been touched when a write fails with one of these errors.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    /// `addr + len` does not fit in 64 bits.
    #[error("DMA range {addr:#x}+{len:#x} overflows the address space")]
    Overflow {
        /// Start of the requested range.
        addr: u64,
        /// Length of the requested range.
        len: u64,
    },
    /// No DMA map covers `at`.
    #[error("DMA range {addr:#x}+{len:#x}: {at:#x} is not mapped")]
    Unmapped {
        /// Start of the requested range.
        addr: u64,
        /// Length of the requested range.
        len: u64,
        /// First address that is not mapped.
        at: u64,
    },
    /// `at` lies in a map the client gave without a file descriptor, so the
    /// server cannot reach it.
    #[error("DMA range {addr:#x}+{len:#x}: {at:#x} is mapped without a file descriptor")]
    NoFd {
        /// Start of the requested range.
        addr: u64,
        /// Length of the requested range.
        len: u64,
        /// First address in a map without a file descriptor.
        at: u64,
    },
    /// A write reached `at`, which lies in a map without the write permission.
    #[error("DMA write {addr:#x}+{len:#x}: {at:#x} is mapped read-only")]
    ReadOnly {
        /// Start of the requested range.
        addr: u64,
        /// Length of the requested range.
        len: u64,
        /// First address in a read-only map.
        at: u64,
    },
    /// A read reached `at`, which lies in a map without the read permission.
    #[error("DMA read {addr:#x}+{len:#x}: {at:#x} is mapped without read permission")]
    NotReadable {
        /// Start of the requested range.
        addr: u64,
        /// Length of the requested range.
        len: u64,
        /// First address in a map without read permission.
        at: u64,
    },
    /// The range is mapped, but not by a single map, and the operation needs
    /// one contiguous host slice (an atomic access or `slice_for_*`).
    #[error("DMA range {addr:#x}+{len:#x} spans more than one map")]
    Discontiguous {
        /// Start of the requested range.
        addr: u64,
        /// Length of the requested range.
        len: u64,
    },
    /// The host memory layer refused the access (e.g. a misaligned atomic).
    #[error("DMA range {addr:#x}+{len:#x}: {source}")]
    Memory {
        /// Start of the requested range.
        addr: u64,
        /// Length of the requested range.
        len: u64,
        /// The vm-memory error.
        #[source]
        source: vm_memory::VolatileMemoryError,
    },
}

/// Why a DMA map or unmap request was refused.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The map has size 0.
    #[error("DMA map at {addr:#x} has size 0")]
    ZeroSize {
        /// Requested start address.
        addr: u64,
    },
    /// `addr + size` or `file_offset + size` overflows.
    #[error("DMA map {addr:#x}+{size:#x} (file offset {file_offset:#x}) overflows")]
    Overflow {
        /// Requested start address.
        addr: u64,
        /// Requested size.
        size: u64,
        /// Requested offset in the file.
        file_offset: u64,
    },
    /// Neither read nor write permission was requested.
    #[error("DMA map {addr:#x}+{size:#x} grants neither read nor write access")]
    NoAccess {
        /// Requested start address.
        addr: u64,
        /// Requested size.
        size: u64,
    },
    /// The size does not fit in the host's address space.
    #[error("DMA map {addr:#x}+{size:#x} is too large for this host")]
    TooLarge {
        /// Requested start address.
        addr: u64,
        /// Requested size.
        size: u64,
    },
    /// The map overlaps an existing one.
    #[error("DMA map {addr:#x}+{size:#x} overlaps the map {existing_addr:#x}+{existing_size:#x}")]
    Overlap {
        /// Requested start address.
        addr: u64,
        /// Requested size.
        size: u64,
        /// Start of the existing map.
        existing_addr: u64,
        /// Size of the existing map.
        existing_size: u64,
    },
    /// The table already holds the maximum number of maps of one client.
    #[error("DMA map table is full ({max} maps)")]
    TooMany {
        /// The limit.
        max: usize,
    },
    /// The process-wide budget of fd-backed maps, shared by every client, is
    /// exhausted; it comes back as clients unmap.
    #[error("the process holds its maximum of {limit} DMA maps with an fd; try again after other clients unmap")]
    BudgetExhausted {
        /// The budget.
        limit: usize,
    },
    /// The fd could shrink under the device's mapping (see the module
    /// `seal`): refused, since touching a truncated mapping raises SIGBUS.
    #[error("DMA map {addr:#x}+{size:#x}: its fd {source}; vrnic needs guest RAM whose size cannot shrink (F_SEAL_SHRINK): use QEMU's memory-backend-memfd (seal=on, the default)")]
    Unsealable {
        /// Requested start address.
        addr: u64,
        /// Requested size.
        size: u64,
        /// What is wrong with the fd.
        #[source]
        source: SealError,
    },
    /// The file is smaller than `file_offset + size`; touching the tail of
    /// such a mapping would raise SIGBUS.
    #[error("DMA map {addr:#x}+{size:#x} at file offset {file_offset:#x} exceeds the file size {file_size:#x}")]
    BeyondFile {
        /// Requested start address.
        addr: u64,
        /// Requested size.
        size: u64,
        /// Requested offset in the file.
        file_offset: u64,
        /// Size of the file.
        file_size: u64,
    },
    /// fstat on the file failed.
    #[error("cannot stat the DMA map file: {0}")]
    Stat(#[source] io::Error),
    /// mmap failed.
    #[error("cannot mmap DMA map {addr:#x}+{size:#x}: {source}")]
    Mmap {
        /// Requested start address.
        addr: u64,
        /// Requested size.
        size: u64,
        /// The vm-memory error.
        #[source]
        source: vm_memory::mmap::MmapRegionError,
    },
    /// No map has exactly this start address and size.
    #[error("no DMA map is exactly {addr:#x}+{size:#x}")]
    NotMapped {
        /// Requested start address.
        addr: u64,
        /// Requested size.
        size: u64,
    },
}

impl MapError {
    /// The errno a vfio-user reply should carry for this error.
    pub fn errno(&self) -> i32 {
        match self {
            MapError::ZeroSize { .. }
            | MapError::Overflow { .. }
            | MapError::NoAccess { .. }
            | MapError::BeyondFile { .. } => libc::EINVAL,
            MapError::TooLarge { .. } => libc::ENOMEM,
            MapError::Overlap { .. } => libc::EEXIST,
            MapError::TooMany { .. } => libc::ENOSPC,
            MapError::BudgetExhausted { .. } => libc::EAGAIN,
            MapError::Unsealable { .. } => libc::EPERM,
            MapError::Stat(e) => e.raw_os_error().unwrap_or(libc::EIO),
            MapError::Mmap { source, .. } => mmap_errno(source),
            MapError::NotMapped { .. } => libc::ENOENT,
        }
    }
}

fn mmap_errno(e: &vm_memory::mmap::MmapRegionError) -> i32 {
    use vm_memory::mmap::MmapRegionError as E;
    match e {
        E::Mmap(io) => io.raw_os_error().unwrap_or(libc::EINVAL),
        _ => libc::EINVAL,
    }
}
