//! The interface between the vfio-user server and a device model.

use std::os::fd::RawFd;

use vmm_sys_util::eventfd::EventFd;

use crate::guest_memory::GuestRam;

/// Region indexes of a PCI device (`VFIO_PCI_*_REGION_INDEX`).
pub mod region_index {
    /// BAR0; BAR1..BAR5 follow as 1..=5.
    pub const BAR0: u32 = 0;
    /// Expansion ROM.
    pub const ROM: u32 = 6;
    /// PCI configuration space.
    pub const CONFIG: u32 = 7;
    /// Legacy VGA.
    pub const VGA: u32 = 8;
    /// Number of standard PCI regions; QEMU wants at least this many.
    pub const NUM_PCI_REGIONS: u32 = 9;
}

/// IRQ indexes of a PCI device (`VFIO_PCI_*_IRQ_INDEX`).
pub mod irq_index {
    /// Legacy INTx.
    pub const INTX: u32 = 0;
    /// MSI.
    pub const MSI: u32 = 1;
    /// MSI-X.
    pub const MSIX: u32 = 2;
    /// AER error notification (not exposed by the server).
    pub const ERR: u32 = 3;
    /// Device request (not exposed by the server).
    pub const REQ: u32 = 4;
}

/// Shape of one region. `size == 0` means the region is absent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegionInfo {
    /// Size in bytes (a power of two for BARs).
    pub size: u64,
    /// REGION_READ is allowed.
    pub readable: bool,
    /// REGION_WRITE is allowed.
    pub writable: bool,
    /// Memory QEMU may mmap, if any.
    pub mmap: Option<RegionMmap>,
}

/// Memory backing a region that the client may mmap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionMmap {
    /// The fd, owned by the model and valid as long as the model lives.
    pub fd: RawFd,
    /// Offset of the region's first byte in `fd`.
    pub fd_offset: u64,
    /// Areas `(offset, size)` within the region the client may mmap; the rest
    /// stays trapped (REGION_READ/WRITE). Empty means the whole region.
    pub areas: Vec<(u64, u64)>,
}

/// A device served over vfio-user.
///
/// The server calls these methods from its thread while holding the model's
/// mutex, one message at a time. Offsets and lengths passed to
/// `region_read`/`region_write` are already checked against `region_info`
/// (size and permission) and are at most 1 MiB long.
pub trait DeviceModel: Send {
    /// Regions by vfio-user index: 0..=5 BARs, 6 ROM, 7 config space, 8 VGA.
    /// `None` or size 0 = absent. Asked once per client connection.
    fn region_info(&self, index: u32) -> Option<RegionInfo>;

    /// Number of regions (QEMU wants at least 9).
    fn num_regions(&self) -> u32;

    /// Number of vectors of an IRQ index: 0 INTx, 1 MSI, 2 MSI-X. The server
    /// exposes exactly these three indexes.
    fn irq_count(&self, index: u32) -> u32;

    /// Trapped read of `data.len()` bytes at `offset` in region `index`.
    /// Errors are errno values sent back to the client.
    fn region_read(&mut self, index: u32, offset: u64, data: &mut [u8]) -> Result<(), i32>;

    /// Trapped write of `data` at `offset` in region `index`. Posted (MMIO)
    /// writes get no reply: an error is only logged.
    fn region_write(&mut self, index: u32, offset: u64, data: &[u8]) -> Result<(), i32>;

    /// Interrupt eventfds for IRQ `index`: `fds[i]` is the eventfd for vector
    /// `start + i`, `None` to disable that vector. Each is a real eventfd,
    /// already non-blocking: a write fails with `EAGAIN` (the counter is
    /// saturated, an interrupt is pending) rather than blocking. The range is checked
    /// against `irq_count`. The server translates the protocol's forms:
    /// "count 0, DATA_NONE" (disable all) becomes `None` for every vector;
    /// "DATA_EVENTFD without fds" (QEMU's first MSI-X message) becomes `None`
    /// for each vector in the range.
    fn set_irqs(&mut self, index: u32, start: u32, fds: Vec<Option<EventFd>>) -> Result<(), i32>;

    /// DEVICE_RESET: return to the power-on state. DMA maps and interrupt
    /// eventfds stay (the client re-sends them only on reconnect).
    fn reset(&mut self);

    /// The DMA map table changed (a map or an unmap succeeded). The model
    /// keeps the [`GuestRam`] it got in [`connected`](Self::connected); this
    /// is only a notification. It comes after an unmap has returned, and an
    /// unmap waits for every snapshot holding the range: a model must never
    /// keep a snapshot of the client's memory across messages (cached until
    /// this call, it would make the unmap wait forever; see the contract on
    /// [`GuestRam`]). Default: nothing.
    fn dma_changed(&mut self) {}

    /// A client connected: the handle through which the model reaches guest
    /// memory from now on. Called before the client's first message.
    fn connected(&mut self, ram: GuestRam);

    /// The client went away: drop every mapping, eventfd and object of that
    /// client so a new client can connect. The server has already emptied the
    /// `GuestRam` table, after waiting for every snapshot of it to be dropped.
    fn disconnected(&mut self);
}
