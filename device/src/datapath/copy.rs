//! Moving a message between two guests' memories: straight from the source pieces to the
//! destination pieces, with no intermediate buffer, the last byte last.

use crate::guest_memory::RamSnapshot;
use std::sync::atomic::{fence, Ordering};

/// Which side of a copy could not be accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Source,
    Destination,
}

/// Guest-physical pieces of a message, in order.
pub type Pieces = Vec<(u64, u64)>;

/// Copies `len` bytes gathered from `src` pieces into `dst` pieces (both must cover `len`).
/// Every byte but the last is copied first, then a full barrier, then the last byte, so a
/// guest polling the last byte sees the whole message.
pub fn copy(
    dst_mem: &RamSnapshot,
    dst: &[(u64, u64)],
    src_mem: &RamSnapshot,
    src: &[(u64, u64)],
    len: u64,
) -> Result<(), Fault> {
    if len == 0 {
        return Ok(());
    }
    let chunks = Chunks::new(dst, src, len);
    let mut last = None;
    for (d, s, n) in chunks {
        let n = if d.1 { n - 1 } else { n };
        if d.1 {
            last = Some((d.0 + n, s + n));
        }
        if n > 0 {
            copy_chunk(dst_mem, d.0, src_mem, s, n)?;
        }
    }
    fence(Ordering::SeqCst);
    match last {
        Some((d, s)) => copy_chunk(dst_mem, d, src_mem, s, 1),
        None => Err(Fault::Destination),
    }
}

fn copy_chunk(
    dst_mem: &RamSnapshot,
    dst: u64,
    src_mem: &RamSnapshot,
    src: u64,
    n: u64,
) -> Result<(), Fault> {
    let len = usize::try_from(n).map_err(|_| Fault::Source)?;
    // copy_from checks both ranges before it copies; only a failure needs to know which.
    dst_mem
        .copy_from(dst, src_mem, src, len)
        .map_err(|_| match src_mem.check_read(src, len) {
            Err(_) => Fault::Source,
            Ok(()) => Fault::Destination,
        })
}

/// Walks two piece lists in step: (destination address, is-final-chunk), source address, length.
struct Chunks<'a> {
    dst: std::slice::Iter<'a, (u64, u64)>,
    src: std::slice::Iter<'a, (u64, u64)>,
    cur_dst: (u64, u64),
    cur_src: (u64, u64),
    left: u64,
}

impl<'a> Chunks<'a> {
    fn new(dst: &'a [(u64, u64)], src: &'a [(u64, u64)], len: u64) -> Self {
        Chunks {
            dst: dst.iter(),
            src: src.iter(),
            cur_dst: (0, 0),
            cur_src: (0, 0),
            left: len,
        }
    }
}

impl Iterator for Chunks<'_> {
    type Item = ((u64, bool), u64, u64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        while self.cur_dst.1 == 0 {
            self.cur_dst = *self.dst.next()?;
        }
        while self.cur_src.1 == 0 {
            self.cur_src = *self.src.next()?;
        }
        let n = self.cur_dst.1.min(self.cur_src.1).min(self.left);
        let item = ((self.cur_dst.0, n == self.left), self.cur_src.0, n);
        self.cur_dst = (self.cur_dst.0 + n, self.cur_dst.1 - n);
        self.cur_src = (self.cur_src.0 + n, self.cur_src.1 - n);
        self.left -= n;
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::Chunks;

    #[test]
    fn chunks_walk_both_lists_in_step_and_mark_the_final_one() {
        let dst = [(0x1000, 3), (0x2000, 5)];
        let src = [(0x9000, 6), (0xa000, 2)];
        let chunks: Vec<_> = Chunks::new(&dst, &src, 8).collect();
        assert_eq!(
            chunks,
            vec![
                ((0x1000, false), 0x9000, 3),
                ((0x2000, false), 0x9003, 3),
                ((0x2003, true), 0xa000, 2)
            ]
        );
        assert_eq!(Chunks::new(&dst, &src, 2).count(), 1);
    }
}
