//! The extended transport headers (IBTA Vol 1 §9.3): DETH, XRCETH, RETH, AtomicETH, AETH,
//! AtomicAckETH, ImmDt and IETH, and which of them each opcode carries, in the order they
//! follow the BTH.

use super::bth::{Op, Opcode, Transport};
use super::{be24, put_be24, take, WireError};

pub const DETH_LEN: usize = 8;
pub const XRCETH_LEN: usize = 4;
pub const RETH_LEN: usize = 16;
pub const ATOMIC_ETH_LEN: usize = 28;
pub const AETH_LEN: usize = 4;
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
pub const IMM_LEN: usize = 4;
pub const IETH_LEN: usize = 4;

/// Datagram ETH (§9.3.2): the Q_Key and the sender's QPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deth {
    pub qkey: u32,
    pub src_qpn: u32,
}

/// RDMA ETH (§9.3.3): where a WRITE or READ goes, and how long the whole of it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

/// Atomic ETH (§9.3.4): the target word and the operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    /// The swap value of a CmpSwap, the addend of a FetchAdd.
    pub swap_add: u64,
    /// The compare value of a CmpSwap (0 for FetchAdd).
    pub compare: u64,
}

/// ACK Extended Transport Header (§9.3.5): the syndrome and the responder's MSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: u8,
    /// 24 bits.
    pub msn: u32,
}

/// What an AETH's syndrome says (§9.3.5, the AETH syndrome table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AethKind {
    /// An ACK with an end-to-end credit count (0x1F: credits not given).
    Ack {
        credits: u8,
    },
    /// Receiver not ready: retry after this RNR timer code.
    RnrNak {
        timer: u8,
    },
    /// A NAK: 0 PSN sequence error, 1 invalid request, 2 remote access error, 3 remote
    /// operational error, 4 invalid RD request.
    Nak {
        code: u8,
    },
    Reserved,
}

/// NAK codes (§9.3.5).
pub const NAK_PSN_SEQUENCE: u8 = 0;
pub const NAK_INVALID_REQUEST: u8 = 1;
pub const NAK_REMOTE_ACCESS: u8 = 2;
pub const NAK_REMOTE_OPERATIONAL: u8 = 3;
/// The credit count that means "no credits given" (responders with an SRQ send it).
pub const CREDITS_INVALID: u8 = 0x1F;

impl Aeth {
    pub fn new(kind: AethKind, msn: u32) -> Aeth {
        let syndrome = match kind {
            AethKind::Ack { credits } => credits & 0x1F,
            AethKind::RnrNak { timer } => 0x20 | (timer & 0x1F),
            AethKind::Nak { code } => 0x60 | (code & 0x1F),
            AethKind::Reserved => 0x40,
        };
        Aeth {
            syndrome,
            msn: msn & 0xFF_FFFF,
        }
    }

    pub fn kind(&self) -> AethKind {
        let low = self.syndrome & 0x1F;
        match self.syndrome >> 5 & 3 {
            0 => AethKind::Ack { credits: low },
            1 => AethKind::RnrNak { timer: low },
            3 => AethKind::Nak { code: low },
            _ => AethKind::Reserved,
        }
    }
}

/// Which headers follow the BTH of an opcode, and whether it carries a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    pub deth: bool,
    pub xrceth: bool,
    pub reth: bool,
    pub atomic_eth: bool,
    pub aeth: bool,
    pub atomic_ack: bool,
    pub imm: bool,
    pub ieth: bool,
    pub payload: bool,
}

impl Layout {
    /// §9.2.1 and §9.3: the headers of each operation. XRC requests add an XRCETH after
    /// the BTH (Annex A14, XRC), UD packets a DETH.
    pub fn of(opcode: Opcode) -> Layout {
        let op = opcode.op;
        let request = opcode.is_request();
        Layout {
            deth: opcode.transport == Transport::Ud,
            xrceth: opcode.transport == Transport::Xrc && request,
            reth: matches!(
                op,
                Op::WriteFirst | Op::WriteOnly | Op::WriteOnlyImm | Op::ReadRequest
            ),
            atomic_eth: matches!(op, Op::CompareSwap | Op::FetchAdd),
            aeth: matches!(
                op,
                Op::ReadResponseFirst
                    | Op::ReadResponseLast
                    | Op::ReadResponseOnly
                    | Op::Acknowledge
                    | Op::AtomicAcknowledge
            ),
            atomic_ack: op == Op::AtomicAcknowledge,
            imm: matches!(
                op,
                Op::SendLastImm | Op::SendOnlyImm | Op::WriteLastImm | Op::WriteOnlyImm
            ),
            ieth: matches!(op, Op::SendLastInv | Op::SendOnlyInv),
            payload: !matches!(
                op,
                Op::ReadRequest
                    | Op::Acknowledge
                    | Op::AtomicAcknowledge
                    | Op::CompareSwap
                    | Op::FetchAdd
            ),
        }
    }
}

pub fn encode_deth(d: &Deth, out: &mut Vec<u8>) {
    out.extend_from_slice(&d.qkey.to_be_bytes());
    out.push(0);
    put_be24(out, d.src_qpn);
}

pub fn decode_deth(b: &[u8], at: usize) -> Result<Deth, WireError> {
    let h: [u8; DETH_LEN] = take(b, at, "DETH")?;
    Ok(Deth {
        qkey: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
        src_qpn: be24(&h[5..]),
    })
}

pub fn encode_xrceth(srqn: u32, out: &mut Vec<u8>) {
    out.push(0);
    put_be24(out, srqn);
}

pub fn decode_xrceth(b: &[u8], at: usize) -> Result<u32, WireError> {
    let h: [u8; XRCETH_LEN] = take(b, at, "XRCETH")?;
    Ok(be24(&h[1..]))
}

pub fn encode_reth(r: &Reth, out: &mut Vec<u8>) {
    out.extend_from_slice(&r.va.to_be_bytes());
    out.extend_from_slice(&r.rkey.to_be_bytes());
    out.extend_from_slice(&r.dma_len.to_be_bytes());
}

pub fn decode_reth(b: &[u8], at: usize) -> Result<Reth, WireError> {
    let h: [u8; RETH_LEN] = take(b, at, "RETH")?;
    Ok(Reth {
        va: u64_at(&h, 0),
        rkey: u32_at(&h, 8),
        dma_len: u32_at(&h, 12),
    })
}

pub fn encode_atomic_eth(a: &AtomicEth, out: &mut Vec<u8>) {
    out.extend_from_slice(&a.va.to_be_bytes());
    out.extend_from_slice(&a.rkey.to_be_bytes());
    out.extend_from_slice(&a.swap_add.to_be_bytes());
    out.extend_from_slice(&a.compare.to_be_bytes());
}

pub fn decode_atomic_eth(b: &[u8], at: usize) -> Result<AtomicEth, WireError> {
    let h: [u8; ATOMIC_ETH_LEN] = take(b, at, "AtomicETH")?;
    Ok(AtomicEth {
        va: u64_at(&h, 0),
        rkey: u32_at(&h, 8),
        swap_add: u64_at(&h, 12),
        compare: u64_at(&h, 20),
    })
}

pub fn encode_aeth(a: &Aeth, out: &mut Vec<u8>) {
    out.push(a.syndrome);
    put_be24(out, a.msn);
}

pub fn decode_aeth(b: &[u8], at: usize) -> Result<Aeth, WireError> {
    let h: [u8; AETH_LEN] = take(b, at, "AETH")?;
    Ok(Aeth {
        syndrome: h[0],
        msn: be24(&h[1..]),
    })
}

/// A big-endian word of 4 bytes (ImmDt is kept as the bytes it is, IETH's R_Key and the
/// AtomicAckETH as numbers).
pub fn decode_u32(b: &[u8], at: usize, what: &'static str) -> Result<u32, WireError> {
    take::<4>(b, at, what).map(u32::from_be_bytes)
}

pub fn decode_u64(b: &[u8], at: usize, what: &'static str) -> Result<u64, WireError> {
    take::<8>(b, at, what).map(u64::from_be_bytes)
}

fn u64_at(h: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&h[i..i + 8]);
    u64::from_be_bytes(w)
}

fn u32_at(h: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aeth_syndromes_encode_each_kind_in_its_bits() {
        let ack = Aeth::new(AethKind::Ack { credits: 0x1F }, 7);
        assert_eq!((ack.syndrome, ack.msn), (0x1F, 7));
        assert_eq!(Aeth::new(AethKind::RnrNak { timer: 12 }, 0).syndrome, 0x2C);
        assert_eq!(Aeth::new(AethKind::Nak { code: 2 }, 0).syndrome, 0x62);
        for kind in [
            AethKind::Ack { credits: 3 },
            AethKind::RnrNak { timer: 31 },
            AethKind::Nak { code: 3 },
        ] {
            assert_eq!(Aeth::new(kind, 1).kind(), kind);
        }
    }
}
