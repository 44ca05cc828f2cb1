//! The doorbell BAR: device memory (a memfd) that QEMU maps into the guest, so doorbell
//! writes reach the device without a trap. The device polls it.

use crate::guest_memory::{DmaMapRequest, GuestRam, RamSnapshot};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use vrnic_hw::{db_page, db_slot_offset, BAR_DB_SIZE, DB_PAGES, DB_PAGE_SIZE};

pub struct DoorbellBar {
    file: File,
    mem: RamSnapshot,
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
        })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn page_offset(page: u32) -> u64 {
        u64::from(page) * u64::from(DB_PAGE_SIZE)
    }

    /// Word `word` (0 or 1) of doorbell slot `slot` in page `page`, read with acquire ordering.
    /// Out-of-range pages or slots read as 0.
    pub fn slot_word(&self, page: u32, slot: u32, word: u32) -> u32 {
        let off = Self::page_offset(page) + db_slot_offset(slot) + u64::from(word) * 4;
        self.mem.load_u32(off, Ordering::Acquire).unwrap_or(0)
    }

    pub fn set_slot_word(&self, page: u32, slot: u32, word: u32, value: u32) {
        let off = Self::page_offset(page) + db_slot_offset(slot) + u64::from(word) * 4;
        let _ = self.mem.store_u32(off, value, Ordering::Release);
    }

    /// Tells the drivers of every page whether the device is polling (see SPEC).
    pub fn set_polling(&self, polling: bool) {
        for page in 0..DB_PAGES {
            let off = Self::page_offset(page) + db_page::POLL_STATE;
            let _ = self
                .mem
                .store_u32(off, u32::from(polling), Ordering::Release);
        }
    }

    /// Zeroes one page's slots (a context was created or destroyed), keeping POLL_STATE.
    pub fn clear_page(&self, page: u32) {
        let start = Self::page_offset(page) + db_slot_offset(0);
        let len = Self::page_offset(page + 1).saturating_sub(start) as usize;
        let _ = self.mem.write(start, &vec![0; len]);
    }

    pub fn clear_all(&self) {
        for page in 0..DB_PAGES {
            self.clear_page(page);
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
