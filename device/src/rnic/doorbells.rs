//! The doorbell BAR: device memory (a sparse memfd) that QEMU maps into the guest, so doorbell
//! writes reach the device without a trap. The device polls it.
//!
//! Pages are given to contexts by the admin path (`give_page`, `release_page`); the device
//! writes POLL_STATE only in given pages, and only they are scanned. Within a page, the
//! driver-written PAGE_FLAG and slot flags are hints (SPEC "Posting work"): they are swapped
//! to 0 atomically, so a flag a driver sets after the swap is seen by the next scan.

use crate::guest_memory::{DmaMapRequest, GuestRam, RamSnapshot};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use vm_memory::VolatileMemory;
use vrnic_hw::{
    db_flag_offset, db_page, db_slot_offset, BAR_DB_SIZE, DB_FLAGS_BASE, DB_PAGES, DB_PAGE_SIZE,
    DB_SLOTS_PER_PAGE, DB_SLOT_SIZE,
};

/// Words of the given-pages bitmap.
const PAGE_WORDS: usize = DB_PAGES.div_ceil(64) as usize;
/// Aligned 8-byte words of slot flags in a page.
const FLAG_WORDS: u32 = DB_SLOTS_PER_PAGE.div_ceil(8);

pub struct DoorbellBar {
    file: File,
    mem: RamSnapshot,
    /// Bit N set: page N is given to a context.
    given: Vec<AtomicU64>,
    /// What the poller last announced through POLL_STATE.
    polling: AtomicBool,
}

impl DoorbellBar {
    pub fn new() -> io::Result<Self> {
        let file = crate::memfd::create(c"vrnic-doorbells", u64::from(BAR_DB_SIZE))?;
        let ram = GuestRam::new();
        ram.map(DmaMapRequest {
            addr: 0,
            size: u64::from(BAR_DB_SIZE),
            file_offset: 0,
            readable: true,
            writable: true,
            fd: Some(file.try_clone()?),
        })
        .map_err(io::Error::other)?;
        Ok(DoorbellBar {
            file,
            mem: ram.snapshot(),
            given: (0..PAGE_WORDS).map(|_| AtomicU64::new(0)).collect(),
            polling: AtomicBool::new(false),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn page_offset(page: u32) -> u64 {
        u64::from(page) * u64::from(DB_PAGE_SIZE)
    }

    /// Offset of the 32-bit field at `field` (a generated `Db*Slot::*_OFF`) of slot `slot`
    /// of page `page`, if all are in range.
    fn word_offset(page: u32, slot: u32, field: usize) -> Option<u64> {
        (page < DB_PAGES && slot < DB_SLOTS_PER_PAGE && field + 4 <= DB_SLOT_SIZE as usize)
            .then(|| Self::page_offset(page) + db_slot_offset(slot) + field as u64)
    }

    /// The 32-bit field `field` (e.g. `DbQpSlot::SQ_PI_OFF`) of doorbell slot `slot` in page
    /// `page`, read with acquire ordering. Out-of-range pages, slots or fields read as 0.
    pub fn slot_word(&self, page: u32, slot: u32, field: usize) -> u32 {
        Self::word_offset(page, slot, field)
            .and_then(|off| self.mem.load_u32(off, Ordering::Acquire).ok())
            .unwrap_or(0)
    }

    pub fn set_slot_word(&self, page: u32, slot: u32, field: usize, value: u32) {
        if let Some(off) = Self::word_offset(page, slot, field) {
            let _ = self.mem.store_u32(off, value, Ordering::Release);
        }
    }

    /// Zeroes a slot and its flag (the slot was taken by a new object).
    pub fn clear_slot(&self, page: u32, slot: u32) {
        for field in (0..DB_SLOT_SIZE as usize).step_by(4) {
            self.set_slot_word(page, slot, field, 0);
        }
        if page < DB_PAGES && slot < DB_SLOTS_PER_PAGE {
            let off = Self::page_offset(page) + db_flag_offset(slot);
            let _ = self.mem.store_u8(off, 0, Ordering::Release);
        }
    }

    /// Gives page `page` to a context: zeroes it, lets the poller see it, and announces the
    /// poller's current state in its POLL_STATE.
    ///
    /// Against a concurrent `set_polling` (both sides: store, full barrier, load): if this
    /// load misses a new state, the poller's page walk sees the page and writes the state
    /// after the store below; a stale 1 is taken back by the second look. The caller
    /// publishes the page to a driver only after this returns.
    pub fn give_page(&self, page: u32) {
        let Some(word) = self.given.get((page / 64) as usize) else {
            return;
        };
        self.zero_page(page);
        word.fetch_or(1 << (page % 64), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.polling.load(Ordering::SeqCst) {
            self.store_poll_state(page, true);
            fence(Ordering::SeqCst);
            if !self.polling.load(Ordering::SeqCst) {
                self.store_poll_state(page, false);
            }
        }
    }

    fn store_poll_state(&self, page: u32, polling: bool) {
        let off = Self::page_offset(page) + db_page::POLL_STATE;
        let _ = self
            .mem
            .store_u32(off, u32::from(polling), Ordering::Release);
    }

    /// Takes a page back from its context: the poller stops looking at it, then it is zeroed.
    pub fn release_page(&self, page: u32) {
        let Some(word) = self.given.get((page / 64) as usize) else {
            return;
        };
        word.fetch_and(!(1 << (page % 64)), Ordering::AcqRel);
        self.zero_page(page);
    }

    pub fn is_given(&self, page: u32) -> bool {
        self.given
            .get((page / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (page % 64)) != 0)
    }

    /// The pages given to contexts, lowest first.
    /// Costs one load per 64 pages plus one step per given page: the poller calls it on
    /// every pass.
    pub fn given_pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.given.iter().enumerate().flat_map(|(i, w)| {
            let mut bits = w.load(Ordering::Acquire);
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    i as u32 * 64 + b
                })
            })
        })
    }

    /// Atomically swaps PAGE_FLAG of `page` to 0; true if a driver had set it.
    pub fn take_page_flag(&self, page: u32) -> bool {
        if page >= DB_PAGES {
            return false;
        }
        let off = Self::page_offset(page) + db_page::PAGE_FLAG;
        self.mem
            .slice_for_write(off, 4)
            .ok()
            .and_then(|s| {
                s.get_atomic_ref::<AtomicU32>(0)
                    .ok()
                    .map(|a| a.swap(0, Ordering::SeqCst))
            })
            .is_some_and(|v| v != 0)
    }

    /// Atomically swaps every slot flag of `page` to 0, 8 bytes at a time, and appends the
    /// slots whose flag was set to `out`. Call after `take_page_flag` returned true and a full
    /// barrier (SPEC "Posting work").
    pub fn take_slot_flags(&self, page: u32, out: &mut Vec<u32>) {
        if page >= DB_PAGES {
            return;
        }
        let base = Self::page_offset(page) + u64::from(DB_FLAGS_BASE);
        let Ok(flags) = self.mem.slice_for_write(base, (FLAG_WORDS * 8) as usize) else {
            return;
        };
        for w in 0..FLAG_WORDS {
            let Ok(word) = flags.get_atomic_ref::<AtomicU64>((w * 8) as usize) else {
                continue;
            };
            // A plain load first: most words are clear, and a swap is a locked operation.
            // A flag set after this load is found by the next scan (the driver set
            // PAGE_FLAG after it).
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let bits = word.swap(0, Ordering::SeqCst);
            let set = bits.to_le_bytes();
            out.extend(
                (0..8u32)
                    .filter(|b| set[*b as usize] != 0)
                    .map(|b| w * 8 + b)
                    .filter(|slot| *slot < DB_SLOTS_PER_PAGE),
            );
        }
    }

    /// Tells the drivers of every given page whether the device is polling (see SPEC).
    pub fn set_polling(&self, polling: bool) {
        self.polling.store(polling, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        for page in self.given_pages() {
            self.store_poll_state(page, polling);
        }
        fence(Ordering::SeqCst);
    }

    /// Zeroes one whole page (POLL_STATE, PAGE_FLAG, flags and slots).
    fn zero_page(&self, page: u32) {
        let start = Self::page_offset(page);
        let _ = self.mem.write(start, &[0; DB_PAGE_SIZE as usize]);
    }

    /// Takes every page back (reset): the next ENABLE gives page 0 to the kernel again.
    pub fn clear_all(&self) {
        let pages: Vec<u32> = self.given_pages().collect();
        for page in pages {
            self.release_page(page);
        }
    }
}

impl DoorbellBar {
    /// A trapped read (the VMM did not map the BAR).
    pub fn read(&self, offset: u64, data: &mut [u8]) -> Result<(), i32> {
        self.mem.read(offset, data).map_err(|_| libc::EINVAL)
    }

    /// A trapped write (the VMM did not map the BAR).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), i32> {
        self.mem.write(offset, data).map_err(|_| libc::EINVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrnic_hw::DbQpSlot;

    fn page_u32(bar: &DoorbellBar, page: u32, off: u64) -> u32 {
        let mut b = [0u8; 4];
        bar.read(DoorbellBar::page_offset(page) + off, &mut b)
            .unwrap();
        u32::from_le_bytes(b)
    }

    fn set_flag(bar: &DoorbellBar, page: u32, slot: u32) {
        let at = DoorbellBar::page_offset(page);
        bar.write(at + db_flag_offset(slot), &[1]).unwrap();
        bar.write(at + db_page::PAGE_FLAG, &1u32.to_le_bytes())
            .unwrap();
    }

    #[test]
    fn flags_are_taken_once_and_name_their_slots() {
        let bar = DoorbellBar::new().unwrap();
        bar.give_page(5);
        for slot in [0, 7, 8, 200, DB_SLOTS_PER_PAGE - 1] {
            set_flag(&bar, 5, slot);
        }
        assert!(bar.take_page_flag(5));
        assert!(!bar.take_page_flag(5), "PAGE_FLAG was swapped to 0");
        let mut slots = Vec::new();
        bar.take_slot_flags(5, &mut slots);
        assert_eq!(slots, vec![0, 7, 8, 200, DB_SLOTS_PER_PAGE - 1]);
        slots.clear();
        bar.take_slot_flags(5, &mut slots);
        assert!(slots.is_empty(), "the flags were swapped to 0");
        assert_eq!(page_u32(&bar, 5, u64::from(DB_FLAGS_BASE)), 0);
    }

    #[test]
    fn polling_state_is_written_only_into_given_pages() {
        let bar = DoorbellBar::new().unwrap();
        bar.give_page(0);
        bar.give_page(3000);
        bar.set_polling(true);
        assert_eq!(bar.given_pages().collect::<Vec<_>>(), vec![0, 3000]);
        assert_eq!(page_u32(&bar, 0, db_page::POLL_STATE), 1);
        assert_eq!(page_u32(&bar, 3000, db_page::POLL_STATE), 1);
        assert_eq!(page_u32(&bar, 1, db_page::POLL_STATE), 0);
        bar.release_page(3000);
        bar.set_polling(true);
        assert_eq!(page_u32(&bar, 3000, db_page::POLL_STATE), 0);
        assert!(!bar.is_given(3000));
    }

    #[test]
    fn a_page_given_while_the_device_polls_announces_polling() {
        let bar = DoorbellBar::new().unwrap();
        bar.give_page(1);
        bar.set_polling(true);
        bar.give_page(2);
        assert_eq!(page_u32(&bar, 2, db_page::POLL_STATE), 1);
        bar.set_polling(false);
        bar.give_page(3);
        assert_eq!(page_u32(&bar, 2, db_page::POLL_STATE), 0);
        assert_eq!(page_u32(&bar, 3, db_page::POLL_STATE), 0);
    }

    #[test]
    fn a_page_is_zeroed_when_given_and_when_released() {
        let bar = DoorbellBar::new().unwrap();
        let at = DoorbellBar::page_offset(9);
        bar.write(at, &[0xab; DB_PAGE_SIZE as usize]).unwrap();
        bar.give_page(9);
        assert_eq!(bar.slot_word(9, 0, 0), 0);
        assert!(!bar.take_page_flag(9));
        bar.set_slot_word(9, 447, DbQpSlot::RQ_PI_OFF, 0x55);
        set_flag(&bar, 9, 447);
        bar.release_page(9);
        assert_eq!(bar.slot_word(9, 447, DbQpSlot::RQ_PI_OFF), 0);
        assert!(!bar.take_page_flag(9));
        let mut slots = Vec::new();
        bar.take_slot_flags(9, &mut slots);
        assert!(slots.is_empty());
    }

    #[test]
    fn slot_addresses_out_of_range_read_as_zero_and_ignore_writes() {
        let bar = DoorbellBar::new().unwrap();
        bar.give_page(1);
        bar.give_page(2);
        // Slot DB_SLOTS_PER_PAGE of page 1 would be POLL_STATE of page 2.
        bar.set_slot_word(1, DB_SLOTS_PER_PAGE, 0, 7);
        assert_eq!(page_u32(&bar, 2, db_page::POLL_STATE), 0);
        assert_eq!(bar.slot_word(1, DB_SLOTS_PER_PAGE, 0), 0);
        assert_eq!(bar.slot_word(DB_PAGES, 0, 0), 0);
        assert_eq!(bar.slot_word(1, 0, DB_SLOT_SIZE as usize), 0);
    }
}
