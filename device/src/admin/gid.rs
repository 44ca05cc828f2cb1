//! SET_GID: the driver sets or clears one entry of a RoCE-mode port's GID table (SPEC
//! "Link modes", cmd_set_gid). The entry is published in the fabric's GID directory at
//! once, so datagrams and connections to that GID route here from the next look-up on.

use super::error::{bad_field, permission, CmdError, CmdResult};
use crate::addr::Gid;
use crate::rnic::{Rnic, RnicState};
use vrnic_hw::{AqStatus, CmdSetGid, GidType, GID_TABLE_LEN, KERNEL_UCTX, PORT_NUM};

pub fn set_gid(rnic: &Rnic, st: &mut RnicState, cmd: &CmdSetGid) -> CmdResult<[u32; 4]> {
    if cmd.uctx.to_native() != KERNEL_UCTX {
        return Err(permission(CmdSetGid::UCTX_OFF));
    }
    if !rnic.link().is_eth() {
        // IB mode: the one GID is fixed (fe80:: and the port GUID).
        return Err(CmdError::general(AqStatus::NotSupported));
    }
    if u32::from(cmd.port) != PORT_NUM {
        return Err(bad_field(CmdSetGid::PORT_OFF));
    }
    if u32::from(cmd.index) >= GID_TABLE_LEN {
        return Err(bad_field(CmdSetGid::INDEX_OFF));
    }
    let gid = Gid(cmd.gid);
    let entry = match cmd.valid {
        1 => {
            if GidType::try_from(cmd.gid_type) != Ok(GidType::RoceV2) {
                return Err(bad_field(CmdSetGid::GID_TYPE_OFF));
            }
            // The zero GID is no address: clearing is valid = 0.
            if gid.is_zero() {
                return Err(bad_field(CmdSetGid::GID_OFF));
            }
            Some(gid)
        }
        0 => {
            if cmd.gid_type != 0 {
                return Err(bad_field(CmdSetGid::GID_TYPE_OFF));
            }
            if !gid.is_zero() {
                return Err(bad_field(CmdSetGid::GID_OFF));
            }
            None
        }
        _ => return Err(bad_field(CmdSetGid::VALID_OFF)),
    };
    rnic.gids(st).set(cmd.index, entry);
    log::debug!(
        "{}: GID {} {}",
        rnic.name(),
        cmd.index,
        match entry {
            Some(g) => format!("set to {:02x?}", g.0),
            None => "cleared".into(),
        }
    );
    Ok([0; 4])
}
