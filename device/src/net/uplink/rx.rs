//! Frames read from an uplink at once: a set of slots, each one frame. A packet socket
//! fills many with one `recvmmsg` (a system call per batch instead of per frame); a tap
//! is read one frame per call into a slot as large as anything it can give.

/// One frame read: its real length (beyond the slot when the frame was longer: a packet
/// socket reports it with MSG_TRUNC), or None for one to skip (ours going out, the host's).
pub type Received = Option<usize>;

pub struct RxBatch {
    buf: Vec<u8>,
    slot: usize,
    got: Vec<Received>,
}

impl RxBatch {
    /// `slots` slots of `slot` bytes each.
    pub fn new(slots: usize, slot: usize) -> RxBatch {
        RxBatch {
            buf: vec![0; slots * slot],
            slot,
            got: Vec::with_capacity(slots),
        }
    }

    pub fn slots(&self) -> usize {
        self.buf.len() / self.slot
    }

    pub fn slot_len(&self) -> usize {
        self.slot
    }

    /// Slot `i`, to read into.
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.buf[i * self.slot..(i + 1) * self.slot]
    }

    /// Forgets what the last read gave.
    pub fn clear(&mut self) {
        self.got.clear();
    }

    /// Records what slot `self.len()` received.
    pub fn push(&mut self, r: Received) {
        debug_assert!(self.got.len() < self.slots());
        self.got.push(r);
    }

    pub fn len(&self) -> usize {
        self.got.len()
    }

    pub fn is_empty(&self) -> bool {
        self.got.is_empty()
    }

    /// The frames read, in order: (real length, the bytes the slot holds of it), None
    /// for a frame to skip.
    pub fn frames(&self) -> impl Iterator<Item = Option<(usize, &[u8])>> {
        self.got.iter().enumerate().map(|(i, r)| {
            r.map(|len| {
                let start = i * self.slot;
                (len, &self.buf[start..start + len.min(self.slot)])
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_back_in_slot_order_cut_at_the_slot_with_their_real_length() {
        let mut b = RxBatch::new(3, 4);
        assert_eq!((b.slots(), b.slot_len()), (3, 4));
        b.slot_mut(0)[..2].copy_from_slice(&[1, 2]);
        b.slot_mut(2).copy_from_slice(&[7, 8, 9, 10]);
        b.push(Some(2));
        b.push(None);
        b.push(Some(9));
        let got: Vec<_> = b.frames().collect();
        assert_eq!(
            got,
            [
                Some((2, &[1u8, 2][..])),
                None,
                Some((9, &[7u8, 8, 9, 10][..]))
            ]
        );
        b.clear();
        assert!(b.is_empty());
    }
}
