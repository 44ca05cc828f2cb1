//! The codec against another implementation's frames: Linux Soft-RoCE (rdma_rxe) between
//! two guests, recorded by QEMU (fixtures/softroce.pcap; fixtures/README.md says how it was
//! made and regenerated). Every RoCEv2 frame of it must decode strictly (lengths, IPv4
//! checksum, opcode and headers, pad, ICRC) and encode back to the same bytes, and the
//! capture must hold each opcode family vrnic's wire speaks, over IPv4 and IPv6.

use super::bth::Op;
use super::cm::CmMessage;
use super::mad::{Mad, GSI_QKEY, GSI_QPN, MGMT_CLASS_CM};
use super::pcap::PcapReader;
use super::*;
use std::collections::BTreeSet;

const FIXTURE: &[u8] = include_bytes!("fixtures/softroce.pcap");

/// The frames of the fixture that are UDP datagrams to port 4791 (read from the raw
/// bytes, so that a frame the decoder refuses still counts), with their record numbers.
fn roce_frames() -> Vec<(usize, Vec<u8>)> {
    let records = PcapReader::new(FIXTURE).unwrap().records().unwrap();
    assert!(records.iter().all(|r| r.is_whole()), "a frame was cut");
    records
        .into_iter()
        .enumerate()
        .filter(|(_, r)| is_roce(&r.data))
        .map(|(i, r)| (i, r.data))
        .collect()
}

fn is_roce(f: &[u8]) -> bool {
    let udp = match f.get(12..14) {
        Some([0x08, 0x00]) if f.get(14 + 9) == Some(&17) => 14 + 20,
        Some([0x86, 0xdd]) if f.get(14 + 6) == Some(&17) => 14 + 40,
        _ => return false,
    };
    f.get(udp + 2..udp + 4) == Some(&[0x12, 0xb7])
}

#[test]
fn every_soft_roce_frame_decodes_strictly_and_encodes_back_to_its_bytes() {
    let frames = roce_frames();
    assert!(frames.len() > 100, "only {} RoCEv2 frames", frames.len());
    let mut faults = Vec::new();
    for (i, frame) in &frames {
        match Packet::decode(frame) {
            Err(e) => faults.push(format!("record {i}: decode: {e}")),
            Ok(p) => match p.encode() {
                Err(e) => faults.push(format!("record {i}: encode: {e}")),
                Ok(again) if again != *frame => {
                    let at = again.iter().zip(frame).position(|(a, b)| a != b);
                    faults.push(format!(
                        "record {i} ({}): encodes to other bytes (first difference at {at:?}, lengths {} and {})",
                        p.bth.opcode.name(),
                        again.len(),
                        frame.len()
                    ))
                }
                Ok(_) => {}
            },
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn a_soft_roce_frame_with_one_bit_flipped_in_what_the_icrc_covers_is_refused() {
    // One frame of each IP version, every bit of its transport part (BTH to ICRC), but
    // the BTH's byte of FECN, BECN and reserved bits, which the ICRC masks.
    for v6 in [false, true] {
        let (_, frame) = roce_frames()
            .into_iter()
            .find(|(_, f)| (f[12] == 0x86) == v6 && f.len() < 200)
            .unwrap();
        let bth = 14 + if v6 { 40 } else { 20 } + 8;
        for byte in bth..frame.len() {
            if byte == bth + 4 {
                continue;
            }
            for bit in 0..8 {
                let mut bad = frame.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    Packet::decode(&bad).is_err(),
                    "v6 {v6} byte {byte} bit {bit}"
                );
            }
        }
    }
}

#[test]
fn soft_roce_frames_still_check_after_routers_change_what_the_icrc_masks() {
    // rxe computed these ICRCs; a router may rewrite IPv4 TOS and TTL (and so the header
    // checksum), IPv6 traffic class, flow label and hop limit, and the UDP checksum.
    for v6 in [false, true] {
        let (i, mut frame) = roce_frames()
            .into_iter()
            .find(|(_, f)| (f[12] == 0x86) == v6)
            .unwrap();
        let udp = if v6 {
            frame[14] ^= 0x0A; // traffic class, high nibble
            frame[15] ^= 0xA5; // traffic class low nibble, flow label
            frame[16] ^= 0x5A;
            frame[17] ^= 0xFF;
            frame[14 + 7] = 3; // hop limit
            14 + 40
        } else {
            frame[15] = 0x2E; // DSCP EF
            frame[14 + 8] = 1; // TTL
            frame[24..26].fill(0);
            let sum = ip::checksum(&frame[14..34]);
            frame[24..26].copy_from_slice(&sum.to_be_bytes());
            14 + 20
        };
        frame[udp + 6..udp + 8].copy_from_slice(&[0x12, 0x34]);

        let p = Packet::decode(&frame).unwrap_or_else(|e| panic!("record {i}: {e}"));

        match p.net {
            Network::V4 { tos, ttl, .. } => assert_eq!((tos, ttl), (0x2E, 1)),
            Network::V6 { hop_limit, .. } => assert_eq!(hop_limit, 3),
        }
    }
}

/// What a frame shows of its kind: IP version, opcode, and whether it is a CM MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    Op {
        v6: bool,
        transport: u8,
        op: u8,
    },
    CmMad {
        v6: bool,
    },
    /// An AETH that is not an ACK, by its syndrome.
    Nak {
        v6: bool,
        syndrome: u8,
    },
}

fn seen() -> BTreeSet<Seen> {
    let mut out = BTreeSet::new();
    for (_, frame) in roce_frames() {
        let Ok(p) = Packet::decode(&frame) else {
            continue;
        };
        let v6 = matches!(p.net, Network::V6 { .. });
        out.insert(Seen::Op {
            v6,
            transport: p.bth.opcode.byte() & 0xE0,
            op: p.bth.opcode.op as u8,
        });
        if is_cm_mad(&p) {
            out.insert(Seen::CmMad { v6 });
        }
        if let Some(a) = p.aeth.filter(|a| !matches!(a.kind(), AethKind::Ack { .. })) {
            out.insert(Seen::Nak {
                v6,
                syndrome: a.syndrome,
            });
        }
    }
    out
}

#[test]
fn the_capture_holds_every_opcode_family_over_ipv4_and_ipv6() {
    let seen = seen();
    let rc = |op: Op| (0x00, op);
    let mut want = vec![
        rc(Op::SendFirst),
        rc(Op::SendMiddle),
        rc(Op::SendLast),
        rc(Op::SendLastImm),
        rc(Op::SendOnly),
        rc(Op::SendOnlyImm),
        rc(Op::WriteFirst),
        rc(Op::WriteMiddle),
        rc(Op::WriteLast),
        rc(Op::WriteLastImm),
        rc(Op::WriteOnly),
        rc(Op::WriteOnlyImm),
        rc(Op::ReadRequest),
        rc(Op::ReadResponseFirst),
        rc(Op::ReadResponseMiddle),
        rc(Op::ReadResponseLast),
        rc(Op::ReadResponseOnly),
        rc(Op::Acknowledge),
        rc(Op::AtomicAcknowledge),
        rc(Op::CompareSwap),
        rc(Op::FetchAdd),
    ];
    want.extend(
        [
            Op::SendFirst,
            Op::SendMiddle,
            Op::SendLast,
            Op::WriteFirst,
            Op::WriteMiddle,
            Op::WriteLast,
        ]
        .map(|op| (0x20, op)),
    );
    want.extend([(0x60, Op::SendOnly), (0x60, Op::SendOnlyImm)]);
    let mut missing = Vec::new();
    for v6 in [false, true] {
        for (transport, op) in &want {
            let s = Seen::Op {
                v6,
                transport: *transport,
                op: *op as u8,
            };
            if !seen.contains(&s) {
                missing.push(format!("{s:?} ({op:?})"));
            }
        }
        if !seen.contains(&Seen::CmMad { v6 }) {
            missing.push(format!("{:?}", Seen::CmMad { v6 }));
        }
        // A WRITE to an R_Key the responder never registered.
        let remote_access = Seen::Nak {
            v6,
            syndrome: Aeth::new(AethKind::Nak { code: 2 }, 0).syndrome,
        };
        if !seen.contains(&remote_access) {
            missing.push(format!("{remote_access:?}"));
        }
    }
    // rxe's NAKs to a SEND flood onto one posted receive (IPv4 only).
    for kind in [AethKind::RnrNak { timer: 12 }, AethKind::Nak { code: 0 }] {
        let syndrome = Aeth::new(kind, 0).syndrome;
        if !seen.contains(&Seen::Nak {
            v6: false,
            syndrome,
        }) {
            missing.push(format!("{kind:?}"));
        }
    }
    assert!(missing.is_empty(), "missing: {}", missing.join(", "));
}

fn is_cm_mad(p: &Packet) -> bool {
    p.bth.dest_qpn == GSI_QPN
        && p.deth.map(|d| d.qkey) == Some(GSI_QKEY)
        && p.payload.get(1) == Some(&MGMT_CLASS_CM)
}

/// The CM MADs of the fixture, decoded, with whether they went over IPv6.
fn cm_messages() -> Vec<(bool, Mad, CmMessage)> {
    let mut out = Vec::new();
    for (i, frame) in roce_frames() {
        let p = Packet::decode(&frame).unwrap();
        if !is_cm_mad(&p) {
            continue;
        }
        let mad = Mad::decode(&p.payload).unwrap_or_else(|e| panic!("record {i}: {e}"));
        let msg = CmMessage::decode(&mad).unwrap_or_else(|e| panic!("record {i}: {e}"));
        let again = Mad {
            header: mad.header,
            data: msg.encode_data().unwrap(),
        };
        assert_eq!(
            again.encode()[..],
            p.payload[..],
            "record {i}: {}",
            msg.name()
        );
        out.push((matches!(p.net, Network::V6 { .. }), mad, msg));
    }
    out
}

#[test]
fn every_soft_roce_cm_mad_decodes_strictly_and_encodes_back_to_its_bytes() {
    let msgs = cm_messages();
    let names: BTreeSet<_> = msgs.iter().map(|(_, _, m)| m.name()).collect();
    for want in [
        "REQ", "REP", "RTU", "REJ", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP",
    ] {
        assert!(names.contains(want), "no {want} in {names:?}");
    }
}

#[test]
fn soft_roce_handshakes_carry_what_rdma_cm_puts_in_them() {
    let msgs = cm_messages();
    let mut handshakes = 0;
    for (v6, mad, msg) in &msgs {
        let CmMessage::Req(req) = msg else { continue };
        // rdma_cm's service IDs: the RDMA_PS_TCP (0x0106) or RDMA_PS_UDP port space and
        // the port; a RoCE path has no LIDs, and its GIDs are the addresses.
        assert_eq!(
            req.service_id >> 16,
            0x0000_0000_0000_0106,
            "{:#x}",
            req.service_id
        );
        assert_eq!(
            (req.primary_local_lid, req.primary_remote_lid),
            (0xFFFF, 0xFFFF)
        );
        let mapped = |g: &[u8; 16]| g[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        assert_eq!(mapped(&req.primary_local_gid), !v6);
        assert_eq!(req.transport_service_type, 0, "RC");
        // The REP that answers it names its comm ID, and the RTU both.
        let rep = msgs.iter().find_map(|(_, _, m)| match m {
            CmMessage::Rep(r) if r.remote_comm_id == req.local_comm_id => Some(r),
            _ => None,
        });
        let Some(rep) = rep else { continue };
        assert_ne!(rep.local_qpn, 0);
        assert!(msgs.iter().any(|(_, h, m)| matches!(m, CmMessage::Rtu(r)
                if r.local_comm_id == req.local_comm_id && r.remote_comm_id == rep.local_comm_id)
            && h.header.transaction_id == mad.header.transaction_id));
        handshakes += 1;
    }
    assert!(
        handshakes >= 2,
        "{handshakes} complete REQ/REP/RTU handshakes"
    );
}
