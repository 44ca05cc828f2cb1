//! Port and QP counters (SPEC "Counters") read with QUERY_COUNTERS: the packets, bytes,
//! messages and ACKs a RoCE v2 wire would carry for RC SEND, WRITE (with immediate), READ
//! and atomics below, at and above the path MTU (1024 and 4096), and across the device's
//! 1 MiB chunks; RNR NAKs and their retries, error NAKs, transport retries, flushes, CQ
//! overflow, UD datagrams sent, received and dropped; each QP's counters against its
//! port's; and every refusal of QUERY_COUNTERS, and a short out_len reading a prefix.
//! Between two devices and on one (loopback: the port counts both sides).

mod harness;

use harness::*;
use vrnic_hw::Counter as C;
use vrnic_hw::*;
use Which::{A, B};

on_both_topologies!(
    writes_take_ceil_len_over_mtu_packets_and_one_ack_at_mtu_1024,
    writes_take_ceil_len_over_mtu_packets_and_one_ack_at_mtu_4096,
    a_write_of_several_chunks_is_one_message_and_one_ack,
    a_read_of_several_chunks_is_one_request_and_all_its_response_packets,
    uc_messages_are_not_acknowledged_and_a_dropped_one_is_not_received,
    sends_count_like_writes_and_the_receive_completion_at_the_target,
    write_with_imm_is_a_write_that_completes_a_receive,
    reads_are_one_request_and_ceil_len_over_mtu_response_packets,
    atomics_are_one_request_and_one_response_without_payload,
    an_rnr_naked_send_counts_each_nak_and_each_resend_and_one_message,
    rnr_retries_exhausted_count_every_attempt_and_the_error_completion,
    a_bad_rkey_is_an_error_nak_sent_by_the_target_and_received_by_the_requester,
    flushed_work_requests_count_completions_but_no_packets,
    an_unready_target_counts_nothing_and_the_requester_counts_its_transport_retries,
    a_cq_overflow_counts_at_the_port_only,
    an_event_that_finds_its_eq_full_counts_one_eq_overflow_at_the_port,
    datagrams_sent_and_received_count_one_packet_each,
    dropped_datagrams_count_at_the_dropping_port_only,
);

type Counts = Vec<u64>;
/// Expected counts: (counter, value), the others 0.
type Want = Vec<(C, u64)>;

fn named(v: &[u64]) -> Vec<(&'static str, u64)> {
    nonzero_counters(v)
}

fn expect(pairs: &[(C, u64)]) -> Vec<(&'static str, u64)> {
    counters_of(pairs)
}

fn delta(after: &[u64], before: &[u64]) -> Counts {
    after
        .iter()
        .zip(before)
        .map(|(a, b)| a.wrapping_sub(*b))
        .collect()
}

fn get(v: &[u64], c: C) -> u64 {
    v[c as usize]
}

/// Both QPs' and both ports' counters (one port in loopback).
struct Snap {
    a: Counts,
    b: Counts,
    port_a: Counts,
    port_b: Counts,
}

fn snap(p: &mut Pair) -> Snap {
    let a = p.a.qp.id();
    let b = p.b.qp.id();
    Snap {
        a: p.drv(A).counters(Some(a)),
        b: p.drv(B).counters(Some(b)),
        port_a: p.drv(A).counters(None),
        port_b: p.drv(B).counters(None),
    }
}

/// What changed since `before`: (QP A, QP B, port A, port B).
fn since(p: &mut Pair, before: &Snap) -> (Counts, Counts, Counts, Counts) {
    let now = snap(p);
    (
        delta(&now.a, &before.a),
        delta(&now.b, &before.b),
        delta(&now.port_a, &before.port_a),
        delta(&now.port_b, &before.port_b),
    )
}

/// QP A (the requester) and QP B (the responder) counted `a` and `b` since `before`, and
/// their ports the same: each its own on two devices, their sum in loopback.
#[track_caller]
fn check(p: &mut Pair, before: &Snap, what: &str, a: &[(C, u64)], b: &[(C, u64)]) {
    let (qa, qb, pa, pb) = since(p, before);
    assert_eq!(named(&qa), expect(a), "{what}: requester QP");
    assert_eq!(named(&qb), expect(b), "{what}: responder QP");
    match p.topology {
        Topology::TwoDevices => {
            assert_eq!(named(&pa), expect(a), "{what}: requester's port");
            assert_eq!(named(&pb), expect(b), "{what}: responder's port");
        }
        Topology::Loopback => {
            let both: Want = a.iter().chain(b).copied().collect();
            assert_eq!(
                named(&pa),
                expect(&both),
                "{what}: the port counts both sides"
            );
        }
    }
}

fn pair_at(t: Topology, mtu: Mtu) -> Pair {
    let opts = ConnectOpts {
        path_mtu: mtu,
        access: ACCESS_ALL | REMOTE_ATOMIC,
        ..ConnectOpts::default()
    };
    Pair::with(t, QpCaps::default(), opts)
}

/// A signalled WRITE of `len` bytes from A to B, and its successful completion.
fn write(p: &mut Pair, src: &Mr, dst: &Mr, len: u64) {
    let wr = SendWr::write(1, vec![src.sge(0, len as u32)], dst, 0).signaled();
    p.post_send(A, &wr);
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
}

/// A requester's and a responder's counts of one acknowledged message of `len` bytes in
/// `packets` packets, sent with `tx` and received with `rx`.
fn acked(tx: C, rx: C, len: u64, packets: u64) -> (Want, Want) {
    (
        vec![
            (C::TxPackets, packets),
            (C::TxBytes, len),
            (tx, 1),
            (C::RxPackets, 1),
            (C::RxAcks, 1),
            (C::Completions, 1),
        ],
        vec![
            (C::RxPackets, packets),
            (C::RxBytes, len),
            (rx, 1),
            (C::TxPackets, 1),
            (C::TxAcks, 1),
        ],
    )
}

fn writes_at(t: Topology, mtu: Mtu, m: u64) {
    let mut p = pair_at(t, mtu);
    let src = p.mr(A, 3 * m + 1, ACCESS_ALL);
    let dst = p.mr(B, 3 * m + 1, ACCESS_ALL);
    // (length, packets at MTU m): below, at and above the MTU, several MTUs, and zero.
    let cases = [(m - 1, 1), (m, 1), (m + 1, 2), (3 * m + 1, 4), (0, 1)];
    for (len, packets) in cases {
        let before = snap(&mut p);
        write(&mut p, &src, &dst, len);
        let (a, b) = acked(C::TxWriteRequests, C::RxWriteRequests, len, packets);
        check(
            &mut p,
            &before,
            &format!("WRITE of {len} at MTU {m}"),
            &a,
            &b,
        );
    }
}

fn writes_take_ceil_len_over_mtu_packets_and_one_ack_at_mtu_1024(t: Topology) {
    writes_at(t, Mtu::Size1024, 1024);
}

fn writes_take_ceil_len_over_mtu_packets_and_one_ack_at_mtu_4096(t: Topology) {
    writes_at(t, Mtu::Size4096, 4096);
}

fn a_write_of_several_chunks_is_one_message_and_one_ack(t: Topology) {
    let mut p = pair_at(t, Mtu::Size4096);
    // Beyond two of the device's 1 MiB chunks.
    let len = (2 << 20) + 5;
    let src = p.mr(A, len, ACCESS_ALL);
    let dst = p.mr(B, len, ACCESS_ALL);
    let before = snap(&mut p);

    write(&mut p, &src, &dst, len);

    let (a, b) = acked(C::TxWriteRequests, C::RxWriteRequests, len, 513);
    check(&mut p, &before, "WRITE of 2 MiB + 5", &a, &b);
}

fn a_read_of_several_chunks_is_one_request_and_all_its_response_packets(t: Topology) {
    let mut p = pair_at(t, Mtu::Size4096);
    let len = (2 << 20) + 5;
    let local = p.mr(A, len, ACCESS_ALL);
    let remote = p.mr(B, len, ACCESS_ALL);
    let before = snap(&mut p);

    let wr = SendWr::read(4, vec![local.sge(0, len as u32)], &remote, 0).signaled();
    p.post_send(A, &wr);
    assert_cqe_ok(&p.send_cqe(A), 4, WcOpcode::RdmaRead);

    let a = [
        (C::TxPackets, 1),
        (C::TxReadRequests, 1),
        (C::RxPackets, 513),
        (C::RxBytes, len),
        (C::Completions, 1),
    ];
    let b = [
        (C::RxPackets, 1),
        (C::RxReadRequests, 1),
        (C::TxPackets, 513),
        (C::TxBytes, len),
    ];
    check(&mut p, &before, "READ of 2 MiB + 5", &a, &b);
}

fn uc_messages_are_not_acknowledged_and_a_dropped_one_is_not_received(t: Topology) {
    let opts = ConnectOpts {
        path_mtu: Mtu::Size1024,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::of(QpType::Uc), opts);
    let src = p.mr(A, 3000, ACCESS_ALL);
    let dst = p.mr(B, 3000, ACCESS_ALL);
    let before = snap(&mut p);

    write(&mut p, &src, &dst, 3000);
    // No receive posted: the UC target drops the SEND, the sender completes it.
    p.post_send(A, &SendWr::send(2, vec![src.sge(0, 100)]).signaled());
    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::Send);

    let a = [
        (C::TxPackets, 4),
        (C::TxBytes, 3100),
        (C::TxWriteRequests, 1),
        (C::TxSendRequests, 1),
        (C::Completions, 2),
    ];
    let b = [
        (C::RxPackets, 3),
        (C::RxBytes, 3000),
        (C::RxWriteRequests, 1),
    ];
    check(
        &mut p,
        &before,
        "UC WRITE of 3000 and a dropped SEND",
        &a,
        &b,
    );
}

fn sends_count_like_writes_and_the_receive_completion_at_the_target(t: Topology) {
    let mut p = pair_at(t, Mtu::Size1024);
    let src = p.mr(A, 4096, ACCESS_ALL);
    let dst = p.mr(B, 4096, ACCESS_ALL);
    for (len, packets) in [(1023, 1), (1024, 1), (1025, 2), (4096, 4)] {
        let before = snap(&mut p);
        p.post_recv(B, &RecvWr::new(9, vec![dst.sge(0, 4096)]));
        p.post_send(A, &SendWr::send(2, vec![src.sge(0, len as u32)]).signaled());
        assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::Send);
        assert_cqe_ok(&p.recv_cqe(B), 9, WcOpcode::Recv);

        let (a, mut b) = acked(C::TxSendRequests, C::RxSendRequests, len, packets);
        b.push((C::Completions, 1));
        check(&mut p, &before, &format!("SEND of {len}"), &a, &b);
    }
}

fn write_with_imm_is_a_write_that_completes_a_receive(t: Topology) {
    let mut p = pair_at(t, Mtu::Size1024);
    let src = p.mr(A, 3000, ACCESS_ALL);
    let dst = p.mr(B, 3000, ACCESS_ALL);
    let before = snap(&mut p);

    p.post_recv(B, &RecvWr::new(9, vec![]));
    let wr = SendWr::write_imm(3, vec![src.sge(0, 3000)], &dst, 0, [1, 2, 3, 4]).signaled();
    p.post_send(A, &wr);
    assert_cqe_ok(&p.send_cqe(A), 3, WcOpcode::RdmaWrite);
    assert_cqe_ok(&p.recv_cqe(B), 9, WcOpcode::RecvRdmaWithImm);

    let (a, mut b) = acked(C::TxWriteRequests, C::RxWriteRequests, 3000, 3);
    b.push((C::Completions, 1));
    check(&mut p, &before, "WRITE_WITH_IMM of 3000", &a, &b);
}

fn reads_are_one_request_and_ceil_len_over_mtu_response_packets(t: Topology) {
    let mut p = pair_at(t, Mtu::Size1024);
    let local = p.mr(A, 5000, ACCESS_ALL);
    let remote = p.mr(B, 5000, ACCESS_ALL);
    for (len, packets) in [(1000, 1), (1024, 1), (1025, 2), (5000, 5), (0, 1)] {
        let before = snap(&mut p);
        let wr = SendWr::read(4, vec![local.sge(0, len as u32)], &remote, 0).signaled();
        p.post_send(A, &wr);
        assert_cqe_ok(&p.send_cqe(A), 4, WcOpcode::RdmaRead);

        let a = [
            (C::TxPackets, 1),
            (C::TxReadRequests, 1),
            (C::RxPackets, packets),
            (C::RxBytes, len),
            (C::Completions, 1),
        ];
        let b = [
            (C::RxPackets, 1),
            (C::RxReadRequests, 1),
            (C::TxPackets, packets),
            (C::TxBytes, len),
        ];
        check(&mut p, &before, &format!("READ of {len}"), &a, &b);
    }
}

fn atomics_are_one_request_and_one_response_without_payload(t: Topology) {
    let mut p = pair_at(t, Mtu::Size1024);
    let result = p.mr(A, 16, ACCESS_ALL);
    let target = p.mr(B, 8, ACCESS_ALL | REMOTE_ATOMIC);
    let before = snap(&mut p);

    p.post_sends(
        A,
        &[
            SendWr::fetch_and_add(5, result.sge(0, 8), &target, 0, 1).signaled(),
            SendWr::cmp_and_swp(6, result.sge(8, 8), &target, 0, 1, 7).signaled(),
        ],
    );
    let c = p.send_cqes(A, 2);
    assert_cqe_ok(&c[0], 5, WcOpcode::FetchAdd);
    assert_cqe_ok(&c[1], 6, WcOpcode::CompSwap);

    let a = [
        (C::TxPackets, 2),
        (C::TxAtomicRequests, 2),
        (C::RxPackets, 2),
        (C::Completions, 2),
    ];
    let b = [
        (C::RxPackets, 2),
        (C::RxAtomicRequests, 2),
        (C::TxPackets, 2),
    ];
    check(&mut p, &before, "two atomics", &a, &b);
}

fn an_rnr_naked_send_counts_each_nak_and_each_resend_and_one_message(t: Topology) {
    let mut p = pair_at(t, Mtu::Size1024); // rnr_retry 7: retries until a receive comes
    let src = p.mr(A, 100, ACCESS_ALL);
    let dst = p.mr(B, 100, ACCESS_ALL);
    let before = snap(&mut p);
    let b_qp = p.b.qp.id();

    p.post_send(A, &SendWr::send(1, vec![src.sge(0, 100)]).signaled());
    wait_for("an RNR NAK", || {
        let c = p.drv(B).counters(Some(b_qp));
        (get(&c, C::RnrNaksSent) > get(&before.b, C::RnrNaksSent)).then_some(())
    });
    p.post_recv(B, &RecvWr::new(9, vec![dst.sge(0, 100)]));
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::Send);
    assert_cqe_ok(&p.recv_cqe(B), 9, WcOpcode::Recv);

    // How many NAKs came before the receive is timing; what each side counts of them is not.
    let (qa, qb, _, _) = since(&mut p, &before);
    let naks = get(&qb, C::RnrNaksSent);
    assert!(naks >= 1);
    let a = [
        (C::TxPackets, naks + 1),
        (C::TxBytes, 100 * (naks + 1)),
        (C::TxSendRequests, 1),
        (C::RnrRetries, naks),
        (C::RnrNaksReceived, naks),
        (C::RxPackets, naks + 1),
        (C::RxAcks, 1),
        (C::Completions, 1),
    ];
    let b = [
        (C::RxPackets, naks + 1),
        (C::RxBytes, 100 * (naks + 1)),
        (C::RxSendRequests, 1),
        (C::TxPackets, naks + 1),
        (C::RnrNaksSent, naks),
        (C::TxAcks, 1),
        (C::Completions, 1),
    ];
    assert_eq!(named(&qa), expect(&a), "requester");
    assert_eq!(named(&qb), expect(&b), "responder");
    check(&mut p, &before, "an RNR-NAKed SEND", &a, &b);
}

fn rnr_retries_exhausted_count_every_attempt_and_the_error_completion(t: Topology) {
    let opts = ConnectOpts {
        rnr_retry: 2,
        min_rnr_timer: 1,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let src = p.mr(A, 10, ACCESS_ALL);
    let before = snap(&mut p);

    p.post_send(A, &SendWr::send(1, vec![src.sge(0, 10)]).signaled());
    let c = p.send_cqe(A);
    assert_cqe_status(&c, WcStatus::RnrRetryExcErr, VendorErr::Rnr);

    // rnr_retry 2: the request and two resends, each NAKed.
    let a = [
        (C::TxPackets, 3),
        (C::TxBytes, 30),
        (C::TxSendRequests, 1),
        (C::RnrRetries, 2),
        (C::RnrNaksReceived, 3),
        (C::RxPackets, 3),
        (C::Completions, 1),
        (C::CompletionErrors, 1),
        (C::CqeRnrRetryExcErr, 1),
    ];
    let b = [
        (C::RxPackets, 3),
        (C::RxBytes, 30),
        (C::TxPackets, 3),
        (C::RnrNaksSent, 3),
    ];
    check(&mut p, &before, "RNR retries exhausted", &a, &b);
}

fn a_bad_rkey_is_an_error_nak_sent_by_the_target_and_received_by_the_requester(t: Topology) {
    let mut p = pair_at(t, Mtu::Size1024);
    let src = p.mr(A, 2000, ACCESS_ALL);
    let dst = p.mr(B, 2000, ACCESS_ALL);
    let before = snap(&mut p);

    let bad = SendWr::write(1, vec![src.sge(0, 2000)], &dst, 0)
        .remote(dst.iova, dst.key + 1)
        .signaled();
    p.post_send(A, &bad);
    assert_cqe_status(&p.send_cqe(A), WcStatus::RemAccessErr, VendorErr::BadRkey);

    let a = [
        (C::TxPackets, 2),
        (C::TxBytes, 2000),
        (C::TxWriteRequests, 1),
        (C::RxPackets, 1),
        (C::ErrorNaksReceived, 1),
        (C::Completions, 1),
        (C::CompletionErrors, 1),
        (C::CqeRemAccessErr, 1),
    ];
    let b = [
        (C::RxPackets, 2),
        (C::RxBytes, 2000),
        (C::RxWriteRequests, 1),
        (C::TxPackets, 1),
        (C::ErrorNaksSent, 1),
    ];
    check(&mut p, &before, "WRITE with a bad rkey", &a, &b);
}

fn flushed_work_requests_count_completions_but_no_packets(t: Topology) {
    let mut p = pair_at(t, Mtu::Size1024);
    let src = p.mr(A, 8, ACCESS_ALL);
    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Err).ok();
    let before = snap(&mut p);

    p.post_sends(
        A,
        &[
            SendWr::send(1, vec![src.sge(0, 8)]),
            SendWr::send(2, vec![src.sge(0, 8)]),
        ],
    );
    let c = p.send_cqes(A, 2);
    assert_cqe_status(&c[1], WcStatus::WrFlushErr, VendorErr::Flush);

    let a = [(C::Completions, 2), (C::CqeWrFlushErr, 2)];
    check(&mut p, &before, "two flushed SENDs", &a, &[]);
}

fn an_unready_target_counts_nothing_and_the_requester_counts_its_transport_retries(t: Topology) {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 2,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let (drv, side) = p.side(B);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    drv.qp_to_init(&side.qp, ACCESS_ALL).ok();
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let before = snap(&mut p);

    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    assert_cqe_status(
        &p.send_cqe(A),
        WcStatus::RetryExcErr,
        VendorErr::Unreachable,
    );

    // retry_cnt 2: the request and two resends, none answered.
    let a = [
        (C::TxPackets, 3),
        (C::TxBytes, 24),
        (C::TxWriteRequests, 1),
        (C::TransportRetries, 2),
        (C::Completions, 1),
        (C::CompletionErrors, 1),
        (C::CqeRetryExcErr, 1),
    ];
    check(&mut p, &before, "WRITE to a QP in INIT", &a, &[]);
}

/// A QP on A whose send and receive CQ is `cq`, connected to a new QP on B.
fn qp_on_cq(p: &mut Pair, cq: &Cq) -> harness::Qp {
    let caps = QpCaps::default();
    let (addr_a, addr_b) = (p.addr(A), p.addr(B));
    let (drv, side) = p.side(A);
    let qp = drv.create_qp(side.uctx, side.pd, cq, cq, caps);
    let (drv_b, side_b) = p.side(B);
    let peer = drv_b.create_qp(
        side_b.uctx,
        side_b.pd,
        &side_b.send_cq,
        &side_b.recv_cq,
        caps,
    );
    drv_b.connect_qp_to(&peer, addr_a, qp.qpn, &ConnectOpts::default());
    p.drv(A)
        .connect_qp_to(&qp, addr_b, peer.qpn, &ConnectOpts::default());
    qp
}

fn a_cq_overflow_counts_at_the_port_only(t: Topology) {
    let mut p = pair_at(t, Mtu::Size4096);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let uctx = p.a.uctx;
    let small = p.drv(A).create_cq(uctx, 1);
    let mut qp = qp_on_cq(&mut p, &small);
    let port_before = p.drv(A).counters(None);
    let wrs: Vec<SendWr> = (0..3)
        .map(|i| SendWr::write(i, vec![src.sge(0, 8)], &dst, 0).signaled())
        .collect();

    p.drv(A).post_sends(&mut qp, &wrs);
    p.drv(A).wait_async_event_for(EventType::CqErr, small.cqn);

    let qp_counts = p.drv(A).counters(Some(qp.id()));
    let port = delta(&p.drv(A).counters(None), &port_before);
    assert_eq!(get(&qp_counts, C::Completions), 2, "the third CQE was lost");
    assert_eq!(get(&qp_counts, C::CqOverflows), 0, "port only");
    assert_eq!(get(&port, C::CqOverflows), 1);
    assert_eq!(get(&port, C::Completions), 2);
}

fn an_event_that_finds_its_eq_full_counts_one_eq_overflow_at_the_port(t: Topology) {
    let mut p = pair_at(t, Mtu::Size4096);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let uctx = p.a.uctx;
    // An EQ of 2 entries the driver does not consume, and a CQ on it.
    let mut eq = p.drv(A).create_eq(1, false, 2);
    let mut cq = p.drv(A).create_cq_on(uctx, 4, Layout::Scattered, eq.eqn);
    let mut qp = qp_on_cq(&mut p, &cq);
    let port_before = p.drv(A).counters(None);

    let drv = p.drv(A);
    for i in 0..3 {
        drv.arm_cq(&mut cq, CqArm::Next);
        drv.post_send(
            &mut qp,
            &SendWr::write(i, vec![src.sge(0, 8)], &dst, 0).signaled(),
        );
        assert_cqe_ok(&drv.wait_cqe(&mut cq), i, WcOpcode::RdmaWrite);
        // The device reads the arm request after it wrote the CQE: arming again before
        // it fired would let this CQE answer the next request too (SPEC "Completion
        // events"). So the next arm waits for this event (the first two fit the EQ).
        if i < 2 {
            drv.wait_eqe_at(&eq, i as u32);
        }
    }
    // The third event is held back and counted after its CQE was written.
    wait_for("the EQ overflow counted", || {
        let d = delta(&drv.counters(None), &port_before);
        (get(&d, C::EqOverflows) > 0).then_some(())
    });
    let full = delta(&drv.counters(None), &port_before);
    // The held-back event arrives once the driver makes room; that is no new overflow.
    for _ in 0..3 {
        drv.wait_eqe(&mut eq);
    }
    let after = delta(&drv.counters(None), &port_before);

    assert_eq!(get(&full, C::EqOverflows), 1, "the third event");
    assert_eq!(get(&after, C::EqOverflows), 1);
    assert_eq!(
        get(&drv.counters(Some(qp.id())), C::EqOverflows),
        0,
        "port only"
    );
}

/// Two UD ends of IB-mode devices: a on device 0, b on device 1 (or 0 in loopback).
struct Ud {
    d: Vec<FakeDriver>,
    ib: usize,
    a: UdEnd,
    b: UdEnd,
    _devices: TestDevices,
}

fn ud(t: Topology) -> Ud {
    let n = match t {
        Topology::TwoDevices => 2,
        Topology::Loopback => 1,
    };
    let devices = TestDevices::start(n);
    let mut d: Vec<FakeDriver> = (0..n).map(|i| devices.addressed_driver(i)).collect();
    let ib = n - 1;
    let a = d[0].ud_end(QpType::Ud, TEST_QKEY);
    let b = d[ib].ud_end(QpType::Ud, TEST_QKEY);
    Ud {
        d,
        ib,
        a,
        b,
        _devices: devices,
    }
}

impl Ud {
    /// Sends `len` bytes from a with `av`, and its successful completion.
    fn send(&mut self, len: u64, av: UdAv) {
        let d = &mut self.d[0];
        let src = d.reg_mr(self.a.uctx, self.a.pd, len, ACCESS_ALL);
        let wr = SendWr::datagram(1, vec![src.sge(0, len as u32)], av).signaled();
        d.post_send(&mut self.a.qp, &wr);
        assert_cqe_ok(&d.wait_cqe(&mut self.a.send_cq), 1, WcOpcode::Send);
    }

    fn post_recv(&mut self, len: u64) {
        let d = &mut self.d[self.ib];
        let mr = d.reg_mr(self.b.uctx, self.b.pd, len, ACCESS_ALL);
        d.post_recv(&mut self.b.qp, &RecvWr::new(2, vec![mr.sge(0, len as u32)]));
    }

    fn av(&self, qkey: u32) -> UdAv {
        ud_av(self.d[self.ib].addr(), self.b.qp.qpn, qkey)
    }

    /// (QP a, QP b, port of a, port of b).
    fn counts(&mut self) -> (Counts, Counts, Counts, Counts) {
        let (qa, qb) = (self.a.qp.id(), self.b.qp.id());
        let ib = self.ib;
        (
            self.d[0].counters(Some(qa)),
            self.d[ib].counters(Some(qb)),
            self.d[0].counters(None),
            self.d[ib].counters(None),
        )
    }
}

fn datagrams_sent_and_received_count_one_packet_each(t: Topology) {
    let mut u = ud(t);
    u.post_recv(40 + 300);
    let av = u.av(TEST_QKEY);

    u.send(300, av);
    let c = u.d[u.ib].wait_cqe(&mut u.b.recv_cq);
    assert_cqe_ok(&c, 2, WcOpcode::Recv);

    let (qa, qb, pa, pb) = u.counts();
    let a = [
        (C::TxPackets, 1),
        (C::TxBytes, 300),
        (C::TxSendRequests, 1),
        (C::Completions, 1),
    ];
    let b = [
        (C::RxPackets, 1),
        (C::RxBytes, 300),
        (C::RxSendRequests, 1),
        (C::Completions, 1),
    ];
    assert_eq!(named(&qa), expect(&a), "sender QP");
    assert_eq!(
        named(&qb),
        expect(&b),
        "receiver QP: the payload, not the GRH"
    );
    match t {
        Topology::TwoDevices => {
            assert_eq!(named(&pa), expect(&a));
            assert_eq!(named(&pb), expect(&b));
        }
        Topology::Loopback => {
            let both: Want = a.iter().chain(&b).copied().collect();
            assert_eq!(named(&pa), expect(&both));
        }
    }
}

fn dropped_datagrams_count_at_the_dropping_port_only(t: Topology) {
    let mut u = ud(t);
    let good = u.av(TEST_QKEY);
    let wrong_qkey = u.av(TEST_QKEY ^ 1);
    let mut no_route = good;
    no_route.dlid = 0x7777.into();

    u.send(10, good); // no receive WQE
    u.send(20, wrong_qkey);
    u.send(30, no_route);

    let (qa, qb, pa, pb) = u.counts();
    let a = [
        (C::TxPackets, 3),
        (C::TxBytes, 60),
        (C::TxSendRequests, 3),
        (C::Completions, 3),
    ];
    assert_eq!(named(&qa), expect(&a), "the sender sent three");
    assert_eq!(named(&qb), expect(&[]), "the receiver took none");
    match t {
        Topology::TwoDevices => {
            let mut at_a = a.to_vec();
            at_a.push((C::DatagramsDropped, 1));
            assert_eq!(named(&pa), expect(&at_a), "no route: the sender's port");
            let at_b = [(C::DatagramsDropped, 2)];
            assert_eq!(named(&pb), expect(&at_b), "no WQE, wrong Q_Key");
        }
        Topology::Loopback => {
            let mut all = a.to_vec();
            all.push((C::DatagramsDropped, 3));
            assert_eq!(named(&pa), expect(&all));
        }
    }
}

// ---------------------------------------------------------------------- QUERY_COUNTERS

#[test]
fn every_query_counters_refusal_names_its_field_and_leaves_the_buffer_alone() {
    let mut p = Pair::new(Topology::Loopback);
    let (qa, qb) = (p.a.qp.id(), p.b.qp.id());
    let d = p.drv(A);
    let out = d.mem.alloc(8 * u64::from(COUNTER_COUNT_MAX), 8);
    let port = FakeDriver::query_counters_cmd(None, out, 8 * COUNTER_COUNT);
    let qp = FakeDriver::query_counters_cmd(Some(qa), out, 8 * COUNTER_COUNT);
    type Cmd = CmdQueryCounters;
    let with = |base: &Cmd, f: &dyn Fn(&mut Cmd)| {
        let mut c = *base;
        f(&mut c);
        c
    };
    let unmapped = d.mem.ram_base() + d.mem.ram_size() + 0x1000;
    let cases: Vec<(&str, Cmd, AqStatus, usize)> = vec![
        (
            "out_len 0",
            with(&port, &|c| c.out_len = 0.into()),
            AqStatus::BadField,
            Cmd::OUT_LEN_OFF,
        ),
        (
            "out_len 12",
            with(&port, &|c| c.out_len = 12.into()),
            AqStatus::BadField,
            Cmd::OUT_LEN_OFF,
        ),
        (
            "out_len beyond COUNTER_COUNT_MAX",
            with(&port, &|c| c.out_len = (8 * COUNTER_COUNT_MAX + 8).into()),
            AqStatus::BadField,
            Cmd::OUT_LEN_OFF,
        ),
        (
            "scope 2",
            with(&port, &|c| c.scope = 2),
            AqStatus::BadField,
            Cmd::SCOPE_OFF,
        ),
        (
            "port 0",
            with(&port, &|c| c.port = 0),
            AqStatus::BadField,
            Cmd::PORT_OFF,
        ),
        (
            "port 2",
            with(&port, &|c| c.port = 2),
            AqStatus::BadField,
            Cmd::PORT_OFF,
        ),
        (
            "port scope, qpn",
            with(&port, &|c| c.qpn = qa.qpn.into()),
            AqStatus::BadField,
            Cmd::QPN_OFF,
        ),
        (
            "port scope, user context",
            with(&port, &|c| c.uctx = qa.uctx.into()),
            AqStatus::Permission,
            Cmd::UCTX_OFF,
        ),
        (
            "QP scope, port 1",
            with(&qp, &|c| c.port = 1),
            AqStatus::BadField,
            Cmd::PORT_OFF,
        ),
        (
            "unknown QP",
            with(&qp, &|c| c.qpn = (qa.qpn ^ 0x80_0000).into()),
            AqStatus::BadHandle,
            Cmd::QPN_OFF,
        ),
        (
            "another context's QP",
            with(&qp, &|c| c.uctx = qb.uctx.into()),
            AqStatus::Permission,
            Cmd::UCTX_OFF,
        ),
        (
            "reserved0",
            with(&port, &|c| c.reserved0 = 1.into()),
            AqStatus::BadField,
            Cmd::RESERVED0_OFF,
        ),
        (
            "reserved1",
            with(&qp, &|c| c.reserved1[95] = 1),
            AqStatus::BadField,
            Cmd::RESERVED1_OFF,
        ),
        (
            "out_addr 4-aligned",
            with(&port, &|c| c.out_addr = (out + 4).into()),
            AqStatus::BadAddress,
            Cmd::OUT_ADDR_OFF,
        ),
        (
            "out_addr unmapped",
            with(&qp, &|c| c.out_addr = unmapped.into()),
            AqStatus::BadAddress,
            Cmd::OUT_ADDR_OFF,
        ),
    ];
    for (what, cmd, status, offset) in cases {
        d.mem.fill(out, 8 * COUNTER_COUNT_MAX as usize, 0xee);
        let r = d.admin(&cmd);
        assert_eq!(
            (r.status(), usize::from(r.err_offset)),
            (Ok(status), offset),
            "{what}"
        );
        let untouched = d.mem.read_vec(out, 8 * COUNTER_COUNT_MAX as usize);
        assert!(
            untouched.iter().all(|&b| b == 0xee),
            "{what}: buffer untouched"
        );
    }
}

#[test]
fn a_short_out_len_reads_a_prefix_and_a_long_one_learns_the_count_from_result0() {
    let mut p = pair_at(Topology::TwoDevices, Mtu::Size4096);
    let src = p.mr(A, 100, ACCESS_ALL);
    let dst = p.mr(B, 100, ACCESS_ALL);
    write(&mut p, &src, &dst, 100);
    let a = p.a.qp.id();
    let d = p.drv(A);
    let out = d.mem.alloc(8 * u64::from(COUNTER_COUNT_MAX), 8);
    d.mem.fill(out, 8 * COUNTER_COUNT_MAX as usize, 0xee);

    let short = d
        .admin(&FakeDriver::query_counters_cmd(Some(a), out, 16))
        .ok();
    let prefix = d.mem.read_vec(out, 24);

    assert_eq!(short[0], 2, "result0: the values written");
    assert_eq!(
        u64::from_le_bytes(prefix[0..8].try_into().unwrap()),
        1,
        "TX_PACKETS"
    );
    assert_eq!(
        u64::from_le_bytes(prefix[8..16].try_into().unwrap()),
        100,
        "TX_BYTES"
    );
    assert_eq!(prefix[16..24], [0xee; 8], "nothing beyond out_len");

    let long = FakeDriver::query_counters_cmd(Some(a), out, 8 * COUNTER_COUNT_MAX);
    let all = d.admin(&long).ok();
    let tail = d.mem.read_vec(out + 8 * u64::from(COUNTER_COUNT), 8);
    assert_eq!(all[0], COUNTER_COUNT, "result0: the device's counters");
    assert_eq!(tail, [0xee; 8], "nothing beyond COUNTER_COUNT values");
}

#[test]
fn a_new_qp_starts_at_zero_while_the_port_keeps_counting() {
    let mut p = pair_at(Topology::TwoDevices, Mtu::Size4096);
    let src = p.mr(A, 100, ACCESS_ALL);
    let dst = p.mr(B, 100, ACCESS_ALL);
    write(&mut p, &src, &dst, 100);
    let (a, _) = p.fresh();

    let fresh = p.drv(A).counters(Some(a.qp.id()));
    let port = p.drv(A).counters(None);

    assert_eq!(named(&fresh), expect(&[]));
    assert_eq!(get(&port, C::TxWriteRequests), 1);
}

#[test]
fn a_reset_zeroes_the_port_counters() {
    let mut p = pair_at(Topology::TwoDevices, Mtu::Size4096);
    let src = p.mr(A, 100, ACCESS_ALL);
    let dst = p.mr(B, 100, ACCESS_ALL);
    write(&mut p, &src, &dst, 100);
    assert_ne!(named(&p.drv(A).counters(None)), expect(&[]));

    let d = p.drv(A);
    d.reset_device();
    d.bring_up();

    assert_eq!(named(&d.counters(None)), expect(&[]));
}
