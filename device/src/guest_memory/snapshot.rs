//! Accessing guest memory through one immutable view of the DMA map table.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use vm_memory::{AtomicAccess, ByteValued, Bytes, MmapRegion, VolatileMemory, VolatileSlice};

use super::error::DmaError;
use super::ram::Table;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// An immutable view of a client's DMA map table, taken with
/// [`GuestRam::snapshot`](super::GuestRam::snapshot).
///
/// Every mapping in the view stays mmapped while the snapshot (or a clone of
/// it) lives, and a `DMA_UNMAP` of one of them waits for it: hold a snapshot
/// for one bounded unit of work only, never across a blocking wait (see the
/// contract on [`GuestRam`](super::GuestRam)). Accesses check the whole range first: an access that would
/// touch an unmapped byte, a map without fd, or (for writes) a read-only map
/// fails with a [`DmaError`] before any byte is read or written. Ranges that
/// span several adjacent maps are handled.
#[derive(Clone, Debug)]
pub struct RamSnapshot {
    table: Arc<Table>,
}

impl RamSnapshot {
    pub(super) fn new(table: Arc<Table>) -> Self {
        Self { table }
    }

    /// Number of maps in this view.
    pub fn len(&self) -> usize {
        self.table.maps.len()
    }

    /// True when the view holds no map.
    pub fn is_empty(&self) -> bool {
        self.table.maps.is_empty()
    }

    /// Checks that `[addr, addr+len)` may be read, without reading it.
    pub fn check_read(&self, addr: u64, len: usize) -> Result<(), DmaError> {
        self.check(addr, len, Access::Read)
    }

    /// Checks that `[addr, addr+len)` may be written, without writing it.
    pub fn check_write(&self, addr: u64, len: usize) -> Result<(), DmaError> {
        self.check(addr, len, Access::Write)
    }

    /// Copies guest memory at `addr` into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let mut done = 0usize;
        self.for_each_slice(addr, buf.len(), Access::Read, |slice| {
            if let Some(dst) = buf.get_mut(done..) {
                done = done.saturating_add(slice.copy_to(dst));
            }
            Ok(())
        })
    }

    /// Copies `data` into guest memory at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        let mut done = 0usize;
        self.for_each_slice(addr, data.len(), Access::Write, |slice| {
            if let Some(src) = data.get(done..) {
                slice.copy_from(src);
                done = done.saturating_add(slice.len().min(src.len()));
            }
            Ok(())
        })
    }

    /// Reads a plain-data object at `addr` (no alignment required).
    pub fn read_obj<T: ByteValued>(&self, addr: u64) -> Result<T, DmaError> {
        let mut val = T::zeroed();
        self.read(addr, val.as_mut_slice())?;
        Ok(val)
    }

    /// Writes a plain-data object at `addr` (no alignment required).
    pub fn write_obj<T: ByteValued>(&self, addr: u64, val: &T) -> Result<(), DmaError> {
        self.write(addr, val.as_slice())
    }

    /// Host slices covering `[addr, addr+len)` in order, one per map crossed,
    /// for reading. Do not write through them: a read-only map would fault.
    pub fn slices_for_read(
        &self,
        addr: u64,
        len: usize,
    ) -> Result<Vec<VolatileSlice<'_>>, DmaError> {
        self.collect_slices(addr, len, Access::Read)
    }

    /// Host slices covering `[addr, addr+len)` in order, one per map crossed,
    /// checked for writing.
    pub fn slices_for_write(
        &self,
        addr: u64,
        len: usize,
    ) -> Result<Vec<VolatileSlice<'_>>, DmaError> {
        self.collect_slices(addr, len, Access::Write)
    }

    /// One host slice covering `[addr, addr+len)` for reading; fails with
    /// [`DmaError::Discontiguous`] if the range spans maps. Do not write
    /// through it.
    pub fn slice_for_read(&self, addr: u64, len: usize) -> Result<VolatileSlice<'_>, DmaError> {
        self.contiguous_slice(addr, len, Access::Read)
    }

    /// One host slice covering `[addr, addr+len)`, checked for writing; fails
    /// with [`DmaError::Discontiguous`] if the range spans maps.
    pub fn slice_for_write(&self, addr: u64, len: usize) -> Result<VolatileSlice<'_>, DmaError> {
        self.contiguous_slice(addr, len, Access::Write)
    }

    /// Copies `len` bytes from `src_addr` in `src` to `dst` in `self`, host
    /// memory to host memory with no intermediate buffer. Both ranges are
    /// checked before anything is copied. `src` may be `self` (overlapping
    /// ranges then behave like `memmove` within one map).
    pub fn copy_from(
        &self,
        dst: u64,
        src: &RamSnapshot,
        src_addr: u64,
        len: usize,
    ) -> Result<(), DmaError> {
        self.check(dst, len, Access::Write)?;
        src.check(src_addr, len, Access::Read)?;
        let total = to_u64(len);
        let mut done = 0u64;
        while done < total {
            let left = total.saturating_sub(done);
            let dst_at = dst.saturating_add(done);
            let src_at = src_addr.saturating_add(done);
            let dst_slice = self.slice_at(dst, len, dst_at, left)?;
            let src_slice = src.slice_at(src_addr, len, src_at, to_u64(dst_slice.len()))?;
            let n = src_slice.len();
            let dst_slice = dst_slice
                .subslice(0, n)
                .map_err(|source| memory_error(dst, len, source))?;
            src_slice.copy_to_volatile_slice(dst_slice);
            if n == 0 {
                break;
            }
            done = done.saturating_add(to_u64(n));
        }
        Ok(())
    }

    /// Atomic load of a naturally aligned `T` (u8/u16/u32/u64...) at `addr`.
    pub fn load<T: AtomicAccess>(&self, addr: u64, ord: Ordering) -> Result<T, DmaError> {
        let len = std::mem::size_of::<T>();
        let slice = self.contiguous_slice(addr, len, Access::Read)?;
        slice
            .load(0, ord)
            .map_err(|source| memory_error(addr, len, source))
    }

    /// Atomic store of a naturally aligned `T` (u8/u16/u32/u64...) at `addr`.
    pub fn store<T: AtomicAccess>(&self, addr: u64, val: T, ord: Ordering) -> Result<(), DmaError> {
        let len = std::mem::size_of::<T>();
        let slice = self.contiguous_slice(addr, len, Access::Write)?;
        slice
            .store(val, 0, ord)
            .map_err(|source| memory_error(addr, len, source))
    }

    /// Atomic load of an aligned `u32` (ring indices: use `Acquire`).
    pub fn load_u32(&self, addr: u64, ord: Ordering) -> Result<u32, DmaError> {
        self.load(addr, ord)
    }

    /// Atomic store of an aligned `u32` (owner bits, indices: use `Release`).
    pub fn store_u32(&self, addr: u64, val: u32, ord: Ordering) -> Result<(), DmaError> {
        self.store(addr, val, ord)
    }

    /// Atomic load of a `u8`.
    pub fn load_u8(&self, addr: u64, ord: Ordering) -> Result<u8, DmaError> {
        self.load(addr, ord)
    }

    /// Atomic store of a `u8`.
    pub fn store_u8(&self, addr: u64, val: u8, ord: Ordering) -> Result<(), DmaError> {
        self.store(addr, val, ord)
    }

    /// Atomic load of an aligned `u64`.
    pub fn load_u64(&self, addr: u64, ord: Ordering) -> Result<u64, DmaError> {
        self.load(addr, ord)
    }

    /// Atomic store of an aligned `u64`.
    pub fn store_u64(&self, addr: u64, val: u64, ord: Ordering) -> Result<(), DmaError> {
        self.store(addr, val, ord)
    }

    /// Checks the whole range for `access` (no memory is touched).
    fn check(&self, addr: u64, len: usize, access: Access) -> Result<(), DmaError> {
        let len64 = to_u64(len);
        if len == 0 {
            return Ok(());
        }
        let end = addr
            .checked_add(len64)
            .ok_or(DmaError::Overflow { addr, len: len64 })?;
        let mut at = addr;
        while at < end {
            let map = self.table.find(at).ok_or(DmaError::Unmapped {
                addr,
                len: len64,
                at,
            })?;
            match access {
                Access::Read if !map.readable => {
                    return Err(DmaError::NotReadable {
                        addr,
                        len: len64,
                        at,
                    })
                }
                Access::Write if !map.writable => {
                    return Err(DmaError::ReadOnly {
                        addr,
                        len: len64,
                        at,
                    })
                }
                _ => {}
            }
            if map.backing.is_none() {
                return Err(DmaError::NoFd {
                    addr,
                    len: len64,
                    at,
                });
            }
            at = map.end().min(end);
        }
        Ok(())
    }

    /// The host slice starting at guest address `at`, at most `max` bytes,
    /// ending at the end of the map containing `at`. `addr`/`len` name the
    /// whole request for error messages. Permissions are not checked here.
    fn slice_at(
        &self,
        addr: u64,
        len: usize,
        at: u64,
        max: u64,
    ) -> Result<VolatileSlice<'_>, DmaError> {
        let len64 = to_u64(len);
        let map = self.table.find(at).ok_or(DmaError::Unmapped {
            addr,
            len: len64,
            at,
        })?;
        let region = map.backing.as_ref().ok_or(DmaError::NoFd {
            addr,
            len: len64,
            at,
        })?;
        let offset = at.saturating_sub(map.start);
        let count = max.min(map.end().saturating_sub(at));
        let too_large = || DmaError::Overflow { addr, len: len64 };
        let offset = usize::try_from(offset).map_err(|_| too_large())?;
        let count = usize::try_from(count).map_err(|_| too_large())?;
        let mmap: &MmapRegion = &region.region;
        VolatileMemory::get_slice(mmap, offset, count)
            .map_err(|source| memory_error(addr, len, source))
    }

    /// Checks the range, then calls `f` with each host slice, in order.
    fn for_each_slice<'s>(
        &'s self,
        addr: u64,
        len: usize,
        access: Access,
        mut f: impl FnMut(VolatileSlice<'s>) -> Result<(), DmaError>,
    ) -> Result<(), DmaError> {
        self.check(addr, len, access)?;
        let total = to_u64(len);
        let mut done = 0u64;
        while done < total {
            let slice = self.slice_at(
                addr,
                len,
                addr.saturating_add(done),
                total.saturating_sub(done),
            )?;
            let n = to_u64(slice.len());
            f(slice)?;
            if n == 0 {
                break;
            }
            done = done.saturating_add(n);
        }
        Ok(())
    }

    fn collect_slices(
        &self,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<Vec<VolatileSlice<'_>>, DmaError> {
        let mut slices = Vec::new();
        self.for_each_slice(addr, len, access, |slice| {
            slices.push(slice);
            Ok(())
        })?;
        Ok(slices)
    }

    fn contiguous_slice(
        &self,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<VolatileSlice<'_>, DmaError> {
        self.check(addr, len, access)?;
        let slice = self.slice_at(addr, len, addr, to_u64(len))?;
        if slice.len() < len {
            return Err(DmaError::Discontiguous {
                addr,
                len: to_u64(len),
            });
        }
        Ok(slice)
    }
}

fn memory_error(addr: u64, len: usize, source: vm_memory::VolatileMemoryError) -> DmaError {
    DmaError::Memory {
        addr,
        len: to_u64(len),
        source,
    }
}

/// `usize` to `u64`: lossless on every target this crate builds for.
fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
