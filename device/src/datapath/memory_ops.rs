//! Work requests on memory keys (SPEC "Memory operations"): REG_MR, LOCAL_INV and BIND_MW
//! execute at the head of the send queue, under the requester's lock, and touch no remote
//! memory; and the target side of SEND_WITH_INV.
//!
//! Revocation and copies: a transfer resolves its guest pieces (plain guest addresses, in
//! its own list) under the device lock and copies them with no lock held, so a key changed
//! meanwhile never leaves a copy reading device state that is gone. What an invalidation
//! must still wait for is the guest-visible promise that no access through the key
//! happens after the work request completes: LOCAL_INV and a BIND_MW that replaces or
//! removes a binding complete only after the DMA fence (as DEREG_MR does), so every
//! transfer that was accepted through the old key has ended. A SEND_WITH_INV invalidates
//! at its target without that wait: it runs on the target's data path, which may itself
//! hold a transfer, and the requests its sender made before it through the key have
//! completed already (a connection's requests execute in order).

use crate::guest_memory::RamSnapshot;
use crate::objects::keys::{Binding, Window};
use crate::objects::mr;
use crate::objects::page_list::GuestPages;
use crate::objects::{Mkey, Mr, Objects, Qp};
use vrnic_hw::{
    Access, BindMwSeg, MwType, RegMrSeg, SendFlags, SendWqeHeader, VendorErr, WcStatus, WrOpcode,
    KERNEL_UCTX, PAGE_SHIFT_MAX, PAGE_SHIFT_MIN,
};

/// A failed memory operation: its completion status and the device's reason.
pub type Failure = (WcStatus, VendorErr);

/// What a memory operation that succeeded asks of its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Complete it now.
    Now,
    /// Access was revoked: complete it once the transfers in flight have ended.
    AfterFence,
}

/// Whether `opcode` is a memory operation (executed here rather than sent).
pub fn is_memory_op(opcode: u8) -> bool {
    matches!(
        WrOpcode::try_from(opcode),
        Ok(WrOpcode::RegMr | WrOpcode::LocalInv | WrOpcode::BindMw)
    )
}

const BAD_WQE: Failure = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
const BAD_OPCODE: Failure = (WcStatus::LocQpOpErr, VendorErr::BadOpcode);
const MKEY_STATE: Failure = (WcStatus::LocProtErr, VendorErr::MkeyState);
const BIND_STATE: Failure = (WcStatus::MwBindErr, VendorErr::MkeyState);

/// Executes the memory operation `wqe` (at `addr`) of QP `qpn`.
pub fn execute(
    objects: &mut Objects,
    mem: &RamSnapshot,
    qpn: u32,
    addr: u64,
    wqe: &SendWqeHeader,
) -> Result<Done, Failure> {
    let qp = objects.qp(qpn).ok_or(BAD_WQE)?;
    // Memory operations are for connected QPs (RC, UC), never datagrams.
    if qp.is_datagram() {
        return Err(BAD_OPCODE);
    }
    let stride = 1u64 << qp.sq.ring.entry_shift;
    let with_seg = (SendWqeHeader::SIZE + RegMrSeg::SIZE) as u64;
    if wqe.nonzero_reserved().is_some()
        || wqe.num_sge != 0
        || wqe.inline_len.to_native() != 0
        || wqe.flags & u8::from(SendFlags::Inline) != 0
    {
        return Err(BAD_WQE);
    }
    let owner = Owner::of(qp);
    let seg_at = addr + SendWqeHeader::SIZE as u64;
    let key = wqe.rkey.to_native();
    match WrOpcode::try_from(wqe.opcode) {
        Ok(WrOpcode::RegMr) => {
            if qp.uctx != KERNEL_UCTX {
                return Err(BAD_OPCODE);
            }
            if stride < with_seg {
                return Err(BAD_WQE);
            }
            let seg: RegMrSeg = mem
                .read_obj(seg_at)
                .map_err(|_| (WcStatus::LocQpOpErr, VendorErr::DmaFault))?;
            if seg.nonzero_reserved().is_some() {
                return Err(BAD_WQE);
            }
            reg_mr(objects, mem, owner, key, &seg).map(|()| Done::Now)
        }
        Ok(WrOpcode::LocalInv) => local_inv(objects, owner, key),
        Ok(WrOpcode::BindMw) => {
            if stride < with_seg {
                return Err(BAD_WQE);
            }
            let seg: BindMwSeg = mem
                .read_obj(seg_at)
                .map_err(|_| (WcStatus::LocQpOpErr, VendorErr::DmaFault))?;
            if seg.nonzero_reserved().is_some() {
                return Err(BAD_WQE);
            }
            bind_mw(objects, owner, key, &seg)
        }
        _ => Err(BAD_OPCODE),
    }
}

/// The QP a memory operation acts for: its keys must be of its context and PD.
#[derive(Debug, Clone, Copy)]
struct Owner {
    qpn: u32,
    uctx: u32,
    pdn: u32,
}

impl Owner {
    fn of(qp: &Qp) -> Self {
        Owner {
            qpn: qp.qpn,
            uctx: qp.uctx,
            pdn: qp.pdn,
        }
    }

    fn owns(&self, entry: &Mkey) -> bool {
        entry.uctx() == self.uctx && entry.pdn() == self.pdn
    }
}

/// REG_MR: a FREE fast-registration MR of the QP's context and PD becomes VALID under
/// `key`, over the pages the WQE's list names (read now: at most `max_pages` u64s).
fn reg_mr(
    objects: &mut Objects,
    mem: &RamSnapshot,
    owner: Owner,
    key: u32,
    seg: &RegMrSeg,
) -> Result<(), Failure> {
    let Some(Mkey::FastReg(frmr)) = objects.mkey_at(key) else {
        return Err(MKEY_STATE);
    };
    if frmr.valid.is_some() || frmr.uctx != owner.uctx || frmr.pdn != owner.pdn {
        return Err(MKEY_STATE);
    }
    let npages = u64::from(seg.npages.to_native());
    let shift = u32::from(seg.page_shift);
    let (iova, length, access) = (
        seg.iova.to_native(),
        seg.length.to_native(),
        seg.access.to_native(),
    );
    if npages == 0
        || npages > u64::from(frmr.max_pages)
        || !(PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&shift)
        || access & u32::from(Access::MwBind) != 0
        || !mr::valid_access(access)
        || iova.checked_add(length).is_none()
    {
        return Err(MKEY_STATE);
    }
    let page_size = 1u64 << shift;
    let first_offset = iova & (page_size - 1);
    if first_offset + length > npages << shift {
        return Err(MKEY_STATE);
    }
    let list = seg.page_list.to_native();
    if !list.is_multiple_of(8) || list % 4096 + npages * 8 > 4096 {
        return Err(MKEY_STATE);
    }
    let mut bytes = vec![0u8; (npages * 8) as usize];
    mem.read(list, &mut bytes)
        .map_err(|_| (WcStatus::LocProtErr, VendorErr::DmaFault))?;
    let pages: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    if pages
        .iter()
        .any(|p| p & (page_size - 1) != 0 || p.checked_add(page_size).is_none())
    {
        return Err(MKEY_STATE);
    }
    let (pdn, uctx) = (frmr.pdn, frmr.uctx);
    objects.rekey(key);
    if let Some(Mkey::FastReg(frmr)) = objects.mkey_at_mut(key) {
        frmr.valid = Some(Mr {
            key,
            pdn,
            uctx,
            iova,
            length,
            access,
            pages: GuestPages::list(pages, shift),
            first_offset,
        });
    }
    Ok(())
}

/// LOCAL_INV: a VALID fast-registration MR or a bound type 2 window of the QP's context and
/// PD, named exactly, becomes FREE.
fn local_inv(objects: &mut Objects, owner: Owner, key: u32) -> Result<Done, Failure> {
    let entry = objects.mkey_mut(key).ok_or(MKEY_STATE)?;
    if !owner.owns(entry) {
        return Err(MKEY_STATE);
    }
    if !invalidate(entry, None) {
        return Err(MKEY_STATE);
    }
    Ok(Done::AfterFence)
}

/// Makes a VALID fast-registration MR or a bound type 2 window FREE; `bound_qpn`, if given,
/// is the QP a window must be bound to (remote invalidation). False if the entry is
/// neither (and then nothing changed).
fn invalidate(entry: &mut Mkey, bound_qpn: Option<u32>) -> bool {
    match entry {
        Mkey::FastReg(frmr) if frmr.valid.is_some() => {
            frmr.valid = None;
            true
        }
        Mkey::Window(Window {
            kind: MwType::Type2,
            binding: binding @ Some(_),
            ..
        }) if bound_qpn.is_none() || binding.and_then(|b| b.qpn) == bound_qpn => {
            *binding = None;
            true
        }
        _ => false,
    }
}

/// SEND_WITH_INV at its target QP `qpn` (of PD `pdn`): whether `key` names, exactly, a
/// VALID fast-registration MR or a type 2 window bound to the QP, of the QP's PD.
pub fn can_invalidate_remotely(objects: &Objects, key: u32, qpn: u32, pdn: u32) -> bool {
    objects.mkey(key).is_some_and(|entry| {
        entry.pdn() == pdn
            && match entry {
                Mkey::FastReg(frmr) => frmr.valid.is_some(),
                Mkey::Window(w) => {
                    w.kind == MwType::Type2 && w.binding.is_some_and(|b| b.qpn == Some(qpn))
                }
                Mkey::Mr(_) => false,
            }
    })
}

/// SEND_WITH_INV, once the data is placed: invalidates `key` for target QP `qpn` of PD
/// `pdn`. False (and nothing changed) if the key may not be invalidated.
pub fn invalidate_remotely(objects: &mut Objects, key: u32, qpn: u32, pdn: u32) -> bool {
    if !can_invalidate_remotely(objects, key, qpn, pdn) {
        return false;
    }
    objects
        .mkey_mut(key)
        .is_some_and(|entry| invalidate(entry, Some(qpn)))
}

/// BIND_MW: binds (or, type 1 with length 0, unbinds) the window at `key`'s index to part
/// of an MR; the window then answers only to `key`.
fn bind_mw(
    objects: &mut Objects,
    owner: Owner,
    key: u32,
    seg: &BindMwSeg,
) -> Result<Done, Failure> {
    let Some(Mkey::Window(window)) = objects.mkey_at(key) else {
        return Err(BIND_STATE);
    };
    if window.pdn != owner.pdn || window.uctx != owner.uctx {
        return Err(BIND_STATE);
    }
    let (kind, was_bound) = (window.kind, window.binding.is_some());
    let binding = match kind {
        MwType::Type2 if was_bound => return Err(BIND_STATE),
        MwType::Type1 if seg.length.to_native() == 0 => None,
        _ => Some(check_binding(objects, owner, seg, kind)?),
    };
    objects.rekey(key);
    if let Some(Mkey::Window(w)) = objects.mkey_at_mut(key) {
        w.binding = binding;
    }
    // A type 1 window that was bound gave access until now (rebinding replaces it).
    Ok(if was_bound {
        Done::AfterFence
    } else {
        Done::Now
    })
}

/// The binding a BIND_MW segment asks for, checked against its MR.
fn check_binding(
    objects: &Objects,
    owner: Owner,
    seg: &BindMwSeg,
    kind: MwType,
) -> Result<Binding, Failure> {
    let mr_key = seg.mr_lkey.to_native();
    let (addr, length, access) = (
        seg.addr.to_native(),
        seg.length.to_native(),
        seg.access.to_native(),
    );
    let mr = objects.mr_by_key(mr_key).ok_or(BIND_STATE)?;
    if mr.pdn != owner.pdn || mr.uctx != owner.uctx {
        return Err(BIND_STATE);
    }
    if !mr.allows(u32::from(Access::MwBind)) {
        return Err((WcStatus::MwBindErr, VendorErr::LocalAccess));
    }
    let remote = u32::from(Access::RemoteWrite)
        | u32::from(Access::RemoteRead)
        | u32::from(Access::RemoteAtomic);
    let needs_local = u32::from(Access::RemoteWrite) | u32::from(Access::RemoteAtomic);
    if access & !remote != 0
        || (access & needs_local != 0 && !mr.allows(u32::from(Access::LocalWrite)))
    {
        return Err(BIND_STATE);
    }
    mr.range(addr, length).ok_or(BIND_STATE)?;
    Ok(Binding {
        mr_key,
        addr,
        length,
        access,
        qpn: (kind == MwType::Type2).then_some(owner.qpn),
    })
}
