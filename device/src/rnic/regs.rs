//! BAR0 registers: values, access types and the side effects of writes.

use vrnic_hw::{bar0, RegAccess};

/// The writable and device-updated registers of BAR0; read-only limits come from the spec.
#[derive(Debug, Default, Clone)]
pub struct Registers {
    pub dev_ctrl: u32,
    pub dev_status: u32,
    pub fatal_code: u32,
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
}

impl Registers {
    /// Value of the register at `offset`; `port_info` is the device's configured PORT_INFO.
    pub fn read(&self, offset: u64, port_info: u32) -> u32 {
        match offset {
            bar0::DEV_CTRL => self.dev_ctrl,
            bar0::DEV_STATUS => self.dev_status,
            bar0::FATAL_CODE => self.fatal_code,
            bar0::AQ_BASE_LO => self.aq_base_lo,
            bar0::AQ_BASE_HI => self.aq_base_hi,
            bar0::ACQ_BASE_LO => self.acq_base_lo,
            bar0::ACQ_BASE_HI => self.acq_base_hi,
            bar0::AQ_DEPTH_LOG2 => self.aq_depth_log2,
            bar0::DRIVER_VERSION => self.driver_version,
            bar0::PORT_INFO => port_info,
            _ => match bar0::REGISTERS.iter().find(|r| r.1 == offset) {
                Some((_, _, RegAccess::Ro, reset)) => *reset,
                _ => 0,
            },
        }
    }

    /// Stores a guest write; read-only and unknown offsets are ignored (and logged).
    pub fn write(&mut self, offset: u64, value: u32) -> RegEffect {
        match offset {
            bar0::DEV_CTRL => {
                if value & bar0::DEV_CTRL_RESET_MASK != 0 {
                    return RegEffect::Reset;
                }
                let was = self.dev_ctrl & bar0::DEV_CTRL_ENABLE_MASK;
                self.dev_ctrl = value & bar0::DEV_CTRL_ENABLE_MASK;
                match (was != 0, self.dev_ctrl != 0) {
                    (false, true) => RegEffect::Enable,
                    (true, false) => RegEffect::Disable,
                    _ => RegEffect::None,
                }
            }
            bar0::AQ_BASE_LO => self.set(|r| &mut r.aq_base_lo, value),
            bar0::AQ_BASE_HI => self.set(|r| &mut r.aq_base_hi, value),
            bar0::ACQ_BASE_LO => self.set(|r| &mut r.acq_base_lo, value),
            bar0::ACQ_BASE_HI => self.set(|r| &mut r.acq_base_hi, value),
            bar0::AQ_DEPTH_LOG2 => self.set(|r| &mut r.aq_depth_log2, value),
            bar0::DRIVER_VERSION => self.set(|r| &mut r.driver_version, value),
            bar0::AQ_DOORBELL => RegEffect::AdminDoorbell(value),
            _ => {
                log::warn!(
                    "BAR0 write of {value:#x} to read-only or undefined offset {offset:#x} ignored"
                );
                RegEffect::None
            }
        }
    }

    fn set(&mut self, field: impl FnOnce(&mut Self) -> &mut u32, value: u32) -> RegEffect {
        *field(self) = value;
        RegEffect::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_their_reset_values_and_ignore_writes() {
        let mut r = Registers::default();
        assert_eq!(r.read(bar0::VERSION, 0), bar0::VERSION_RESET);
        assert_eq!(r.write(bar0::MAX_QP, 7), RegEffect::None);
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
}
