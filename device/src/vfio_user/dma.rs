//! DMA map commands: DMA_MAP and DMA_UNMAP, applied to the client's
//! [`GuestRam`](crate::guest_memory::GuestRam).

use std::fs::File;
use std::os::fd::OwnedFd;

use log::debug;

use super::protocol::{
    DmaMap, DmaUnmap, DMA_MAP_FLAG_READ, DMA_MAP_FLAG_WRITE, DMA_UNMAP_FLAG_ALL,
    DMA_UNMAP_FLAG_GET_DIRTY_BITMAP,
};
use super::ratelimit::client_warn;
use super::session::{Errno, Handled, Reply, Session};
use crate::guest_memory::DmaMapRequest;

impl Session<'_, '_, '_> {
    /// DMA_MAP: zero or one fd; READ/WRITE flags only. Overlaps fail with
    /// EEXIST. The model is told through `dma_changed`.
    pub(crate) fn dma_map(&mut self, p: &[u8], fds: Vec<OwnedFd>) -> Handled {
        let req = DmaMap::decode(p).map_err(|_| Errno::EINVAL)?;
        if fds.len() > 1 {
            client_warn!(self.warn, self.name, "DMA_MAP with {} fds", fds.len());
            return Err(Errno::EINVAL);
        }
        if req.flags & !(DMA_MAP_FLAG_READ | DMA_MAP_FLAG_WRITE) != 0 {
            client_warn!(
                self.warn,
                self.name,
                "DMA_MAP flags {:#x} unsupported",
                req.flags
            );
            return Err(Errno::EINVAL);
        }
        let fd = fds.into_iter().next().map(File::from);
        let has_fd = fd.is_some();
        let map = DmaMapRequest {
            addr: req.address,
            size: req.size,
            file_offset: req.offset,
            readable: req.flags & DMA_MAP_FLAG_READ != 0,
            writable: req.flags & DMA_MAP_FLAG_WRITE != 0,
            fd,
        };
        self.ram.map(map).map_err(|e| {
            client_warn!(self.warn, self.name, "DMA_MAP refused: {e}");
            Errno(e.errno())
        })?;
        debug!(
            "{}: DMA map {:#x}+{:#x} flags {:#x} {}",
            self.name,
            req.address,
            req.size,
            req.flags,
            if has_fd { "with fd" } else { "without fd" }
        );
        self.model().dma_changed();
        Ok(Reply::empty())
    }

    /// DMA_UNMAP of exactly one earlier map, or of all with flag bit 1 (then
    /// address and size must be 0). The reply echoes the request.
    pub(crate) fn dma_unmap(&mut self, p: &[u8]) -> Handled {
        let req = DmaUnmap::decode(p).map_err(|_| Errno::EINVAL)?;
        if req.flags & DMA_UNMAP_FLAG_GET_DIRTY_BITMAP != 0 {
            return Err(Errno::ENOTSUP);
        }
        if req.flags & !DMA_UNMAP_FLAG_ALL != 0 {
            client_warn!(
                self.warn,
                self.name,
                "DMA_UNMAP flags {:#x} unsupported",
                req.flags
            );
            return Err(Errno::EINVAL);
        }
        if req.flags & DMA_UNMAP_FLAG_ALL != 0 {
            if req.address != 0 || req.size != 0 {
                return Err(Errno::EINVAL);
            }
            let n = self.ram.unmap_all();
            debug!("{}: DMA unmap all ({n} maps)", self.name);
        } else {
            self.ram.unmap(req.address, req.size).map_err(|e| {
                client_warn!(self.warn, self.name, "DMA_UNMAP refused: {e}");
                Errno(e.errno())
            })?;
            debug!(
                "{}: DMA unmap {:#x}+{:#x}",
                self.name, req.address, req.size
            );
        }
        self.model().dma_changed();
        let payload = if req.argsz >= DmaUnmap::SIZE {
            DmaUnmap {
                argsz: DmaUnmap::SIZE,
                ..req
            }
            .encode()
        } else {
            Vec::new()
        };
        Ok(Reply::with(payload))
    }
}
