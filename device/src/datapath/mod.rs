//! The data path: executes work requests between the devices of the process (SPEC
//! "Posting work", "Send queue processing", "Data placement").
//!
//! A transfer is resolved under the requester's device lock (WQE, local pieces, one chunk
//! of at most `CHUNK` bytes), accepted under the target's lock (keys, receive WQE, PSN),
//! copied with no lock held, then completed under each lock in turn. Both devices' DMA
//! fences see the transfer while it is in flight, so commands that revoke memory wait for
//! it. Work per pass is bounded per QP (`WQE_BUDGET`, one chunk) and per device
//! (`DEVICE_BYTES_PER_PASS`), and each pass starts where the previous one stopped.

pub mod atomic;
pub mod capture;
pub mod copy;
pub mod datagram;
pub mod grh;
pub mod memory_ops;
pub mod receive;
pub mod requester;
pub mod responder;
pub mod sge;
pub mod wire;

use crate::addr::Address;
use crate::rnic::notify::deliver_held_back;
use crate::rnic::{Rnic, RnicState};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of one message moved per transfer.
pub const CHUNK: u64 = 1 << 20;
/// WQEs one QP may execute per pass, so one busy QP cannot starve the others.
pub const WQE_BUDGET: usize = 32;
/// Bytes one device may move per pass, so one device cannot starve the others.
pub const DEVICE_BYTES_PER_PASS: u64 = 4 * CHUNK;
/// How soon the poller looks again while events wait for room in an EQ (drivers do not
/// kick when they consume EQEs).
const EVENT_RETRY: Duration = Duration::from_millis(1);

/// Where a packet goes.
pub enum Route {
    /// A device of this process: the request is handed to its responder.
    Device(Arc<Rnic>),
    /// No device of this process: out of the requesting device's wire port (`wire`).
    Wire,
}

/// The devices a requester can reach: the layer above (the fabric) routes.
pub trait Peers: Sync {
    /// The route to `to`, or None for an address nothing answers to.
    fn route(&self, to: &Address) -> Option<Route>;
    /// `rnic`'s wire port and wire QPs, if the fabric attached it to a switch.
    fn wire(&self, _rnic: &Rnic) -> Option<Arc<wire::WireDevice>> {
        None
    }
}

/// What one pass over some QPs achieved.
#[derive(Debug, Default, Clone, Copy)]
pub struct Progress {
    /// Some WQE was executed or completed.
    pub worked: bool,
    /// The earliest time a waiting WQE (or event) wants another look.
    pub retry_at: Option<Instant>,
}

impl Progress {
    pub fn worked() -> Self {
        Progress {
            worked: true,
            retry_at: None,
        }
    }

    pub fn merge(&mut self, other: Progress) {
        self.worked |= other.worked;
        self.retry_at = match (self.retry_at, other.retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// What a pass may still spend on one device.
pub struct Budget {
    pub bytes: u64,
}

/// Marks the QPs whose doorbell a driver flagged since the last look (SPEC "Posting work":
/// PAGE_FLAG, then the page's slot flags, each swapped to 0 before the slot is read).
fn find_rung_doorbells(rnic: &Rnic, st: &mut RnicState) {
    let mut slots = Vec::new();
    for page in rnic.doorbells.given_pages() {
        if !rnic.doorbells.take_page_flag(page) {
            continue;
        }
        // Pairs with the driver's order: slot value, slot flag, PAGE_FLAG.
        fence(Ordering::SeqCst);
        slots.clear();
        rnic.doorbells.take_slot_flags(page, &mut slots);
        for &slot in &slots {
            // Flags on CQ, EQ or free slots name no QP: ignored (flags are hints).
            if let Some(qpn) = st.objects.qp_by_slot(page, slot) {
                rnic.trace.qp_doorbell(qpn, page, slot, |field| {
                    rnic.doorbells.slot_word(page, slot, field)
                });
                st.objects.mark_active(qpn);
            }
        }
    }
}

/// One pass over the QPs of `rnic`: the flagged doorbells join the active QPs; one look
/// under the lock finds which of those have work (a doorbell ahead of the device, a queue
/// to flush, a retry due); only those are served, and the idle ones leave the set.
pub fn poll_device(peers: &dyn Peers, rnic: &Arc<Rnic>, now: Instant) -> Progress {
    let mut progress = Progress::default();
    let (busy, start) = {
        let mut st = rnic.lock();
        if !st.serving() {
            return progress;
        }
        // Under the device lock, as a stall is recorded (`faults::act::apply`).
        if let Some(until) = rnic.faults.stalled(now) {
            progress.retry_at = Some(until);
            return progress;
        }
        if let Some(mem) = st.mem() {
            if deliver_held_back(rnic, &mut st, &mem) {
                progress.retry_at = Some(now + EVENT_RETRY);
            }
        }
        find_rung_doorbells(rnic, &mut st);
        let mut busy = Vec::new();
        let mut idle = Vec::new();
        for qpn in st.objects.active_qps() {
            let Some(qp) = st.objects.qp(qpn) else {
                idle.push(qpn);
                continue;
            };
            match requester::look(rnic, qp, now) {
                requester::Look::Idle => idle.push(qpn),
                requester::Look::Work => busy.push(qpn),
                requester::Look::WaitUntil(at) => progress.merge(Progress {
                    worked: false,
                    retry_at: Some(at),
                }),
            }
        }
        for qpn in idle {
            st.objects.mark_idle(qpn);
        }
        let start = st.poll_cursor % busy.len().max(1);
        (busy, start)
    };
    if wire::on() {
        progress.merge(wire::poll(peers, rnic, now));
    }
    let mut budget = Budget {
        bytes: DEVICE_BYTES_PER_PASS,
    };
    let mut visited = 0;
    for &qpn in busy[start..].iter().chain(&busy[..start]) {
        if budget.bytes == 0 {
            break;
        }
        progress.merge(requester::service_qp(peers, rnic, qpn, now, &mut budget));
        visited += 1;
    }
    if visited < busy.len() {
        // The budget ran out: the next pass starts with the QPs this one did not reach.
        rnic.lock().poll_cursor = start + visited;
    }
    progress
}
