//! Scatter/gather lists: reading them from a WQE and resolving them through MRs.

use super::copy::Pieces;
use crate::guest_memory::{DmaError, RamSnapshot};
use crate::objects::Objects;
use vrnic_hw::{bar0, Sge, VendorErr, WcStatus};

/// Reads `count` SGEs at `addr`.
pub fn read(mem: &RamSnapshot, addr: u64, count: usize) -> Result<Vec<Sge>, DmaError> {
    (0..count as u64)
        .map(|i| mem.read_obj(addr + i * Sge::SIZE as u64))
        .collect()
}

/// Checks each SGE against its MR (key, PD, `access`, bounds) and returns the guest pieces
/// and the total length.
pub fn resolve(
    objects: &Objects,
    pdn: u32,
    sges: &[Sge],
    access: u32,
) -> Result<(Pieces, u64), (WcStatus, VendorErr)> {
    let mut pieces = Vec::with_capacity(sges.len());
    let mut total: u64 = 0;
    for sge in sges {
        let len = u64::from(sge.length.to_native());
        if len == 0 {
            continue;
        }
        let mr = objects
            .mr_by_key(sge.lkey.to_native())
            .ok_or((WcStatus::LocProtErr, VendorErr::BadLkey))?;
        if mr.pdn != pdn {
            return Err((WcStatus::LocProtErr, VendorErr::PdMismatch));
        }
        if !mr.allows(access) {
            return Err((WcStatus::LocAccessErr, VendorErr::LocalAccess));
        }
        let range = mr
            .range(sge.addr.to_native(), len)
            .ok_or((WcStatus::LocProtErr, VendorErr::LocalBounds))?;
        pieces.extend(range);
        total += len;
    }
    if total > u64::from(bar0::MAX_MSG_SIZE_RESET) {
        return Err((WcStatus::LocLenErr, VendorErr::Length));
    }
    Ok((pieces, total))
}
