//! ALLOC_MW and DEALLOC_MW (SPEC "Memory keys"): windows are bound and invalidated by work
//! requests (datapath::memory_ops); the admin queue only creates and destroys them.

use super::commands::owned;
use super::error::{bad_field, bad_handle, no_resources, CmdResult};
use crate::objects::keys::Window;
use crate::objects::Mkey;
use crate::rnic::RnicState;
use vrnic_hw::{CmdAllocMw, CmdHandle, MwType, MAX_MW};

/// ALLOC_MW: an unbound window of a PD; result0 = its rkey.
pub fn alloc_mw(st: &mut RnicState, cmd: &CmdAllocMw) -> CmdResult<[u32; 4]> {
    let pdn = cmd.pdn.to_native();
    let pd = st
        .objects
        .pds
        .get(pdn)
        .ok_or(bad_handle(CmdAllocMw::PDN_OFF))?;
    owned(pd.uctx, cmd.uctx.to_native(), CmdAllocMw::UCTX_OFF)?;
    let uctx = pd.uctx;
    let kind = MwType::try_from(cmd.mw_type).map_err(|_| bad_field(CmdAllocMw::MW_TYPE_OFF))?;
    if st.objects.windows() >= MAX_MW as usize {
        return Err(no_resources());
    }
    let (index, key) = st.objects.next_key().ok_or_else(no_resources)?;
    st.objects.insert_key(
        index,
        Mkey::Window(Window {
            key,
            pdn,
            uctx,
            kind,
            binding: None,
        }),
    );
    Ok([key, 0, 0, 0])
}

/// DEALLOC_MW: `handle` is the window's rkey, any variant of its index (a BIND_MW that
/// failed may have left the driver with a newer one). The completion waits for transfers
/// in flight, as DEREG_MR's does: the window gave access until now.
pub fn dealloc_mw(st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let key = cmd.handle.to_native();
    let Some(window @ Mkey::Window(_)) = st.objects.mkey_at(key) else {
        return Err(bad_handle(CmdHandle::HANDLE_OFF));
    };
    owned(window.uctx(), cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    st.objects.remove_key(key);
    Ok([0; 4])
}
