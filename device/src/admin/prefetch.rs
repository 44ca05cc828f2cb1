//! Page lists read before a command takes the device lock. An INDIRECT list may name 2M
//! pages (16 MiB of entries): reading it is the one unbounded part of a command, and it
//! needs only guest memory, never device state.
//!
//! `prefetch` reads every page list the command carries whose parameters are valid; the
//! handler, under the lock, validates the command in its usual order and takes the result
//! read for exactly the same list and parameters (`read`), so errors are reported as if the
//! list had been read in place.

use super::commands::parse;
use super::queues::{ring_bytes, MAX_DEPTH_LOG2};
use crate::guest_memory::RamSnapshot;
use crate::objects::page_list::{self, GuestPages, PageListError};
use vrnic_hw::{
    AqHeader, AqOpcode, CmdCreateCq, CmdCreateEq, CmdCreateQp, CmdCreateSrq, CmdRegMr, CmdReregMr,
    CmdResizeCq, Cqe, Eqe, PageList,
};

/// Which list of which command, covering what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    at: usize,
    first_offset: u64,
    bytes: u64,
}

impl Key {
    fn new(at: usize, first_offset: u64, bytes: u64) -> Self {
        Key {
            at,
            first_offset,
            bytes,
        }
    }
}

type Read = Result<GuestPages, PageListError>;

#[derive(Default)]
pub struct PageListReads {
    done: Vec<(Key, PageList, Read)>,
}

impl PageListReads {
    /// Reads the page lists of command `cmd` (no device lock needed).
    pub fn prefetch(mem: &RamSnapshot, cmd: &[u8]) -> Self {
        let mut reads = PageListReads::default();
        let hdr: AqHeader = parse(cmd);
        let mut ring = |pl: &PageList, at: usize, depth_log2: u8, entry_size: usize| {
            if (1..=MAX_DEPTH_LOG2).contains(&depth_log2) {
                reads.fetch(mem, pl, at, 0, ring_bytes(depth_log2, entry_size));
            }
        };
        match AqOpcode::try_from(hdr.opcode) {
            Ok(AqOpcode::CreateCq) => {
                let c: CmdCreateCq = parse(cmd);
                ring(&c.ring, CmdCreateCq::RING_OFF, c.depth_log2, Cqe::SIZE);
            }
            Ok(AqOpcode::ResizeCq) => {
                let c: CmdResizeCq = parse(cmd);
                ring(&c.ring, CmdResizeCq::RING_OFF, c.depth_log2, Cqe::SIZE);
            }
            Ok(AqOpcode::CreateEq) => {
                let c: CmdCreateEq = parse(cmd);
                ring(&c.ring, CmdCreateEq::RING_OFF, c.depth_log2, Eqe::SIZE);
            }
            Ok(AqOpcode::CreateQp) => {
                let c: CmdCreateQp = parse(cmd);
                for (pl, at, depth, shift) in [
                    (
                        &c.sq_ring,
                        CmdCreateQp::SQ_RING_OFF,
                        c.sq_depth_log2,
                        c.sq_wqe_shift,
                    ),
                    (
                        &c.rq_ring,
                        CmdCreateQp::RQ_RING_OFF,
                        c.rq_depth_log2,
                        c.rq_wqe_shift,
                    ),
                ] {
                    if shift < 16 {
                        ring(pl, at, depth, 1 << shift);
                    }
                }
            }
            Ok(AqOpcode::CreateSrq) => {
                let c: CmdCreateSrq = parse(cmd);
                if c.wqe_shift < 16 {
                    ring(
                        &c.ring,
                        CmdCreateSrq::RING_OFF,
                        c.depth_log2,
                        1 << c.wqe_shift,
                    );
                }
            }
            Ok(AqOpcode::RegMr) => {
                let c: CmdRegMr = parse(cmd);
                let shift = u32::from(c.pages.page_shift).min(63);
                let first_offset = c.iova.to_native() & ((1u64 << shift) - 1);
                reads.fetch(
                    mem,
                    &c.pages,
                    CmdRegMr::PAGES_OFF,
                    first_offset,
                    c.length.to_native(),
                );
            }
            Ok(AqOpcode::ReregMr) => {
                let c: CmdReregMr = parse(cmd);
                let shift = u32::from(c.pages.page_shift).min(63);
                let first_offset = c.iova.to_native() & ((1u64 << shift) - 1);
                reads.fetch(
                    mem,
                    &c.pages,
                    CmdReregMr::PAGES_OFF,
                    first_offset,
                    c.length.to_native(),
                );
            }
            _ => {}
        }
        reads
    }

    fn fetch(
        &mut self,
        mem: &RamSnapshot,
        pl: &PageList,
        at: usize,
        first_offset: u64,
        bytes: u64,
    ) {
        let key = Key::new(at, first_offset, bytes);
        let read = page_list::read(mem, pl, at, first_offset, bytes);
        self.done.push((key, *pl, read));
    }

    /// The list `pl` at `at` covering `bytes` from `first_offset`: prefetched if it was,
    /// else read now (only when prefetch did not foresee these parameters).
    pub fn read(
        &mut self,
        mem: &RamSnapshot,
        pl: &PageList,
        at: usize,
        first_offset: u64,
        bytes: u64,
    ) -> Read {
        let key = Key::new(at, first_offset, bytes);
        let found = self
            .done
            .iter()
            .position(|(k, list, _)| *k == key && list == pl);
        match found {
            Some(i) => self.done.swap_remove(i).2,
            None => page_list::read(mem, pl, at, first_offset, bytes),
        }
    }
}
