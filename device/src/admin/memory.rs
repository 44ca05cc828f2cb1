//! REG_MR and DEREG_MR.

use super::commands::owned;
use super::error::{bad_field, bad_handle, bad_size, no_resources, CmdResult};
use super::prefetch::PageListReads;
use crate::guest_memory::RamSnapshot;
use crate::objects::Mr;
use crate::rnic::RnicState;
use vrnic_hw::{bar0, Access, CmdHandle, CmdRegMr, PageListMode, ACCESS_SUPPORTED_MASK};

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
    let remote_needs_local = u32::from(Access::RemoteWrite) | u32::from(Access::RemoteAtomic);
    if access & !ACCESS_SUPPORTED_MASK != 0
        || (access & remote_needs_local != 0 && access & u32::from(Access::LocalWrite) == 0)
    {
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
    let listed = match PageListMode::try_from(cmd.pages.mode) {
        Ok(PageListMode::Contiguous) => 0,
        _ => cmd.pages.npages.to_native() as usize,
    };
    if !st.objects.mtt_room_for(listed) {
        return Err(no_resources());
    }
    let shift = u32::from(cmd.pages.page_shift).min(63);
    let first_offset = iova & ((1u64 << shift) - 1);
    let pages = reads.read(mem, &cmd.pages, CmdRegMr::PAGES_OFF, first_offset, length)?;
    let (index, key) = st.objects.next_mr_key().ok_or_else(no_resources)?;
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

pub fn dereg_mr(st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let key = cmd.handle.to_native();
    let mr = st
        .objects
        .mr_by_key(key)
        .ok_or(bad_handle(CmdHandle::HANDLE_OFF))?;
    owned(mr.uctx, cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    st.objects.remove_mr(key);
    Ok([0; 4])
}
