//! ALLOC_XRCD and DEALLOC_XRCD (SPEC "XRC"): XRC domains belong to the kernel context.

use super::error::{bad_field, bad_handle, busy, no_resources, permission, CmdResult};
use crate::objects::Xrcd;
use crate::rnic::{Rnic, RnicState};
use vrnic_hw::{CmdHandle, KERNEL_UCTX};

pub fn alloc_xrcd(rnic: &Rnic, st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    if cmd.handle.to_native() != 0 {
        return Err(bad_field(CmdHandle::HANDLE_OFF));
    }
    if cmd.uctx.to_native() != KERNEL_UCTX {
        return Err(permission(CmdHandle::UCTX_OFF));
    }
    let xrcdn = st.objects.xrcds.free_index(0).ok_or_else(no_resources)?;
    st.objects
        .xrcds
        .insert_at(xrcdn, Xrcd { uctx: KERNEL_UCTX });
    log::debug!("{}: XRCD {xrcdn} allocated", rnic.name());
    Ok([xrcdn as u32, 0, 0, 0])
}

pub fn dealloc_xrcd(rnic: &Rnic, st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let xrcdn = cmd.handle.to_native();
    let xrcd = st
        .objects
        .xrcds
        .get(xrcdn)
        .ok_or(bad_handle(CmdHandle::HANDLE_OFF))?;
    if cmd.uctx.to_native() != xrcd.uctx {
        return Err(permission(CmdHandle::UCTX_OFF));
    }
    let o = &st.objects;
    let in_use = o
        .srqs
        .iter()
        .any(|(_, srq)| srq.xrc.is_some_and(|x| x.xrcdn == xrcdn))
        || o.qps.iter().any(|(_, qp)| qp.xrcdn == Some(xrcdn));
    if in_use {
        return Err(busy(CmdHandle::HANDLE_OFF));
    }
    st.objects.xrcds.remove(xrcdn);
    log::debug!("{}: XRCD {xrcdn} deallocated", rnic.name());
    Ok([0; 4])
}
