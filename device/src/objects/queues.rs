//! Completion queues, event queues and the rings of work queues: where entry `i` lives and
//! who owns it.

use super::page_list::GuestPages;

/// A ring of `2^depth_log2` entries of `2^entry_shift` bytes in guest pages.
#[derive(Debug, Clone)]
pub struct Ring {
    pub pages: GuestPages,
    pub depth_log2: u8,
    pub entry_shift: u8,
}

impl Ring {
    pub fn depth(&self) -> u32 {
        1 << self.depth_log2
    }

    /// Guest address of the entry with free-running index `index`. Entries never straddle
    /// pages: the entry size divides the page size.
    pub fn entry_addr(&self, index: u32) -> Option<u64> {
        let slot = u64::from(index & (self.depth() - 1));
        self.pages.addr(slot << self.entry_shift)
    }

    /// Phase bit the device writes into the entry of free-running `index`: 1 on the first pass.
    pub fn phase(&self, index: u32) -> u8 {
        (((u64::from(index) >> self.depth_log2) & 1) ^ 1) as u8
    }

    pub fn bytes(&self) -> u64 {
        1u64 << (self.depth_log2 + self.entry_shift)
    }
}

#[derive(Debug)]
pub struct Cq {
    pub uctx: u32,
    pub eqn: u32,
    pub ring: Ring,
    /// Doorbell page (of context `uctx`) and slot.
    pub db_page: u32,
    pub db_slot: u32,
    /// Free-running count of CQEs written.
    pub pi: u32,
    /// Arm sequence number the last completion event was posted for.
    pub fired_seq: u32,
    /// Overflowed or unwritable: no more CQEs.
    pub error: bool,
}

/// An event waiting for room in its EQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingEvent {
    pub event: u8,
    pub obj: u32,
    pub data: u32,
}

#[derive(Debug)]
pub struct Eq {
    pub ring: Ring,
    pub vector: u16,
    pub is_async: bool,
    /// Doorbell page (of the kernel context) and slot.
    pub db_page: u32,
    pub db_slot: u32,
    pub pi: u32,
    /// Events that found the ring full, oldest first.
    pub pending: std::collections::VecDeque<PendingEvent>,
    /// Events dropped because even the pending list was full.
    pub dropped: u64,
}

/// A send or receive queue of a QP.
#[derive(Debug)]
pub struct WorkQueue {
    pub ring: Ring,
    /// Free-running count of WQEs the device has finished.
    pub ci: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_entries_wrap_and_phase_flips_per_pass() {
        let ring = Ring {
            pages: GuestPages::list(vec![0x10000, 0x30000], 12),
            depth_log2: 8,
            entry_shift: 5,
        };
        assert_eq!(ring.entry_addr(0), Some(0x10000));
        assert_eq!(ring.entry_addr(128), Some(0x30000));
        assert_eq!(ring.entry_addr(256 + 129), Some(0x30020));
        assert_eq!(
            (
                ring.phase(0),
                ring.phase(255),
                ring.phase(256),
                ring.phase(512)
            ),
            (1, 1, 0, 1)
        );
        assert_eq!(ring.phase(u32::MAX), 0);
    }
}
