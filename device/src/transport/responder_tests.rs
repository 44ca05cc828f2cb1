//! The responder against hand-made requests: ePSN, duplicates, every NAK it sends, ACK
//! coalescing, READ and atomic resources, UC.

use super::*;
use crate::transport::testing::{self, packet};
use crate::wire::ext::CREDITS_INVALID;

fn rc(rq_psn: u32) -> ResponderConfig {
    ResponderConfig {
        dest_qpn: 0x21,
        rq_psn,
        min_rnr_timer: 12,
        ack_every: 4,
        max_dest_rd_atomic: 2,
        ..ResponderConfig::default()
    }
}

fn req(op: Op, psn: u32, len: usize) -> Packet {
    let mut p = packet(Transport::Rc, op, psn);
    p.payload = vec![0xab; len];
    p
}

fn write(op: Op, psn: u32, len: usize, dma_len: u32) -> Packet {
    let mut p = req(op, psn, len);
    if matches!(op, Op::WriteFirst | Op::WriteOnly | Op::WriteOnlyImm) {
        p.reth = Some(Reth {
            va: 0x1000,
            rkey: 7,
            dma_len,
        });
    }
    if matches!(op, Op::WriteLastImm | Op::WriteOnlyImm) {
        p.imm = Some([9; 4]);
    }
    p
}

fn read(psn: u32, va: u64, dma_len: u32) -> Packet {
    let mut p = packet(Transport::Rc, Op::ReadRequest, psn);
    p.reth = Some(Reth {
        va,
        rkey: 7,
        dma_len,
    });
    p
}

fn fetch_add(psn: u32) -> Packet {
    let mut p = packet(Transport::Rc, Op::FetchAdd, psn);
    p.atomic_eth = Some(AtomicEth {
        va: 0x40,
        rkey: 7,
        swap_add: 1,
        compare: 0,
    });
    p
}

/// Executes `p` with `outcome`.
fn run(rs: &mut Responder, p: &Packet, outcome: Outcome) -> Execute {
    match rs.on_packet(p) {
        Received::Execute(ex) => {
            let copy = clone_ex(&ex);
            rs.finish(ex, outcome);
            copy
        }
        other => panic!("{other:?} for PSN {:#x}", p.bth.psn),
    }
}

fn clone_ex(ex: &Execute) -> Execute {
    Execute {
        op: ex.op,
        family: ex.family,
        position: ex.position,
        psn: ex.psn,
        offset: ex.offset,
        len: ex.len,
        reth: ex.reth,
        atomic: ex.atomic,
        imm: ex.imm,
        invalidate: ex.invalidate,
        solicited: ex.solicited,
        xrc_srqn: ex.xrc_srqn,
        restart: ex.restart,
        ack_req: ex.ack_req,
        next: ex.next,
    }
}

fn replies(rs: &mut Responder) -> Vec<Outgoing> {
    std::iter::from_fn(|| rs.poll_transmit()).collect()
}

fn psns(out: &[Outgoing]) -> Vec<u32> {
    out.iter().map(|o| o.bth.psn).collect()
}

/// (opcode, PSN, AETH kind) of each reply.
fn summary(out: &[Outgoing]) -> Vec<(Op, u32, Option<AethKind>)> {
    out.iter()
        .map(|o| (o.bth.opcode.op, o.bth.psn, o.aeth.map(|a| a.kind())))
        .collect()
}

const ACK: Option<AethKind> = Some(AethKind::Ack {
    credits: CREDITS_INVALID,
});

fn nak(code: u8) -> Option<AethKind> {
    Some(AethKind::Nak { code })
}

#[test]
fn an_in_sequence_send_is_executed_and_acked_with_its_psn_and_the_msn() {
    let mut rs = Responder::new(rc(0x50)).unwrap();
    let mut p = req(Op::SendOnlyImm, 0x50, 10);
    p.imm = Some([1, 2, 3, 4]);
    p.bth.solicited = true;
    let ex = run(&mut rs, &p, Outcome::Done);
    assert_eq!((ex.family, ex.position), (Family::Send, Position::Only));
    assert_eq!(
        (ex.offset, ex.len, ex.imm, ex.solicited),
        (0, 10, Some([1, 2, 3, 4]), true)
    );
    let out = replies(&mut rs);
    assert_eq!(summary(&out), [(Op::Acknowledge, 0x50, ACK)]);
    assert_eq!(out[0].bth.dest_qpn, 0x21);
    assert_eq!(out[0].aeth.map(|a| a.msn), Some(1));
    assert_eq!(rs.expected_psn(), Psn::new(0x51));
    // The ACK encodes as an IBTA Acknowledge.
    assert_eq!(testing::deliver_zeros(&out[0]).aeth, out[0].aeth);
}

#[test]
fn acks_come_at_the_end_of_a_message_on_ackreq_and_every_ack_every_packets() {
    let mut rs = Responder::new(rc(0)).unwrap();
    let mut offsets = Vec::new();
    let mut acked = Vec::new();
    let ops = [
        Op::SendFirst,
        Op::SendMiddle,
        Op::SendMiddle,
        Op::SendMiddle,
        Op::SendMiddle,
    ];
    for (psn, op) in ops.into_iter().enumerate() {
        offsets.push(run(&mut rs, &req(op, psn as u32, 1024), Outcome::Done).offset);
        acked.extend(replies(&mut rs).iter().map(|o| o.bth.psn));
    }
    assert_eq!(offsets, [0, 1024, 2048, 3072, 4096]);
    // Four packets without AckReq: one ACK.
    assert_eq!(acked, [3]);
    let mut p = req(Op::SendMiddle, 5, 1024);
    p.bth.ack_req = true;
    run(&mut rs, &p, Outcome::Done);
    run(&mut rs, &req(Op::SendLast, 6, 1), Outcome::Done);
    assert_eq!(
        summary(&replies(&mut rs)),
        [(Op::Acknowledge, 6, ACK)],
        "the ACK of 5 waiting is replaced by that of 6"
    );
    assert_eq!(rs.msn(), 1);
}

#[test]
fn a_duplicate_send_or_write_is_acked_again_and_not_executed() {
    let mut rs = Responder::new(rc(10)).unwrap();
    run(&mut rs, &req(Op::SendOnly, 10, 1), Outcome::Done);
    run(&mut rs, &write(Op::WriteOnly, 11, 4, 4), Outcome::Done);
    replies(&mut rs);
    assert_eq!(rs.on_packet(&req(Op::SendOnly, 10, 1)), Received::Handled);
    assert_eq!(summary(&replies(&mut rs)), [(Op::Acknowledge, 11, ACK)]);
    assert_eq!(
        rs.on_packet(&write(Op::WriteOnly, 11, 4, 4)),
        Received::Handled
    );
    assert_eq!(summary(&replies(&mut rs)), [(Op::Acknowledge, 11, ACK)]);
    assert_eq!(rs.stats().duplicates, 2);
    assert_eq!(rs.expected_psn(), Psn::new(12));
}

#[test]
fn an_out_of_sequence_packet_gets_one_sequence_nak_then_silence_until_epsn_arrives() {
    let mut rs = Responder::new(rc(0)).unwrap();
    run(&mut rs, &req(Op::SendFirst, 0, 1024), Outcome::Done);
    // PSN 1 is lost.
    for psn in 2..5 {
        assert_eq!(
            rs.on_packet(&req(Op::SendMiddle, psn, 1024)),
            Received::Handled
        );
    }
    assert_eq!(
        summary(&replies(&mut rs)),
        [(Op::Acknowledge, 1, nak(NAK_PSN_SEQUENCE))]
    );
    assert_eq!(rs.stats().out_of_sequence, 3);
    run(&mut rs, &req(Op::SendMiddle, 1, 1024), Outcome::Done);
    // After ePSN, a new gap NAKs again.
    rs.on_packet(&req(Op::SendMiddle, 9, 1024));
    assert_eq!(
        summary(&replies(&mut rs)),
        [(Op::Acknowledge, 2, nak(NAK_PSN_SEQUENCE))]
    );
}

#[test]
fn no_receive_wqe_gives_an_rnr_nak_with_min_rnr_timer_and_keeps_epsn() {
    let mut rs = Responder::new(rc(3)).unwrap();
    run(&mut rs, &req(Op::SendOnly, 3, 8), Outcome::Rnr);
    assert_eq!(
        summary(&replies(&mut rs)),
        [(Op::Acknowledge, 3, Some(AethKind::RnrNak { timer: 12 }))]
    );
    assert_eq!(rs.expected_psn(), Psn::new(3));
    // The packets after it are dropped silently (no sequence NAK after the RNR NAK).
    rs.on_packet(&req(Op::SendOnly, 4, 8));
    assert!(replies(&mut rs).is_empty());
    run(&mut rs, &req(Op::SendOnly, 3, 8), Outcome::Done);
    assert_eq!(summary(&replies(&mut rs)), [(Op::Acknowledge, 3, ACK)]);
    assert_eq!(rs.stats().rnr_naks, 1);
}

#[test]
fn a_bad_opcode_sequence_is_an_invalid_request_that_fails_the_qp() {
    for packets in [
        vec![write(Op::WriteMiddle, 0, 1024, 0)],
        vec![req(Op::SendLast, 0, 1)],
        vec![req(Op::SendFirst, 0, 1024), req(Op::SendOnly, 1, 1)],
        vec![
            req(Op::SendFirst, 0, 1024),
            write(Op::WriteMiddle, 1, 1024, 0),
        ],
        vec![req(Op::SendFirst, 0, 1024), read(1, 0, 1)],
    ] {
        let mut rs = Responder::new(rc(0)).unwrap();
        let (last, before) = packets.split_last().unwrap();
        for p in before {
            run(&mut rs, p, Outcome::Done);
        }
        replies(&mut rs);
        assert_eq!(rs.on_packet(last), Received::Fatal(EventType::QpReqErr));
        let psn = last.bth.psn;
        assert_eq!(
            summary(&replies(&mut rs)),
            [(Op::Acknowledge, psn, nak(NAK_INVALID_REQUEST))]
        );
        assert!(rs.is_failed());
        assert_eq!(rs.on_packet(&req(Op::SendOnly, psn, 1)), Received::Handled);
    }
}

#[test]
fn lengths_that_break_the_mtu_rules_or_the_reth_are_invalid_requests() {
    for packets in [
        // First and Middle carry exactly one MTU.
        vec![req(Op::SendFirst, 0, 1000)],
        vec![req(Op::SendOnly, 0, 1025)],
        // Last carries at least one byte.
        vec![req(Op::SendFirst, 0, 1024), req(Op::SendLast, 1, 0)],
        // The WRITE's packets add up to its DMA length.
        vec![write(Op::WriteOnly, 0, 10, 11)],
        vec![write(Op::WriteFirst, 0, 1024, 1024)],
        vec![
            write(Op::WriteFirst, 0, 1024, 2000),
            write(Op::WriteLast, 1, 1000, 0),
        ],
    ] {
        let mut rs = Responder::new(rc(0)).unwrap();
        let (last, before) = packets.split_last().unwrap();
        for p in before {
            run(&mut rs, p, Outcome::Done);
        }
        assert_eq!(rs.on_packet(last), Received::Fatal(EventType::QpReqErr));
    }
}

#[test]
fn a_write_gives_the_data_path_its_reth_and_each_packets_offset() {
    let mut rs = Responder::new(rc(0)).unwrap();
    let a = run(
        &mut rs,
        &write(Op::WriteFirst, 0, 1024, 1030),
        Outcome::Done,
    );
    let mut last = write(Op::WriteLastImm, 1, 6, 0);
    last.imm = Some([5; 4]);
    let b = run(&mut rs, &last, Outcome::Done);
    let reth = Some(Reth {
        va: 0x1000,
        rkey: 7,
        dma_len: 1030,
    });
    assert_eq!((a.reth, a.offset), (reth, 0));
    assert_eq!(
        (b.reth, b.offset, b.len, b.imm),
        (reth, 1024, 6, Some([5; 4]))
    );
}

#[test]
fn refusals_nak_with_their_code_and_fail_the_qp() {
    for (why, code) in [
        (Refusal::InvalidRequest, NAK_INVALID_REQUEST),
        (Refusal::RemoteAccess, NAK_REMOTE_ACCESS),
        (Refusal::RemoteOperational, NAK_REMOTE_OPERATIONAL),
    ] {
        let mut rs = Responder::new(rc(0)).unwrap();
        run(
            &mut rs,
            &write(Op::WriteOnly, 0, 8, 8),
            Outcome::Refused(why),
        );
        assert_eq!(
            summary(&replies(&mut rs)),
            [(Op::Acknowledge, 0, nak(code))]
        );
        assert!(rs.is_failed());
        assert_eq!(
            rs.on_packet(&write(Op::WriteOnly, 0, 8, 8)),
            Received::Handled
        );
    }
}

#[test]
fn a_read_is_answered_with_responses_from_the_responders_memory() {
    let mut rs = Responder::new(rc(0)).unwrap();
    let ex = run(&mut rs, &read(0, 0x9000, 2500), Outcome::Done);
    assert_eq!(ex.reth.map(|r| r.dma_len), Some(2500));
    // The READ took three PSNs.
    assert_eq!(rs.expected_psn(), Psn::new(3));
    let out = replies(&mut rs);
    assert_eq!(
        summary(&out),
        [
            (Op::ReadResponseFirst, 0, ACK),
            (Op::ReadResponseMiddle, 1, None),
            (Op::ReadResponseLast, 2, ACK)
        ]
    );
    let payloads: Vec<_> = out.iter().map(|o| o.payload).collect();
    assert_eq!(
        payloads,
        [(0x9000, 1024), (0x9400, 1024), (0x9800, 452)].map(|(va, len)| Payload::Memory {
            va,
            rkey: 7,
            len
        })
    );
    for o in &out {
        assert_eq!(testing::deliver_zeros(o).bth.opcode, o.bth.opcode);
    }
    // A zero-length READ is one Only response without payload.
    run(&mut rs, &read(3, 0, 0), Outcome::Done);
    let out = replies(&mut rs);
    assert_eq!(summary(&out), [(Op::ReadResponseOnly, 3, ACK)]);
    assert_eq!(out[0].payload.len(), 0);
}

#[test]
fn an_ack_queued_after_a_read_waits_behind_its_responses() {
    let mut rs = Responder::new(rc(0)).unwrap();
    run(&mut rs, &read(0, 0, 2048), Outcome::Done);
    let mut p = req(Op::SendOnly, 2, 1);
    p.bth.ack_req = true;
    run(&mut rs, &p, Outcome::Done);
    let psns: Vec<_> = replies(&mut rs).iter().map(|o| o.bth.psn).collect();
    assert_eq!(psns, [0, 1, 2]);
}

#[test]
fn a_duplicate_read_is_answered_again_for_the_range_it_names() {
    let mut rs = Responder::new(rc(0)).unwrap();
    run(&mut rs, &read(0, 0x9000, 3072), Outcome::Done);
    replies(&mut rs);
    // The requester asks again from the second response on.
    assert_eq!(rs.on_packet(&read(1, 0x9400, 2048)), Received::Handled);
    let out = replies(&mut rs);
    assert_eq!(
        summary(&out),
        [
            (Op::ReadResponseFirst, 1, ACK),
            (Op::ReadResponseLast, 2, ACK)
        ]
    );
    assert_eq!(
        out[0].payload,
        Payload::Memory {
            va: 0x9400,
            rkey: 7,
            len: 1024
        }
    );
    // A range that is not the original's from that PSN, or another rkey: dropped.
    rs.on_packet(&read(1, 0x9000, 2048));
    let mut other_key = read(0, 0x9000, 3072);
    other_key.reth.as_mut().unwrap().rkey = 8;
    rs.on_packet(&other_key);
    assert!(replies(&mut rs).is_empty());
    assert_eq!(rs.expected_psn(), Psn::new(3));
}

#[test]
fn a_duplicate_atomic_gets_its_saved_original_value_without_executing_again() {
    let mut rs = Responder::new(rc(0)).unwrap();
    run(&mut rs, &fetch_add(0), Outcome::Atomic(41));
    let first = replies(&mut rs);
    assert_eq!(summary(&first), [(Op::AtomicAcknowledge, 0, ACK)]);
    assert_eq!(first[0].atomic_ack, Some(41));
    assert_eq!(rs.on_packet(&fetch_add(0)), Received::Handled);
    let again = replies(&mut rs);
    assert_eq!(again[0].atomic_ack, Some(41));
    assert_eq!(testing::deliver_zeros(&again[0]).atomic_ack, Some(41));
}

#[test]
fn the_resource_ring_keeps_the_last_max_dest_rd_atomic_requests() {
    let mut rs = Responder::new(rc(0)).unwrap();
    for psn in 0..3 {
        run(
            &mut rs,
            &fetch_add(psn),
            Outcome::Atomic(u64::from(psn) + 100),
        );
    }
    replies(&mut rs);
    // Two slots: the atomic at PSN 0 is forgotten and its duplicate dropped.
    rs.on_packet(&fetch_add(0));
    assert!(replies(&mut rs).is_empty());
    rs.on_packet(&fetch_add(1));
    assert_eq!(replies(&mut rs)[0].atomic_ack, Some(101));
}

#[test]
fn reads_and_atomics_without_responder_resources_are_invalid_requests() {
    for p in [read(0, 0, 8), fetch_add(0)] {
        let mut rs = Responder::new(ResponderConfig {
            max_dest_rd_atomic: 0,
            ..rc(0)
        })
        .unwrap();
        assert_eq!(rs.on_packet(&p), Received::Fatal(EventType::QpReqErr));
    }
}

#[test]
fn duplicates_are_told_from_new_requests_across_the_psn_wrap() {
    let mut rs = Responder::new(rc(0xFF_FFFE)).unwrap();
    for psn in [0xFF_FFFE, 0xFF_FFFF, 0] {
        run(&mut rs, &req(Op::SendOnly, psn, 1), Outcome::Done);
    }
    replies(&mut rs);
    assert_eq!(rs.expected_psn(), Psn::new(1));
    // Before the wrap: duplicates; the far half ahead: out of sequence.
    rs.on_packet(&req(Op::SendOnly, 0xFF_FFFE, 1));
    assert_eq!(summary(&replies(&mut rs)), [(Op::Acknowledge, 0, ACK)]);
    rs.on_packet(&req(Op::SendOnly, 0x7F_FFFF, 1));
    assert_eq!(
        summary(&replies(&mut rs)),
        [(Op::Acknowledge, 1, nak(NAK_PSN_SEQUENCE))]
    );
    assert_eq!(rs.stats().duplicates, 1);
}

#[test]
fn packets_of_another_transport_or_responses_are_ignored() {
    let mut rs = Responder::new(rc(0)).unwrap();
    let mut uc = req(Op::SendOnly, 0, 1);
    uc.bth.opcode = Opcode::new(Transport::Uc, Op::SendOnly).unwrap();
    assert_eq!(rs.on_packet(&uc), Received::Handled);
    assert_eq!(rs.on_packet(&testing::ack(0)), Received::Handled);
    assert_eq!(rs.stats().ignored, 2);
    assert_eq!(rs.expected_psn(), Psn::new(0));
}

fn uc(op: Op, psn: u32, len: usize) -> Packet {
    let mut p = req(op, psn, len);
    p.bth.opcode = Opcode::new(Transport::Uc, op).unwrap();
    p
}

fn uc_responder() -> Responder {
    Responder::new(ResponderConfig {
        transport: Transport::Uc,
        ..rc(0)
    })
    .unwrap()
}

#[test]
fn uc_drops_a_message_with_a_lost_packet_whole_and_resyncs_at_the_next_first() {
    let mut rs = uc_responder();
    run(&mut rs, &uc(Op::SendFirst, 0, 1024), Outcome::Done);
    // PSN 1 lost: the message is abandoned, its last packet dropped.
    assert_eq!(
        rs.on_packet(&uc(Op::SendMiddle, 2, 1024)),
        Received::Abandoned
    );
    assert_eq!(rs.on_packet(&uc(Op::SendLast, 3, 1)), Received::Handled);
    // The next message starts anywhere in PSN space.
    let ex = run(&mut rs, &uc(Op::SendOnly, 10, 5), Outcome::Done);
    assert!(!ex.restart);
    assert_eq!(rs.expected_psn(), Psn::new(11));
    assert!(replies(&mut rs).is_empty(), "UC never acknowledges");
    assert_eq!(rs.stats().dropped, 2);
}

#[test]
fn uc_a_new_first_inside_a_message_restarts_and_refusals_only_drop() {
    let mut rs = uc_responder();
    run(&mut rs, &uc(Op::SendFirst, 0, 1024), Outcome::Done);
    // The tail of the first message was lost; a new message begins.
    let ex = run(&mut rs, &uc(Op::SendFirst, 5, 1024), Outcome::Done);
    assert!(ex.restart);
    run(&mut rs, &uc(Op::SendLast, 6, 3), Outcome::Done);
    // No receive WQE or a bad rkey: the message is dropped, the QP goes on.
    run(&mut rs, &uc(Op::SendFirst, 7, 1024), Outcome::Rnr);
    assert_eq!(rs.on_packet(&uc(Op::SendLast, 8, 1)), Received::Handled);
    let mut w = uc(Op::WriteOnly, 9, 4);
    w.reth = Some(Reth {
        va: 0,
        rkey: 1,
        dma_len: 4,
    });
    run(&mut rs, &w, Outcome::Refused(Refusal::RemoteAccess));
    run(&mut rs, &uc(Op::SendOnly, 10, 1), Outcome::Done);
    assert!(!rs.is_failed());
    assert!(replies(&mut rs).is_empty());
}

#[test]
fn copies_of_a_read_resume_its_one_response_stream_instead_of_queueing_more() {
    let mut rs = Responder::new(rc(0)).unwrap();
    run(&mut rs, &read(0, 0x9000, 8192), Outcome::Done);
    let first = std::iter::from_fn(|| rs.poll_transmit())
        .take(3)
        .collect::<Vec<_>>();
    assert_eq!(psns(&first), [0, 1, 2]);
    // 64 copies of the READ while its responses go out: the stream starts again from
    // the copy's PSN, once; a copy asking for what is still to come changes nothing.
    for _ in 0..64 {
        assert_eq!(rs.on_packet(&read(0, 0x9000, 8192)), Received::Handled);
    }
    rs.on_packet(&read(5, 0x9000 + 5 * 1024, 3072));
    let rest = replies(&mut rs);
    assert_eq!(psns(&rest), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(rest[0].bth.opcode.op, Op::ReadResponseFirst);
    assert_eq!(rs.stats().duplicates, 65);
    // Once the stream has ended, a copy gets one more stream.
    rs.on_packet(&read(6, 0x9000 + 6 * 1024, 2048));
    assert_eq!(psns(&replies(&mut rs)), [6, 7]);
}

#[test]
fn a_read_response_refused_at_its_turn_becomes_a_nak_and_the_qp_fails() {
    let mut rs = Responder::new(rc(0)).unwrap();
    run(&mut rs, &read(0, 0x9000, 4096), Outcome::Done);
    let out = rs.poll_transmit().unwrap();
    rs.refuse_read(out.psn().add(1), Refusal::RemoteAccess);
    assert_eq!(
        summary(&replies(&mut rs)),
        [(Op::Acknowledge, 1, nak(NAK_REMOTE_ACCESS))]
    );
    assert!(rs.is_failed());
}

#[test]
fn duplicates_stop_being_answered_when_the_reply_queue_is_full() {
    let mut rs = Responder::new(rc(0)).unwrap();
    run(&mut rs, &fetch_add(0), Outcome::Atomic(1));
    for _ in 0..MAX_QUEUED_REPLIES + 10 {
        rs.on_packet(&fetch_add(0));
    }
    assert_eq!(replies(&mut rs).len(), MAX_QUEUED_REPLIES);
    // New requests are still answered.
    let mut p = req(Op::SendOnly, 1, 1);
    p.bth.ack_req = true;
    run(&mut rs, &p, Outcome::Done);
    assert_eq!(summary(&replies(&mut rs)), [(Op::Acknowledge, 1, ACK)]);
}

#[test]
fn reconfiguring_changes_the_rnr_timer_and_shrinks_the_resources() {
    let mut rs = Responder::new(rc(0)).unwrap();
    run(&mut rs, &fetch_add(0), Outcome::Atomic(1));
    run(&mut rs, &fetch_add(1), Outcome::Atomic(2));
    replies(&mut rs);
    rs.reconfigure(ResponderConfig {
        min_rnr_timer: 20,
        max_dest_rd_atomic: 1,
        ..rc(0)
    });
    rs.on_packet(&fetch_add(0));
    assert!(replies(&mut rs).is_empty(), "the older resource is gone");
    run(&mut rs, &req(Op::SendOnly, 2, 1), Outcome::Rnr);
    assert_eq!(
        summary(&replies(&mut rs)),
        [(Op::Acknowledge, 2, Some(AethKind::RnrNak { timer: 20 }))]
    );
}

#[test]
fn an_xrc_responder_names_the_srq_of_each_request_and_answers_with_xrc_acks() {
    let mut rs = Responder::new(ResponderConfig {
        transport: Transport::Xrc,
        ..rc(0)
    })
    .unwrap();
    let mut p = req(Op::SendOnly, 0, 3);
    p.bth.opcode = Opcode::new(Transport::Xrc, Op::SendOnly).unwrap();
    p.xrc_srqn = Some(0x44);
    let ex = run(&mut rs, &p, Outcome::Done);
    assert_eq!(ex.xrc_srqn, Some(0x44));
    let out = replies(&mut rs);
    assert_eq!(
        out[0].bth.opcode,
        Opcode::new(Transport::Xrc, Op::Acknowledge).unwrap()
    );
    assert_eq!(testing::deliver_zeros(&out[0]).xrc_srqn, None);
}
