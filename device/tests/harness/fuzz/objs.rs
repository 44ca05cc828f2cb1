//! Guest-side building blocks shared by the in-process targets: a bump allocator over the
//! canary RAM and page lists (SPEC "Page lists") whose every page is recorded as memory
//! the device may write.

use vrnic_hw::{PageList, PageListMode, PAGE_LIST_DIRECT_MAX};

use super::guest::{CanaryRam, PAGE};
use super::input::Input;

/// Bump allocator over guest RAM, restarted for every input.
pub struct Heap {
    next: u64,
    end: u64,
}

impl Heap {
    pub fn new(start: u64, end: u64) -> Self {
        Heap { next: start, end }
    }

    /// `size` bytes aligned to `align` (a power of two); None when RAM is exhausted.
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let start = self.next.checked_next_multiple_of(align.max(1))?;
        let end = start.checked_add(size.max(1))?;
        if end > self.end {
            return None;
        }
        self.next = end;
        Some(start)
    }

    /// Like `alloc`, but returns the last page of RAM when exhausted (the input still gets
    /// an address; the allocation just overlaps).
    pub fn alloc_or_last(&mut self, size: u64, align: u64) -> u64 {
        self.alloc(size, align)
            .unwrap_or_else(|| self.end.saturating_sub(PAGE))
    }
}

/// How the pages of a buffer lie in guest RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Contiguous,
    /// DIRECT list of pages taken backwards from every other page of a block.
    Scattered,
    /// INDIRECT list (two levels) of scattered pages.
    Indirect,
}

pub const LAYOUTS: &[Layout] = &[Layout::Contiguous, Layout::Scattered, Layout::Indirect];

/// A buffer of `bytes` bytes in pages of 2^`shift` and the page list describing it, with
/// every page allowed for device writes. Returns (page list, page addresses).
pub fn buffer(
    ram: &mut CanaryRam,
    heap: &mut Heap,
    bytes: u64,
    shift: u32,
    layout: Layout,
) -> (PageList, Vec<u64>) {
    let page = 1u64 << shift;
    let n = bytes
        .div_ceil(page)
        .clamp(1, u64::from(PAGE_LIST_DIRECT_MAX) * 2);
    let pages: Vec<u64> = match layout {
        Layout::Contiguous => {
            let first = heap.alloc_or_last(n * page, page);
            (0..n).map(|i| first + i * page).collect()
        }
        Layout::Scattered | Layout::Indirect => {
            let first = heap.alloc_or_last(2 * n * page, page);
            (0..n).rev().map(|i| first + 2 * i * page).collect()
        }
    };
    let list = describe(ram, heap, &pages, shift, layout);
    (list, pages)
}

/// The page list of `pages` in `layout`, writing the DIRECT/INDIRECT tables to guest RAM.
pub fn describe(
    ram: &mut CanaryRam,
    heap: &mut Heap,
    pages: &[u64],
    shift: u32,
    layout: Layout,
) -> PageList {
    let (mode, addr) = match layout {
        Layout::Contiguous => (
            PageListMode::Contiguous,
            pages.first().copied().unwrap_or(0),
        ),
        Layout::Scattered => {
            let direct = &pages[..pages.len().min(PAGE_LIST_DIRECT_MAX as usize)];
            (PageListMode::Direct, write_u64s(ram, heap, direct))
        }
        Layout::Indirect => {
            let tables: Vec<u64> = pages
                .chunks(512)
                .map(|chunk| write_u64s(ram, heap, chunk))
                .collect();
            (PageListMode::Indirect, write_u64s(ram, heap, &tables))
        }
    };
    let npages = match layout {
        Layout::Scattered => pages.len().min(PAGE_LIST_DIRECT_MAX as usize),
        _ => pages.len(),
    };
    PageList {
        addr: addr.into(),
        npages: (npages as u32).into(),
        page_shift: shift as u8,
        mode: mode.into(),
        ..Default::default()
    }
}

fn write_u64s(ram: &mut CanaryRam, heap: &mut Heap, values: &[u64]) -> u64 {
    let addr = heap.alloc_or_last(values.len() as u64 * 8, PAGE);
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    ram.write(addr, &bytes);
    addr
}

/// A page list as a hostile driver might write it: mostly `valid`, with mutated fields.
pub fn mutate_list(inp: &mut Input, valid: PageList) -> PageList {
    PageList {
        addr: inp.mostly_u64(valid.addr.to_native()).into(),
        npages: inp.mostly_u32(valid.npages.to_native()).into(),
        page_shift: inp.mostly_u8(valid.page_shift),
        mode: inp.mostly_u8(valid.mode),
        reserved0: if inp.chance(2) {
            u16::from(inp.u8()).into()
        } else {
            0u16.into()
        },
    }
}

/// Records every page the (possibly mutated) page list names as memory the device may
/// write, reading DIRECT/INDIRECT tables the way the device would (bounded: tables outside
/// RAM end the walk).
pub fn allow_list(ram: &mut CanaryRam, list: &PageList) {
    let shift = u32::from(list.page_shift);
    let page = 1u64.checked_shl(shift).unwrap_or(0);
    let npages = u64::from(list.npages.to_native());
    let addr = list.addr.to_native();
    // Generous about alignment: the page containing an unaligned address counts too.
    let allow_page = |ram: &mut CanaryRam, p: u64, n: u64| {
        let start = p & !page.wrapping_sub(1);
        let len = n.saturating_add(1).saturating_mul(page);
        ram.allow(start, len);
    };
    let read_u64 = |ram: &CanaryRam, at: u64| {
        let mut b = [0u8; 8];
        ram.read(at, &mut b).then(|| u64::from_le_bytes(b))
    };
    match PageListMode::try_from(list.mode) {
        Ok(PageListMode::Contiguous) => allow_page(ram, addr, npages),
        Ok(PageListMode::Direct) => {
            for i in 0..npages.min(u64::from(PAGE_LIST_DIRECT_MAX) * 4) {
                match read_u64(ram, addr.wrapping_add(i * 8)) {
                    Some(p) => allow_page(ram, p, 1),
                    None => break,
                }
            }
        }
        Ok(PageListMode::Indirect) => {
            let tables = npages.div_ceil(512);
            'outer: for t in 0..tables.min(8192) {
                let Some(table) = read_u64(ram, addr.wrapping_add(t * 8)) else {
                    break;
                };
                for i in 0..512u64.min(npages - t * 512) {
                    match read_u64(ram, table.wrapping_add(i * 8)) {
                        Some(p) => allow_page(ram, p, 1),
                        None => continue 'outer,
                    }
                }
            }
        }
        Err(_) => {}
    }
}
