//! BAR0 registers: values, access types and the side effects of writes.

use vrnic_hw::{bar0, RegAccess};

/// The writable and device-updated registers of BAR0; read-only limits come from the spec.
#[derive(Debug, Default, Clone)]
pub struct Registers {
    pub dev_ctrl: u32,
    pub dev_status: u32,
    pub fatal_code: u32,
    /// FATAL_CODE CONTRACT: the rule broken.
    pub fatal_detail: u32,
    pub aq_base_lo: u32,
    pub aq_base_hi: u32,
    pub acq_base_lo: u32,
    pub acq_base_hi: u32,
    pub aq_depth_log2: u32,
    pub driver_version: u32,
}

/// What a register write asks the device to do beyond storing a value.
#[derive(Debug, PartialEq, Eq)]
pub enum RegEffect {
    None,
    Enable,
    Disable,
    Reset,
    AdminDoorbell(u32),
    /// A write to a read-only or undefined offset: nothing changed (the caller warns).
    Ignored,
}

impl Registers {
    /// Value of the register at `offset`; `port_info` is the device's configured PORT_INFO.
    pub fn read(&self, offset: u64, port_info: u32) -> u32 {
        let readable = bar0::masks(offset).map_or(0, |m| m.readable);
        let value = match offset {
            bar0::PORT_INFO => port_info,
            _ => match self.stored(offset) {
                Some(value) => value,
                None => match bar0::REGISTERS.iter().find(|r| r.1 == offset) {
                    Some((_, _, RegAccess::Ro, reset)) => *reset,
                    _ => 0,
                },
            },
        };
        value & readable
    }

    /// Applies a guest write through the register's generated masks (from the spec's field
    /// access types): writable bits are stored, rw1c bits written as 1 are cleared, rw1s
    /// bits trigger their action; read-only and unknown offsets are ignored (and logged).
    pub fn write(&mut self, offset: u64, value: u32) -> RegEffect {
        let masks = match bar0::masks(offset) {
            Some(masks) if masks.is_writable() => masks,
            _ => return RegEffect::Ignored,
        };
        let triggered = masks.triggered(value);
        match offset {
            bar0::DEV_CTRL if triggered & bar0::DEV_CTRL_RESET_MASK != 0 => {
                return RegEffect::Reset
            }
            bar0::AQ_DOORBELL => return RegEffect::AdminDoorbell(value & masks.writable),
            _ => {}
        }
        let Some(register) = self.storage(offset) else {
            return RegEffect::None;
        };
        let was = *register;
        *register = masks.apply(was, value);
        let now = *register;
        match offset {
            bar0::DEV_CTRL => {
                let enable = bar0::DEV_CTRL_ENABLE_MASK;
                match (was & enable != 0, now & enable != 0) {
                    (false, true) => RegEffect::Enable,
                    (true, false) => RegEffect::Disable,
                    _ => RegEffect::None,
                }
            }
            _ => RegEffect::None,
        }
    }

    /// The value of a register this struct holds.
    fn stored(&self, offset: u64) -> Option<u32> {
        Some(match offset {
            bar0::DEV_CTRL => self.dev_ctrl,
            bar0::DEV_STATUS => self.dev_status,
            bar0::FATAL_CODE => self.fatal_code,
            bar0::FATAL_DETAIL => self.fatal_detail,
            bar0::AQ_BASE_LO => self.aq_base_lo,
            bar0::AQ_BASE_HI => self.aq_base_hi,
            bar0::ACQ_BASE_LO => self.acq_base_lo,
            bar0::ACQ_BASE_HI => self.acq_base_hi,
            bar0::AQ_DEPTH_LOG2 => self.aq_depth_log2,
            bar0::DRIVER_VERSION => self.driver_version,
            _ => return None,
        })
    }

    /// Where a guest write to `offset` is stored (the device-maintained DEV_STATUS and
    /// FATAL_CODE are read-only and have none).
    fn storage(&mut self, offset: u64) -> Option<&mut u32> {
        Some(match offset {
            bar0::DEV_CTRL => &mut self.dev_ctrl,
            bar0::AQ_BASE_LO => &mut self.aq_base_lo,
            bar0::AQ_BASE_HI => &mut self.aq_base_hi,
            bar0::ACQ_BASE_LO => &mut self.acq_base_lo,
            bar0::ACQ_BASE_HI => &mut self.acq_base_hi,
            bar0::AQ_DEPTH_LOG2 => &mut self.aq_depth_log2,
            bar0::DRIVER_VERSION => &mut self.driver_version,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_their_reset_values_and_ignore_writes() {
        let mut r = Registers::default();
        assert_eq!(r.read(bar0::VERSION, 0), bar0::VERSION_RESET);
        assert_eq!(r.write(bar0::MAX_QP, 7), RegEffect::Ignored);
        assert_eq!(r.read(bar0::MAX_QP, 0), bar0::MAX_QP_RESET);
        assert_eq!(r.read(0xFFC, 0), 0);
    }

    #[test]
    fn dev_ctrl_reports_enable_disable_and_reset() {
        let mut r = Registers::default();
        assert_eq!(r.write(bar0::DEV_CTRL, 1), RegEffect::Enable);
        assert_eq!(r.write(bar0::DEV_CTRL, 1), RegEffect::None);
        assert_eq!(r.write(bar0::DEV_CTRL, 0), RegEffect::Disable);
        assert_eq!(r.write(bar0::DEV_CTRL, 2), RegEffect::Reset);
        assert_eq!(r.write(bar0::AQ_DOORBELL, 5), RegEffect::AdminDoorbell(5));
    }

    #[test]
    fn dev_ctrl_stores_only_its_writable_bits() {
        let mut r = Registers::default();
        assert_eq!(r.write(bar0::DEV_CTRL, 0xFFFF_FFFD), RegEffect::Enable);
        assert_eq!(r.read(bar0::DEV_CTRL, 0), bar0::DEV_CTRL_ENABLE_MASK);
    }

    #[test]
    fn reset_wins_over_enable_and_is_not_stored() {
        let mut r = Registers::default();
        assert_eq!(r.write(bar0::DEV_CTRL, 0x3), RegEffect::Reset);
        assert_eq!(r.read(bar0::DEV_CTRL, 0), 0);
    }

    #[test]
    fn device_status_ignores_guest_writes_and_doorbell_reads_zero() {
        let mut r = Registers {
            dev_status: bar0::DEV_STATUS_READY_MASK,
            ..Registers::default()
        };
        assert_eq!(r.write(bar0::DEV_STATUS, 0), RegEffect::Ignored);
        assert_eq!(r.read(bar0::DEV_STATUS, 0), bar0::DEV_STATUS_READY_MASK);
        assert_eq!(r.write(bar0::AQ_DOORBELL, 9), RegEffect::AdminDoorbell(9));
        assert_eq!(r.read(bar0::AQ_DOORBELL, 0), 0);
    }

    #[test]
    fn admin_queue_registers_store_every_bit() {
        let mut r = Registers::default();
        assert_eq!(r.write(bar0::AQ_BASE_HI, 0xDEAD_BEEF), RegEffect::None);
        assert_eq!(r.read(bar0::AQ_BASE_HI, 0), 0xDEAD_BEEF);
        assert_eq!(r.aq_base_hi, 0xDEAD_BEEF);
    }
}
