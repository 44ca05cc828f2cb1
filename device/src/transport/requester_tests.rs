//! The requester against hand-made responses: segmentation, ACK coalescing, every NAK,
//! RNR and timeout with their retry counts, READ responses, atomics, the limits, UC.

use super::*;
use crate::transport::testing::*;
use crate::wire::ext::NAK_PSN_SEQUENCE;

fn rc(sq_psn: u32) -> RequesterConfig {
    RequesterConfig {
        dest_qpn: 0x12,
        sq_psn,
        ..RequesterConfig::default()
    }
}

fn send(len: u64) -> Message {
    Message::new(MsgOp::Send, len)
}

/// Everything the requester sends now.
fn sent(rq: &mut Requester, now: Instant, actions: &mut Vec<Action>) -> Vec<Outgoing> {
    std::iter::from_fn(|| rq.poll_transmit(now, actions)).collect()
}

fn psns(out: &[Outgoing]) -> Vec<u32> {
    out.iter().map(|o| o.bth.psn).collect()
}

fn ops(out: &[Outgoing]) -> Vec<Op> {
    out.iter().map(|o| o.bth.opcode.op).collect()
}

fn handle(rq: &mut Requester, p: Packet, now: Instant) -> Vec<Action> {
    let mut actions = Vec::new();
    rq.on_packet(&p, now, &mut actions);
    actions
}

fn success(wqe: u32, byte_len: u32) -> Action {
    Action::Complete {
        wqe: WqeId(wqe),
        status: WcStatus::Success,
        vendor_err: VendorErr::None,
        byte_len,
    }
}

fn failure(wqe: u32, status: WcStatus, vendor_err: VendorErr) -> Action {
    Action::Complete {
        wqe: WqeId(wqe),
        status,
        vendor_err,
        byte_len: 0,
    }
}

#[test]
fn a_send_is_cut_at_the_mtu_and_completes_on_the_ack_of_its_last_packet() {
    let mut rq = Requester::new(rc(100)).unwrap();
    let mut msg = send(3000);
    msg.solicited = true;
    rq.post(WqeId(7), msg).unwrap();
    let mut actions = Vec::new();
    let out = sent(&mut rq, t0(), &mut actions);
    assert_eq!(ops(&out), [Op::SendFirst, Op::SendMiddle, Op::SendLast]);
    assert_eq!(psns(&out), [100, 101, 102]);
    let payloads: Vec<_> = out.iter().map(|o| o.payload).collect();
    assert_eq!(
        payloads,
        [(0, 1024), (1024, 1024), (2048, 952)].map(|(offset, len)| Payload::Wqe {
            wqe: WqeId(7),
            offset,
            len
        })
    );
    // AckReq and SE only where the message ends.
    assert_eq!(
        out.iter().map(|o| o.bth.ack_req).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert_eq!(
        out.iter().map(|o| o.bth.solicited).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert!(out
        .iter()
        .all(|o| o.bth.dest_qpn == 0x12 && o.reth.is_none()));
    assert!(actions.is_empty());
    // A partial ACK completes nothing.
    assert!(handle(&mut rq, ack(101), t0()).is_empty());
    assert_eq!(handle(&mut rq, ack(102), t0()), [success(7, 3000)]);
    assert_eq!(rq.pending(), 0);
    assert_eq!(rq.next_psn(), Psn::new(103));
    assert_eq!(rq.next_timer(), None);
}

#[test]
fn a_write_carries_its_reth_on_the_first_packet_and_the_immediate_on_the_last() {
    let mut rq = Requester::new(rc(0)).unwrap();
    let msg = Message::new(MsgOp::WriteImm([1, 2, 3, 4]), 2048).remote(0x1000, 0x55);
    rq.post(WqeId(0), msg).unwrap();
    rq.post(WqeId(1), Message::new(MsgOp::SendInv(0x77), 10))
        .unwrap();
    rq.post(WqeId(2), Message::new(MsgOp::Write, 0).remote(0, 0))
        .unwrap();
    let out = sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(
        ops(&out),
        [
            Op::WriteFirst,
            Op::WriteLastImm,
            Op::SendOnlyInv,
            Op::WriteOnly
        ]
    );
    let reth = Reth {
        va: 0x1000,
        rkey: 0x55,
        dma_len: 2048,
    };
    assert_eq!(out[0].reth, Some(reth));
    assert_eq!((out[1].reth, out[1].imm), (None, Some([1, 2, 3, 4])));
    assert_eq!(out[2].ieth, Some(0x77));
    assert_eq!(out[3].payload.len(), 0);
    // Every packet encodes and decodes as its opcode requires.
    for o in &out {
        assert_eq!(deliver_zeros(o).bth, o.bth);
    }
}

#[test]
fn one_ack_of_a_later_psn_completes_every_wqe_before_it_in_order() {
    let mut rq = Requester::new(rc(0)).unwrap();
    for i in 0..4 {
        rq.post(WqeId(i), send(100)).unwrap();
    }
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0, 1, 2, 3]);
    assert_eq!(
        handle(&mut rq, ack(2), t0()),
        [success(0, 100), success(1, 100), success(2, 100)]
    );
    assert_eq!(handle(&mut rq, ack(3), t0()), [success(3, 100)]);
}

#[test]
fn psns_wrap_at_24_bits_and_acks_after_the_wrap_complete() {
    let mut rq = Requester::new(rc(0xFF_FFFE)).unwrap();
    rq.post(WqeId(0), send(3000)).unwrap();
    rq.post(WqeId(1), send(1)).unwrap();
    let out = sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(psns(&out), [0xFF_FFFE, 0xFF_FFFF, 0, 1]);
    assert_eq!(handle(&mut rq, ack(0), t0()), [success(0, 3000)]);
    // An ACK from before the wrap is old now.
    assert!(handle(&mut rq, ack(0xFF_FFFF), t0()).is_empty());
    assert_eq!(handle(&mut rq, ack(1), t0()), [success(1, 1)]);
    assert_eq!(rq.next_psn(), Psn::new(2));
}

#[test]
fn duplicate_ghost_and_future_acks_are_ignored() {
    let mut rq = Requester::new(rc(10)).unwrap();
    rq.post(WqeId(0), send(10)).unwrap();
    rq.post(WqeId(1), send(10)).unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(handle(&mut rq, ack(10), t0()), [success(0, 10)]);
    // The responder's re-ACK of a duplicate, and PSNs never sent.
    assert!(handle(&mut rq, ack(10), t0()).is_empty());
    assert!(handle(&mut rq, ack(9), t0()).is_empty());
    assert!(handle(&mut rq, ack(12), t0()).is_empty());
    assert!(handle(&mut rq, nak(NAK_PSN_SEQUENCE, 13), t0()).is_empty());
    assert_eq!(rq.stats().ignored, 4);
    assert_eq!(rq.pending(), 1);
}

#[test]
fn a_sequence_nak_acks_what_is_before_it_and_goes_back_to_its_psn() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), send(2048)).unwrap();
    rq.post(WqeId(1), send(2048)).unwrap();
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0, 1, 2, 3]);
    // The responder lost PSN 2: it NAKs it, which acknowledges 0 and 1.
    let actions = handle(&mut rq, nak(NAK_PSN_SEQUENCE, 2), at(10));
    assert_eq!(actions, [success(0, 2048)]);
    let again = sent(&mut rq, at(10), &mut Vec::new());
    assert_eq!(psns(&again), [2, 3]);
    assert_eq!(ops(&again), [Op::SendFirst, Op::SendLast]);
    assert_eq!(rq.stats().seq_naks, 1);
    assert_eq!(rq.stats().retransmitted, 2);
    // The same NAK again (for a packet sent before the retry) does not start another.
    handle(&mut rq, nak(NAK_PSN_SEQUENCE, 2), at(11));
    assert!(sent(&mut rq, at(11), &mut Vec::new()).is_empty());
    assert_eq!(handle(&mut rq, ack(3), at(12)), [success(1, 2048)]);
}

#[test]
fn sequence_naks_without_progress_use_up_retry_cnt() {
    let mut rq = Requester::new(RequesterConfig {
        retry_cnt: 1,
        ..rc(0)
    })
    .unwrap();
    rq.post(WqeId(0), send(2048)).unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    assert!(handle(&mut rq, nak(NAK_PSN_SEQUENCE, 0), t0()).is_empty());
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0, 1]);
    // Progress (PSN 0 acked) restores the count ...
    assert!(handle(&mut rq, nak(NAK_PSN_SEQUENCE, 1), t0()).is_empty());
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [1]);
    // ... which a NAK of another PSN without progress then uses up.
    let mut rq2 = Requester::new(RequesterConfig {
        retry_cnt: 1,
        ..rc(0)
    })
    .unwrap();
    rq2.post(WqeId(0), send(4096)).unwrap();
    sent(&mut rq2, t0(), &mut Vec::new());
    handle(&mut rq2, nak(NAK_PSN_SEQUENCE, 0), t0());
    let actions = handle(&mut rq2, nak(NAK_PSN_SEQUENCE, 1), t0());
    // The NAK of 1 acknowledged 0 (progress), so it retries ...
    assert!(actions.is_empty());
    // ... but a timeout without progress afterwards has nothing left.
    let mut actions = Vec::new();
    rq2.on_timer(at(1_000_000), &mut actions);
    assert_eq!(
        actions,
        [failure(0, WcStatus::RetryExcErr, VendorErr::Unreachable)]
    );
    assert!(rq2.is_failed());
}

#[test]
fn an_rnr_nak_waits_its_timer_then_resends_from_its_psn() {
    let mut rq = Requester::new(rc(5)).unwrap();
    rq.post(WqeId(0), send(10)).unwrap();
    rq.post(WqeId(1), send(10)).unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    // Timer code 3: 30 us.
    let actions = handle(&mut rq, rnr(3, 5), t0());
    assert_eq!(
        actions,
        [Action::RnrWait {
            until: at(30),
            retries_left: None
        }]
    );
    assert_eq!(rq.next_timer(), Some(at(30)));
    assert!(sent(&mut rq, at(29), &mut Vec::new()).is_empty());
    // A sequence NAK for the same PSN (rxe sends one for the packets after) changes nothing.
    handle(&mut rq, nak(NAK_PSN_SEQUENCE, 5), at(1));
    assert!(sent(&mut rq, at(29), &mut Vec::new()).is_empty());
    assert_eq!(psns(&sent(&mut rq, at(30), &mut Vec::new())), [5, 6]);
    assert_eq!(rq.stats().rnr_naks, 1);
    assert_eq!(
        handle(&mut rq, ack(6), at(31)),
        [success(0, 10), success(1, 10)]
    );
}

#[test]
fn rnr_retry_counts_the_naks_and_then_fails_with_rnr_retry_exc_err() {
    let mut rq = Requester::new(RequesterConfig {
        rnr_retry: 1,
        ..rc(0)
    })
    .unwrap();
    rq.post(WqeId(0), send(10)).unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    let actions = handle(&mut rq, rnr(1, 0), t0());
    assert_eq!(
        actions,
        [Action::RnrWait {
            until: at(10),
            retries_left: Some(0)
        }]
    );
    assert_eq!(psns(&sent(&mut rq, at(10), &mut Vec::new())), [0]);
    assert_eq!(
        handle(&mut rq, rnr(1, 0), at(11)),
        [failure(0, WcStatus::RnrRetryExcErr, VendorErr::Rnr)]
    );
    assert!(rq.is_failed());
    assert!(rq.poll_transmit(at(100), &mut Vec::new()).is_none());
    assert_eq!(rq.post(WqeId(1), send(1)), Err(TransportError::Failed));
}

#[test]
fn rnr_retry_7_retries_forever() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), send(10)).unwrap();
    let mut now = t0();
    for _ in 0..100 {
        assert_eq!(psns(&sent(&mut rq, now, &mut Vec::new())), [0]);
        handle(&mut rq, rnr(1, 0), now);
        now += Duration::from_micros(10);
    }
    assert!(!rq.is_failed());
    assert_eq!(rq.stats().rnr_naks, 100);
}

#[test]
fn error_naks_complete_the_wqe_they_name_with_its_remote_status() {
    for (code, status, why) in [
        (1, WcStatus::RemInvReqErr, VendorErr::RemoteError),
        (2, WcStatus::RemAccessErr, VendorErr::RemoteAccess),
        (3, WcStatus::RemOpErr, VendorErr::RemoteError),
    ] {
        let mut rq = Requester::new(rc(0)).unwrap();
        rq.post(WqeId(0), send(10)).unwrap();
        rq.post(WqeId(1), Message::new(MsgOp::Write, 10).remote(0x10, 1))
            .unwrap();
        rq.post(WqeId(2), send(10)).unwrap();
        sent(&mut rq, t0(), &mut Vec::new());
        // The NAK of PSN 1 acknowledges WQE 0 and fails WQE 1.
        assert_eq!(
            handle(&mut rq, nak(code, 1), t0()),
            [success(0, 10), failure(1, status, why)]
        );
        assert!(rq.is_failed());
        assert!(handle(&mut rq, ack(2), t0()).is_empty());
    }
}

#[test]
fn the_ack_timeout_resends_from_the_oldest_unacked_psn_until_retry_cnt_is_spent() {
    let mut rq = Requester::new(RequesterConfig {
        timeout: 10, // 4.096 us * 1024 = 4194.304 us
        retry_cnt: 2,
        ..rc(0)
    })
    .unwrap();
    rq.post(WqeId(0), send(2048)).unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    let deadline = t0() + Duration::from_nanos(4096 << 10);
    assert_eq!(rq.next_timer(), Some(deadline));
    let mut actions = Vec::new();
    // Not yet due.
    rq.on_timer(deadline - Duration::from_nanos(1), &mut actions);
    assert!(sent(&mut rq, deadline, &mut actions).is_empty());
    handle(&mut rq, ack(0), t0());
    for round in 1..=2 {
        let now = rq.next_timer().unwrap();
        rq.on_timer(now, &mut actions);
        assert_eq!(
            psns(&sent(&mut rq, now, &mut actions)),
            [1],
            "round {round}"
        );
    }
    assert_eq!(rq.stats().timeouts, 2);
    let now = rq.next_timer().unwrap();
    rq.on_timer(now, &mut actions);
    assert_eq!(
        actions,
        [failure(0, WcStatus::RetryExcErr, VendorErr::Unreachable)]
    );
}

#[test]
fn timeout_zero_runs_no_ack_timer() {
    let mut rq = Requester::new(RequesterConfig {
        timeout: 0,
        ..rc(0)
    })
    .unwrap();
    rq.post(WqeId(0), send(1)).unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(rq.next_timer(), None);
}

#[test]
fn a_read_asks_for_its_whole_length_and_completes_with_its_last_response() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), Message::new(MsgOp::Read, 2500).remote(0x8000, 9))
        .unwrap();
    rq.post(WqeId(1), send(1)).unwrap();
    let out = sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(ops(&out), [Op::ReadRequest, Op::SendOnly]);
    // The READ takes the PSNs of its three responses.
    assert_eq!(psns(&out), [0, 3]);
    assert_eq!(
        out[0].reth,
        Some(Reth {
            va: 0x8000,
            rkey: 9,
            dma_len: 2500
        })
    );
    assert_eq!(out[0].payload, Payload::None);
    let r = |op, psn, n| read_response(op, psn, vec![0; n]);
    assert_eq!(
        handle(&mut rq, r(Op::ReadResponseFirst, 0, 1024), t0()),
        [Action::Place {
            wqe: WqeId(0),
            offset: 0,
            len: 1024
        }]
    );
    // A response seen twice is placed once.
    assert!(handle(&mut rq, r(Op::ReadResponseFirst, 0, 1024), t0()).is_empty());
    handle(&mut rq, r(Op::ReadResponseMiddle, 1, 1024), t0());
    assert_eq!(
        handle(&mut rq, r(Op::ReadResponseLast, 2, 452), t0()),
        [
            Action::Place {
                wqe: WqeId(0),
                offset: 2048,
                len: 452
            },
            success(0, 2500)
        ]
    );
    assert_eq!(handle(&mut rq, ack(3), t0()), [success(1, 1)]);
}

#[test]
fn a_skipped_read_response_is_an_implied_nak_that_asks_again_from_the_missing_one() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), Message::new(MsgOp::Read, 4096).remote(0x8000, 9))
        .unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    handle(
        &mut rq,
        read_response(Op::ReadResponseFirst, 0, vec![0; 1024]),
        t0(),
    );
    // Response 1 is lost; 2 arrives.
    let r2 = read_response(Op::ReadResponseMiddle, 2, vec![0; 1024]);
    assert!(handle(&mut rq, r2.clone(), t0()).is_empty());
    // The rest of the old stream does not start another retry.
    handle(
        &mut rq,
        read_response(Op::ReadResponseLast, 3, vec![0; 1024]),
        t0(),
    );
    assert_eq!(rq.stats().implied_naks, 1);
    let again = sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(psns(&again), [1]);
    assert_eq!(
        again[0].reth,
        Some(Reth {
            va: 0x8400,
            rkey: 9,
            dma_len: 3072
        })
    );
    // The new stream starts with First at PSN 1.
    let r = |op, psn| read_response(op, psn, vec![0; 1024]);
    handle(&mut rq, r(Op::ReadResponseFirst, 1), t0());
    handle(&mut rq, r(Op::ReadResponseMiddle, 2), t0());
    let actions = handle(&mut rq, r(Op::ReadResponseLast, 3), t0());
    assert_eq!(actions.last(), Some(&success(0, 4096)));
}

#[test]
fn an_ack_past_an_outstanding_read_is_an_implied_nak() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), send(1)).unwrap();
    rq.post(WqeId(1), Message::new(MsgOp::Read, 100).remote(0x10, 1))
        .unwrap();
    rq.post(WqeId(2), send(1)).unwrap();
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0, 1, 2]);
    // The READ response (PSN 1) was lost; the ACK of 2 says the READ was executed.
    assert_eq!(handle(&mut rq, ack(2), t0()), [success(0, 1)]);
    assert_eq!(rq.stats().implied_naks, 1);
    let again = sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(ops(&again), [Op::ReadRequest, Op::SendOnly]);
    assert_eq!(psns(&again), [1, 2]);
    let actions = handle(
        &mut rq,
        read_response(Op::ReadResponseOnly, 1, vec![0; 100]),
        t0(),
    );
    assert_eq!(actions.last(), Some(&success(1, 100)));
    // A READ response acknowledged the SEND before it; the ACK of 2 ends WQE 2.
    assert_eq!(handle(&mut rq, ack(2), t0()), [success(2, 1)]);
}

#[test]
fn a_read_response_of_the_wrong_length_is_a_bad_response() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), Message::new(MsgOp::Read, 2048).remote(0x10, 1))
        .unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(
        handle(
            &mut rq,
            read_response(Op::ReadResponseFirst, 0, vec![0; 1000]),
            t0()
        ),
        [failure(0, WcStatus::BadRespErr, VendorErr::Length)]
    );
    // An Only where the READ has two responses is one too.
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), Message::new(MsgOp::Read, 2048).remote(0x10, 1))
        .unwrap();
    sent(&mut rq, t0(), &mut Vec::new());
    let only = read_response(Op::ReadResponseOnly, 0, vec![0; 1024]);
    assert!(matches!(
        handle(&mut rq, only, t0())[..],
        [Action::Complete {
            status: WcStatus::BadRespErr,
            ..
        }]
    ));
}

#[test]
fn an_atomic_carries_its_operands_and_completes_with_the_original_value() {
    let mut rq = Requester::new(rc(0)).unwrap();
    let cas = MsgOp::CompareSwap {
        compare: 5,
        swap: 9,
    };
    rq.post(WqeId(0), Message::new(cas, 8).remote(0x40, 3))
        .unwrap();
    let out = sent(&mut rq, t0(), &mut Vec::new());
    assert_eq!(ops(&out), [Op::CompareSwap]);
    assert_eq!(
        out[0].atomic_eth,
        Some(AtomicEth {
            va: 0x40,
            rkey: 3,
            swap_add: 9,
            compare: 5
        })
    );
    assert_eq!(deliver_zeros(&out[0]).atomic_eth, out[0].atomic_eth);
    // A plain ACK of an atomic's PSN is no atomic ACK: the response is still missing.
    assert!(handle(&mut rq, ack(0), t0()).is_empty());
    assert_eq!(rq.stats().implied_naks, 1);
    assert_eq!(
        handle(&mut rq, atomic_ack(0, 5), t0()),
        [
            Action::AtomicResult {
                wqe: WqeId(0),
                original: 5
            },
            success(0, 8)
        ]
    );
    assert!(handle(&mut rq, atomic_ack(0, 5), t0()).is_empty());
}

#[test]
fn max_rd_atomic_holds_back_reads_and_atomics_and_everything_behind_them() {
    let mut rq = Requester::new(RequesterConfig {
        max_rd_atomic: 1,
        ..rc(0)
    })
    .unwrap();
    rq.post(WqeId(0), Message::new(MsgOp::Read, 10).remote(0, 1))
        .unwrap();
    rq.post(
        WqeId(1),
        Message::new(MsgOp::FetchAdd { add: 1 }, 8).remote(0, 1),
    )
    .unwrap();
    rq.post(WqeId(2), send(1)).unwrap();
    assert_eq!(
        ops(&sent(&mut rq, t0(), &mut Vec::new())),
        [Op::ReadRequest]
    );
    handle(
        &mut rq,
        read_response(Op::ReadResponseOnly, 0, vec![0; 10]),
        t0(),
    );
    assert_eq!(
        ops(&sent(&mut rq, t0(), &mut Vec::new())),
        [Op::FetchAdd, Op::SendOnly]
    );
}

#[test]
fn a_fenced_wqe_waits_for_the_reads_before_it() {
    let mut rq = Requester::new(RequesterConfig {
        max_rd_atomic: 4,
        ..rc(0)
    })
    .unwrap();
    rq.post(WqeId(0), Message::new(MsgOp::Read, 10).remote(0, 1))
        .unwrap();
    let mut fenced = send(1);
    fenced.fence = true;
    rq.post(WqeId(1), fenced).unwrap();
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0]);
    handle(
        &mut rq,
        read_response(Op::ReadResponseOnly, 0, vec![0; 10]),
        t0(),
    );
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [1]);
}

#[test]
fn an_aborted_wqe_sends_nothing_more_and_fails_once_those_before_it_completed() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), send(1)).unwrap();
    rq.post(WqeId(1), send(3000)).unwrap();
    rq.post(WqeId(2), send(1)).unwrap();
    let mut actions = Vec::new();
    let first = std::iter::from_fn(|| rq.poll_transmit(t0(), &mut actions))
        .take(2)
        .collect::<Vec<_>>();
    assert_eq!(psns(&first), [0, 1]);
    rq.abort(
        WqeId(1),
        WcStatus::LocProtErr,
        VendorErr::DmaFault,
        t0(),
        &mut actions,
    );
    assert!(actions.is_empty(), "WQE 0 is not acknowledged yet");
    assert!(sent(&mut rq, t0(), &mut actions).is_empty());
    assert_eq!(
        handle(&mut rq, ack(0), t0()),
        [
            success(0, 1),
            failure(1, WcStatus::LocProtErr, VendorErr::DmaFault)
        ]
    );
    assert!(rq.is_failed());
}

#[test]
fn within_one_long_message_the_window_bounds_the_psns_outstanding() {
    let mut rq = Requester::new(RequesterConfig { window: 4, ..rc(0) }).unwrap();
    rq.post(WqeId(0), send(10 * 1024)).unwrap();
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0, 1, 2, 3]);
    handle(&mut rq, ack(1), t0());
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [4, 5]);
}

#[test]
fn the_window_bounds_the_psns_outstanding() {
    let mut rq = Requester::new(RequesterConfig { window: 3, ..rc(0) }).unwrap();
    for i in 0..5 {
        rq.post(WqeId(i), send(1)).unwrap();
    }
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0, 1, 2]);
    handle(&mut rq, ack(1), t0());
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [3, 4]);
}

#[test]
fn uc_sends_once_completes_when_sent_and_takes_no_read_or_response() {
    let mut rq = Requester::new(RequesterConfig {
        transport: Transport::Uc,
        ..rc(0)
    })
    .unwrap();
    assert_eq!(
        rq.post(WqeId(0), Message::new(MsgOp::Read, 1)),
        Err(TransportError::UcReadAtomic)
    );
    rq.post(WqeId(0), send(2048)).unwrap();
    rq.post(WqeId(1), Message::new(MsgOp::Write, 1).remote(0, 1))
        .unwrap();
    let mut actions = Vec::new();
    let out = sent(&mut rq, t0(), &mut actions);
    assert_eq!(ops(&out), [Op::SendFirst, Op::SendLast, Op::WriteOnly]);
    assert!(out
        .iter()
        .all(|o| o.bth.opcode.transport == Transport::Uc && !o.bth.ack_req));
    assert_eq!(actions, [success(0, 2048), success(1, 1)]);
    assert_eq!(rq.next_timer(), None);
    let mut uc_ack = ack(2);
    uc_ack.bth.opcode = Opcode::new(Transport::Uc, Op::SendOnly).unwrap();
    assert!(handle(&mut rq, uc_ack, t0()).is_empty());
}

#[test]
fn bad_configurations_and_work_requests_are_refused() {
    let bad = |cfg| Requester::new(cfg).err();
    assert_eq!(
        bad(RequesterConfig { mtu: 1500, ..rc(0) }),
        Some(TransportError::Mtu(1500))
    );
    assert!(matches!(
        bad(rc(1 << 24)),
        Some(TransportError::Range { .. })
    ));
    assert!(matches!(
        bad(RequesterConfig {
            transport: Transport::Ud,
            ..rc(0)
        }),
        Some(TransportError::Transport(Transport::Ud))
    ));
    let mut rq = Requester::new(rc(0)).unwrap();
    assert_eq!(
        rq.post(WqeId(0), send(MAX_MESSAGE + 1)),
        Err(TransportError::Length(MAX_MESSAGE + 1))
    );
    let mut xrc = Requester::new(RequesterConfig {
        transport: Transport::Xrc,
        ..rc(0)
    })
    .unwrap();
    assert_eq!(xrc.post(WqeId(0), send(1)), Err(TransportError::XrcSrq));
    let mut msg = send(1);
    msg.xrc_srqn = Some(0x33);
    xrc.post(WqeId(0), msg).unwrap();
    let out = sent(&mut xrc, t0(), &mut Vec::new());
    assert_eq!(out[0].xrc_srqn, Some(0x33));
    assert_eq!(deliver_zeros(&out[0]).xrc_srqn, Some(0x33));
}

#[test]
fn an_atomic_ack_acknowledges_the_wqes_before_it_and_answers_its_own() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), send(1)).unwrap();
    rq.post(
        WqeId(1),
        Message::new(MsgOp::FetchAdd { add: 2 }, 8).remote(0x40, 3),
    )
    .unwrap();
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0, 1]);
    // The ACK of the SEND was lost; the atomic ACK implies it.
    assert_eq!(
        handle(&mut rq, atomic_ack(1, 40), t0()),
        [
            success(0, 1),
            Action::AtomicResult {
                wqe: WqeId(1),
                original: 40
            },
            success(1, 8)
        ]
    );
}

#[test]
fn reconfiguring_changes_the_retry_attributes_and_the_mtu_only_when_idle() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), send(2048)).unwrap();
    let small = RequesterConfig { mtu: 512, ..rc(0) };
    // Not yet started: the message is cut at the new MTU.
    rq.reconfigure(small).unwrap();
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [0, 1, 2, 3]);
    assert_eq!(rq.reconfigure(rc(0)), Err(TransportError::Busy));
    rq.reconfigure(RequesterConfig {
        retry_cnt: 0,
        ..small
    })
    .unwrap();
    let mut actions = Vec::new();
    rq.on_timer(rq.next_timer().unwrap(), &mut actions);
    assert_eq!(
        actions,
        [failure(0, WcStatus::RetryExcErr, VendorErr::Unreachable)]
    );
}

#[test]
fn a_memory_operation_runs_when_all_before_it_completed_and_holds_back_what_follows() {
    let mut rq = Requester::new(rc(0)).unwrap();
    rq.post(WqeId(0), send(1)).unwrap();
    rq.post_local(WqeId(1)).unwrap();
    rq.post(WqeId(2), send(1)).unwrap();
    let mut actions = Vec::new();
    assert_eq!(psns(&sent(&mut rq, t0(), &mut actions)), [0]);
    assert!(actions.is_empty());
    assert_eq!(
        rq.local_done(
            WqeId(1),
            WcStatus::Success,
            VendorErr::None,
            t0(),
            &mut actions
        ),
        Err(TransportError::NotLocal(1))
    );
    assert_eq!(handle(&mut rq, ack(0), t0()), [success(0, 1)]);
    assert!(sent(&mut rq, t0(), &mut actions).is_empty());
    assert_eq!(actions, [Action::Local { wqe: WqeId(1) }]);
    actions.clear();
    rq.local_done(
        WqeId(1),
        WcStatus::Success,
        VendorErr::None,
        t0(),
        &mut actions,
    )
    .unwrap();
    assert_eq!(actions, [success(1, 0)]);
    assert_eq!(psns(&sent(&mut rq, t0(), &mut Vec::new())), [1]);
    // A failed memory operation fails the QP.
    rq.post_local(WqeId(3)).unwrap();
    handle(&mut rq, ack(1), t0());
    let mut actions = Vec::new();
    sent(&mut rq, t0(), &mut actions);
    actions.clear();
    rq.local_done(
        WqeId(3),
        WcStatus::LocProtErr,
        VendorErr::MkeyState,
        t0(),
        &mut actions,
    )
    .unwrap();
    assert_eq!(
        actions,
        [failure(3, WcStatus::LocProtErr, VendorErr::MkeyState)]
    );
    assert!(rq.is_failed());
}
