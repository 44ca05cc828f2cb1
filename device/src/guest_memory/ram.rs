//! The DMA map table of one vfio-user client and its atomic replacement.

use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use vm_memory::{FileOffset, GuestAddress, GuestRegionMmap, MmapRegion};

use super::budget::{MapBudget, Slot};
use super::error::MapError;
use super::retire::{RetireSignal, Retired};
use super::seal::forbid_shrinking;
use super::snapshot::RamSnapshot;

/// The most maps one client's table holds, advertised as `max_dma_maps` in
/// the VERSION reply. QEMU makes one map per RAM section it sees (a q35 guest
/// has about a dozen, SeaBIOS churns a few more, each DIMM adds one); its own
/// planning in hw/vfio/listener.c assumes at most 512 memory slots without
/// KVM. 1024 leaves room for that twice over while keeping the fds and mmaps
/// one client can pin small next to RLIMIT_NOFILE. (virtio-mem, which needs a
/// map per plugged block and room for every KVM memslot, is not supported.)
pub const MAX_DMA_MAPS: usize = 1024;

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
    pub(super) backing: Option<Arc<Backing>>,
}

/// The host side of a map with an fd, shared by every table that contains
/// the map. Fields drop in order: the mmap (and the fd) go first, then the
/// budget slot is given back, then waiting unmaps are released.
#[derive(Debug)]
pub(super) struct Backing {
    pub(super) region: GuestRegionMmap,
    _slot: Slot,
    retire: RetireSignal,
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
/// it still mmapped, until it is dropped.
///
/// # The snapshot contract
///
/// [`unmap`](Self::unmap) and [`unmap_all`](Self::unmap_all) return only when
/// no snapshot that contains a removed mapping is left, so that the client
/// may reuse the memory as soon as it has the reply. In exchange, code that
/// reaches guest memory holds a snapshot only for one bounded unit of work (a
/// command, a WQE, one chunk of a copy) and never across a blocking wait (a
/// socket, a condition variable, another device's lock that such a wait may
/// hold); the thread that unmaps must hold no snapshot of this table itself,
/// or it waits for itself forever. A wait longer than a second is logged
/// once. Snapshots taken after an unmap do not contain the range and are not
/// waited for.
///
/// Maps with an fd also count against the process-wide budget of mappings
/// (half of RLIMIT_NOFILE, see `budget`), and each table holds at most
/// [`MAX_DMA_MAPS`] maps.
#[derive(Debug, Clone)]
pub struct GuestRam {
    current: Arc<Mutex<Arc<Table>>>,
    budget: Arc<MapBudget>,
    max_maps: usize,
}

impl Default for GuestRam {
    fn default() -> Self {
        Self::with_limits(MAX_DMA_MAPS, Arc::clone(MapBudget::process()))
    }
}

impl GuestRam {
    /// An empty table: every access fails with `Unmapped`.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table of at most `max_maps` maps whose fd-backed maps count
    /// against `budget`.
    pub(crate) fn with_limits(max_maps: usize, budget: Arc<MapBudget>) -> Self {
        Self {
            current: Arc::default(),
            budget,
            max_maps,
        }
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

    /// Adds a map. With an fd, the fd must be one that cannot shrink (see the
    /// module `seal`; a sealable memfd is sealed here), and the range is
    /// mmapped `MAP_SHARED`, read-only unless `writable`. Refuses overlaps
    /// (`EEXIST`), zero sizes, ranges that overflow, ranges past the end of
    /// the file, a full table (`ENOSPC`) and an exhausted process budget
    /// (`EAGAIN`).
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
        self.check_room()?;
        let backing = match fd {
            None => None,
            Some(file) => {
                if file_offset.checked_add(size).is_none() {
                    return Err(overflow);
                }
                let host_size =
                    usize::try_from(size).map_err(|_| MapError::TooLarge { addr, size })?;
                forbid_shrinking(&file, addr, size).map_err(|source| MapError::Unsealable {
                    addr,
                    size,
                    source,
                })?;
                // Sealed first, so the size checked here is a lower bound for good.
                check_file_size(&file, addr, size, file_offset)?;
                let slot = self.budget.take().ok_or(MapError::BudgetExhausted {
                    limit: self.budget.limit(),
                })?;
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
                Some(Arc::new(Backing {
                    region,
                    _slot: slot,
                    retire: RetireSignal::default(),
                }))
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
        if current.maps.len() >= self.max_maps {
            return Err(MapError::TooMany { max: self.max_maps });
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

    /// Refuses early, before any sealing or mmap, when the table is full.
    fn check_room(&self) -> Result<(), MapError> {
        if self.len() >= self.max_maps {
            return Err(MapError::TooMany { max: self.max_maps });
        }
        Ok(())
    }

    /// Removes the map that starts at `addr` and is exactly `size` long, then
    /// waits until every snapshot that still contains it has been dropped
    /// (see the snapshot contract above).
    pub fn unmap(&self, addr: u64, size: u64) -> Result<(), MapError> {
        let removed = {
            let mut current = self.lock();
            let pos = current
                .maps
                .iter()
                .position(|m| m.start == addr && m.len == size)
                .ok_or(MapError::NotMapped { addr, size })?;
            let mut maps = current.maps.clone();
            let removed = maps.remove(pos);
            *current = Arc::new(Table { maps });
            removed
        };
        wait_until_retired(vec![removed], &|| format!("DMA unmap {addr:#x}+{size:#x}"));
        Ok(())
    }

    /// Removes every map, waits as [`unmap`](Self::unmap) does, and returns
    /// how many maps there were.
    pub fn unmap_all(&self) -> usize {
        let old = std::mem::take(&mut *self.lock());
        let n = old.maps.len();
        let removed = old.maps.clone();
        drop(old);
        wait_until_retired(removed, &|| format!("DMA unmap of all {n} maps"));
        n
    }

    fn lock(&self) -> MutexGuard<'_, Arc<Table>> {
        // The critical sections only swap an Arc; a panic cannot leave the
        // table half-updated, so a poisoned lock is still consistent.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Waits until every fd-backed mapping of `removed` is gone from every table.
/// `removed` holds the caller's own references, dropped before waiting.
fn wait_until_retired(removed: Vec<Mapping>, what: &dyn Fn() -> String) {
    let pending: Vec<Arc<Retired>> = removed
        .iter()
        .filter_map(|m| m.backing.as_ref().map(|b| b.retire.handle()))
        .collect();
    drop(removed);
    for retired in pending {
        retired.wait(what);
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
