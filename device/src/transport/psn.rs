//! Packet sequence numbers (IBTA Vol 1 §9.7): 24 bits that wrap, compared by serial
//! arithmetic (rxe's psn_compare). The half of the space behind a reference PSN is the
//! past (a responder's duplicate region), the half ahead the future (out of sequence), so
//! at most `HALF - 1` PSNs may be outstanding at once.

pub const PSN_MASK: u32 = 0xFF_FFFF;
/// Half the PSN space: the greatest distance serial comparison can order.
pub const HALF: u32 = 1 << 23;

/// A 24-bit PSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The PSN of the low 24 bits of `v`.
    pub const fn new(v: u32) -> Psn {
        Psn(v & PSN_MASK)
    }

    pub const fn get(self) -> u32 {
        self.0
    }

    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// `self - other` as a signed distance in (-2^23, 2^23]: negative when `self` is
    /// before `other`.
    pub const fn diff(self, other: Psn) -> i32 {
        // Sign-extend the 24-bit difference.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// How far `self` is past `start`, going forward (0..2^24).
    pub const fn since(self, start: Psn) -> u32 {
        self.0.wrapping_sub(start.0) & PSN_MASK
    }

    /// Whether `self` is one of the `count` PSNs from `start` on.
    pub const fn within(self, start: Psn, count: u32) -> bool {
        self.since(start) < count
    }
}

impl std::fmt::Display for Psn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_wraps_at_24_bits() {
        assert_eq!(Psn::new(0xFF_FFFF).add(1), Psn::new(0));
        assert_eq!(Psn::new(0xFF_FFFE).add(5), Psn::new(3));
        assert_eq!(Psn::new(2).sub(3), Psn::new(0xFF_FFFF));
        assert_eq!(Psn::new(0x1FF_FFFF), Psn::new(0xFF_FFFF));
    }

    #[test]
    fn serial_comparison_orders_across_the_wrap() {
        let top = Psn::new(0xFF_FFF0);
        let wrapped = Psn::new(0x10);
        assert!(top.before(wrapped));
        assert!(!wrapped.before(top));
        assert_eq!(wrapped.diff(top), 0x20);
        assert_eq!(top.diff(wrapped), -0x20);
        assert_eq!(top.diff(top), 0);
        // The farthest future is half the space ahead; one more is the past.
        assert_eq!(top.add(HALF - 1).diff(top), (HALF - 1) as i32);
        assert!(top.add(HALF + 1).before(top));
    }

    #[test]
    fn windows_count_forward_from_their_start_across_the_wrap() {
        let start = Psn::new(0xFF_FFFE);
        assert!(start.within(start, 1));
        assert!(Psn::new(1).within(start, 4));
        assert!(!Psn::new(2).within(start, 4));
        assert!(!Psn::new(0xFF_FFFD).within(start, 4));
        assert!(!start.within(start, 0));
        assert_eq!(Psn::new(1).since(start), 3);
    }
}
