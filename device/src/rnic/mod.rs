//! One vrnic device: its identity, its BARs and config space, and the state behind them.
//! `RnicModel` is what the vfio-user server drives; the data path reaches the same state
//! through the fabric.

pub mod doorbells;
pub mod irqs;
pub mod regs;

use crate::admin;
use crate::datapath::Waker;
use crate::guest_memory::{GuestRam, RamSnapshot};
use crate::objects::Objects;
use crate::pci::{ConfigSpace, ConfigWrite, PciIds};
use crate::vfio_user::model::{irq_index, region_index, DeviceModel, RegionInfo, RegionMmap};
use doorbells::DoorbellBar;
use irqs::Irqs;
use regs::{RegEffect, Registers};
use std::sync::{Arc, Mutex, MutexGuard};
use vmm_sys_util::eventfd::EventFd;
use vrnic_hw::{
    bar0, Mtu, BAR_CTRL, BAR_CTRL_SIZE, BAR_DB, BAR_DB_SIZE, BAR_KICK, BAR_KICK_SIZE, DB_PAGE_SIZE,
    MSIX_TABLE_OFF, MSIX_VECTORS,
};

/// What a device is, as configured on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RnicConfig {
    pub name: String,
    pub socket: std::path::PathBuf,
    pub lid: u16,
    pub ids: PciIds,
}

pub struct Rnic {
    pub config: RnicConfig,
    /// Node GUID (derived from the LID so it is stable across runs).
    pub node_guid: u64,
    pub doorbells: DoorbellBar,
    state: Mutex<RnicState>,
    waker: Arc<Waker>,
}

/// Everything that changes, behind one lock: the control path (vfio-user thread) and the
/// data path (poller) both take it.
pub struct RnicState {
    /// Guest memory of the connected VMM, if any.
    pub ram: Option<GuestRam>,
    pub config_space: ConfigSpace,
    pub regs: Registers,
    pub admin: Option<admin::AdminQueue>,
    pub irqs: Irqs,
    pub objects: Objects,
}

impl RnicState {
    /// A snapshot of guest memory, or None without a VMM.
    pub fn mem(&self) -> Option<RamSnapshot> {
        self.ram.as_ref().map(GuestRam::snapshot)
    }
}

impl Rnic {
    pub fn new(config: RnicConfig, waker: Arc<Waker>) -> std::io::Result<Arc<Rnic>> {
        let state = RnicState {
            ram: None,
            config_space: ConfigSpace::new(config.ids),
            regs: Registers::default(),
            admin: None,
            irqs: Irqs::default(),
            objects: Objects::new(),
        };
        Ok(Arc::new(Rnic {
            node_guid: 0x0002_c903_0000_0000 | u64::from(config.lid),
            config,
            doorbells: DoorbellBar::new()?,
            state: Mutex::new(state),
            waker,
        }))
    }

    pub fn lock(&self) -> MutexGuard<'_, RnicState> {
        // A panic elsewhere must not take every later access down with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn lid(&self) -> u16 {
        self.config.lid
    }

    fn port_info(&self) -> u32 {
        u32::from(self.config.lid)
            | (u32::from(u8::from(Mtu::Size4096)) << bar0::PORT_INFO_MTU_SHIFT)
    }

    /// Destroys every object and returns registers and doorbells to their reset values.
    pub fn reset(&self, st: &mut RnicState) {
        log::debug!("{}: reset", self.name());
        st.objects = Objects::new();
        st.admin = None;
        st.regs = Registers::default();
        self.doorbells.clear_all();
    }

    /// A reset of the whole function (vfio DEVICE_RESET, or an FLR the guest initiated):
    /// the device reset plus config space. Interrupt routing stays: MSI-X is emulated by
    /// the VMM, which sets or clears the eventfds itself.
    fn reset_function(&self, st: &mut RnicState) {
        self.reset(st);
        st.config_space.reset();
    }

    fn config_write(&self, offset: u64, data: &[u8]) -> Result<(), i32> {
        let mut st = self.lock();
        if st.config_space.write(offset, data)? == ConfigWrite::FunctionLevelReset {
            log::info!("{}: function level reset", self.name());
            self.reset_function(&mut st);
        }
        Ok(())
    }

    fn bar0_read(&self, st: &RnicState, offset: u64, data: &mut [u8]) -> Result<(), i32> {
        if offset >= u64::from(MSIX_TABLE_OFF) {
            // MSI-X table (emulated by QEMU) and PBA: nothing pending to report.
            data.fill(0);
            return Ok(());
        }
        let value = st.regs.read(offset & !3, self.port_info());
        let shift = (offset & 3) * 8;
        let bytes = (value >> shift).to_le_bytes();
        let n = data.len().min(4 - (offset & 3) as usize);
        data[..n].copy_from_slice(&bytes[..n]);
        data[n..].fill(0);
        log::trace!("{}: BAR0 read {offset:#x} -> {value:#x}", self.name());
        Ok(())
    }

    fn bar0_write(&self, st: &mut RnicState, offset: u64, data: &[u8]) -> Result<(), i32> {
        if offset >= u64::from(MSIX_TABLE_OFF) {
            return Ok(());
        }
        let Ok(bytes) = <[u8; 4]>::try_from(data) else {
            log::warn!(
                "{}: BAR0 write of {} bytes at {offset:#x} ignored: registers take 32-bit writes",
                self.name(),
                data.len()
            );
            return Err(libc::EINVAL);
        };
        if !offset.is_multiple_of(4) {
            return Err(libc::EINVAL);
        }
        let value = u32::from_le_bytes(bytes);
        log::trace!("{}: BAR0 write {offset:#x} <- {value:#x}", self.name());
        match st.regs.write(offset, value) {
            RegEffect::None => {}
            RegEffect::Enable => admin::enable(self, st),
            RegEffect::Disable | RegEffect::Reset => self.reset(st),
            RegEffect::AdminDoorbell(pi) => {
                admin::doorbell(self, st, pi);
                // New QPs or CQs may have appeared: let the poller look.
                self.waker.wake();
            }
        }
        Ok(())
    }
}

/// The vfio-user face of a device.
pub struct RnicModel(pub Arc<Rnic>);

impl DeviceModel for RnicModel {
    fn region_info(&self, index: u32) -> Option<RegionInfo> {
        let rw = |size: u32| RegionInfo {
            size: u64::from(size),
            readable: true,
            writable: true,
            mmap: None,
        };
        match index {
            i if i == BAR_CTRL => Some(rw(BAR_CTRL_SIZE)),
            i if i == BAR_DB => Some(RegionInfo {
                mmap: Some(RegionMmap {
                    fd: self.0.doorbells.fd(),
                    fd_offset: 0,
                    areas: vec![(0, u64::from(BAR_DB_SIZE))],
                }),
                ..rw(BAR_DB_SIZE)
            }),
            i if i == BAR_KICK => Some(rw(BAR_KICK_SIZE)),
            region_index::CONFIG => Some(rw(vrnic_hw::PCI_CONFIG_SIZE)),
            _ => None,
        }
    }

    fn num_regions(&self) -> u32 {
        region_index::NUM_PCI_REGIONS
    }

    fn irq_count(&self, index: u32) -> u32 {
        match index {
            irq_index::MSIX => MSIX_VECTORS,
            _ => 0,
        }
    }

    fn region_read(&mut self, index: u32, offset: u64, data: &mut [u8]) -> Result<(), i32> {
        let rnic = &self.0;
        let st = rnic.lock();
        match index {
            i if i == BAR_CTRL => rnic.bar0_read(&st, offset, data),
            i if i == BAR_DB => rnic.doorbells.read(offset, data),
            i if i == BAR_KICK => {
                data.fill(0);
                Ok(())
            }
            region_index::CONFIG => st.config_space.read(offset, data),
            _ => Err(libc::EINVAL),
        }
    }

    fn region_write(&mut self, index: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        let rnic = &self.0;
        match index {
            i if i == BAR_CTRL => rnic.bar0_write(&mut rnic.lock(), offset, data),
            i if i == BAR_DB => {
                // Only when the VMM did not map the BAR: the same memory, plus a wake-up.
                rnic.doorbells.write(offset, data)?;
                rnic.waker.wake();
                Ok(())
            }
            i if i == BAR_KICK => {
                log::trace!(
                    "{}: kick from page {}",
                    rnic.name(),
                    offset / u64::from(DB_PAGE_SIZE)
                );
                rnic.waker.wake();
                Ok(())
            }
            region_index::CONFIG => rnic.config_write(offset, data),
            _ => Err(libc::EINVAL),
        }
    }

    fn set_irqs(&mut self, index: u32, start: u32, fds: Vec<Option<EventFd>>) -> Result<(), i32> {
        match index {
            irq_index::MSIX => self.0.lock().irqs.set(start, fds),
            _ if fds.iter().all(Option::is_none) => Ok(()),
            _ => Err(libc::EINVAL),
        }
    }

    fn reset(&mut self) {
        let rnic = &self.0;
        rnic.reset_function(&mut rnic.lock());
    }

    fn connected(&mut self, ram: GuestRam) {
        log::info!("{}: VMM connected", self.0.name());
        self.0.lock().ram = Some(ram);
    }

    fn disconnected(&mut self) {
        let rnic = &self.0;
        log::info!(
            "{}: VMM disconnected; dropping its objects, mappings and interrupts",
            rnic.name()
        );
        let mut st = rnic.lock();
        rnic.reset_function(&mut st);
        st.irqs.clear();
        st.ram = None;
    }
}
