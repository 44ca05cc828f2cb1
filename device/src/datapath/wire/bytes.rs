//! A packet's payload out of (and into) a message's guest-memory pieces, at a message offset.

use crate::guest_memory::{DmaError, RamSnapshot};

/// The parts of `pieces` holding message bytes `[offset, offset + len)`: (address, length).
fn window(pieces: &[(u64, u64)], offset: u64, len: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut skip, mut left) = (offset, len);
    for &(addr, n) in pieces {
        if left == 0 {
            break;
        }
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = (n - skip).min(left);
        out.push((addr + skip, take));
        left -= take;
        skip = 0;
    }
    out
}

/// Message bytes `[offset, offset + len)` read from `pieces`; None if the pieces are
/// shorter or the memory cannot be read.
pub fn gather(mem: &RamSnapshot, pieces: &[(u64, u64)], offset: u64, len: u32) -> Option<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    let mut at = 0usize;
    for (addr, n) in window(pieces, offset, u64::from(len)) {
        let n = n as usize;
        mem.read(addr, &mut out[at..at + n]).ok()?;
        at += n;
    }
    (at == out.len()).then_some(out)
}

/// Writes `bytes` into `pieces` from message offset `offset`.
pub fn scatter(
    mem: &RamSnapshot,
    pieces: &[(u64, u64)],
    offset: u64,
    bytes: &[u8],
) -> Result<(), Option<DmaError>> {
    let mut at = 0usize;
    for (addr, n) in window(pieces, offset, bytes.len() as u64) {
        let n = n as usize;
        mem.write(addr, &bytes[at..at + n]).map_err(Some)?;
        at += n;
    }
    match at == bytes.len() {
        true => Ok(()),
        false => Err(None),
    }
}

#[cfg(test)]
mod tests {
    use super::window;

    #[test]
    fn a_window_spans_pieces_from_any_offset() {
        let pieces = [(0x1000, 10), (0x2000, 5), (0x3000, 100)];
        assert_eq!(window(&pieces, 0, 4), vec![(0x1000, 4)]);
        assert_eq!(
            window(&pieces, 8, 10),
            vec![(0x1008, 2), (0x2000, 5), (0x3000, 3)]
        );
        assert_eq!(window(&pieces, 15, 2), vec![(0x3000, 2)]);
        assert_eq!(window(&pieces, 110, 10), vec![(0x305f, 5)]);
        assert!(window(&pieces, 200, 1).is_empty());
    }
}
