//! A packet's payload out of (and into) guest-memory pieces resolved for that packet.

use crate::guest_memory::{DmaError, RamSnapshot};

/// Fills `out` with the bytes of `pieces`, in order; None if they do not add up to its
/// length or the memory cannot be read.
pub fn gather(mem: &RamSnapshot, pieces: &[(u64, u64)], out: &mut [u8]) -> Option<()> {
    let mut at = 0usize;
    for &(addr, n) in pieces {
        let end = at.checked_add(usize::try_from(n).ok()?)?;
        mem.read(addr, out.get_mut(at..end)?).ok()?;
        at = end;
    }
    (at == out.len()).then_some(())
}

/// Writes `bytes` into `pieces` from their start; an error if they hold fewer bytes
/// (None) or the memory cannot be written.
pub fn scatter(
    mem: &RamSnapshot,
    pieces: &[(u64, u64)],
    bytes: &[u8],
) -> Result<(), Option<DmaError>> {
    let mut left = bytes;
    for &(addr, n) in pieces {
        if left.is_empty() {
            break;
        }
        let (now, rest) =
            left.split_at(usize::try_from(n).map_or(left.len(), |n| n.min(left.len())));
        mem.write(addr, now).map_err(Some)?;
        left = rest;
    }
    match left.is_empty() {
        true => Ok(()),
        false => Err(None),
    }
}
