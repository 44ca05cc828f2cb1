//! Guest pages described by a `page_list` (see SPEC "Page lists"), copied into the device
//! when a command executes, and the translation of byte ranges onto them. A contiguous list
//! is kept as its first page and a count, so its cost does not grow with its length.

use crate::guest_memory::RamSnapshot;
use vrnic_hw::{
    PageList, PageListMode, PAGE_LIST_DIRECT_MAX, PAGE_LIST_INDIRECT_MAX, PAGE_SHIFT_MAX,
    PAGE_SHIFT_MIN,
};

/// Entries in one 4 KiB page of page addresses.
const ENTRIES_PER_PAGE: u64 = 512;

/// Why a page list was refused: which check failed and the offset, in the command, of the
/// field at fault (the admin engine turns it into a command status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PageListError {
    #[error("bad page list field at offset {0}")]
    BadField(usize),
    #[error("page list reserved field at offset {0} is not zero")]
    Reserved(usize),
    #[error("page list does not cover the object (field at offset {0})")]
    BadSize(usize),
    #[error("page list not readable (field at offset {0})")]
    BadAddress(usize),
}

/// The pages themselves: a run of physically contiguous pages, or a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pages {
    Contiguous { first: u64, count: u64 },
    List(Vec<u64>),
}

/// A list of equally sized, size-aligned guest pages.
#[derive(Debug, Clone)]
pub struct GuestPages {
    pub pages: Pages,
    pub page_shift: u32,
}

impl GuestPages {
    /// A list of individually named pages.
    pub fn list(pages: Vec<u64>, page_shift: u32) -> Self {
        GuestPages {
            pages: Pages::List(pages),
            page_shift,
        }
    }

    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    pub fn count(&self) -> u64 {
        match &self.pages {
            Pages::Contiguous { count, .. } => *count,
            Pages::List(list) => list.len() as u64,
        }
    }

    /// Host memory the list takes: entries of a list (a contiguous run takes none).
    pub fn entries_held(&self) -> usize {
        match &self.pages {
            Pages::Contiguous { .. } => 0,
            Pages::List(list) => list.len(),
        }
    }

    /// Bytes covered.
    pub fn bytes(&self) -> u64 {
        self.count() << self.page_shift
    }

    fn page(&self, index: u64) -> Option<u64> {
        match &self.pages {
            Pages::Contiguous { first, count } => {
                (index < *count).then(|| first + (index << self.page_shift))
            }
            Pages::List(list) => list.get(usize::try_from(index).ok()?).copied(),
        }
    }

    /// Guest address of byte `offset`, if inside.
    pub fn addr(&self, offset: u64) -> Option<u64> {
        let page = self.page(offset >> self.page_shift)?;
        Some(page + (offset & (self.page_size() - 1)))
    }

    /// The guest-physical pieces of `[offset, offset + len)`, or None if it leaves the list.
    pub fn segments(&self, offset: u64, len: u64) -> Option<Segments<'_>> {
        (offset.checked_add(len)? <= self.bytes()).then_some(Segments {
            pages: self,
            offset,
            left: len,
        })
    }
}

/// Iterator over (guest address, length) pieces of a range, split at page boundaries
/// (adjacent pages that are also physically adjacent are merged).
#[derive(Clone)]
pub struct Segments<'a> {
    pages: &'a GuestPages,
    offset: u64,
    left: u64,
}

impl Iterator for Segments<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        if self.left == 0 {
            return None;
        }
        let start = self.pages.addr(self.offset)?;
        if let Pages::Contiguous { .. } = self.pages.pages {
            // One piece, whatever its length: no walk over its pages.
            let len = self.left;
            self.offset += len;
            self.left = 0;
            return Some((start, len));
        }
        let mut len = 0;
        while len < self.left {
            let Some(at) = self.pages.addr(self.offset + len) else {
                break;
            };
            if at != start + len {
                break;
            }
            let in_page =
                self.pages.page_size() - ((self.offset + len) & (self.pages.page_size() - 1));
            len += in_page.min(self.left - len);
        }
        self.offset += len;
        self.left -= len;
        Some((start, len))
    }
}

fn bad_field(at: usize) -> PageListError {
    PageListError::BadField(at)
}

fn bad_size(at: usize) -> PageListError {
    PageListError::BadSize(at)
}

fn bad_address(at: usize) -> PageListError {
    PageListError::BadAddress(at)
}

/// Reads the page list `pl` (found at byte `at` of the command) from guest memory. It must
/// cover exactly `bytes` bytes starting at `first_offset` within its first page. Reads only
/// guest memory, never device state: callers run it without the device lock.
pub fn read(
    mem: &RamSnapshot,
    pl: &PageList,
    at: usize,
    first_offset: u64,
    bytes: u64,
) -> Result<GuestPages, PageListError> {
    let shift = u32::from(pl.page_shift);
    if !(PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&shift) {
        return Err(bad_field(at + PageList::PAGE_SHIFT_OFF));
    }
    if pl.reserved0.to_native() != 0 {
        return Err(PageListError::Reserved(at + PageList::RESERVED0_OFF));
    }
    let page_size = 1u64 << shift;
    let npages = u64::from(pl.npages.to_native());
    let needed = first_offset
        .checked_add(bytes)
        .map(|end| end.div_ceil(page_size))
        .ok_or(bad_size(at + PageList::NPAGES_OFF))?;
    if npages == 0 || npages != needed {
        return Err(bad_size(at + PageList::NPAGES_OFF));
    }
    let addr = pl.addr.to_native();
    let addr_at = at + PageList::ADDR_OFF;
    let pages = match PageListMode::try_from(pl.mode) {
        Ok(PageListMode::Contiguous) => {
            let end = npages
                .checked_shl(shift)
                .filter(|n| n >> shift == npages)
                .and_then(|n| addr.checked_add(n));
            if addr & (page_size - 1) != 0 || end.is_none() {
                return Err(bad_field(addr_at));
            }
            return Ok(GuestPages {
                pages: Pages::Contiguous {
                    first: addr,
                    count: npages,
                },
                page_shift: shift,
            });
        }
        Ok(PageListMode::Direct) => {
            if npages > u64::from(PAGE_LIST_DIRECT_MAX)
                || !addr.is_multiple_of(8)
                || (addr % 4096) + npages * 8 > 4096
            {
                return Err(bad_field(addr_at));
            }
            read_u64s(mem, addr, npages).map_err(|_| bad_address(addr_at))?
        }
        Ok(PageListMode::Indirect) => {
            let top = npages.div_ceil(ENTRIES_PER_PAGE);
            if top > u64::from(PAGE_LIST_INDIRECT_MAX) || !addr.is_multiple_of(8) {
                return Err(bad_field(addr_at));
            }
            let level1 = read_u64s(mem, addr, top).map_err(|_| bad_address(addr_at))?;
            let mut pages = Vec::with_capacity(npages as usize);
            for (i, l1) in level1.iter().enumerate() {
                if l1 % 4096 != 0 {
                    return Err(bad_field(addr_at));
                }
                let count = (npages - i as u64 * ENTRIES_PER_PAGE).min(ENTRIES_PER_PAGE);
                pages.extend(read_u64s(mem, *l1, count).map_err(|_| bad_address(addr_at))?);
            }
            pages
        }
        Err(_) => return Err(bad_field(at + PageList::MODE_OFF)),
    };
    if pages
        .iter()
        .any(|p| p & (page_size - 1) != 0 || p.checked_add(page_size).is_none())
    {
        return Err(bad_field(addr_at));
    }
    Ok(GuestPages::list(pages, shift))
}

fn read_u64s(
    mem: &RamSnapshot,
    addr: u64,
    count: u64,
) -> Result<Vec<u64>, crate::guest_memory::DmaError> {
    let mut bytes = vec![0u8; (count * 8) as usize];
    mem.read(addr, &mut bytes)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::GuestPages;

    #[test]
    fn segments_split_at_discontiguous_pages_and_merge_contiguous_ones() {
        let pages = GuestPages::list(vec![0x10000, 0x11000, 0x40000], 12);
        let segs: Vec<_> = pages.segments(0x800, 0x2000).unwrap().collect();
        assert_eq!(segs, vec![(0x10800, 0x1800), (0x40000, 0x800)]);
        assert!(pages.segments(0x2000, 0x1001).is_none());
        assert_eq!(pages.addr(0x2fff), Some(0x40fff));
    }

    #[test]
    fn a_contiguous_run_translates_like_the_list_it_stands_for() {
        let run = GuestPages {
            pages: super::Pages::Contiguous {
                first: 0x10000,
                count: 3,
            },
            page_shift: 12,
        };
        let list = GuestPages::list(vec![0x10000, 0x11000, 0x12000], 12);
        for offset in [0, 0xfff, 0x1000, 0x2fff] {
            assert_eq!(run.addr(offset), list.addr(offset));
        }
        assert_eq!(run.addr(0x3000), None);
        assert_eq!(run.entries_held(), 0);
        let segs: Vec<_> = run.segments(0x800, 0x2000).unwrap().collect();
        assert_eq!(segs, vec![(0x10800, 0x2000)]);
    }
}
