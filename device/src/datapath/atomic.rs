//! Atomics (SPEC "Atomics"): the WQE of ATOMIC_CMP_AND_SWP and ATOMIC_FETCH_AND_ADD at the
//! requester, and the read-modify-write of the 8-byte word at the target.
//!
//! Atomicity (atomic_cap HCA): every atomic of every device of this process takes one
//! process-wide lock, `ATOMICS`, around its read-modify-write. It cannot be keyed on the
//! host address of the word: a VMM may map one guest page into two devices at different
//! host addresses, and two guests may share memory, so a per-address lock could let two
//! atomics on the same word run at once. One lock is correct whatever the mappings, and an
//! atomic holds it for two 8-byte accesses only. It is a leaf lock (lock_order rule 2):
//! nothing is taken while it is held. The in-process path takes it with no device lock
//! held; the wire's responder under its device lock (a leaf may be).

use super::copy::{Fault, Pieces};
use crate::guest_memory::RamSnapshot;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use vrnic_hw::{AtomicSeg, SendFlags, SendWqeHeader, Sge, VendorErr, WcStatus, WrOpcode};

/// Serializes every atomic of the process (see the module comment).
static ATOMICS: Mutex<()> = Mutex::new(());

/// Bytes an atomic operates on (and returns).
pub const ATOMIC_LEN: u64 = 8;

pub fn is_atomic(opcode: WrOpcode) -> bool {
    matches!(
        opcode,
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
    )
}

/// An atomic WQE's operands and its one SGE (which receives the original value), checked
/// for the layout SPEC requires: header, atomic_seg at `seg_at` (32; XRC_INI: 48), exactly
/// one sge of length 8 after it, no inline data (else LOC_QP_OP_ERR/BAD_WQE).
pub fn read_wqe(
    mem: &RamSnapshot,
    addr: u64,
    seg_at: u64,
    wqe: &SendWqeHeader,
    stride: u64,
) -> Result<(AtomicSeg, Sge), (WcStatus, VendorErr)> {
    let bad = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    let sge_at = seg_at + AtomicSeg::SIZE as u64;
    if wqe.num_sge != 1
        || wqe.flags & u8::from(SendFlags::Inline) != 0
        || wqe.inline_len.to_native() != 0
        || sge_at + Sge::SIZE as u64 > stride
    {
        return Err(bad);
    }
    let dma = (WcStatus::LocQpOpErr, VendorErr::DmaFault);
    let seg: AtomicSeg = mem.read_obj(addr + seg_at).map_err(|_| dma)?;
    let sge: Sge = mem.read_obj(addr + sge_at).map_err(|_| dma)?;
    if u64::from(sge.length.to_native()) != ATOMIC_LEN {
        return Err(bad);
    }
    Ok((seg, sge))
}

/// The new value of a word holding `old`.
fn apply(opcode: WrOpcode, seg: &AtomicSeg, old: u64) -> u64 {
    let compare_add = seg.compare_add.to_native();
    match opcode {
        WrOpcode::AtomicCmpAndSwp if old == compare_add => seg.swap.to_native(),
        WrOpcode::AtomicFetchAndAdd => old.wrapping_add(compare_add),
        _ => old,
    }
}

/// Executes the atomic on the target word (`target`: one 8-byte aligned piece of
/// `target_mem`) and returns its original value (Fault::Source: the word could not be
/// accessed). The wire's responder calls this alone: its requester is another host.
pub fn read_modify_write(
    opcode: WrOpcode,
    seg: &AtomicSeg,
    target_mem: &RamSnapshot,
    target: &Pieces,
) -> Result<u64, Fault> {
    let &[(word, ATOMIC_LEN)] = target.as_slice() else {
        return Err(Fault::Source);
    };
    let _serialized = ATOMICS.lock().unwrap_or_else(|p| p.into_inner());
    let old = target_mem
        .load_u64(word, Ordering::SeqCst)
        .map_err(|_| Fault::Source)?;
    let new = apply(opcode, seg, old);
    if new != old {
        target_mem
            .store_u64(word, new, Ordering::SeqCst)
            .map_err(|_| Fault::Source)?;
    }
    Ok(old)
}

/// Executes the atomic on the target word (`target`: one 8-byte aligned piece of
/// `target_mem`) and writes its original value into the requester's `local` pieces.
/// Fault::Source: the target word could not be accessed; Fault::Destination: the local
/// buffer could not be written (the target word has been updated: as on a wire, the
/// response was lost on the way back).
pub fn execute(
    opcode: WrOpcode,
    seg: &AtomicSeg,
    target_mem: &RamSnapshot,
    target: &Pieces,
    local_mem: &RamSnapshot,
    local: &Pieces,
) -> Result<(), Fault> {
    let old = read_modify_write(opcode, seg, target_mem, target)?;
    let bytes = old.to_le_bytes();
    let mut done = 0usize;
    for &(addr, len) in local {
        let n = usize::try_from(len).map_err(|_| Fault::Destination)?;
        let part = bytes.get(done..done + n).ok_or(Fault::Destination)?;
        local_mem
            .write(addr, part)
            .map_err(|_| Fault::Destination)?;
        done += n;
    }
    match done == bytes.len() {
        true => Ok(()),
        false => Err(Fault::Destination),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(compare_add: u64, swap: u64) -> AtomicSeg {
        AtomicSeg {
            compare_add: compare_add.into(),
            swap: swap.into(),
        }
    }

    #[test]
    fn compare_and_swap_stores_swap_only_on_a_match_and_fetch_and_add_wraps() {
        let cas = WrOpcode::AtomicCmpAndSwp;
        let faa = WrOpcode::AtomicFetchAndAdd;
        assert_eq!(apply(cas, &seg(5, 9), 5), 9);
        assert_eq!(apply(cas, &seg(5, 9), 6), 6);
        assert_eq!(apply(faa, &seg(3, 0), u64::MAX - 1), 1);
    }

    #[test]
    fn concurrent_fetch_and_adds_through_two_mappings_of_one_page_lose_nothing() {
        use crate::guest_memory::{DmaMapRequest, GuestRam};
        let fd = crate::memfd::create(c"atomics", 0x1000).unwrap();
        // One page of "guest RAM" mapped at two guest addresses (two host mappings).
        let ram = GuestRam::new();
        for addr in [0x10_0000u64, 0x20_0000] {
            ram.map(DmaMapRequest {
                addr,
                size: 0x1000,
                file_offset: 0,
                readable: true,
                writable: true,
                fd: Some(fd.try_clone().unwrap()),
            })
            .unwrap();
        }
        let mem = ram.snapshot();
        let threads: Vec<_> = [0x10_0000u64, 0x20_0000]
            .into_iter()
            .enumerate()
            .map(|(i, word)| {
                let mem = mem.clone();
                std::thread::spawn(move || {
                    let local = vec![(0x10_0100 + 8 * i as u64, 8)];
                    for _ in 0..10_000 {
                        let add = seg(1, 0);
                        execute(
                            WrOpcode::AtomicFetchAndAdd,
                            &add,
                            &mem,
                            &vec![(word, 8)],
                            &mem,
                            &local,
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(mem.load_u64(0x10_0000, Ordering::SeqCst).unwrap(), 20_000);
    }
}
