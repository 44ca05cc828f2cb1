//! Every object the admin queue creates, in bounded tables.

pub mod mr;
pub mod page_list;
pub mod qp;
pub mod queues;
pub mod table;

use table::Table;
use vrnic_hw::{bar0, DB_SLOTS_PER_PAGE, QPN_MIN};

pub use mr::Mr;
pub use qp::Qp;
pub use queues::{Cq, Eq, Ring, WorkQueue};

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

/// The object tables of one device.
#[derive(Debug)]
pub struct Objects {
    pub uctxs: Table<Uctx>,
    pub pds: Table<Pd>,
    pub mrs: Table<Mr>,
    /// Variant byte last used per MR index, so a reused index gets a new key.
    pub mr_variants: Vec<u8>,
    pub cqs: Table<Cq>,
    pub eqs: Table<Eq>,
    /// QPs by `qpn - QPN_MIN`.
    pub qps: Table<Qp>,
}

impl Objects {
    pub fn new() -> Self {
        Objects {
            uctxs: Table::new(bar0::MAX_UCTX_RESET as usize + 1),
            pds: Table::new(bar0::MAX_PD_RESET as usize),
            mrs: Table::new(bar0::MAX_MR_RESET as usize),
            mr_variants: Vec::new(),
            cqs: Table::new(bar0::MAX_CQ_RESET as usize),
            eqs: Table::new(bar0::MAX_EQ_RESET as usize),
            qps: Table::new(bar0::MAX_QP_RESET as usize),
        }
    }

    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(qpn.checked_sub(QPN_MIN)?)
    }

    pub fn qp_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.qps.get_mut(qpn.checked_sub(QPN_MIN)?)
    }

    /// The MR named by `key`, if live (index and variant both match).
    pub fn mr_by_key(&self, key: u32) -> Option<&Mr> {
        let (index, _) = mr::split_key(key);
        self.mrs.get(index).filter(|mr| mr.key == key)
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
