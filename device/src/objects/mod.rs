//! Every object the admin queue creates, in bounded tables, and the names (QPNs, memory
//! keys) that identify them to the guests.
//!
//! Names carry a generation that survives destruction and device reset, so a new object
//! never answers to a destroyed one's name: a peer still holding an old QPN or rkey reaches
//! nothing.

pub mod mr;
pub mod page_list;
pub mod qp;
pub mod queues;
pub mod table;

use table::Table;
use vrnic_hw::{bar0, DB_SLOTS_PER_PAGE};

pub use mr::Mr;
pub use qp::Qp;
pub use queues::{Cq, Eq, Ring, WorkQueue};

/// Most page-list entries all MRs of one device may hold together (16M entries: 128 MiB of
/// host memory, 64 GiB of 4 KiB pages). Contiguous lists hold none.
pub const MAX_MTT_ENTRIES: usize = 1 << 24;

/// QPN = generation << QPN_INDEX_BITS | table index.
pub const QPN_INDEX_BITS: u32 = 16;
const QPN_INDEX_MASK: u32 = (1 << QPN_INDEX_BITS) - 1;

/// A context: the kernel's (0) or a user process's, owning one doorbell page.
#[derive(Debug)]
pub struct Uctx {
    /// Doorbell slots in use.
    slots: Vec<bool>,
}

impl Uctx {
    pub fn new() -> Self {
        Uctx {
            slots: vec![false; DB_SLOTS_PER_PAGE as usize],
        }
    }

    pub fn take_slot(&mut self) -> Option<u32> {
        let free = self.slots.iter().position(|used| !used)?;
        self.slots[free] = true;
        Some(free as u32)
    }

    pub fn release_slot(&mut self, slot: u32) {
        if let Some(used) = self.slots.get_mut(slot as usize) {
            *used = false;
        }
    }
}

impl Default for Uctx {
    fn default() -> Self {
        Self::new()
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
}

/// The object tables of one device.
#[derive(Debug)]
pub struct Objects {
    pub uctxs: Table<Uctx>,
    pub pds: Table<Pd>,
    pub mrs: Table<Mr>,
    pub cqs: Table<Cq>,
    pub eqs: Table<Eq>,
    /// QPs by the index part of their QPN.
    pub qps: Table<Qp>,
    /// Page-list entries held by all MRs (bounded by MAX_MTT_ENTRIES).
    mtt_entries: usize,
    generations: Generations,
}

impl Objects {
    pub fn new() -> Self {
        Objects {
            uctxs: Table::new(bar0::MAX_UCTX_RESET as usize + 1),
            pds: Table::new(bar0::MAX_PD_RESET as usize),
            mrs: Table::new(bar0::MAX_MR_RESET as usize),
            cqs: Table::new(bar0::MAX_CQ_RESET as usize),
            eqs: Table::new(bar0::MAX_EQ_RESET as usize),
            qps: Table::new((bar0::MAX_QP_RESET as usize).min(1 << QPN_INDEX_BITS)),
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

    pub fn remove_qp(&mut self, qpn: u32) -> Option<Qp> {
        self.qp(qpn)?;
        self.qps.remove(qpn & QPN_INDEX_MASK)
    }

    /// The MR named by `key`, if live (index and variant both match).
    pub fn mr_by_key(&self, key: u32) -> Option<&Mr> {
        let (index, _) = mr::split_key(key);
        self.mrs.get(index).filter(|mr| mr.key == key)
    }

    /// A free MR index and the key an MR registered there gets.
    pub fn next_mr_key(&mut self) -> Option<(usize, u32)> {
        let index = self.mrs.free_index(1)?;
        let variant = Generations::bump(&mut self.generations.mr, index);
        Some((index, (index as u32) << 8 | u32::from(variant)))
    }

    /// Whether an MR holding `entries` more page-list entries fits the device's budget.
    pub fn mtt_room_for(&self, entries: usize) -> bool {
        self.mtt_entries.saturating_add(entries) <= MAX_MTT_ENTRIES
    }

    pub fn insert_mr(&mut self, index: usize, mr: Mr) {
        self.mtt_entries += mr.pages.entries_held();
        self.mrs.insert_at(index, mr);
    }

    pub fn remove_mr(&mut self, key: u32) -> Option<Mr> {
        self.mr_by_key(key)?;
        let mr = self.mrs.remove(key >> 8)?;
        self.mtt_entries -= mr.pages.entries_held();
        Some(mr)
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
        let (_, before) = o.next_mr_key().unwrap();
        o.reset();
        let (_, after) = o.next_mr_key().unwrap();
        assert_ne!(before, after);
        assert_eq!(before >> 8, after >> 8);
    }
}
