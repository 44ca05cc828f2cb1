//! The DMA map table of one vfio-user client and its atomic replacement.

use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use vm_memory::{FileOffset, GuestAddress, GuestRegionMmap, MmapRegion};

use super::error::MapError;
use super::snapshot::RamSnapshot;

/// The most maps one table holds (the vfio-user default of `max_dma_maps`).
pub const MAX_DMA_MAPS: usize = 65535;

/// One DMA map as the client described it (`VFIO_USER_DMA_MAP`).
#[derive(Debug)]
pub struct DmaMapRequest {
    /// Guest (IOVA) address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// Offset of `addr` in `fd`; ignored without an fd.
    pub file_offset: u64,
    /// The device may read this range.
    pub readable: bool,
    /// The device may write this range.
    pub writable: bool,
    /// The memory to mmap; `None` records an address range the server
    /// cannot reach (BIOS ROM, another device's BAR...).
    pub fd: Option<File>,
}

/// One entry of the table: an address range, its permissions and, when the
/// client passed an fd, the host mapping of it.
#[derive(Debug, Clone)]
pub(super) struct Mapping {
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) readable: bool,
    pub(super) writable: bool,
    pub(super) backing: Option<Arc<GuestRegionMmap>>,
}

impl Mapping {
    /// One past the last address; never overflows (checked at insertion).
    pub(super) fn end(&self) -> u64 {
        self.start.saturating_add(self.len)
    }
}

/// An immutable, sorted, non-overlapping list of maps.
#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) maps: Vec<Mapping>,
}

impl Table {
    /// Index of the map containing `addr`, if any.
    pub(super) fn find(&self, addr: u64) -> Option<&Mapping> {
        let after = self.maps.partition_point(|m| m.start <= addr);
        let candidate = self.maps.get(after.checked_sub(1)?)?;
        (addr < candidate.end()).then_some(candidate)
    }
}

/// Handle to one client's DMA map table: cheap to clone, shared between the
/// vfio-user server (which changes it on `DMA_MAP`/`DMA_UNMAP`) and the device
/// model (which reads and writes guest memory through it).
///
/// The table is replaced as a whole on every change. [`GuestRam::snapshot`]
/// hands out the current table; a snapshot stays valid, with every mapping in
/// it still mmapped, until it is dropped, even if the client unmaps the range
/// meanwhile. Data-path code takes a snapshot per unit of work (a WQE, a
/// doorbell) and drops it when done, so an unmap takes effect for the next
/// unit.
#[derive(Debug, Clone, Default)]
pub struct GuestRam {
    current: Arc<Mutex<Arc<Table>>>,
}

impl GuestRam {
    /// An empty table: every access fails with `Unmapped`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current table, as an immutable view.
    pub fn snapshot(&self) -> RamSnapshot {
        RamSnapshot::new(Arc::clone(&self.lock()))
    }

    /// Number of maps in the table.
    pub fn len(&self) -> usize {
        self.lock().maps.len()
    }

    /// True when no map is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a map. With an fd, the range is mmapped `MAP_SHARED`, read-only
    /// unless `writable`. Refuses overlaps (`EEXIST`), zero sizes, ranges that
    /// overflow and ranges past the end of a regular file.
    pub fn map(&self, req: DmaMapRequest) -> Result<(), MapError> {
        let DmaMapRequest {
            addr,
            size,
            file_offset,
            readable,
            writable,
            fd,
        } = req;
        if size == 0 {
            return Err(MapError::ZeroSize { addr });
        }
        let overflow = MapError::Overflow {
            addr,
            size,
            file_offset,
        };
        if addr.checked_add(size).is_none() {
            return Err(overflow);
        }
        if !readable && !writable {
            return Err(MapError::NoAccess { addr, size });
        }
        let backing = match fd {
            None => None,
            Some(file) => {
                if file_offset.checked_add(size).is_none() {
                    return Err(overflow);
                }
                let host_size =
                    usize::try_from(size).map_err(|_| MapError::TooLarge { addr, size })?;
                check_file_size(&file, addr, size, file_offset)?;
                let mut prot = libc::PROT_READ;
                if writable {
                    prot |= libc::PROT_WRITE;
                }
                let region = MmapRegion::build(
                    Some(FileOffset::new(file, file_offset)),
                    host_size,
                    prot,
                    libc::MAP_SHARED | libc::MAP_NORESERVE,
                )
                .map_err(|source| MapError::Mmap { addr, size, source })?;
                let region = GuestRegionMmap::new(region, GuestAddress(addr)).ok_or(overflow)?;
                Some(Arc::new(region))
            }
        };
        let new = Mapping {
            start: addr,
            len: size,
            readable,
            writable,
            backing,
        };

        let mut current = self.lock();
        if current.maps.len() >= MAX_DMA_MAPS {
            return Err(MapError::TooMany { max: MAX_DMA_MAPS });
        }
        let pos = current.maps.partition_point(|m| m.start < new.start);
        let neighbours = [pos.checked_sub(1), Some(pos)];
        for existing in neighbours
            .into_iter()
            .flatten()
            .filter_map(|i| current.maps.get(i))
        {
            if existing.start < new.end() && new.start < existing.end() {
                return Err(MapError::Overlap {
                    addr,
                    size,
                    existing_addr: existing.start,
                    existing_size: existing.len,
                });
            }
        }
        let mut maps = Vec::with_capacity(current.maps.len().saturating_add(1));
        maps.extend(current.maps.iter().take(pos).cloned());
        maps.push(new);
        maps.extend(current.maps.iter().skip(pos).cloned());
        *current = Arc::new(Table { maps });
        Ok(())
    }

    /// Removes the map that starts at `addr` and is exactly `size` long.
    /// Snapshots taken before keep it until they are dropped.
    pub fn unmap(&self, addr: u64, size: u64) -> Result<(), MapError> {
        let mut current = self.lock();
        let pos = current
            .maps
            .iter()
            .position(|m| m.start == addr && m.len == size)
            .ok_or(MapError::NotMapped { addr, size })?;
        let maps = current
            .maps
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != pos)
            .map(|(_, m)| m.clone())
            .collect();
        *current = Arc::new(Table { maps });
        Ok(())
    }

    /// Removes every map; returns how many there were.
    pub fn unmap_all(&self) -> usize {
        let mut current = self.lock();
        let n = current.maps.len();
        *current = Arc::new(Table::default());
        n
    }

    fn lock(&self) -> MutexGuard<'_, Arc<Table>> {
        // The critical sections only swap an Arc; a panic cannot leave the
        // table half-updated, so a poisoned lock is still consistent.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Refuses a map that reaches past the end of a regular file: the tail of
/// such a mapping raises SIGBUS when touched.
fn check_file_size(file: &File, addr: u64, size: u64, file_offset: u64) -> Result<(), MapError> {
    let meta = file.metadata().map_err(MapError::Stat)?;
    if meta.file_type().is_file() {
        let end = file_offset.saturating_add(size);
        if end > meta.len() {
            return Err(MapError::BeyondFile {
                addr,
                size,
                file_offset,
                file_size: meta.len(),
            });
        }
    }
    Ok(())
}
