//! REG_MR, REREG_MR, ALLOC_MR (fast-registration MRs) and DEREG_MR of either.

use super::commands::owned;
use super::error::{bad_field, bad_handle, bad_size, busy, no_resources, permission, CmdResult};
use super::prefetch::PageListReads;
use crate::guest_memory::RamSnapshot;
use crate::objects::keys::{index_of, FastRegMr};
use crate::objects::{mr, Mkey, Mr};
use crate::rnic::RnicState;
use vrnic_hw::{
    bar0, rereg_flags, CmdAllocMr, CmdHandle, CmdRegMr, CmdReregMr, PageList, PageListMode,
    KERNEL_UCTX, MAX_FAST_REG_PAGES,
};

fn max_mr_size() -> u64 {
    u64::from(bar0::MAX_MR_SIZE_HI_RESET) << 32 | u64::from(bar0::MAX_MR_SIZE_LO_RESET)
}

pub fn reg_mr(
    st: &mut RnicState,
    mem: &RamSnapshot,
    reads: &mut PageListReads,
    cmd: &CmdRegMr,
) -> CmdResult<[u32; 4]> {
    let pdn = cmd.pdn.to_native();
    let pd = st
        .objects
        .pds
        .get(pdn)
        .ok_or(bad_handle(CmdRegMr::PDN_OFF))?;
    owned(pd.uctx, cmd.uctx.to_native(), CmdRegMr::UCTX_OFF)?;
    let uctx = pd.uctx;
    let access = cmd.access.to_native();
    if !mr::valid_access(access) {
        return Err(bad_field(CmdRegMr::ACCESS_OFF));
    }
    let (iova, length) = (cmd.iova.to_native(), cmd.length.to_native());
    if length == 0 || length > max_mr_size() {
        return Err(bad_size(CmdRegMr::LENGTH_OFF));
    }
    if iova.checked_add(length).is_none() {
        return Err(bad_field(CmdRegMr::IOVA_OFF));
    }
    // Page lists are copied into host memory: bound their total so no guest can make the
    // device allocate without limit (objects::MAX_MTT_ENTRIES). Contiguous lists take none.
    let listed = listed_entries(&cmd.pages);
    if !st.objects.mtt_room_for(listed) {
        return Err(no_resources());
    }
    let shift = u32::from(cmd.pages.page_shift).min(63);
    let first_offset = iova & ((1u64 << shift) - 1);
    let pages = reads.read(mem, &cmd.pages, CmdRegMr::PAGES_OFF, first_offset, length)?;
    let (index, key) = st.objects.next_key().ok_or_else(no_resources)?;
    st.objects.insert_mr(
        index,
        Mr {
            key,
            pdn,
            uctx,
            iova,
            length,
            access,
            pages,
            first_offset,
        },
    );
    Ok([key, 0, 0, 0])
}

/// Page-list entries a list holds against the device's budget (contiguous lists none).
fn listed_entries(pages: &PageList) -> usize {
    match PageListMode::try_from(pages.mode) {
        Ok(PageListMode::Contiguous) => 0,
        _ => pages.npages.to_native() as usize,
    }
}

/// REREG_MR (SPEC "Memory keys"): the translation, PD and access of a REG_MR region change
/// in place under the same key, all at once, once every check passed. A transfer resolves
/// its pieces under the device lock, so it sees the old region or the new one; the command
/// completes after the DMA fence (`commands::execute`), so no transfer still uses the old
/// translation when the driver learns it is done.
pub fn rereg_mr(
    st: &mut RnicState,
    mem: &RamSnapshot,
    reads: &mut PageListReads,
    cmd: &CmdReregMr,
) -> CmdResult<[u32; 4]> {
    let key = cmd.mkey.to_native();
    let Some(Mkey::Mr(mr)) = st.objects.mkey(key) else {
        return Err(bad_handle(CmdReregMr::MKEY_OFF));
    };
    owned(mr.uctx, cmd.uctx.to_native(), CmdReregMr::UCTX_OFF)?;
    let flags = cmd.flags.to_native();
    if flags == 0 || flags & !rereg_flags::ALL != 0 {
        return Err(bad_field(CmdReregMr::FLAGS_OFF));
    }
    let (pd, access, translation) = (
        flags & rereg_flags::CHANGE_PD != 0,
        flags & rereg_flags::CHANGE_ACCESS != 0,
        flags & rereg_flags::CHANGE_TRANSLATION != 0,
    );
    let unnamed = [
        (!pd && cmd.pdn.to_native() != 0, CmdReregMr::PDN_OFF),
        (
            !access && cmd.access.to_native() != 0,
            CmdReregMr::ACCESS_OFF,
        ),
        (
            !translation && cmd.iova.to_native() != 0,
            CmdReregMr::IOVA_OFF,
        ),
        (
            !translation && cmd.length.to_native() != 0,
            CmdReregMr::LENGTH_OFF,
        ),
        (
            !translation && cmd.pages != PageList::default(),
            CmdReregMr::PAGES_OFF,
        ),
    ];
    if let Some((_, at)) = unnamed.iter().find(|(set, _)| *set) {
        return Err(bad_field(*at));
    }
    let (uctx, held) = (mr.uctx, mr.pages.entries_held());
    let mut new_pdn = mr.pdn;
    if pd {
        new_pdn = cmd.pdn.to_native();
        let pd = st
            .objects
            .pds
            .get(new_pdn)
            .ok_or(bad_handle(CmdReregMr::PDN_OFF))?;
        if pd.uctx != uctx {
            return Err(permission(CmdReregMr::PDN_OFF));
        }
    }
    let new_access = cmd.access.to_native();
    if access && !mr::valid_access(new_access) {
        return Err(bad_field(CmdReregMr::ACCESS_OFF));
    }
    let translation = match translation {
        false => None,
        true => {
            let (iova, length) = (cmd.iova.to_native(), cmd.length.to_native());
            if length == 0 || length > max_mr_size() {
                return Err(bad_size(CmdReregMr::LENGTH_OFF));
            }
            if iova.checked_add(length).is_none() {
                return Err(bad_field(CmdReregMr::IOVA_OFF));
            }
            // The new list replaces the old one in the budget.
            let listed = listed_entries(&cmd.pages);
            if !st.objects.mtt_room_for(listed.saturating_sub(held)) {
                return Err(no_resources());
            }
            let shift = u32::from(cmd.pages.page_shift).min(63);
            let first_offset = iova & ((1u64 << shift) - 1);
            let pages = reads.read(mem, &cmd.pages, CmdReregMr::PAGES_OFF, first_offset, length)?;
            Some((iova, length, pages, first_offset))
        }
    };
    if st.objects.mkeys().any(|e| e.binds(key)) {
        return Err(busy(CmdReregMr::MKEY_OFF));
    }
    // Every check passed: the new region replaces the old one under the same key.
    let Some(Mkey::Mr(mut mr)) = st.objects.remove_key(key) else {
        return Err(bad_handle(CmdReregMr::MKEY_OFF));
    };
    mr.pdn = new_pdn;
    if access {
        mr.access = new_access;
    }
    if let Some((iova, length, pages, first_offset)) = translation {
        (mr.iova, mr.length, mr.pages, mr.first_offset) = (iova, length, pages, first_offset);
    }
    st.objects.insert_mr(index_of(key) as usize, mr);
    Ok([key, 0, 0, 0])
}

/// ALLOC_MR: a FREE fast-registration MR of the kernel context, with room for `max_pages`.
pub fn alloc_mr(st: &mut RnicState, cmd: &CmdAllocMr) -> CmdResult<[u32; 4]> {
    if cmd.uctx.to_native() != KERNEL_UCTX {
        return Err(permission(CmdAllocMr::UCTX_OFF));
    }
    let pdn = cmd.pdn.to_native();
    let pd = st
        .objects
        .pds
        .get(pdn)
        .ok_or(bad_handle(CmdAllocMr::PDN_OFF))?;
    // Only kernel QPs post REG_MR work requests, and only into MRs of their own PD.
    if pd.uctx != KERNEL_UCTX {
        return Err(permission(CmdAllocMr::PDN_OFF));
    }
    let max_pages = cmd.max_pages.to_native();
    if !(1..=MAX_FAST_REG_PAGES).contains(&max_pages) {
        return Err(bad_size(CmdAllocMr::MAX_PAGES_OFF));
    }
    if !st.objects.mtt_room_for(max_pages as usize) {
        return Err(no_resources());
    }
    let (index, key) = st.objects.next_key().ok_or_else(no_resources)?;
    st.objects.insert_key(
        index,
        Mkey::FastReg(FastRegMr {
            key,
            pdn,
            uctx: KERNEL_UCTX,
            max_pages,
            valid: None,
        }),
    );
    Ok([key, 0, 0, 0])
}

/// DEREG_MR of an MR (its key), or of a fast-registration MR in any state (any variant of
/// its index: a REG_MR work request that failed may have left the driver with a newer key
/// than the MR's). BUSY while windows are bound to the MR.
pub fn dereg_mr(st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let key = cmd.handle.to_native();
    let entry = match st.objects.mkey_at(key) {
        Some(e @ Mkey::FastReg(_)) => e,
        Some(e @ Mkey::Mr(_)) if e.key() == key => e,
        _ => return Err(bad_handle(CmdHandle::HANDLE_OFF)),
    };
    owned(entry.uctx(), cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    if st.objects.mkeys().any(|e| e.binds(key)) {
        return Err(busy(CmdHandle::HANDLE_OFF));
    }
    st.objects.remove_key(key);
    Ok([0; 4])
}
