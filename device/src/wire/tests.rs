//! The codec against frames built independently (by hand from the IBTA layouts, their
//! IPv4 checksum and ICRC computed with Python's zlib.crc32), round trips of every
//! header, and malformed input.

use super::bth::Op;
use super::ext::{AethKind, CREDITS_INVALID};
use super::*;
use crate::addr::Mac;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const MAC1: Mac = Mac([2, 0, 0, 0, 0, 1]);
const MAC2: Mac = Mac([2, 0, 0, 0, 0, 2]);

fn v4() -> Network {
    Network::V4 {
        src: [10, 0, 0, 1],
        dst: [10, 0, 0, 2],
        tos: 0,
        ttl: 64,
        ident: 0,
        dont_fragment: true,
    }
}

fn v6() -> Network {
    let mut src = [0u8; 16];
    src[..2].copy_from_slice(&[0xfe, 0x80]);
    let mut dst = src;
    src[15] = 1;
    dst[15] = 2;
    Network::V6 {
        src,
        dst,
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 64,
    }
}

fn packet(transport: Transport, op: Op, net: Network) -> Packet {
    let bth = Bth {
        opcode: Opcode::new(transport, op).unwrap(),
        solicited: false,
        migreq: true,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qpn: 0x11,
        ack_req: true,
        psn: 0x12_3456,
    };
    Packet::new(MAC1, MAC2, net, 0xc001, bth)
}

/// RC SEND Only of "hello", IPv4: every byte from the IBTA layouts, the IPv4 checksum and
/// the ICRC (0xc358d5db, sent least significant byte first) computed by Python.
const SEND_ONLY_V4: &str = "02000000000202000000000108004500003400004000401126b70a0000010a000002\
c00112b7002000000470ffff000000118012345668656c6c6f000000dbd558c3";
/// RC Acknowledge, IPv6 fe80::1 -> fe80::2 (MAC ::2 -> ::1), AETH ACK (credits invalid) MSN 5, PSN 0x100.
const ACK_V6: &str = "02000000000102000000000286dd60000000001c1140fe80000000000000000000000000\
0001fe800000000000000000000000000002c12312b7001c00001140ffff00000022000001001f0000052f277339";

/// Soft-RoCE's (Linux rdma_rxe's) Acknowledge from 169.254.100.2 to .1, as its guest sent
/// it (fixtures/softroce.pcap): IPv4 identification 0x5efb, DF, UDP checksum 0.
const RXE_ACK_V4: &str = "525400fe6401525400fe64020800450000305efb40004011bfc1a9fe6402a9fe6401\
c12112b7001c00001100ffff0000001100b399bf1f000001aeede33e";

#[test]
fn a_soft_roce_ack_keeps_its_ipv4_identification_and_re_encodes_to_its_bytes() {
    let frame = hex(RXE_ACK_V4);

    let p = Packet::decode(&frame).unwrap();

    let Network::V4 {
        ident,
        dont_fragment,
        ..
    } = p.net
    else {
        panic!("not IPv4: {:?}", p.net)
    };
    assert_eq!((ident, dont_fragment), (0x5efb, true));
    assert_eq!(p.encode().unwrap(), frame);
}

#[test]
fn a_send_only_encodes_to_the_independently_built_frame_with_its_icrc() {
    let mut p = packet(Transport::Rc, Op::SendOnly, v4());
    p.payload = b"hello".to_vec();

    let frame = p.encode().unwrap();

    assert_eq!(frame, hex(SEND_ONLY_V4));
    assert_eq!(Packet::decode(&frame), Ok(p));
}

#[test]
fn an_ipv6_ack_encodes_to_the_independently_built_frame_with_its_icrc() {
    let mut p = packet(Transport::Rc, Op::Acknowledge, v6());
    p.src_mac = MAC2;
    p.dst_mac = MAC1;
    p.udp_src_port = 0xc123;
    p.bth.dest_qpn = 0x22;
    p.bth.ack_req = false;
    p.bth.psn = 0x100;
    p.aeth = Some(Aeth::new(
        AethKind::Ack {
            credits: CREDITS_INVALID,
        },
        5,
    ));

    let frame = p.encode().unwrap();

    assert_eq!(frame, hex(ACK_V6));
    assert_eq!(Packet::decode(&frame), Ok(p));
}

/// One packet of each header combination, over IPv4 and IPv6.
fn samples() -> Vec<Packet> {
    let reth = Some(Reth {
        va: 0x7f00_1234_5678,
        rkey: 0xabcd,
        dma_len: 10_000,
    });
    let mut out = Vec::new();
    for net in [v4(), v6()] {
        let mut p = packet(Transport::Rc, Op::WriteFirst, net);
        p.reth = reth;
        p.payload = vec![7; 4096];
        out.push(p);
        let mut p = packet(Transport::Rc, Op::WriteOnlyImm, net);
        p.reth = reth;
        p.imm = Some([1, 2, 3, 4]);
        p.payload = vec![1, 2, 3];
        out.push(p);
        let mut p = packet(Transport::Rc, Op::SendLastInv, net);
        p.ieth = Some(0x1234);
        p.payload = vec![9; 6];
        out.push(p);
        let mut p = packet(Transport::Rc, Op::ReadRequest, net);
        p.reth = reth;
        out.push(p);
        let mut p = packet(Transport::Rc, Op::ReadResponseFirst, net);
        p.aeth = Some(Aeth::new(AethKind::Ack { credits: 0x1f }, 3));
        p.payload = vec![5; 1024];
        out.push(p);
        let mut p = packet(Transport::Rc, Op::ReadResponseMiddle, net);
        p.payload = vec![5; 1024];
        out.push(p);
        let mut p = packet(Transport::Rc, Op::CompareSwap, net);
        p.atomic_eth = Some(AtomicEth {
            va: 0x1000,
            rkey: 7,
            swap_add: 0x1122_3344_5566_7788,
            compare: 42,
        });
        out.push(p);
        let mut p = packet(Transport::Rc, Op::AtomicAcknowledge, net);
        p.aeth = Some(Aeth::new(AethKind::Ack { credits: 0x1f }, 9));
        p.atomic_ack = Some(42);
        out.push(p);
        let mut p = packet(Transport::Rc, Op::Acknowledge, net);
        p.aeth = Some(Aeth::new(AethKind::RnrNak { timer: 14 }, 9));
        out.push(p);
        let mut p = packet(Transport::Ud, Op::SendOnlyImm, net);
        p.deth = Some(Deth {
            qkey: 0x8001_0000,
            src_qpn: 1,
        });
        p.imm = Some([0xde, 0xad, 0xbe, 0xef]);
        p.payload = vec![3; 256];
        out.push(p);
        let mut p = packet(Transport::Xrc, Op::SendOnly, net);
        p.xrc_srqn = Some(0x42);
        p.payload = vec![8; 1];
        out.push(p);
        let mut p = packet(Transport::Uc, Op::WriteMiddle, net);
        p.payload = vec![4; 4096];
        out.push(p);
    }
    out
}

#[test]
fn every_header_combination_round_trips() {
    for p in samples() {
        let frame = p.encode().unwrap();
        assert_eq!(
            Packet::decode(&frame),
            Ok(p.clone()),
            "{}",
            p.bth.opcode.name()
        );
        // The pad makes the transport part a multiple of four bytes.
        assert_eq!((frame.len() - 14 - p.net.header_len() - 8) % 4, 0);
    }
}

#[test]
fn headers_that_do_not_belong_to_the_opcode_are_refused_by_the_encoder() {
    let mut p = packet(Transport::Rc, Op::WriteFirst, v4());
    assert_eq!(
        p.encode(),
        Err(WireError::MissingHeader {
            opcode: "RDMA WRITE First",
            header: "RETH"
        })
    );
    p.bth.opcode = Opcode::new(Transport::Rc, Op::SendOnly).unwrap();
    p.imm = Some([0; 4]);
    assert!(matches!(p.encode(), Err(WireError::ExtraHeader { .. })));
    let mut ack = packet(Transport::Rc, Op::Acknowledge, v4());
    ack.aeth = Some(Aeth::new(AethKind::Ack { credits: 0 }, 0));
    ack.payload = vec![1];
    assert!(matches!(
        ack.encode(),
        Err(WireError::UnexpectedPayload { .. })
    ));
    let mut big = packet(Transport::Rc, Op::SendOnly, v4());
    big.payload = vec![0; 70_000];
    assert!(matches!(big.encode(), Err(WireError::TooLong(_))));
    let mut psn = packet(Transport::Rc, Op::SendOnly, v4());
    psn.bth.psn = 1 << 24;
    assert!(matches!(psn.encode(), Err(WireError::Range { .. })));
}

#[test]
fn every_truncation_of_a_frame_is_an_error_never_a_panic() {
    for p in samples() {
        let frame = p.encode().unwrap();
        for len in 0..frame.len() {
            assert!(Packet::decode(&frame[..len]).is_err(), "{len}");
        }
    }
}

#[test]
fn a_flipped_bit_in_what_the_icrc_covers_is_an_error() {
    let frame = hex(SEND_ONLY_V4);
    // Past the Ethernet header: every bit but the masked fields (TOS, TTL and checksum
    // are caught by the IPv4 checksum; the UDP checksum and BTH byte 4 are not checked).
    let udp_checksum = 14 + 20 + 6..14 + 20 + 8;
    let bth_resv = 14 + 28 + 4;
    for byte in 14..frame.len() {
        if udp_checksum.contains(&byte) || byte == bth_resv {
            continue;
        }
        for bit in 0..8 {
            let mut bad = frame.clone();
            bad[byte] ^= 1 << bit;
            assert!(Packet::decode(&bad).is_err(), "byte {byte} bit {bit}");
        }
    }
}

#[test]
fn malformed_frames_get_the_error_that_names_the_fault() {
    let frame = hex(SEND_ONLY_V4);
    let mut vlan = frame.clone();
    vlan[12..14].copy_from_slice(&[0x81, 0x00]);
    assert_eq!(Packet::decode(&vlan), Err(WireError::EtherType(0x8100)));
    let mut port = packet(Transport::Rc, Op::SendOnly, v4()).encode().unwrap();
    port[14 + 22..14 + 24].copy_from_slice(&4792u16.to_be_bytes());
    assert_eq!(Packet::decode(&port), Err(WireError::UdpPort(4792)));
    let mut long = frame.clone();
    long.extend_from_slice(&[0; 8]);
    assert_eq!(Packet::decode(&long), Err(WireError::Trailing(8)));
    let mut icrc = frame.clone();
    let n = icrc.len();
    icrc[n - 1] ^= 0x80;
    assert!(matches!(Packet::decode(&icrc), Err(WireError::Icrc { .. })));
    assert!(matches!(
        Packet::decode(&[0xff; 200]),
        Err(WireError::EtherType(0xffff))
    ));
}

#[test]
fn arbitrary_bytes_decode_to_a_packet_or_an_error() {
    // A deterministic walk over mutations of valid frames (the fuzz target does more).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for p in samples() {
        let frame = p.encode().unwrap();
        for _ in 0..200 {
            let mut bad = frame.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() % bad.len() as u64) as usize;
                bad[i] = next() as u8;
            }
            let cut = (next() % (bad.len() as u64 + 1)) as usize;
            let _ = Packet::decode(&bad[..cut]);
        }
    }
}
