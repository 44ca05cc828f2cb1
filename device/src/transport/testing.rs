//! Packets for the engine tests: what a peer would send, built through the wire codec.

use super::Outgoing;
use crate::addr::Mac;
use crate::wire::bth::Op;
use crate::wire::ext::{AethKind, CREDITS_INVALID};
use crate::wire::{Aeth, Bth, Network, Opcode, Packet, Transport};
use std::time::{Duration, Instant};

pub const MAC_A: Mac = Mac([2, 0, 0, 0, 0, 0xa]);
pub const MAC_B: Mac = Mac([2, 0, 0, 0, 0, 0xb]);

pub fn net() -> Network {
    Network::V4 {
        src: [10, 0, 0, 1],
        dst: [10, 0, 0, 2],
        tos: 0,
        ttl: 64,
        ident: 0,
        dont_fragment: true,
    }
}

/// `out` as the peer receives it: encoded with `payload` and decoded again.
pub fn deliver(out: &Outgoing, payload: Vec<u8>) -> Packet {
    let p = out.packet(MAC_A, MAC_B, net(), 0xc000, payload);
    let frame = p.encode().expect("the engine's headers fit its opcode");
    Packet::decode(&frame).expect("the engine's packets decode")
}

/// `out` with zero bytes for its payload.
pub fn deliver_zeros(out: &Outgoing) -> Packet {
    deliver(out, vec![0; out.payload.len() as usize])
}

pub fn bth(transport: Transport, op: Op, psn: u32) -> Bth {
    Bth {
        opcode: Opcode::new(transport, op).unwrap(),
        solicited: false,
        migreq: true,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qpn: 0x12,
        ack_req: false,
        psn,
    }
}

/// A packet with no extended header (callers add what the opcode needs).
pub fn packet(transport: Transport, op: Op, psn: u32) -> Packet {
    Packet::new(MAC_B, MAC_A, net(), 0xc000, bth(transport, op, psn))
}

/// An Acknowledge of `psn` with this AETH kind.
pub fn response(kind: AethKind, psn: u32) -> Packet {
    let mut p = packet(Transport::Rc, Op::Acknowledge, psn);
    p.aeth = Some(Aeth::new(kind, 0));
    p
}

pub fn ack(psn: u32) -> Packet {
    response(
        AethKind::Ack {
            credits: CREDITS_INVALID,
        },
        psn,
    )
}

pub fn nak(code: u8, psn: u32) -> Packet {
    response(AethKind::Nak { code }, psn)
}

pub fn rnr(timer: u8, psn: u32) -> Packet {
    response(AethKind::RnrNak { timer }, psn)
}

pub fn read_response(op: Op, psn: u32, payload: Vec<u8>) -> Packet {
    let mut p = packet(Transport::Rc, op, psn);
    if op != Op::ReadResponseMiddle {
        p.aeth = Some(Aeth::new(
            AethKind::Ack {
                credits: CREDITS_INVALID,
            },
            0,
        ));
    }
    p.payload = payload;
    p
}

pub fn atomic_ack(psn: u32, original: u64) -> Packet {
    let mut p = packet(Transport::Rc, Op::AtomicAcknowledge, psn);
    p.aeth = Some(Aeth::new(
        AethKind::Ack {
            credits: CREDITS_INVALID,
        },
        0,
    ));
    p.atomic_ack = Some(original);
    p
}

/// A fixed start of time: tests move it forward by durations only.
pub fn t0() -> Instant {
    use std::sync::OnceLock;
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

pub fn at(us: u64) -> Instant {
    t0() + Duration::from_micros(us)
}
