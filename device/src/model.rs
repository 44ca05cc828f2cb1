//! The vfio-user face of a device: what the vfio-user server drives. BAR accesses, resets
//! and interrupt routing arrive here and go to the device state, the admin engine or the
//! poller.

use crate::admin;
use crate::guest_memory::GuestRam;
use crate::pci::ConfigWrite;
use crate::rnic::contract;
use crate::rnic::regs::RegEffect;
use crate::rnic::Rnic;
use crate::vfio_user::model::{irq_index, region_index, DeviceModel, RegionInfo, RegionMmap};
use std::sync::Arc;
use vmm_sys_util::eventfd::EventFd;
use vrnic_hw::{
    ContractRule, BAR_CTRL, BAR_CTRL_SIZE, BAR_DB, BAR_DB_SIZE, BAR_KICK, BAR_KICK_SIZE,
    DB_PAGE_SIZE, MSIX_TABLE_OFF, MSIX_VECTORS,
};

pub struct RnicModel(pub Arc<Rnic>);

impl RnicModel {
    /// Resets the device or function and returns once no transfer can touch guest memory
    /// on behalf of the objects that went away.
    fn reset_device(&self, function: bool) {
        {
            let mut st = self.0.lock();
            if function {
                self.0.reset_function(&mut st);
            } else {
                self.0.reset(&mut st);
            }
        }
        self.0.fence.wait();
    }

    fn bar0_write(&self, offset: u64, data: &[u8]) -> Result<(), i32> {
        let rnic = &self.0;
        if offset >= u64::from(MSIX_TABLE_OFF) {
            return Ok(());
        }
        let Ok(bytes) = <[u8; 4]>::try_from(data) else {
            rnic.lock().warn(
                rnic,
                format_args!(
                    "BAR0 write of {} bytes at {offset:#x} ignored: registers take 32-bit writes",
                    data.len()
                ),
            );
            return Err(libc::EINVAL);
        };
        if !offset.is_multiple_of(4) {
            return Err(libc::EINVAL);
        }
        let value = u32::from_le_bytes(bytes);
        log::trace!("{}: BAR0 write {offset:#x} <- {value:#x}", rnic.name());
        if !contract::check_reg_write(rnic, &mut rnic.lock(), offset, value) {
            return Ok(());
        }
        let effect = rnic.lock().regs.write(offset, value);
        match effect {
            RegEffect::None => {}
            RegEffect::Ignored => contract::report(
                rnic,
                &mut rnic.lock(),
                ContractRule::RegNotWritable,
                format_args!(
                    "BAR0 write of {value:#x} to read-only or undefined offset {offset:#x} ignored"
                ),
            ),
            RegEffect::Enable => admin::enable(rnic, &mut rnic.lock()),
            RegEffect::Disable | RegEffect::Reset => self.reset_device(false),
            RegEffect::AdminDoorbell(pi) => {
                admin::doorbell(rnic, pi);
                // New QPs or CQs may have appeared: let the poller look.
                rnic.wake();
            }
        }
        Ok(())
    }
}

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
        match index {
            i if i == BAR_CTRL => rnic.bar0_read(&rnic.lock(), offset, data),
            i if i == BAR_DB => rnic.doorbells.read(offset, data),
            i if i == BAR_KICK => {
                data.fill(0);
                Ok(())
            }
            region_index::CONFIG => rnic.lock().config_space.read(offset, data),
            _ => Err(libc::EINVAL),
        }
    }

    fn region_write(&mut self, index: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        let rnic = &self.0;
        match index {
            i if i == BAR_CTRL => self.bar0_write(offset, data),
            i if i == BAR_DB => {
                // Only when the VMM did not map the BAR: the same memory, plus a wake-up.
                rnic.doorbells.write(offset, data)?;
                rnic.wake();
                Ok(())
            }
            i if i == BAR_KICK => {
                log::trace!(
                    "{}: kick from page {}",
                    rnic.name(),
                    offset / u64::from(DB_PAGE_SIZE)
                );
                rnic.wake();
                Ok(())
            }
            region_index::CONFIG => {
                let mut st = rnic.lock();
                if st.config_space.write(offset, data)? == ConfigWrite::FunctionLevelReset {
                    st.log(rnic, log::Level::Info, format_args!("function level reset"));
                    drop(st);
                    self.reset_device(true);
                }
                Ok(())
            }
            _ => Err(libc::EINVAL),
        }
    }

    fn set_irqs(&mut self, index: u32, start: u32, fds: Vec<Option<EventFd>>) -> Result<(), i32> {
        match index {
            irq_index::MSIX => self.0.irq_lines.set(start, fds),
            _ if fds.iter().all(Option::is_none) => Ok(()),
            _ => Err(libc::EINVAL),
        }
    }

    fn reset(&mut self) {
        self.reset_device(true);
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
        self.reset_device(true);
        rnic.irq_lines.clear();
        rnic.lock().ram = None;
    }
}
