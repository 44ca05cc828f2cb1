//! Malformed CQEs: wrong, foreign, out-of-range or unused QPNs; WQE indices outside the
//! queue or of slots not posted; unknown opcode, status and flag values; a byte_len no
//! buffer can hold; an srqn of no SRQ; a CQE written twice; a CQE of the wrong phase.

use super::{Hostile, Kind, State};
use crate::guest_memory::RamSnapshot;
use crate::objects::{Objects, Qp, Ring};
use crate::rnic::doorbells::DoorbellBar;
use std::sync::atomic::Ordering;
use vm_memory::ByteValued;
use vrnic_hw::{
    bar0, Cqe, DbQpSlot, WcOpcode, CQE_FLAG_RECV, CQE_FLAG_SRQ, MAX_SRQ, QPN_MAX, QPN_MIN,
};

/// What the device writes instead of a CQE.
#[derive(Debug, Clone)]
pub struct CqeWrite {
    entry: Cqe,
    wrong_phase: bool,
    duplicate: bool,
}

/// Flag bits of cqe.flags no spec value has.
const UNKNOWN_FLAGS: u8 = !0b111;
/// Bits of cqe.wc_flags no spec value has (GRH 1, WITH_IMM 2, WITH_INV 8).
const UNKNOWN_WC_FLAGS: u8 = !0b1011;

impl Hostile {
    /// The corrupted write of `cqe` for CQ `cqn`, or None to write it as it is.
    pub fn cqe(
        &self,
        objects: &Objects,
        doorbells: &DoorbellBar,
        cqn: u32,
        cqe: &Cqe,
    ) -> Option<CqeWrite> {
        let mut st = self.active()?;
        let kind = st.draw(super::Class::Cqe)?;
        let mut w = CqeWrite {
            entry: *cqe,
            wrong_phase: false,
            duplicate: false,
        };
        let what = corrupt(&mut st, kind, objects, doorbells, cqn, &mut w)?;
        st.written(&self.device, kind, format_args!("CQ {cqn}: {what}"));
        Some(w)
    }
}

/// Applies `kind` to `w`; what it did, or None where the kind does not apply (no other
/// QP to name, a queue of 65536 entries, ...).
fn corrupt(
    st: &mut State,
    kind: Kind,
    objects: &Objects,
    doorbells: &DoorbellBar,
    cqn: u32,
    w: &mut CqeWrite,
) -> Option<String> {
    let e = &mut w.entry;
    let real_qpn = e.qpn.to_native();
    let rng = &mut st.rng;
    match kind {
        Kind::CqeQpnWrong => {
            let others: Vec<u32> = objects
                .qps
                .iter()
                .map(|(_, qp)| qp.qpn)
                .filter(|&q| q != real_qpn)
                .collect();
            e.qpn = (*rng.pick(&others)?).into();
        }
        Kind::CqeQpnForeign => {
            let uctx = objects.cqs.get(cqn)?.uctx;
            let foreign: Vec<u32> = objects
                .qps
                .iter()
                .filter(|(_, qp)| qp.uctx != uctx)
                .map(|(_, qp)| qp.qpn)
                .collect();
            e.qpn = (*rng.pick(&foreign)?).into();
        }
        Kind::CqeQpnRange => {
            let qpn = match rng.below(2) {
                0 => 1,
                _ => QPN_MAX + 1 + rng.below(u64::from(u32::MAX - QPN_MAX)) as u32,
            };
            e.qpn = qpn.into();
        }
        Kind::CqeQpnFree => {
            let qpn = (0..16)
                .map(|_| rng.range(QPN_MIN, QPN_MAX))
                .find(|&q| objects.qp(q).is_none())?;
            e.qpn = qpn.into();
        }
        Kind::CqeWqeRange => {
            let depth = queue_depth(objects, e)?;
            let over = 0x1_0000u32.checked_sub(depth).filter(|&n| n > 0)?;
            // Below 0x10000: depth + (0..over).
            e.wqe_index = ((depth + rng.below(u64::from(over)) as u32) as u16).into();
        }
        Kind::CqeWqeUnposted => {
            let qp = objects.qp(real_qpn)?;
            let (wq, pi_off) = match (e.flags & CQE_FLAG_RECV as u8 != 0, &qp.srq) {
                (false, _) => (&qp.sq, DbQpSlot::SQ_PI_OFF),
                (true, None) => (&qp.rq, DbQpSlot::RQ_PI_OFF),
                (true, Some(_)) => return None,
            };
            let pi = doorbells.slot_word(qp.db_page, qp.db_slot, pi_off);
            let depth = wq.ring.depth();
            // Slots from the posted producer index up to a full ring past what the
            // device finished hold no posted WQE (the driver retires no later than that).
            let free = depth
                .checked_sub(pi.wrapping_sub(wq.ci))
                .filter(|&n| n > 0)?;
            let index = pi.wrapping_add(rng.below(u64::from(free)) as u32) & (depth - 1);
            e.wqe_index = (index as u16).into();
        }
        Kind::CqeOpcode => {
            e.opcode = (0..64)
                .map(|_| rng.below(256) as u8)
                .find(|&o| WcOpcode::try_from(o).is_err())?;
        }
        Kind::CqeStatus => {
            // wc_status ends at GENERAL_ERR (0x15).
            e.status = rng.range(0x16, 0xff) as u8;
        }
        Kind::CqeFlags => {
            e.flags |= 1 << rng.range(3, 7);
            e.wc_flags |= [4u8, 0x10, 0x20, 0x40, 0x80][rng.below(5) as usize];
            debug_assert!(e.flags & UNKNOWN_FLAGS != 0 && e.wc_flags & UNKNOWN_WC_FLAGS != 0);
        }
        Kind::CqeByteLen => {
            let max = bar0::MAX_MSG_SIZE_RESET;
            e.byte_len = (max + 1 + rng.below(u64::from(u32::MAX - max)) as u32).into();
        }
        Kind::CqeSrqn => {
            let srqn = (0..16)
                .map(|_| rng.below(u64::from(MAX_SRQ)) as u32)
                .find(|&n| objects.srqs.get(n).is_none())
                .unwrap_or(MAX_SRQ + rng.below(0x1000) as u32);
            e.flags |= CQE_FLAG_SRQ as u8;
            e.srqn = srqn.into();
        }
        Kind::CqeDuplicate => w.duplicate = true,
        Kind::CqePhase => w.wrong_phase = true,
        _ => return None,
    }
    Some(describe(kind, w))
}

fn describe(kind: Kind, w: &CqeWrite) -> String {
    let e = &w.entry;
    match kind {
        Kind::CqeDuplicate => format!("CQE of QP {:#x} written twice", e.qpn.to_native()),
        Kind::CqePhase => format!("CQE of QP {:#x} with the wrong phase", e.qpn.to_native()),
        _ => format!(
            "qpn {:#x} wqe_index {} opcode {:#x} status {:#x} flags {:#x} wc_flags {:#x} byte_len {:#x} srqn {}",
            e.qpn.to_native(),
            e.wqe_index.to_native(),
            e.opcode,
            e.status,
            e.flags,
            e.wc_flags,
            e.byte_len.to_native(),
            e.srqn.to_native()
        ),
    }
}

/// The depth of the queue a CQE's wqe_index indexes.
fn queue_depth(objects: &Objects, e: &Cqe) -> Option<u32> {
    let qp: &Qp = objects.qp(e.qpn.to_native())?;
    if e.flags & CQE_FLAG_RECV as u8 == 0 {
        return Some(qp.sq.ring.depth());
    }
    match &qp.srq {
        Some(s) => Some(objects.srqs.get(s.srqn)?.ring.depth()),
        None => Some(qp.rq.ring.depth()),
    }
}

/// The entry to write: the corrupted one, or `cqe`.
pub fn entry<'a>(w: &'a Option<CqeWrite>, cqe: &'a Cqe) -> &'a Cqe {
    w.as_ref().map_or(cqe, |w| &w.entry)
}

/// The owner phase to write: `phase`, or the other one.
pub fn phase(w: &Option<CqeWrite>, phase: u8) -> u8 {
    match w {
        Some(w) if w.wrong_phase => phase ^ 1,
        _ => phase,
    }
}

/// Writes the second copy of a duplicated CQE at free-running index `pi` if the ring has
/// room (consumer index `ci`); the number of entries written (0 or 1), which the CQ's
/// producer index then counts.
pub fn duplicate(w: &Option<CqeWrite>, mem: &RamSnapshot, ring: &Ring, pi: u32, ci: u32) -> u32 {
    let Some(w) = w.as_ref().filter(|w| w.duplicate) else {
        return 0;
    };
    if pi.wrapping_sub(ci) >= ring.depth() {
        return 0;
    }
    let Some(addr) = ring.entry_addr(pi) else {
        return 0;
    };
    // As rnic::notify::publish: everything but the owner byte, then the owner (release).
    let bytes = w.entry.as_slice();
    let owner = Cqe::OWNER_OFF;
    let written = mem.write(addr, &bytes[..owner]).is_ok()
        && mem
            .write(addr + owner as u64 + 1, &bytes[owner + 1..])
            .is_ok()
        && mem
            .store_u8(addr + owner as u64, ring.phase(pi), Ordering::Release)
            .is_ok();
    u32::from(written)
}
