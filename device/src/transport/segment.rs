//! A message cut into packets at the path MTU (IBTA Vol 1 §9.2 opcodes, §9.3 extended
//! headers): every packet but the last carries exactly one MTU of payload (what rxe's
//! check_length demands of a peer), First/Middle/Last (or Only) name its place, the RETH
//! rides on the first packet of a WRITE and on the READ request, ImmDt and IETH on the
//! last, and the pad brings the payload to a multiple of four (§9.2, PadCnt). A READ
//! request takes one PSN per response packet it asks for (the next request leaves that
//! gap), an atomic one.

use crate::wire::bth::Op;

/// The largest message IBTA allows (2^31 bytes; rxe's check_length refuses longer).
pub const MAX_MESSAGE: u64 = 1 << 31;

/// What a message does at the responder, with what its opcode carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgOp {
    Send,
    /// SEND with immediate data (network order, as the consumer gave it).
    SendImm([u8; 4]),
    /// SEND with invalidate of this R_Key at the responder.
    SendInv(u32),
    Write,
    WriteImm([u8; 4]),
    Read,
    CompareSwap {
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        add: u64,
    },
}

impl MsgOp {
    pub fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            MsgOp::Read | MsgOp::CompareSwap { .. } | MsgOp::FetchAdd { .. }
        )
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, MsgOp::CompareSwap { .. } | MsgOp::FetchAdd { .. })
    }

    /// SEND or WRITE: data travels in the requests.
    pub fn carries_payload(self) -> bool {
        !self.is_read_or_atomic()
    }
}

/// A packet's place in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// Packet `index` of `count`.
    pub fn of(index: u32, count: u32) -> Position {
        match (index == 0, index + 1 >= count) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        }
    }

    pub fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    pub fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// Packets (and PSNs) a message of `len` bytes takes at path MTU `mtu`: at least one.
pub fn packets(len: u64, mtu: u32) -> u32 {
    let mtu = u64::from(mtu.max(1));
    u32::try_from(len.div_ceil(mtu).max(1)).unwrap_or(u32::MAX)
}

/// Bytes of packet `index` of a `len`-byte message at `mtu`, and its offset.
pub fn piece(len: u64, mtu: u32, index: u32) -> (u64, u32) {
    let offset = u64::from(index) * u64::from(mtu);
    let n = len.saturating_sub(offset).min(u64::from(mtu));
    (offset, n as u32)
}

/// Whether `mtu` is an IBTA path MTU (256 to 4096 bytes, a power of two).
pub fn valid_mtu(mtu: u32) -> bool {
    (256..=4096).contains(&mtu) && mtu.is_power_of_two()
}

/// The request opcode (operation bits) of a packet of `op` at `pos`. READ and atomics are
/// one request packet whatever their length.
pub fn request_op(op: MsgOp, pos: Position) -> Op {
    use Position::*;
    match (op, pos) {
        (MsgOp::Read, _) => Op::ReadRequest,
        (MsgOp::CompareSwap { .. }, _) => Op::CompareSwap,
        (MsgOp::FetchAdd { .. }, _) => Op::FetchAdd,
        (MsgOp::Send | MsgOp::SendImm(_) | MsgOp::SendInv(_), First) => Op::SendFirst,
        (MsgOp::Send | MsgOp::SendImm(_) | MsgOp::SendInv(_), Middle) => Op::SendMiddle,
        (MsgOp::Send, Last) => Op::SendLast,
        (MsgOp::Send, Only) => Op::SendOnly,
        (MsgOp::SendImm(_), Last) => Op::SendLastImm,
        (MsgOp::SendImm(_), Only) => Op::SendOnlyImm,
        (MsgOp::SendInv(_), Last) => Op::SendLastInv,
        (MsgOp::SendInv(_), Only) => Op::SendOnlyInv,
        (MsgOp::Write | MsgOp::WriteImm(_), First) => Op::WriteFirst,
        (MsgOp::Write | MsgOp::WriteImm(_), Middle) => Op::WriteMiddle,
        (MsgOp::Write, Last) => Op::WriteLast,
        (MsgOp::Write, Only) => Op::WriteOnly,
        (MsgOp::WriteImm(_), Last) => Op::WriteLastImm,
        (MsgOp::WriteImm(_), Only) => Op::WriteOnlyImm,
    }
}

/// The READ response opcode at `pos`.
pub fn read_response_op(pos: Position) -> Op {
    match pos {
        Position::First => Op::ReadResponseFirst,
        Position::Middle => Op::ReadResponseMiddle,
        Position::Last => Op::ReadResponseLast,
        Position::Only => Op::ReadResponseOnly,
    }
}

/// The family of a multi-packet request opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Send,
    Write,
    Read,
    Atomic,
}

/// What a received request opcode is: its family and place (READ and atomics: Only).
pub fn classify_request(op: Op) -> Option<(Family, Position)> {
    use Position::*;
    Some(match op {
        Op::SendFirst => (Family::Send, First),
        Op::SendMiddle => (Family::Send, Middle),
        Op::SendLast | Op::SendLastImm | Op::SendLastInv => (Family::Send, Last),
        Op::SendOnly | Op::SendOnlyImm | Op::SendOnlyInv => (Family::Send, Only),
        Op::WriteFirst => (Family::Write, First),
        Op::WriteMiddle => (Family::Write, Middle),
        Op::WriteLast | Op::WriteLastImm => (Family::Write, Last),
        Op::WriteOnly | Op::WriteOnlyImm => (Family::Write, Only),
        Op::ReadRequest => (Family::Read, Only),
        Op::CompareSwap | Op::FetchAdd => (Family::Atomic, Only),
        _ => return None,
    })
}

/// The place of a READ response opcode.
pub fn classify_read_response(op: Op) -> Option<Position> {
    Some(match op {
        Op::ReadResponseFirst => Position::First,
        Op::ReadResponseMiddle => Position::Middle,
        Op::ReadResponseLast => Position::Last,
        Op::ReadResponseOnly => Position::Only,
        _ => return None,
    })
}

/// Pad bytes after a payload of `len` (to a multiple of four).
pub fn pad(len: usize) -> usize {
    (4 - len % 4) % 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_takes_one_packet_per_mtu_and_at_least_one() {
        assert_eq!(packets(0, 1024), 1);
        assert_eq!(packets(1, 1024), 1);
        assert_eq!(packets(1024, 1024), 1);
        assert_eq!(packets(1025, 1024), 2);
        assert_eq!(packets(MAX_MESSAGE, 256), 1 << 23);
        assert_eq!(piece(2500, 1024, 0), (0, 1024));
        assert_eq!(piece(2500, 1024, 2), (2048, 452));
        assert_eq!(piece(0, 1024, 0), (0, 0));
    }

    #[test]
    fn positions_name_first_middle_last_and_only() {
        assert_eq!(Position::of(0, 1), Position::Only);
        assert_eq!(Position::of(0, 3), Position::First);
        assert_eq!(Position::of(1, 3), Position::Middle);
        assert_eq!(Position::of(2, 3), Position::Last);
    }

    #[test]
    fn immediate_and_invalidate_ride_only_on_the_last_or_only_opcode() {
        let imm = MsgOp::SendImm([1, 2, 3, 4]);
        assert_eq!(request_op(imm, Position::First), Op::SendFirst);
        assert_eq!(request_op(imm, Position::Middle), Op::SendMiddle);
        assert_eq!(request_op(imm, Position::Last), Op::SendLastImm);
        assert_eq!(request_op(imm, Position::Only), Op::SendOnlyImm);
        let inv = MsgOp::SendInv(7);
        assert_eq!(request_op(inv, Position::Last), Op::SendLastInv);
        assert_eq!(request_op(inv, Position::Only), Op::SendOnlyInv);
        let wimm = MsgOp::WriteImm([0; 4]);
        assert_eq!(request_op(wimm, Position::First), Op::WriteFirst);
        assert_eq!(request_op(wimm, Position::Last), Op::WriteLastImm);
        assert_eq!(request_op(MsgOp::Write, Position::Only), Op::WriteOnly);
        assert_eq!(request_op(MsgOp::Read, Position::Only), Op::ReadRequest);
        assert_eq!(
            request_op(MsgOp::FetchAdd { add: 1 }, Position::Only),
            Op::FetchAdd
        );
    }

    #[test]
    fn classification_inverts_the_opcode_choice() {
        for op in [
            MsgOp::Send,
            MsgOp::SendImm([0; 4]),
            MsgOp::SendInv(1),
            MsgOp::Write,
            MsgOp::WriteImm([0; 4]),
        ] {
            for pos in [
                Position::First,
                Position::Middle,
                Position::Last,
                Position::Only,
            ] {
                let (family, back) = classify_request(request_op(op, pos)).unwrap();
                assert_eq!(back, pos);
                let write = matches!(op, MsgOp::Write | MsgOp::WriteImm(_));
                assert_eq!(family == Family::Write, write);
            }
        }
        for pos in [
            Position::First,
            Position::Middle,
            Position::Last,
            Position::Only,
        ] {
            assert_eq!(classify_read_response(read_response_op(pos)), Some(pos));
        }
        assert_eq!(classify_request(Op::Acknowledge), None);
    }

    #[test]
    fn pads_reach_a_multiple_of_four_and_mtus_are_ibta_sizes() {
        assert_eq!([0, 1, 2, 3, 4].map(pad), [0, 3, 2, 1, 0]);
        assert!(valid_mtu(256) && valid_mtu(4096));
        assert!(!valid_mtu(128) && !valid_mtu(1500) && !valid_mtu(8192));
    }
}
