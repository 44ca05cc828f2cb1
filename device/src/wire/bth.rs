//! The Base Transport Header (IBTA Vol 1 §9.2) and its opcodes (§9.2.1, the OpCode field
//! table): the transport in the top three bits, the operation in the low five.

use super::{be24, put_be24, take, WireError};

pub const BTH_LEN: usize = 12;
/// The default partition key (full membership).
pub const DEFAULT_PKEY: u16 = 0xFFFF;
pub const PSN_MASK: u32 = 0xFF_FFFF;
pub const QPN_MASK: u32 = 0xFF_FFFF;

/// The transport of an opcode (its bits 7..5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Rc,
    Uc,
    Ud,
    Xrc,
}

impl Transport {
    fn bits(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
            Transport::Xrc => 0xA0,
        }
    }
}

/// The operation of an opcode (its bits 4..0), as §9.2.1 numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    SendFirst = 0x00,
    SendMiddle = 0x01,
    SendLast = 0x02,
    SendLastImm = 0x03,
    SendOnly = 0x04,
    SendOnlyImm = 0x05,
    WriteFirst = 0x06,
    WriteMiddle = 0x07,
    WriteLast = 0x08,
    WriteLastImm = 0x09,
    WriteOnly = 0x0A,
    WriteOnlyImm = 0x0B,
    ReadRequest = 0x0C,
    ReadResponseFirst = 0x0D,
    ReadResponseMiddle = 0x0E,
    ReadResponseLast = 0x0F,
    ReadResponseOnly = 0x10,
    Acknowledge = 0x11,
    AtomicAcknowledge = 0x12,
    CompareSwap = 0x13,
    FetchAdd = 0x14,
    SendLastInv = 0x16,
    SendOnlyInv = 0x17,
}

impl Op {
    /// Every operation (the decoder's table; tests draw from it).
    pub const ALL: [Op; 23] = [
        Op::SendFirst,
        Op::SendMiddle,
        Op::SendLast,
        Op::SendLastImm,
        Op::SendOnly,
        Op::SendOnlyImm,
        Op::WriteFirst,
        Op::WriteMiddle,
        Op::WriteLast,
        Op::WriteLastImm,
        Op::WriteOnly,
        Op::WriteOnlyImm,
        Op::ReadRequest,
        Op::ReadResponseFirst,
        Op::ReadResponseMiddle,
        Op::ReadResponseLast,
        Op::ReadResponseOnly,
        Op::Acknowledge,
        Op::AtomicAcknowledge,
        Op::CompareSwap,
        Op::FetchAdd,
        Op::SendLastInv,
        Op::SendOnlyInv,
    ];

    /// Whether `transport` has this operation: UC has SEND and WRITE (no READ, atomics or
    /// invalidation), UD only SEND Only (with immediate); RC and XRC have all.
    fn allowed(self, transport: Transport) -> bool {
        match transport {
            Transport::Rc | Transport::Xrc => true,
            Transport::Uc => (self as u8) <= Op::WriteOnlyImm as u8,
            Transport::Ud => matches!(self, Op::SendOnly | Op::SendOnlyImm),
        }
    }
}

/// A BTH opcode: a transport and one of its operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opcode {
    pub transport: Transport,
    pub op: Op,
}

impl Opcode {
    pub fn new(transport: Transport, op: Op) -> Result<Opcode, WireError> {
        let code = Opcode { transport, op };
        match op.allowed(transport) {
            true => Ok(code),
            false => Err(WireError::Opcode(code.byte())),
        }
    }

    pub fn byte(self) -> u8 {
        self.transport.bits() | self.op as u8
    }

    pub fn from_byte(byte: u8) -> Result<Opcode, WireError> {
        let transport = match byte & 0xE0 {
            0x00 => Transport::Rc,
            0x20 => Transport::Uc,
            0x60 => Transport::Ud,
            0xA0 => Transport::Xrc,
            // RD (0x40), CNP (0x80) and the reserved/vendor ranges.
            _ => return Err(WireError::Opcode(byte)),
        };
        let op = Op::ALL
            .into_iter()
            .find(|op| *op as u8 == byte & 0x1F)
            .ok_or(WireError::Opcode(byte))?;
        Opcode::new(transport, op).map_err(|_| WireError::Opcode(byte))
    }

    /// The name Wireshark gives it, for errors and tests.
    pub fn name(self) -> &'static str {
        match self.op {
            Op::SendFirst => "SEND First",
            Op::SendMiddle => "SEND Middle",
            Op::SendLast => "SEND Last",
            Op::SendLastImm => "SEND Last with Immediate",
            Op::SendOnly => "SEND Only",
            Op::SendOnlyImm => "SEND Only with Immediate",
            Op::WriteFirst => "RDMA WRITE First",
            Op::WriteMiddle => "RDMA WRITE Middle",
            Op::WriteLast => "RDMA WRITE Last",
            Op::WriteLastImm => "RDMA WRITE Last with Immediate",
            Op::WriteOnly => "RDMA WRITE Only",
            Op::WriteOnlyImm => "RDMA WRITE Only with Immediate",
            Op::ReadRequest => "RDMA READ Request",
            Op::ReadResponseFirst => "RDMA READ Response First",
            Op::ReadResponseMiddle => "RDMA READ Response Middle",
            Op::ReadResponseLast => "RDMA READ Response Last",
            Op::ReadResponseOnly => "RDMA READ Response Only",
            Op::Acknowledge => "Acknowledge",
            Op::AtomicAcknowledge => "ATOMIC Acknowledge",
            Op::CompareSwap => "CmpSwap",
            Op::FetchAdd => "FetchAdd",
            Op::SendLastInv => "SEND Last with Invalidate",
            Op::SendOnlyInv => "SEND Only with Invalidate",
        }
    }

    /// A request (sent by a requester) rather than a response.
    pub fn is_request(self) -> bool {
        !matches!(
            self.op,
            Op::ReadResponseFirst
                | Op::ReadResponseMiddle
                | Op::ReadResponseLast
                | Op::ReadResponseOnly
                | Op::Acknowledge
                | Op::AtomicAcknowledge
        )
    }
}

/// The BTH's fields; the pad count follows from the payload and is set by the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    pub opcode: Opcode,
    /// SE: the requester asks for a solicited event.
    pub solicited: bool,
    /// M: the migration state. A QP without an armed alternate path is "migrated" (1, as
    /// vrnic sends it), yet Linux's rxe sends 0 in every packet (fixtures/softroce.pcap):
    /// receivers must not depend on it.
    pub migreq: bool,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qpn: u32,
    /// A: the requester asks for an acknowledgement.
    pub ack_req: bool,
    pub psn: u32,
}

impl Bth {
    /// The header with `pad` pad bytes after the payload.
    pub fn encode(&self, pad: usize, out: &mut Vec<u8>) -> Result<(), WireError> {
        for (what, v, mask) in [
            ("destination QPN", self.dest_qpn, QPN_MASK),
            ("PSN", self.psn, PSN_MASK),
        ] {
            if v & !mask != 0 {
                return Err(WireError::Range {
                    what,
                    value: u64::from(v),
                });
            }
        }
        out.push(self.opcode.byte());
        out.push(u8::from(self.solicited) << 7 | u8::from(self.migreq) << 6 | (pad as u8 & 3) << 4);
        out.extend_from_slice(&self.pkey.to_be_bytes());
        out.push(u8::from(self.fecn) << 7 | u8::from(self.becn) << 6);
        put_be24(out, self.dest_qpn);
        out.push(u8::from(self.ack_req) << 7);
        put_be24(out, self.psn);
        Ok(())
    }

    /// The header at `at`, and its pad count. Reserved bits are ignored, as §9.2 tells
    /// receivers to.
    pub fn decode(bytes: &[u8], at: usize) -> Result<(Bth, usize), WireError> {
        let b: [u8; BTH_LEN] = take(bytes, at, "BTH")?;
        let opcode = Opcode::from_byte(b[0])?;
        let tver = b[1] & 0xF;
        if tver != 0 {
            return Err(WireError::TransportVersion(tver));
        }
        let bth = Bth {
            opcode,
            solicited: b[1] & 0x80 != 0,
            migreq: b[1] & 0x40 != 0,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qpn: be24(&b[5..8]),
            ack_req: b[8] & 0x80 != 0,
            psn: be24(&b[9..12]),
        };
        Ok((bth, usize::from(b[1] >> 4 & 3)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_opcode_byte_either_decodes_to_itself_or_is_refused() {
        let mut known = 0;
        for byte in 0..=255u8 {
            if let Ok(code) = Opcode::from_byte(byte) {
                assert_eq!(code.byte(), byte);
                known += 1;
            }
        }
        // RC 23, XRC 23, UC 12, UD 2.
        assert_eq!(known, 60);
        assert_eq!(Opcode::from_byte(0x15), Err(WireError::Opcode(0x15)));
        assert_eq!(Opcode::from_byte(0x2C), Err(WireError::Opcode(0x2C)));
        assert_eq!(Opcode::from_byte(0x81), Err(WireError::Opcode(0x81)));
        assert!(Opcode::new(Transport::Ud, Op::WriteOnly).is_err());
    }
}
