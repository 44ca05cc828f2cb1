//! Every object the admin queue creates, in bounded tables, and the names (QPNs, memory
//! keys) that identify them to the guests.
//!
//! Names carry a generation that survives destruction and device reset, so a new object
//! never answers to a destroyed one's name: a peer still holding an old QPN or rkey reaches
//! nothing.

pub mod counters;
pub mod keys;
pub mod mr;
pub mod page_list;
pub mod qp;
pub mod queues;
pub mod snapshot;
pub mod srq;
pub mod table;
pub mod xrcd;

use std::collections::{BTreeSet, HashMap};
use table::Table;
use vrnic_hw::{bar0, DB_PAGES, DB_SLOTS_PER_PAGE, MAX_DB_PAGES_PER_UCTX};

pub use keys::Mkey;
pub use mr::Mr;
pub use qp::Qp;
pub use queues::{Cq, Eq, Ring, WorkQueue};
pub use srq::Srq;
pub use xrcd::Xrcd;

/// Most page-list entries all MRs of one device may hold together (16M entries: 128 MiB of
/// host memory, 64 GiB of 4 KiB pages). Contiguous lists hold none.
pub const MAX_MTT_ENTRIES: usize = 1 << 24;

/// QPN = generation << QPN_INDEX_BITS | table index.
pub const QPN_INDEX_BITS: u32 = 16;
const QPN_INDEX_MASK: u32 = (1 << QPN_INDEX_BITS) - 1;

/// The doorbell page every device gives the kernel context first.
pub const KERNEL_DB_PAGE: u32 = 0;

/// Why a context got no doorbell slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("the context's {MAX_DB_PAGES_PER_UCTX} doorbell pages are full")]
    ContextFull,
    #[error("the device has no free doorbell page")]
    PoolEmpty,
}

/// The device's doorbell pages not given to any context (SPEC "Doorbell pages"). Page 0 is
/// never in it: it is the kernel context's first page.
#[derive(Debug)]
pub struct PagePool {
    free: BTreeSet<u32>,
}

impl PagePool {
    pub fn new() -> Self {
        Self::with_pages(DB_PAGES)
    }

    /// A pool of pages `1..pages` (smaller pools for tests).
    pub fn with_pages(pages: u32) -> Self {
        PagePool {
            free: (KERNEL_DB_PAGE + 1..pages).collect(),
        }
    }

    /// Takes the lowest free page.
    pub fn take(&mut self) -> Option<u32> {
        self.free.pop_first()
    }

    /// Returns a page (the caller zeroes it). Page 0 and pages outside the BAR are ignored.
    pub fn give_back(&mut self, page: u32) {
        if page != KERNEL_DB_PAGE && page < DB_PAGES {
            self.free.insert(page);
        }
    }

    pub fn free_pages(&self) -> usize {
        self.free.len()
    }
}

impl Default for PagePool {
    fn default() -> Self {
        Self::new()
    }
}

/// One doorbell page of a context and which of its slots are taken.
#[derive(Debug)]
struct DbPage {
    page: u32,
    used: Vec<bool>,
    taken: usize,
}

impl DbPage {
    fn new(page: u32) -> Self {
        DbPage {
            page,
            used: vec![false; DB_SLOTS_PER_PAGE as usize],
            taken: 0,
        }
    }

    fn take(&mut self) -> Option<u32> {
        let free = self.used.iter().position(|used| !used)?;
        self.used[free] = true;
        self.taken += 1;
        u32::try_from(free).ok()
    }
}

/// Where a new doorbell slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotGrant {
    pub page: u32,
    pub slot: u32,
    /// The page was taken from the pool for this slot (the caller zeroes it).
    pub new_page: bool,
}

/// A context: the kernel's (0) or a user process's, owning one or more doorbell pages.
#[derive(Debug)]
pub struct Uctx {
    /// In the order the context got them; the first is never given back before the context.
    pages: Vec<DbPage>,
    /// Most pages the context may hold.
    max_pages: usize,
}

impl Uctx {
    /// A context whose first doorbell page is `first_page`.
    pub fn new(first_page: u32) -> Self {
        Self::with_max_pages(first_page, MAX_DB_PAGES_PER_UCTX as usize)
    }

    /// A context limited to `max_pages` doorbell pages (smaller limits for tests).
    pub fn with_max_pages(first_page: u32, max_pages: usize) -> Self {
        Uctx {
            pages: vec![DbPage::new(first_page)],
            max_pages,
        }
    }

    pub fn first_page(&self) -> u32 {
        self.pages.first().map_or(KERNEL_DB_PAGE, |p| p.page)
    }

    /// Every doorbell page of the context.
    pub fn pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.pages.iter().map(|p| p.page)
    }

    /// Takes the lowest free slot of the context's pages, in the order it got them; when all
    /// are full, a new page from `pool`, up to the context's page limit.
    pub fn take_slot(&mut self, pool: &mut PagePool) -> Result<SlotGrant, SlotError> {
        let slots = DB_SLOTS_PER_PAGE as usize;
        if let Some(p) = self.pages.iter_mut().find(|p| p.taken < slots) {
            if let Some(slot) = p.take() {
                return Ok(SlotGrant {
                    page: p.page,
                    slot,
                    new_page: false,
                });
            }
        }
        if self.pages.len() >= self.max_pages {
            return Err(SlotError::ContextFull);
        }
        let mut p = DbPage::new(pool.take().ok_or(SlotError::PoolEmpty)?);
        let slot = p.take().ok_or(SlotError::ContextFull)?;
        let page = p.page;
        self.pages.push(p);
        Ok(SlotGrant {
            page,
            slot,
            new_page: true,
        })
    }

    /// Frees a slot; the page stays with the context (its process may still map it).
    pub fn release_slot(&mut self, page: u32, slot: u32) {
        let Some(p) = self.pages.iter_mut().find(|p| p.page == page) else {
            return;
        };
        if let Some(used) = p.used.get_mut(slot as usize) {
            if std::mem::replace(used, false) {
                p.taken = p.taken.saturating_sub(1);
            }
        }
    }
}

#[derive(Debug)]
pub struct Pd {
    pub uctx: u32,
}

/// Generation counters per table index; they outlive the objects and device resets.
#[derive(Debug, Default)]
struct Generations {
    qp: Vec<u8>,
    mr: Vec<u8>,
    /// Where the next QP index search starts: indices are reused as late as possible.
    qp_cursor: usize,
}

impl Generations {
    /// The next generation for `index` in `gens`, never 0 (QPN 0 and 1 are special, and a
    /// key of variant 0 would equal an index-only key).
    fn bump(gens: &mut Vec<u8>, index: usize) -> u8 {
        if gens.len() <= index {
            gens.resize(index + 1, 0);
        }
        gens[index] = match gens[index].wrapping_add(1) {
            0 => 1,
            g => g,
        };
        gens[index]
    }

    /// Makes `generation` the last one handed out for `index`.
    fn set(gens: &mut Vec<u8>, index: usize, generation: u8) {
        if gens.len() <= index {
            gens.resize(index + 1, 0);
        }
        gens[index] = generation;
    }
}

/// The object tables of one device.
#[derive(Debug)]
pub struct Objects {
    pub uctxs: Table<Uctx>,
    /// Doorbell pages no context holds.
    pub db_pages: PagePool,
    pub pds: Table<Pd>,
    /// MRs, fast-registration MRs and memory windows, by the index part of their key
    /// (see `keys`).
    keys: Table<Mkey>,
    pub cqs: Table<Cq>,
    pub eqs: Table<Eq>,
    /// QPs by the index part of their QPN.
    pub qps: Table<Qp>,
    /// SRQs by srqn.
    pub srqs: Table<Srq>,
    /// XRC domains by xrcdn.
    pub xrcds: Table<Xrcd>,
    /// The QP whose doorbell is at (page, slot), for a scan of the slot flags.
    qp_slots: HashMap<(u32, u32), u32>,
    /// QPs that may have work for the data path: a flagged doorbell, a state change, a
    /// transfer or retry in progress. The data path drops a QP once it finds it idle, so a
    /// pass costs what the busy QPs cost, not what all QPs do.
    active: BTreeSet<u32>,
    /// The GSI QP (RoCE mode), which peers reach as GSI_QPN.
    pub gsi_qpn: Option<u32>,
    /// Page-list entries held by all MRs (bounded by MAX_MTT_ENTRIES).
    mtt_entries: usize,
    generations: Generations,
}

impl Objects {
    pub fn new() -> Self {
        Objects {
            uctxs: Table::new(bar0::MAX_UCTX_RESET as usize + 1),
            db_pages: PagePool::new(),
            pds: Table::new(bar0::MAX_PD_RESET as usize),
            keys: Table::new(bar0::MAX_MR_RESET as usize),
            cqs: Table::new(bar0::MAX_CQ_RESET as usize),
            eqs: Table::new(bar0::MAX_EQ_RESET as usize),
            qps: Table::new((bar0::MAX_QP_RESET as usize).min(1 << QPN_INDEX_BITS)),
            srqs: Table::new(vrnic_hw::MAX_SRQ as usize),
            xrcds: Table::new(vrnic_hw::MAX_XRCD as usize),
            qp_slots: HashMap::new(),
            active: BTreeSet::new(),
            gsi_qpn: None,
            mtt_entries: 0,
            generations: Generations::default(),
        }
    }

    /// Destroys every object; names already handed out stay retired.
    pub fn reset(&mut self) {
        let generations = std::mem::take(&mut self.generations);
        *self = Objects::new();
        self.generations = generations;
    }

    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps
            .get(qpn & QPN_INDEX_MASK)
            .filter(|qp| qp.qpn == qpn)
    }

    pub fn qp_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.qps
            .get_mut(qpn & QPN_INDEX_MASK)
            .filter(|qp| qp.qpn == qpn)
    }

    /// A free QP index and the QPN a QP created there gets, or None when the table is full.
    /// Indices are taken round-robin and each reuse bumps the generation.
    pub fn next_qpn(&mut self) -> Option<(usize, u32)> {
        let index = self.qps.free_index_from(self.generations.qp_cursor)?;
        self.generations.qp_cursor = index + 1;
        let generation = Generations::bump(&mut self.generations.qp, index);
        Some((
            index,
            u32::from(generation) << QPN_INDEX_BITS | index as u32,
        ))
    }

    /// Stores a QP at `index` (from `next_qpn`) and remembers where its doorbell is (an
    /// XRC_TGT QP has none).
    pub fn insert_qp(&mut self, index: usize, qp: Qp) {
        if qp.has_doorbell() {
            self.qp_slots.insert((qp.db_page, qp.db_slot), qp.qpn);
        }
        self.qps.insert_at(index, qp);
    }

    pub fn remove_qp(&mut self, qpn: u32) -> Option<Qp> {
        self.qp(qpn)?;
        let qp = self.qps.remove(qpn & QPN_INDEX_MASK)?;
        if qp.has_doorbell() {
            self.qp_slots.remove(&(qp.db_page, qp.db_slot));
        }
        self.active.remove(&qpn);
        if self.gsi_qpn == Some(qpn) {
            self.gsi_qpn = None;
        }
        Some(qp)
    }

    /// The data path should look at QP `qpn` on its next pass.
    pub fn mark_active(&mut self, qpn: u32) {
        if self.qp(qpn).is_some() {
            self.active.insert(qpn);
        }
    }

    /// The data path found QP `qpn` idle.
    pub fn mark_idle(&mut self, qpn: u32) {
        self.active.remove(&qpn);
    }

    /// QPs that may have work, lowest QPN first.
    pub fn active_qps(&self) -> impl Iterator<Item = u32> + '_ {
        self.active.iter().copied()
    }

    /// Moves QP `qpn` to ERR; the data path then flushes it.
    pub fn qp_to_error(&mut self, qpn: u32) {
        if let Some(qp) = self.qp_mut(qpn) {
            qp.enter_error();
            self.active.insert(qpn);
        }
    }

    /// The QPN of the QP whose doorbell is slot `slot` of page `page` (a flagged slot the
    /// poller found, SPEC "Posting work"); None for a free slot or a CQ's or EQ's.
    pub fn qp_by_slot(&self, page: u32, slot: u32) -> Option<u32> {
        self.qp_slots.get(&(page, slot)).copied()
    }

    /// Creates a user context (number 1..=MAX_UCTX) with a first doorbell page from the
    /// pool; returns (uctx, page). None when the table or the pool is exhausted.
    pub fn alloc_uctx(&mut self) -> Option<(u32, u32)> {
        let index = self.uctxs.free_index(1)?;
        let uctx = u32::try_from(index).ok()?;
        let page = self.db_pages.take()?;
        self.uctxs.insert_at(index, Uctx::new(page));
        Some((uctx, page))
    }

    /// Destroys a user context; returns the doorbell pages it held (now back in the pool,
    /// the caller zeroes them).
    pub fn dealloc_uctx(&mut self, uctx: u32) -> Vec<u32> {
        let Some(ctx) = self.uctxs.remove(uctx) else {
            return Vec::new();
        };
        let pages: Vec<u32> = ctx.pages().collect();
        for &page in &pages {
            self.db_pages.give_back(page);
        }
        pages
    }

    /// The EQ receiving async events.
    pub fn async_eq(&self) -> Option<u32> {
        self.eqs.iter().find(|(_, eq)| eq.is_async).map(|(n, _)| n)
    }
}

impl Default for Objects {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_qp_index_gets_a_new_qpn_even_across_a_reset() {
        let mut o = Objects::new();
        let (index, first) = o.next_qpn().unwrap();
        assert_eq!(index, 0);
        o.reset();
        let (_, after_reset) = o.next_qpn().unwrap();
        assert_ne!(after_reset, first);
        assert!(
            first >= 1 << QPN_INDEX_BITS,
            "QPNs 0 and 1 are never issued"
        );
    }

    #[test]
    fn qp_indices_are_reused_round_robin() {
        let mut o = Objects::new();
        let (a, _) = o.next_qpn().unwrap();
        let (b, _) = o.next_qpn().unwrap();
        assert_eq!(
            (a, b),
            (0, 1),
            "nothing inserted: the cursor still moves on"
        );
    }

    #[test]
    fn mr_keys_change_across_a_reset() {
        let mut o = Objects::new();
        let (_, before) = o.next_key().unwrap();
        o.reset();
        let (_, after) = o.next_key().unwrap();
        assert_ne!(before, after);
        assert_eq!(before >> 8, after >> 8);
    }

    fn ring() -> Ring {
        Ring {
            pages: page_list::GuestPages::list(vec![0x1000], 12),
            depth_log2: 1,
            entry_shift: 6,
        }
    }

    fn qp_at(qpn: u32, db_page: u32, db_slot: u32) -> Qp {
        Qp {
            qpn,
            kind: vrnic_hw::QpType::Rc,
            uctx: 1,
            pdn: 0,
            send_cqn: 0,
            recv_cqn: 0,
            state: vrnic_hw::QpState::Reset,
            attr: vrnic_hw::QpAttr::default(),
            sq: WorkQueue {
                ring: ring(),
                ci: 0,
            },
            rq: WorkQueue {
                ring: ring(),
                ci: 0,
            },
            db_page,
            db_slot,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline: 0,
            dmac: [0; 6],
            waiting: None,
            sq_offset: 0,
            sq_started: false,
            sq_drained_due: false,
            comm_established: false,
            next_psn: 0,
            expected_psn: 0,
            epoch: 0,
            receive_in_flight: false,
            srq: None,
            xrcdn: None,
            counters: Default::default(),
        }
    }

    #[test]
    fn a_flagged_slot_names_its_qp_until_the_qp_is_destroyed() {
        let mut o = Objects::new();
        let (index, qpn) = o.next_qpn().unwrap();
        o.insert_qp(index, qp_at(qpn, 7, 300));

        assert_eq!(o.qp_by_slot(7, 300), Some(qpn));
        assert_eq!(o.qp_by_slot(7, 301), None);
        assert_eq!(o.qp_by_slot(8, 300), None);
        o.remove_qp(qpn);
        assert_eq!(o.qp_by_slot(7, 300), None);
    }

    #[test]
    fn a_context_fills_its_pages_in_order_then_takes_the_lowest_free_page() {
        let mut pool = PagePool::with_pages(8);
        let mut ctx = Uctx::new(pool.take().unwrap());
        assert_eq!(ctx.first_page(), 1);
        let slots = DB_SLOTS_PER_PAGE;
        for slot in 0..slots {
            let g = ctx.take_slot(&mut pool).unwrap();
            assert_eq!((g.page, g.slot, g.new_page), (1, slot, false));
        }
        let g = ctx.take_slot(&mut pool).unwrap();
        assert_eq!((g.page, g.slot, g.new_page), (2, 0, true));
        ctx.release_slot(1, 17);
        let g = ctx.take_slot(&mut pool).unwrap();
        assert_eq!((g.page, g.slot, g.new_page), (1, 17, false));
        assert_eq!(ctx.pages().collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn a_context_at_its_page_limit_gets_context_full_while_another_still_gets_slots() {
        let mut pool = PagePool::with_pages(16);
        let mut full = Uctx::with_max_pages(pool.take().unwrap(), 2);
        let mut other = Uctx::with_max_pages(pool.take().unwrap(), 2);
        for _ in 0..2 * DB_SLOTS_PER_PAGE {
            full.take_slot(&mut pool).unwrap();
        }
        assert_eq!(full.take_slot(&mut pool), Err(SlotError::ContextFull));
        assert_eq!(full.pages().count(), 2);
        let g = other.take_slot(&mut pool).unwrap();
        assert_eq!((g.page, g.slot), (other.first_page(), 0));
    }

    #[test]
    fn an_empty_pool_refuses_a_new_page_with_pool_empty() {
        let mut pool = PagePool::with_pages(2);
        let mut ctx = Uctx::new(pool.take().unwrap());
        for _ in 0..DB_SLOTS_PER_PAGE {
            ctx.take_slot(&mut pool).unwrap();
        }
        assert_eq!(ctx.take_slot(&mut pool), Err(SlotError::PoolEmpty));
    }

    #[test]
    fn dealloc_uctx_returns_its_pages_for_the_next_context() {
        let mut o = Objects::new();
        let (a, first) = o.alloc_uctx().unwrap();
        let grant = o
            .uctxs
            .get_mut(a)
            .unwrap()
            .take_slot(&mut o.db_pages)
            .unwrap();
        assert_eq!(grant.page, first);
        let free = o.db_pages.free_pages();
        assert_eq!(o.dealloc_uctx(a), vec![first]);
        assert_eq!(o.db_pages.free_pages(), free + 1);
        let (_, again) = o.alloc_uctx().unwrap();
        assert_eq!(again, first);
    }
}
