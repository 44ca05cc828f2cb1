//! The send queue drain (SPEC "Send queue drain (SQD)"): a WQE that has started (here: one
//! waiting for RNR at a responder that has no receive posted) runs to its completion in
//! SQD while no later WQE starts; QUERY_QP reads sq_draining 1 until then; SQ_DRAINED comes
//! once, after that completion, if the move to SQD asked for it; SQD -> SQD is refused
//! while draining; the waiting WQEs run after SQD -> RTS; a started WQE that fails in SQD
//! moves the QP to ERR without SQ_DRAINED.

mod harness;

use harness::*;
use vrnic_hw::*;
use Which::{A, B};

on_both_topologies!(
    a_started_wqe_finishes_in_sqd_then_sq_drained_and_the_rest_waits_for_rts,
    a_started_wqe_failing_in_sqd_moves_the_qp_to_err_without_sq_drained,
    sqd_without_notify_drains_silently,
);

/// A pair whose B end is only in RTR, so the first request it receives posts COMM_EST: a
/// test learns from it that A's WQE has started.
fn pair_with_b_in_rtr(t: Topology, opts: ConnectOpts) -> Pair {
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let (a_addr, a_qpn) = (p.addr(A), p.qpn(A));
    let (d, side) = p.side(B);
    d.set_qp_state(&mut side.qp, QpState::Reset).ok();
    d.qp_to_init(&side.qp, opts.access).ok();
    let (m, attr, dmac) = FakeDriver::rtr_attr_to(a_addr, a_qpn, &opts);
    d.modify_qp_dmac(&side.qp, m, attr, dmac).ok();
    p
}

/// Posts a SEND from A (B has no receive: A waits for RNR) and waits for B's COMM_EST.
fn start_a_send(p: &mut Pair, src: &Mr) {
    p.post_send(A, &SendWr::send(1, vec![src.sge(0, 32)]).signaled());
    let b_qpn = p.qpn(B);
    p.drv(B).wait_async_event_for(EventType::CommEst, b_qpn);
}

fn to_sqd(p: &mut Pair, notify: bool) {
    let attr = QpAttr {
        qp_state: QpState::Sqd.into(),
        en_sqd_async_notify: u8::from(notify),
        ..Default::default()
    };
    let (d, side) = p.side(A);
    d.modify_qp(
        &side.qp,
        mask(&[QpAttrMask::State, QpAttrMask::EnSqdAsyncNotify]),
        attr,
    )
    .ok();
}

fn draining(p: &mut Pair) -> u8 {
    let (d, side) = p.side(A);
    d.query_qp(&side.qp).sq_draining
}

/// A's async events for its own QP (in loopback B's share the EQ), event types only.
fn a_events(p: &mut Pair) -> Vec<u8> {
    let a_qpn = p.qpn(A);
    let d = p.drv(A);
    std::iter::from_fn(|| d.poll_async_event())
        .filter(|e| e.obj.to_native() == a_qpn)
        .map(|e| e.event_type)
        .collect()
}

fn a_started_wqe_finishes_in_sqd_then_sq_drained_and_the_rest_waits_for_rts(t: Topology) {
    let mut p = pair_with_b_in_rtr(t, ConnectOpts::default());
    let src = p.mr(A, 32, ACCESS_ALL);
    let dst = p.mr(B, 32, ACCESS_ALL);
    let data = pattern(1, 32);
    p.write(A, &src, 0, &data);
    start_a_send(&mut p, &src);
    let write = |id| SendWr::write(id, vec![src.sge(0, 32)], &dst, 0).signaled();
    p.post_send(A, &write(2));

    to_sqd(&mut p, true);
    p.post_send(A, &write(3));

    assert_eq!(
        draining(&mut p),
        1,
        "the SEND has started and not completed"
    );
    assert_eq!(a_events(&mut p), Vec::<u8>::new(), "not drained yet");
    let (d, side) = p.side(A);
    let sqd_to_sqd = QpAttr {
        qp_state: QpState::Sqd.into(),
        timeout: 9,
        ..Default::default()
    };
    let m = mask(&[QpAttrMask::State, QpAttrMask::Timeout]);
    d.modify_qp(&side.qp, m, sqd_to_sqd).expect_err(
        AqStatus::BadState,
        CmdModifyQp::ATTR_OFF + QpAttr::QP_STATE_OFF,
    );

    let buf = p.mr(B, 32, ACCESS_ALL);
    p.post_recv(B, &RecvWr::new(7, vec![buf.sge(0, 32)]));

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::Send);
    assert_cqe_ok(&p.recv_cqe(B), 7, WcOpcode::Recv);
    assert_same_bytes(&p.read(B, &buf, 0, 32), &data, "received");
    let a_qpn = p.qpn(A);
    p.drv(A).wait_async_event_for(EventType::SqDrained, a_qpn);
    assert_eq!(draining(&mut p), 0);
    assert_eq!(p.poll_send_cq(A), None, "the WRITEs wait for RTS");
    assert_eq!(p.read(B, &dst, 0, 32), vec![0; 32]);
    let (d, side) = p.side(A);
    d.modify_qp(&side.qp, m, sqd_to_sqd).ok();
    d.set_qp_state(&mut side.qp, QpState::Rts).ok();

    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::RdmaWrite);
    assert_cqe_ok(&p.send_cqe(A), 3, WcOpcode::RdmaWrite);
    assert_same_bytes(&p.read(B, &dst, 0, 32), &data, "written");
    assert_eq!(a_events(&mut p), Vec::<u8>::new(), "SQ_DRAINED once");
}

fn a_started_wqe_failing_in_sqd_moves_the_qp_to_err_without_sq_drained(t: Topology) {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    };
    let mut p = pair_with_b_in_rtr(t, opts);
    let src = p.mr(A, 32, ACCESS_ALL);
    start_a_send(&mut p, &src);
    p.post_send(A, &SendWr::send(2, vec![src.sge(0, 32)]).signaled());
    to_sqd(&mut p, true);

    // The responder goes away: the SEND's next retry finds nothing and times out.
    let (d, side) = p.side(B);
    d.set_qp_state(&mut side.qp, QpState::Err).ok();

    let c = p.send_cqe(A);
    assert_eq!(c.wr_id.to_native(), 1);
    assert_cqe_status(&c, WcStatus::RetryExcErr, VendorErr::Unreachable);
    let flushed = p.send_cqe(A);
    assert_eq!(flushed.wr_id.to_native(), 2);
    assert_cqe_status(&flushed, WcStatus::WrFlushErr, VendorErr::Flush);
    assert_eq!(p.qp_state(A), QpState::Err);
    let drained = u8::from(EventType::SqDrained);
    assert!(
        !a_events(&mut p).contains(&drained),
        "no SQ_DRAINED after an error"
    );
}

fn sqd_without_notify_drains_silently(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);

    to_sqd(&mut p, false);
    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );

    assert_eq!(draining(&mut p), 0, "nothing started");
    let (d, side) = p.side(A);
    d.set_qp_state(&mut side.qp, QpState::Rts).ok();
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
    assert_eq!(
        a_events(&mut p),
        Vec::<u8>::new(),
        "no SQ_DRAINED was asked for"
    );
}
