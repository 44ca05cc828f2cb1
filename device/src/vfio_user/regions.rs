//! Region commands: DEVICE_GET_REGION_INFO, REGION_READ, REGION_WRITE and
//! REGION_WRITE_MULTI.

use log::trace;
use vfio_bindings::bindings::vfio;

use super::model::RegionInfo;
use super::protocol::{
    decode_write_multi, encode_sparse_mmap_cap, RegionAccess, RegionInfoWire, WriteMultiEntry,
    Writer, MAX_DATA_XFER_SIZE, MAX_WRITE_MULTI, WRITE_MULTI_DATA_SIZE, WRITE_MULTI_ENTRY_SIZE,
};
use super::ratelimit::client_warn;
use super::session::{Errno, Handled, Reply, Session};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

impl Session<'_, '_, '_> {
    /// Looks up a region and checks `[offset, offset+count)` against its size
    /// and permissions.
    fn checked_access(
        &mut self,
        region: u32,
        offset: u64,
        count: u32,
        dir: Dir,
    ) -> Result<(), Errno> {
        let name = self.name;
        let info = usize::try_from(region)
            .ok()
            .and_then(|i| self.regions.get(i))
            .cloned()
            .unwrap_or_default();
        let allowed = match dir {
            Dir::Read => info.readable,
            Dir::Write => info.writable,
        };
        let in_bounds = offset
            .checked_add(u64::from(count))
            .is_some_and(|end| end <= info.size);
        if info.size == 0 || !allowed || !in_bounds || count > MAX_DATA_XFER_SIZE {
            client_warn!(
                self.warn,
                name,
                "region {region} access {offset:#x}+{count:#x} refused (size {:#x}, readable {}, writable {})",
                info.size,
                info.readable,
                info.writable
            );
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// DEVICE_GET_REGION_INFO. A region with mmap-able memory gets the MMAP
    /// and CAPS flags, a sparse-mmap capability and its fd (SCM_RIGHTS). If
    /// the client's `argsz` is too small for the capability, the reply holds
    /// only the fixed part with the `argsz` needed (and neither CAPS nor the
    /// fd), so the client asks again.
    pub(crate) fn region_info(&mut self, p: &[u8]) -> Handled {
        let req = RegionInfoWire::decode(p).map_err(|_| Errno::EINVAL)?;
        if req.argsz < RegionInfoWire::SIZE {
            return Err(Errno::EINVAL);
        }
        let info: RegionInfo = usize::try_from(req.index)
            .ok()
            .and_then(|i| self.regions.get(i))
            .cloned()
            .ok_or(Errno::EINVAL)?;
        let mut flags = 0;
        if info.size > 0 && info.readable {
            flags |= vfio::VFIO_REGION_INFO_FLAG_READ;
        }
        if info.size > 0 && info.writable {
            flags |= vfio::VFIO_REGION_INFO_FLAG_WRITE;
        }
        let mut reply = RegionInfoWire {
            argsz: RegionInfoWire::SIZE,
            flags,
            index: req.index,
            cap_offset: 0,
            size: info.size,
            offset: 0,
        };
        let mmap = info.mmap.filter(|_| self.caps.max_msg_fds >= 1);
        let Some(mmap) = mmap else {
            return Ok(Reply::with(reply.encode()));
        };
        let areas = if mmap.areas.is_empty() {
            vec![(0, info.size)]
        } else {
            mmap.areas
        };
        let cap = encode_sparse_mmap_cap(&areas);
        let needed = usize::try_from(RegionInfoWire::SIZE)
            .ok()
            .and_then(|s| s.checked_add(cap.len()))
            .and_then(|s| u32::try_from(s).ok())
            .ok_or(Errno::EINVAL)?;
        reply.argsz = needed;
        reply.offset = mmap.fd_offset;
        reply.flags |= vfio::VFIO_REGION_INFO_FLAG_MMAP;
        if req.argsz < needed {
            return Ok(Reply::with(reply.encode()));
        }
        reply.flags |= vfio::VFIO_REGION_INFO_FLAG_CAPS;
        reply.cap_offset = RegionInfoWire::SIZE;
        let mut payload = reply.encode();
        payload.extend_from_slice(&cap);
        Ok(Reply {
            payload,
            fd: Some(mmap.fd),
        })
    }

    /// REGION_READ: reply with the fixed part echoed and the data.
    pub(crate) fn region_read(&mut self, p: &[u8]) -> Handled {
        let (access, _) = RegionAccess::decode(p).map_err(|_| Errno::EINVAL)?;
        self.checked_access(access.region, access.offset, access.count, Dir::Read)?;
        let len = usize::try_from(access.count).map_err(|_| Errno::EINVAL)?;
        let mut data = vec![0u8; len];
        self.model()
            .region_read(access.region, access.offset, &mut data)
            .map_err(Errno::from_model)?;
        trace!(
            "{}: read region {} {:#x}+{} -> {:02x?}",
            self.name,
            access.region,
            access.offset,
            access.count,
            head(&data)
        );
        Ok(Reply::with(access.encode(&data)))
    }

    /// REGION_WRITE: the data must be exactly `count` bytes.
    pub(crate) fn region_write(&mut self, p: &[u8]) -> Handled {
        let (access, data) = RegionAccess::decode(p).map_err(|_| Errno::EINVAL)?;
        if usize::try_from(access.count).ok() != Some(data.len()) {
            client_warn!(
                self.warn,
                self.name,
                "REGION_WRITE count {} but {} data bytes",
                access.count,
                data.len()
            );
            return Err(Errno::EINVAL);
        }
        self.checked_access(access.region, access.offset, access.count, Dir::Write)?;
        trace!(
            "{}: write region {} {:#x}+{} <- {:02x?}",
            self.name,
            access.region,
            access.offset,
            access.count,
            head(data)
        );
        self.model()
            .region_write(access.region, access.offset, data)
            .map_err(Errno::from_model)?;
        Ok(Reply::with(access.encode(&[])))
    }

    /// REGION_WRITE_MULTI: up to 200 writes of at most 8 bytes each. All
    /// entries are checked before the first write; the writes then run in
    /// order and stop at the first the model refuses. The reply counts the
    /// writes done.
    pub(crate) fn region_write_multi(&mut self, p: &[u8]) -> Handled {
        let (count, mut r) = decode_write_multi(p).map_err(|_| Errno::EINVAL)?;
        let needed = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(WRITE_MULTI_ENTRY_SIZE));
        if count > MAX_WRITE_MULTI || needed != Some(r.rest().len()) {
            client_warn!(
                self.warn,
                self.name,
                "REGION_WRITE_MULTI of {count} writes with {} bytes of entries",
                r.rest().len()
            );
            return Err(Errno::EINVAL);
        }
        let mut entries = Vec::new();
        for _ in 0..count {
            let e = WriteMultiEntry::decode(&mut r).map_err(|_| Errno::EINVAL)?;
            if e.count > WRITE_MULTI_DATA_SIZE {
                return Err(Errno::EINVAL);
            }
            self.checked_access(e.region, e.offset, e.count, Dir::Write)?;
            entries.push(e);
        }
        let mut done = 0u64;
        let mut model = self.model();
        for e in &entries {
            let len = usize::try_from(e.count).unwrap_or(0);
            let data = e.data.get(..len).ok_or(Errno::EINVAL)?;
            model
                .region_write(e.region, e.offset, data)
                .map_err(Errno::from_model)?;
            done = done.saturating_add(1);
        }
        Ok(Reply::with(Writer::new().u64(done).finish()))
    }
}

/// The first bytes of an access, for trace logs.
fn head(data: &[u8]) -> &[u8] {
    data.get(..8).unwrap_or(data)
}
