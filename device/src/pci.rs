//! PCI configuration space of the device: registers plus a mask of the bits a guest may
//! write; every write goes through one masked store. Setting DevCtl "Initiate Function Level
//! Reset" is not stored: the write reports it and the device resets the function.

use vrnic_hw::{
    BAR_CTRL, BAR_CTRL_SIZE, BAR_DB, BAR_DB_SIZE, BAR_KICK, BAR_KICK_SIZE, MSIX_PBA_OFF,
    MSIX_TABLE_BAR, MSIX_TABLE_OFF, MSIX_VECTORS, PCI_CAP_MSIX_OFF, PCI_CAP_PCIE_OFF,
    PCI_CLASS_CODE, PCI_CONFIG_SIZE, PCI_REVISION,
};

/// The PCI IDs a device presents (defaults from the hw-spec, overridable per device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciIds {
    pub vendor: u16,
    pub device: u16,
    pub subsystem_vendor: u16,
    pub subsystem: u16,
}

impl Default for PciIds {
    fn default() -> Self {
        PciIds {
            vendor: vrnic_hw::PCI_VENDOR_ID as u16,
            device: vrnic_hw::PCI_DEVICE_ID as u16,
            subsystem_vendor: vrnic_hw::PCI_SUBSYSTEM_VENDOR_ID as u16,
            subsystem: vrnic_hw::PCI_SUBSYSTEM_ID as u16,
        }
    }
}

const CONFIG_SIZE: usize = PCI_CONFIG_SIZE as usize;
const COMMAND: usize = 0x04;
const STATUS: usize = 0x06;
const BAR0: usize = 0x10;
const CAP_PTR: usize = 0x34;
const CAP_ID_PCIE: u8 = 0x10;
const CAP_ID_MSIX: u8 = 0x11;
/// Command bits a guest may set: memory space, bus master, INTx disable.
const COMMAND_WRITABLE: u16 = 0x0002 | 0x0004 | 0x0400;
const STATUS_CAP_LIST: u16 = 0x0010;
/// PCIe capability: Device Capabilities and Device Control.
const PCIE_DEVCAP: usize = 0x04;
const PCIE_DEVCTL: usize = 0x08;
/// DevCap: role-based error reporting.
const DEVCAP_RBER: u32 = 1 << 15;
/// DevCap: Function Level Reset capability.
const DEVCAP_FLR: u32 = 1 << 28;
/// DevCtl: Initiate Function Level Reset (write 1; always reads 0).
const DEVCTL_INITIATE_FLR: u16 = 1 << 15;

/// What a config space write asks of the device besides storing bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigWrite {
    Stored,
    /// The write set DevCtl "Initiate Function Level Reset": the device must reset the
    /// function (everything, config space included) before the write completes.
    FunctionLevelReset,
}

pub struct ConfigSpace {
    bytes: Vec<u8>,
    writable: Vec<u8>,
    reset_bytes: Vec<u8>,
}

impl ConfigSpace {
    pub fn new(ids: PciIds) -> Self {
        let mut c = ConfigSpace {
            bytes: vec![0; CONFIG_SIZE],
            writable: vec![0; CONFIG_SIZE],
            reset_bytes: Vec::new(),
        };
        c.put16(0x00, ids.vendor);
        c.put16(0x02, ids.device);
        c.put16(STATUS, STATUS_CAP_LIST);
        c.bytes[0x08] = PCI_REVISION as u8;
        c.put(0x09, &PCI_CLASS_CODE.to_le_bytes()[..3]);
        c.put16(0x2C, ids.subsystem_vendor);
        c.put16(0x2E, ids.subsystem);
        c.bytes[CAP_PTR] = PCI_CAP_PCIE_OFF as u8;
        c.mask16(COMMAND, COMMAND_WRITABLE);
        for (bar, size) in [
            (BAR_CTRL, BAR_CTRL_SIZE),
            (BAR_DB, BAR_DB_SIZE),
            (BAR_KICK, BAR_KICK_SIZE),
        ] {
            let off = BAR0 + 4 * bar as usize;
            // Memory BAR, 64-bit (type 0b10), not prefetchable.
            c.put32(off, 0x4);
            c.mask32(off, !(size - 1) & !0xF);
            c.mask32(off + 4, u32::MAX);
        }
        // PCI Express capability v2, Endpoint; max payload 128 bytes; link x1 2.5 GT/s.
        let pcie = PCI_CAP_PCIE_OFF as usize;
        c.bytes[pcie] = CAP_ID_PCIE;
        c.bytes[pcie + 1] = PCI_CAP_MSIX_OFF as u8;
        c.put16(pcie + 0x02, 0x0002);
        c.put32(pcie + PCIE_DEVCAP, DEVCAP_RBER | DEVCAP_FLR);
        // DevCtl: everything but Initiate FLR, which triggers and never sticks.
        c.mask16(pcie + PCIE_DEVCTL, !DEVCTL_INITIATE_FLR);
        c.put32(pcie + 0x0C, 0x0000_0011); // LinkCap: x1, 2.5 GT/s
        c.put16(pcie + 0x12, 0x0011); // LinkSta: x1, 2.5 GT/s
        c.mask16(pcie + 0x28, 0xFFFF); // DevCtl2

        // MSI-X: table and PBA in BAR0 (QEMU emulates both; PBA reads reach us).
        let msix = PCI_CAP_MSIX_OFF as usize;
        c.bytes[msix] = CAP_ID_MSIX;
        c.bytes[msix + 1] = 0;
        c.put16(msix + 0x02, (MSIX_VECTORS - 1) as u16);
        c.mask16(msix + 0x02, 0xC000); // enable, function mask
        c.put32(msix + 0x04, MSIX_TABLE_OFF | MSIX_TABLE_BAR);
        c.put32(msix + 0x08, MSIX_PBA_OFF | MSIX_TABLE_BAR);
        c.reset_bytes = c.bytes.clone();
        c
    }

    fn put(&mut self, off: usize, data: &[u8]) {
        self.bytes[off..off + data.len()].copy_from_slice(data);
    }
    fn put16(&mut self, off: usize, v: u16) {
        self.put(off, &v.to_le_bytes());
    }
    fn put32(&mut self, off: usize, v: u32) {
        self.put(off, &v.to_le_bytes());
    }
    fn mask16(&mut self, off: usize, v: u16) {
        self.writable[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn mask32(&mut self, off: usize, v: u32) {
        self.writable[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    pub fn read(&self, offset: u64, data: &mut [u8]) -> Result<(), i32> {
        let range = range(offset, data.len())?;
        data.copy_from_slice(&self.bytes[range]);
        Ok(())
    }

    /// A guest write: only writable bits change. Reports a write that initiates a Function
    /// Level Reset (the caller resets the device, this config space included).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<ConfigWrite, i32> {
        let range = range(offset, data.len())?;
        let flr_byte = PCI_CAP_PCIE_OFF as usize + PCIE_DEVCTL + 1;
        let flr_bit = (DEVCTL_INITIATE_FLR >> 8) as u8;
        let mut effect = ConfigWrite::Stored;
        for (i, new) in range.zip(data) {
            let mask = self.writable[i];
            self.bytes[i] = (self.bytes[i] & !mask) | (new & mask);
            if i == flr_byte && new & flr_bit != 0 {
                effect = ConfigWrite::FunctionLevelReset;
            }
        }
        Ok(effect)
    }

    pub fn reset(&mut self) {
        self.bytes.copy_from_slice(&self.reset_bytes);
    }
}

fn range(offset: u64, len: usize) -> Result<std::ops::Range<usize>, i32> {
    let start = usize::try_from(offset).map_err(|_| libc::EINVAL)?;
    let end = start.checked_add(len).ok_or(libc::EINVAL)?;
    if end > CONFIG_SIZE {
        return Err(libc::EINVAL);
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read32(c: &ConfigSpace, off: u64) -> u32 {
        let mut b = [0; 4];
        c.read(off, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    #[test]
    fn bar_sizing_reads_back_the_size_mask() {
        let mut c = ConfigSpace::new(PciIds::default());
        c.write(0x18, &u32::MAX.to_le_bytes()).unwrap();
        assert_eq!(read32(&c, 0x18), !(BAR_DB_SIZE - 1) & !0xF | 0x4);
        c.reset();
        assert_eq!(read32(&c, 0x18), 0x4);
    }

    fn read16(c: &ConfigSpace, off: usize) -> u16 {
        let mut b = [0; 2];
        c.read(off as u64, &mut b).unwrap();
        u16::from_le_bytes(b)
    }

    #[test]
    fn flr_is_advertised_and_initiating_it_is_reported_and_never_sticks() {
        let mut c = ConfigSpace::new(PciIds::default());
        let devcap = PCI_CAP_PCIE_OFF as u64 + PCIE_DEVCAP as u64;
        let devctl = PCI_CAP_PCIE_OFF as usize + PCIE_DEVCTL;
        assert_ne!(read32(&c, devcap) & DEVCAP_FLR, 0, "DevCap advertises FLR");

        // Ordinary DevCtl bits are stored and ask for nothing.
        assert_eq!(
            c.write(devctl as u64, &0x0010u16.to_le_bytes()),
            Ok(ConfigWrite::Stored)
        );
        assert_eq!(read16(&c, devctl), 0x0010);
        // Read-modify-write with Initiate FLR, as Linux's pcie_flr() does, in every width.
        for (off, data) in [
            (devctl, vec![0x10, 0x80]),
            (devctl + 1, vec![0x80]),
            (devctl - 4, [0u8, 0, 0, 0, 0x10, 0x80].to_vec()),
        ] {
            assert_eq!(
                c.write(off as u64, &data),
                Ok(ConfigWrite::FunctionLevelReset),
                "write of {data:x?} at {off:#x}"
            );
            assert_eq!(read16(&c, devctl) & DEVCTL_INITIATE_FLR, 0, "never sticks");
        }
        // Writing the low byte alone or a neighbouring register never triggers it.
        assert_eq!(c.write(devctl as u64, &[0xff]), Ok(ConfigWrite::Stored));
        assert_eq!(
            c.write(devctl as u64 + 2, &[0xff, 0xff]),
            Ok(ConfigWrite::Stored)
        );
    }

    #[test]
    fn identity_is_read_only_and_out_of_range_access_fails() {
        let mut c = ConfigSpace::new(PciIds::default());
        c.write(0, &[0xff, 0xff, 0xff, 0xff]).unwrap();
        assert_eq!(
            read32(&c, 0),
            (vrnic_hw::PCI_DEVICE_ID << 16) | vrnic_hw::PCI_VENDOR_ID
        );
        assert_eq!(read32(&c, 0x08) >> 8, PCI_CLASS_CODE);
        assert_eq!(c.read(4094, &mut [0; 4]), Err(libc::EINVAL));
        assert_eq!(c.write(u64::MAX, &[0]), Err(libc::EINVAL));
    }
}
