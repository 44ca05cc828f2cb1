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

/// Checks every SGE against its MR (key, PD, `access`, bounds) and returns the total
/// length. Costs one look-up per SGE, whatever the lengths.
pub fn check(
    objects: &Objects,
    pdn: u32,
    sges: &[Sge],
    access: u32,
) -> Result<u64, (WcStatus, VendorErr)> {
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
        mr.range(sge.addr.to_native(), len)
            .ok_or((WcStatus::LocProtErr, VendorErr::LocalBounds))?;
        total += len;
    }
    if total > u64::from(bar0::MAX_MSG_SIZE_RESET) {
        return Err((WcStatus::LocLenErr, VendorErr::Length));
    }
    Ok(total)
}

/// The guest pieces of bytes `[offset, offset + len)` of the message the (checked) SGEs
/// describe. Costs what those bytes span, not what the whole message does.
pub fn pieces(objects: &Objects, sges: &[Sge], offset: u64, len: u64) -> Pieces {
    let mut out = Vec::new();
    let (mut skip, mut left) = (offset, len);
    for sge in sges {
        if left == 0 {
            break;
        }
        let n = u64::from(sge.length.to_native());
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = (n - skip).min(left);
        if let Some(range) = objects
            .mr_by_key(sge.lkey.to_native())
            .and_then(|mr| mr.range(sge.addr.to_native() + skip, take))
        {
            out.extend(range);
        }
        left -= take;
        skip = 0;
    }
    out
}
