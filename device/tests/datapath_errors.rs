//! Data-path error paths, between two devices and in loopback: each fails with its exact
//! wc_status and vendor_err, moves the QP to ERR and flushes what was queued behind it
//! (WR_FLUSH_ERR); remote errors also move the target QP to ERR with an async event. After
//! each, the devices still serve other QPs and each other.

mod harness;

use std::time::Duration;

use harness::*;
use vrnic_hw::*;
use Which::{A, B};

on_both_topologies!(
    bad_lkey_fails_with_loc_prot_err,
    deregistered_lkey_fails_with_loc_prot_err,
    lkey_of_another_pd_fails_with_pd_mismatch,
    sge_outside_its_mr_fails_with_local_bounds,
    read_into_mr_without_local_write_fails_with_loc_access_err,
    bad_rkey_fails_with_rem_access_err_and_the_target_qp_errors,
    rkey_of_another_pd_fails_with_rem_access_err_pd_mismatch,
    remote_range_outside_the_mr_fails_with_remote_bounds,
    write_to_mr_without_remote_write_fails_with_remote_access,
    read_from_mr_without_remote_read_fails_with_remote_access,
    write_to_qp_without_remote_write_access_fails_with_remote_access,
    read_from_qp_without_remote_read_access_fails_with_remote_access,
    send_longer_than_the_receive_fails_with_rem_inv_req_err,
    receive_wqe_with_too_many_sges_fails_both_sides,
    receive_into_mr_without_local_write_fails_both_sides,
    message_longer_than_max_msg_size_fails_with_loc_len_err,
    wqe_with_too_many_sges_fails_with_bad_wqe,
    wqe_with_unknown_opcode_fails_with_bad_opcode,
    wqe_with_nonzero_reserved_field_fails_with_bad_wqe,
    wqe_with_unknown_flag_fails_with_bad_wqe,
    inline_data_longer_than_max_inline_fails_with_bad_wqe,
    inline_rdma_read_fails_with_bad_wqe,
    send_from_unmapped_guest_memory_fails_with_dma_fault,
    send_from_fdless_guest_memory_fails_with_dma_fault,
    read_into_read_only_guest_memory_fails_with_dma_fault,
    write_into_read_only_remote_memory_fails_with_remote_dma_fault,
    read_from_unmapped_remote_memory_fails_with_remote_dma_fault,
    memory_unmapped_after_registration_fails_with_dma_fault,
    send_posted_in_init_fails_with_qp_state,
    send_posted_in_rtr_fails_with_qp_state,
    send_posted_in_reset_fails_with_qp_state,
    send_posted_in_sqd_waits_for_rts,
    missing_destination_qp_fails_with_retry_exc_err,
    destination_qp_not_ready_fails_with_retry_exc_err,
    write_to_a_qp_connected_elsewhere_is_dropped,
    request_out_of_sequence_is_dropped,
    a_new_qp_does_not_answer_to_a_destroyed_qps_number,
    cq_overflow_errors_the_cq_and_its_qp,
    cq_overflow_moves_every_qp_of_the_cq_to_err,
    doorbell_beyond_the_queue_depth_errors_the_qp,
    qp_moved_to_err_flushes_both_queues,
    wqes_posted_in_err_are_flushed,
    moving_to_reset_forgets_outstanding_wqes,
    solicited_arm_fires_for_an_error_completion,
);

/// Posts a receive on A, then `bad` (signaled), an unsignaled and a signaled good WRITE; the
/// bad one completes with (status, vendor), the rest and the receive are flushed and A is
/// in ERR.
fn expect_failure_and_flush(p: &mut Pair, bad: SendWr, status: WcStatus, vendor: VendorErr) {
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let bad_id = bad.wr_id;
    p.post_recv(A, &RecvWr::new(0xf1, vec![]));

    p.post_sends(
        A,
        &[
            bad.signaled(),
            SendWr::write(0xf2, vec![src.sge(0, 8)], &dst, 0),
            SendWr::write(0xf3, vec![src.sge(0, 8)], &dst, 0).signaled(),
        ],
    );

    let c = p.send_cqe(A);
    assert_cqe_status(&c, status, vendor);
    assert_eq!(
        (c.wr_id.to_native(), c.qpn.to_native(), c.flags),
        (bad_id, p.qpn(A), 0)
    );
    let flushed = p.send_cqes(A, 2);
    for (c, id) in flushed.iter().zip([0xf2u64, 0xf3]) {
        assert_cqe_status(c, WcStatus::WrFlushErr, VendorErr::Flush);
        assert_eq!(
            c.wr_id.to_native(),
            id,
            "flushed in order, signalled or not"
        );
    }
    let r = p.recv_cqe(A);
    assert_cqe_status(&r, WcStatus::WrFlushErr, VendorErr::Flush);
    assert_eq!((r.wr_id.to_native(), r.flags), (0xf1, CQE_FLAG_RECV as u8));
    assert_eq!(p.qp_state(A), QpState::Err);
    assert_eq!(p.poll_send_cq(A), None);
}

/// The target QP B moved to ERR with async event `event` (data `vendor`), and its posted
/// receive `wr_id` was flushed.
fn expect_target_errored(p: &mut Pair, event: EventType, vendor: VendorErr, posted: Option<u64>) {
    let qpn = p.qpn(B);
    let data = p.drv(B).wait_async_event_for(event, qpn);
    assert_eq!(
        data,
        u32::from(u8::from(vendor)),
        "event data is the vendor_err"
    );
    assert_eq!(p.qp_state(B), QpState::Err);
    if let Some(wr_id) = posted {
        let r = p.recv_cqe(B);
        assert_cqe_status(&r, WcStatus::WrFlushErr, VendorErr::Flush);
        assert_eq!(r.wr_id.to_native(), wr_id);
    }
}

/// A local error: A fails and flushes, B is untouched, everything else still works.
fn local_error(t: Topology, make: impl FnOnce(&mut Pair) -> SendWr, s: WcStatus, v: VendorErr) {
    let mut p = Pair::new(t);
    let bad = make(&mut p);
    expect_failure_and_flush(&mut p, bad, s, v);
    assert_eq!(p.qp_state(B), QpState::Rts, "the responder is not at fault");
    p.assert_still_serving();
}

/// A remote error: A fails and flushes, B errors with `event`, everything else still works.
fn remote_error(
    p: &mut Pair,
    bad: SendWr,
    s: WcStatus,
    v: VendorErr,
    event: EventType,
    target_v: VendorErr,
) {
    p.post_recv(B, &RecvWr::new(0xb1, vec![]));
    expect_failure_and_flush(p, bad, s, v);
    expect_target_errored(p, event, target_v, Some(0xb1));
    p.assert_still_serving();
}

// ---------------------------------------------------------------------- local keys

fn bad_lkey_fails_with_loc_prot_err(t: Topology) {
    local_error(
        t,
        |p| {
            let mr = p.mr(A, 64, ACCESS_ALL);
            let mut sge = mr.sge(0, 64);
            sge.lkey = (mr.key ^ 0x5500).into();
            SendWr::send(1, vec![sge])
        },
        WcStatus::LocProtErr,
        VendorErr::BadLkey,
    );
}

fn deregistered_lkey_fails_with_loc_prot_err(t: Topology) {
    local_error(
        t,
        |p| {
            let mr = p.mr(A, 64, ACCESS_ALL);
            p.drv(A).dereg_mr(&mr).ok();
            let dst = p.mr(B, 64, ACCESS_ALL);
            SendWr::write(1, vec![mr.sge(0, 64)], &dst, 0)
        },
        WcStatus::LocProtErr,
        VendorErr::BadLkey,
    );
}

fn lkey_of_another_pd_fails_with_pd_mismatch(t: Topology) {
    local_error(
        t,
        |p| {
            let (drv, side) = p.side(A);
            let pd2 = drv.alloc_pd(side.uctx);
            let mr = drv.reg_mr(side.uctx, pd2, 64, ACCESS_ALL);
            SendWr::send(1, vec![mr.sge(0, 64)])
        },
        WcStatus::LocProtErr,
        VendorErr::PdMismatch,
    );
}

fn sge_outside_its_mr_fails_with_local_bounds(t: Topology) {
    local_error(
        t,
        |p| {
            let mr = p.mr(A, 100, ACCESS_ALL);
            let dst = p.mr(B, 200, ACCESS_ALL);
            // 50 bytes from offset 60 reach 10 bytes past the end.
            SendWr::write(1, vec![mr.sge(0, 10), mr.sge(60, 50)], &dst, 0)
        },
        WcStatus::LocProtErr,
        VendorErr::LocalBounds,
    );
}

fn read_into_mr_without_local_write_fails_with_loc_access_err(t: Topology) {
    local_error(
        t,
        |p| {
            let local = p.mr(A, 64, REMOTE_READ);
            let remote = p.mr(B, 64, ACCESS_ALL);
            SendWr::read(1, vec![local.sge(0, 64)], &remote, 0)
        },
        WcStatus::LocAccessErr,
        VendorErr::LocalAccess,
    );
}

// ---------------------------------------------------------------------- remote keys

fn bad_rkey_fails_with_rem_access_err_and_the_target_qp_errors(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64, ACCESS_ALL);
    let bad = SendWr::write(1, vec![src.sge(0, 64)], &dst, 0).remote(dst.iova, dst.key + 1);
    remote_error(
        &mut p,
        bad,
        WcStatus::RemAccessErr,
        VendorErr::BadRkey,
        EventType::QpAccessErr,
        VendorErr::BadRkey,
    );
}

fn rkey_of_another_pd_fails_with_rem_access_err_pd_mismatch(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 64, ACCESS_ALL);
    let (drv, side) = p.side(B);
    let pd2 = drv.alloc_pd(side.uctx);
    let dst = drv.reg_mr(side.uctx, pd2, 64, ACCESS_ALL);
    let bad = SendWr::write(1, vec![src.sge(0, 64)], &dst, 0);
    remote_error(
        &mut p,
        bad,
        WcStatus::RemAccessErr,
        VendorErr::PdMismatch,
        EventType::QpAccessErr,
        VendorErr::PdMismatch,
    );
}

fn remote_range_outside_the_mr_fails_with_remote_bounds(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64, ACCESS_ALL);
    let bad = SendWr::write(1, vec![src.sge(0, 64)], &dst, 1);
    remote_error(
        &mut p,
        bad,
        WcStatus::RemAccessErr,
        VendorErr::RemoteBounds,
        EventType::QpAccessErr,
        VendorErr::RemoteBounds,
    );
}

fn write_to_mr_without_remote_write_fails_with_remote_access(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64, LOCAL_WRITE | REMOTE_READ);
    let bad = SendWr::write(1, vec![src.sge(0, 64)], &dst, 0);
    remote_error(
        &mut p,
        bad,
        WcStatus::RemAccessErr,
        VendorErr::RemoteAccess,
        EventType::QpAccessErr,
        VendorErr::RemoteAccess,
    );
}

fn read_from_mr_without_remote_read_fails_with_remote_access(t: Topology) {
    let mut p = Pair::new(t);
    let local = p.mr(A, 64, ACCESS_ALL);
    let remote = p.mr(B, 64, LOCAL_WRITE | REMOTE_WRITE);
    let bad = SendWr::read(1, vec![local.sge(0, 64)], &remote, 0);
    remote_error(
        &mut p,
        bad,
        WcStatus::RemAccessErr,
        VendorErr::RemoteAccess,
        EventType::QpAccessErr,
        VendorErr::RemoteAccess,
    );
}

/// A pair whose B side only allows `access` for incoming requests.
fn pair_with_b_access(t: Topology, access: u32) -> Pair {
    let mut p = Pair::new(t);
    let (drv, side) = p.side(B);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    let lid_a = p.lid(A);
    let qpn_a = p.qpn(A);
    let opts = ConnectOpts {
        access,
        ..ConnectOpts::default()
    };
    let (drv, side) = p.side(B);
    drv.connect_qp(&side.qp, lid_a, qpn_a, &opts);
    p
}

fn write_to_qp_without_remote_write_access_fails_with_remote_access(t: Topology) {
    let mut p = pair_with_b_access(t, LOCAL_WRITE | REMOTE_READ);
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64, ACCESS_ALL);
    let bad = SendWr::write(1, vec![src.sge(0, 64)], &dst, 0);
    remote_error(
        &mut p,
        bad,
        WcStatus::RemAccessErr,
        VendorErr::RemoteAccess,
        EventType::QpAccessErr,
        VendorErr::RemoteAccess,
    );
}

fn read_from_qp_without_remote_read_access_fails_with_remote_access(t: Topology) {
    let mut p = pair_with_b_access(t, LOCAL_WRITE | REMOTE_WRITE);
    let local = p.mr(A, 64, ACCESS_ALL);
    let remote = p.mr(B, 64, ACCESS_ALL);
    let bad = SendWr::read(1, vec![local.sge(0, 64)], &remote, 0);
    remote_error(
        &mut p,
        bad,
        WcStatus::RemAccessErr,
        VendorErr::RemoteAccess,
        EventType::QpAccessErr,
        VendorErr::RemoteAccess,
    );
}

// ---------------------------------------------------------------------- receives

fn send_longer_than_the_receive_fails_with_rem_inv_req_err(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 100, ACCESS_ALL);
    let dst = p.mr(B, 100, ACCESS_ALL);
    p.post_recvs(
        B,
        &[
            RecvWr::new(0xb0, vec![dst.sge(0, 60), dst.sge(60, 39)]),
            RecvWr::new(0xb1, vec![dst.sge(0, 100)]),
        ],
    );
    expect_failure_and_flush(
        &mut p,
        SendWr::send(1, vec![src.sge(0, 100)]),
        WcStatus::RemInvReqErr,
        VendorErr::Length,
    );

    let r = p.recv_cqe(B);
    assert_cqe_status(&r, WcStatus::LocLenErr, VendorErr::Length);
    assert_eq!((r.wr_id.to_native(), r.flags), (0xb0, CQE_FLAG_RECV as u8));
    expect_target_errored(&mut p, EventType::QpReqErr, VendorErr::Length, Some(0xb1));
    p.assert_still_serving();
}

fn receive_wqe_with_too_many_sges_fails_both_sides(t: Topology) {
    let mut p = Pair::new(t); // max_recv_sge 4
    let src = p.mr(A, 16, ACCESS_ALL);
    let dst = p.mr(B, 16, ACCESS_ALL);
    let sges = (0..5).map(|i| dst.sge(i, 1)).collect();
    p.post_recv(B, &RecvWr::new(0xb0, sges));
    p.post_recv(B, &RecvWr::new(0xb1, vec![dst.sge(0, 16)]));

    expect_failure_and_flush(
        &mut p,
        SendWr::send(1, vec![src.sge(0, 16)]),
        WcStatus::RemOpErr,
        VendorErr::RemoteError,
    );

    let r = p.recv_cqe(B);
    assert_cqe_status(&r, WcStatus::LocQpOpErr, VendorErr::BadWqe);
    assert_eq!(r.wr_id.to_native(), 0xb0);
    expect_target_errored(&mut p, EventType::QpFatal, VendorErr::BadWqe, Some(0xb1));
    p.assert_still_serving();
}

fn receive_into_mr_without_local_write_fails_both_sides(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 16, ACCESS_ALL);
    let dst = p.mr(B, 16, REMOTE_READ);
    p.post_recv(B, &RecvWr::new(0xb0, vec![dst.sge(0, 16)]));
    p.post_recv(B, &RecvWr::new(0xb1, vec![]));

    expect_failure_and_flush(
        &mut p,
        SendWr::send(1, vec![src.sge(0, 16)]),
        WcStatus::RemOpErr,
        VendorErr::RemoteError,
    );

    let r = p.recv_cqe(B);
    assert_cqe_status(&r, WcStatus::LocAccessErr, VendorErr::LocalAccess);
    assert_eq!(r.wr_id.to_native(), 0xb0);
    expect_target_errored(
        &mut p,
        EventType::QpFatal,
        VendorErr::LocalAccess,
        Some(0xb1),
    );
    p.assert_still_serving();
}

fn message_longer_than_max_msg_size_fails_with_loc_len_err(t: Topology) {
    local_error(
        t,
        |p| {
            // An MR of 3 GiB on 1 GiB pages nowhere near guest RAM: the length check comes
            // before any byte moves.
            let (drv, side) = p.side(A);
            let spec = MrSpec::new(side.uctx, side.pd, 3 << 30, ACCESS_ALL)
                .layout(Layout::Contiguous)
                .page_shift(30);
            let mr = drv.reg_mr_at(spec, 0x100_0000_0000);
            SendWr::send(1, vec![mr.sge(0, bar0::MAX_MSG_SIZE_RESET + 1)])
        },
        WcStatus::LocLenErr,
        VendorErr::Length,
    );
}

// ---------------------------------------------------------------------- malformed WQEs

fn wqe_with_too_many_sges_fails_with_bad_wqe(t: Topology) {
    local_error(
        t,
        |p| {
            let mr = p.mr(A, 64, ACCESS_ALL);
            SendWr::send(1, (0..5).map(|i| mr.sge(i, 1)).collect())
        },
        WcStatus::LocQpOpErr,
        VendorErr::BadWqe,
    );
}

fn wqe_with_unknown_opcode_fails_with_bad_opcode(t: Topology) {
    local_error(
        t,
        |p| {
            let mr = p.mr(A, 64, ACCESS_ALL);
            let mut wr = SendWr::send(1, vec![mr.sge(0, 64)]);
            wr.opcode = 0x1F; // between SEND_WITH_INV (9) and REG_MR (0x20): unassigned
            wr
        },
        WcStatus::LocQpOpErr,
        VendorErr::BadOpcode,
    );
}

fn wqe_with_nonzero_reserved_field_fails_with_bad_wqe(t: Topology) {
    let mut p = Pair::new(t);
    let mr = p.mr(A, 64, ACCESS_ALL);
    let mut bytes = SendWr::send(1, vec![mr.sge(0, 64)]).signaled().encode();
    bytes[SendWqeHeader::RESERVED0_OFF] = 1;
    p.post_send_raw(A, &bytes);

    let c = p.send_cqe(A);

    assert_cqe_status(&c, WcStatus::LocQpOpErr, VendorErr::BadWqe);
    assert_eq!(c.wr_id.to_native(), 1);
    assert_eq!(p.qp_state(A), QpState::Err);
    p.assert_still_serving();
}

fn wqe_with_unknown_flag_fails_with_bad_wqe(t: Topology) {
    local_error(
        t,
        |p| {
            let mr = p.mr(A, 64, ACCESS_ALL);
            let mut wr = SendWr::send(1, vec![mr.sge(0, 64)]);
            wr.flags |= 0x40;
            wr
        },
        WcStatus::LocQpOpErr,
        VendorErr::BadWqe,
    );
}

fn inline_data_longer_than_max_inline_fails_with_bad_wqe(t: Topology) {
    // max_inline 64 in a 128-byte WQE: 65 bytes still fit the WQE but exceed max_inline.
    local_error(
        t,
        |_| SendWr::send(1, vec![]).inline(vec![7; 65]),
        WcStatus::LocQpOpErr,
        VendorErr::BadWqe,
    );
}

fn inline_rdma_read_fails_with_bad_wqe(t: Topology) {
    local_error(
        t,
        |p| {
            let remote = p.mr(B, 64, ACCESS_ALL);
            SendWr::read(1, vec![], &remote, 0).inline(vec![1; 8])
        },
        WcStatus::LocQpOpErr,
        VendorErr::BadWqe,
    );
}

// ---------------------------------------------------------------------- DMA faults

const RO_GPA: u64 = 0x20_0000_0000;
const FDLESS_GPA: u64 = 0x30_0000_0000;
const UNMAPPED_GPA: u64 = 0x60_0000_0000;

fn pages_at(gpa: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| gpa + i * 4096).collect()
}

fn send_from_unmapped_guest_memory_fails_with_dma_fault(t: Topology) {
    local_error(
        t,
        |p| {
            let (drv, side) = p.side(A);
            let mr = drv.reg_mr_on_pages(side.uctx, side.pd, pages_at(UNMAPPED_GPA, 2), ACCESS_ALL);
            SendWr::send(1, vec![mr.sge(100, 5000)])
        },
        WcStatus::LocProtErr,
        VendorErr::DmaFault,
    );
}

fn send_from_fdless_guest_memory_fails_with_dma_fault(t: Topology) {
    local_error(
        t,
        |p| {
            let (drv, side) = p.side(A);
            drv.map_fdless_range(FDLESS_GPA, 0x10000);
            let mr = drv.reg_mr_on_pages(side.uctx, side.pd, pages_at(FDLESS_GPA, 2), ACCESS_ALL);
            let dst = p.mr(B, 64, ACCESS_ALL);
            SendWr::write(1, vec![mr.sge(0, 64)], &dst, 0)
        },
        WcStatus::LocProtErr,
        VendorErr::DmaFault,
    );
}

fn read_into_read_only_guest_memory_fails_with_dma_fault(t: Topology) {
    local_error(
        t,
        |p| {
            let (drv, side) = p.side(A);
            drv.map_read_only_range(RO_GPA, 0x10000);
            let local = drv.reg_mr_on_pages(side.uctx, side.pd, pages_at(RO_GPA, 2), ACCESS_ALL);
            let remote = p.mr(B, 64, ACCESS_ALL);
            SendWr::read(1, vec![local.sge(0, 64)], &remote, 0)
        },
        WcStatus::LocProtErr,
        VendorErr::DmaFault,
    );
}

fn write_into_read_only_remote_memory_fails_with_remote_dma_fault(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 64, ACCESS_ALL);
    let ro = RO_GPA + 0x100_0000;
    let (drv, side) = p.side(B);
    drv.map_read_only_range(ro, 0x10000);
    let dst = drv.reg_mr_on_pages(side.uctx, side.pd, pages_at(ro, 2), ACCESS_ALL);
    p.drv(B).mem.fill(ro, 64, 0x33);
    let bad = SendWr::write(1, vec![src.sge(0, 64)], &dst, 0);

    remote_error(
        &mut p,
        bad,
        WcStatus::RemOpErr,
        VendorErr::RemoteDmaFault,
        EventType::QpFatal,
        VendorErr::RemoteDmaFault,
    );
    assert!(
        p.drv(B).mem.read_vec(ro, 64).iter().all(|b| *b == 0x33),
        "read-only memory unchanged"
    );
}

fn read_from_unmapped_remote_memory_fails_with_remote_dma_fault(t: Topology) {
    let mut p = Pair::new(t);
    let local = p.mr(A, 64, ACCESS_ALL);
    let (drv, side) = p.side(B);
    let remote = drv.reg_mr_on_pages(side.uctx, side.pd, pages_at(UNMAPPED_GPA, 1), ACCESS_ALL);
    let bad = SendWr::read(1, vec![local.sge(0, 64)], &remote, 0);

    remote_error(
        &mut p,
        bad,
        WcStatus::RemOpErr,
        VendorErr::RemoteDmaFault,
        EventType::QpFatal,
        VendorErr::RemoteDmaFault,
    );
}

fn memory_unmapped_after_registration_fails_with_dma_fault(t: Topology) {
    let extra = 0x38_0000_0000;
    let mut p = Pair::new(t);
    let (drv, side) = p.side(A);
    drv.map_extra_range(
        extra,
        0x10000,
        harness::vfio::DMA_READ | harness::vfio::DMA_WRITE,
    );
    let src = drv.reg_mr_on_pages(side.uctx, side.pd, pages_at(extra, 4), ACCESS_ALL);
    let dst = p.mr(B, 64, ACCESS_ALL);
    let data = pattern(3, 64);
    p.write(A, &src, 0, &data);
    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 64)], &dst, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
    assert_same_bytes(&p.read(B, &dst, 0, 64), &data, "written while mapped");

    p.drv(A).unmap_range(extra, 0x10000);

    expect_failure_and_flush(
        &mut p,
        SendWr::write(2, vec![src.sge(0, 64)], &dst, 0),
        WcStatus::LocProtErr,
        VendorErr::DmaFault,
    );
    p.assert_still_serving();
}

// ---------------------------------------------------------------------- QP states

/// A third QP on A's driver, in RESET, sharing A's context, PD and CQs.
fn extra_qp_on_a(p: &mut Pair) -> Qp {
    let (drv, side) = p.side(A);
    drv.create_qp(
        side.uctx,
        side.pd,
        &side.send_cq,
        &side.recv_cq,
        QpCaps::default(),
    )
}

/// Posts a signaled SEND then an unsignaled one on `qp` (A's driver, A's CQs).
fn send_on(p: &mut Pair, qp: &mut Qp) -> Vec<Cqe> {
    let mr = p.mr(A, 8, ACCESS_ALL);
    let (drv, side) = p.side(A);
    drv.post_sends(
        qp,
        &[
            SendWr::send(1, vec![mr.sge(0, 8)]).signaled(),
            SendWr::send(2, vec![mr.sge(0, 8)]),
        ],
    );
    drv.wait_cqes(&mut side.send_cq, 2)
}

fn expect_qp_state_failure(p: &mut Pair, cqes: &[Cqe], qp: &Qp) {
    assert_cqe_status(&cqes[0], WcStatus::LocQpOpErr, VendorErr::QpState);
    assert_eq!(cqes[0].qpn.to_native(), qp.qpn);
    assert_cqe_status(&cqes[1], WcStatus::WrFlushErr, VendorErr::Flush);
    assert_eq!(p.drv(A).qp_state(qp), QpState::Err);
    p.assert_still_serving();
}

fn send_posted_in_init_fails_with_qp_state(t: Topology) {
    let mut p = Pair::new(t);
    let mut qp = extra_qp_on_a(&mut p);
    p.drv(A).qp_to_init(&qp, ACCESS_ALL).ok();
    let cqes = send_on(&mut p, &mut qp);
    expect_qp_state_failure(&mut p, &cqes, &qp);
}

fn send_posted_in_rtr_fails_with_qp_state(t: Topology) {
    let mut p = Pair::new(t);
    let mut qp = extra_qp_on_a(&mut p);
    let (lid, qpn) = (p.lid(B), p.qpn(B));
    let drv = p.drv(A);
    drv.qp_to_init(&qp, ACCESS_ALL).ok();
    let (m, a) = FakeDriver::rtr_attr(lid, qpn, &ConnectOpts::default());
    drv.modify_qp(&qp, m, a).ok();
    let cqes = send_on(&mut p, &mut qp);
    expect_qp_state_failure(&mut p, &cqes, &qp);
}

fn send_posted_in_reset_fails_with_qp_state(t: Topology) {
    let mut p = Pair::new(t);
    let mut qp = extra_qp_on_a(&mut p);
    let cqes = send_on(&mut p, &mut qp);
    expect_qp_state_failure(&mut p, &cqes, &qp);
}

fn send_posted_in_sqd_waits_for_rts(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Sqd).ok();

    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    std::thread::sleep(Duration::from_millis(20));
    let while_sqd = p.poll_send_cq(A);
    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Rts).ok();

    assert_eq!(while_sqd, None, "no new WQE starts in SQD");
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
}

fn missing_destination_qp_fails_with_retry_exc_err(t: Topology) {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 2,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let (drv, side) = p.side(B);
    drv.destroy_qp(&side.qp).ok();
    let src = p.mr(A, 8, ACCESS_ALL);
    expect_failure_and_flush(
        &mut p,
        SendWr::send(1, vec![src.sge(0, 8)]),
        WcStatus::RetryExcErr,
        VendorErr::Unreachable,
    );
}

fn destination_qp_not_ready_fails_with_retry_exc_err(t: Topology) {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let (drv, side) = p.side(B);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    drv.qp_to_init(&side.qp, ACCESS_ALL).ok();
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    expect_failure_and_flush(
        &mut p,
        SendWr::write(1, vec![src.sge(0, 8)], &dst, 0),
        WcStatus::RetryExcErr,
        VendorErr::Unreachable,
    );
    assert_eq!(p.qp_state(B), QpState::Init, "the target is untouched");
}

fn cq_overflow_errors_the_cq_and_its_qp(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let (drv, side) = p.side(A);
    let mut small = drv.create_cq(side.uctx, 1);
    let mut qp = drv.create_qp(side.uctx, side.pd, &small, &small, QpCaps::default());
    // An RC target accepts only its connected peer: give the new QP one of its own on B.
    let (lid_a, lid_b) = (p.lid(A), p.lid(B));
    let (drv_b, side_b) = p.side(B);
    let peer = drv_b.create_qp(
        side_b.uctx,
        side_b.pd,
        &side_b.send_cq,
        &side_b.recv_cq,
        QpCaps::default(),
    );
    drv_b.connect_qp(&peer, lid_a, qp.qpn, &ConnectOpts::default());
    p.drv(A)
        .connect_qp(&qp, lid_b, peer.qpn, &ConnectOpts::default());
    let wrs: Vec<SendWr> = (0..3)
        .map(|i| SendWr::write(i, vec![src.sge(0, 8)], &dst, 0).signaled())
        .collect();

    p.drv(A).post_sends(&mut qp, &wrs);

    let drv = p.drv(A);
    let cqn = small.cqn;
    let data = drv.wait_async_event_for(EventType::CqErr, cqn);
    assert_eq!(data, 0);
    let first_two = drv.wait_cqes(&mut small, 2);
    assert_cqe_ok(&first_two[0], 0, WcOpcode::RdmaWrite);
    assert_cqe_ok(&first_two[1], 1, WcOpcode::RdmaWrite);
    assert_eq!(drv.qp_state(&qp), QpState::Err);
    p.assert_still_serving();
}

fn cq_overflow_moves_every_qp_of_the_cq_to_err(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let (lid, qpn) = (p.lid(B), p.qpn(B));
    let (drv, side) = p.side(A);
    let small = drv.create_cq(side.uctx, 1);
    let mut busy = drv.create_qp(side.uctx, side.pd, &small, &small, QpCaps::default());
    let idle = drv.create_qp(side.uctx, side.pd, &side.send_cq, &small, QpCaps::default());
    drv.connect_qp(&busy, lid, qpn, &ConnectOpts::default());
    drv.connect_qp(&idle, lid, qpn, &ConnectOpts::default());
    let wrs: Vec<SendWr> = (0..3)
        .map(|i| SendWr::write(i, vec![src.sge(0, 8)], &dst, 0).signaled())
        .collect();

    drv.post_sends(&mut busy, &wrs);

    drv.wait_async_event_for(EventType::CqErr, small.cqn);
    assert_eq!(drv.qp_state(&busy), QpState::Err);
    assert_eq!(
        drv.qp_state(&idle),
        QpState::Err,
        "SPEC: a CQ that would overflow enters the error state and its QPs move to ERR"
    );
    p.assert_still_serving();
}

fn doorbell_beyond_the_queue_depth_errors_the_qp(t: Topology) {
    let mut p = Pair::new(t);
    let (drv, side) = p.side(A);
    let depth = side.qp.sq.depth();
    let (page, slot) = (side.qp.page, side.qp.slot);

    drv.ring_doorbell(page, slot, 0, depth + 1);

    let qpn = p.qpn(A);
    p.drv(A).wait_async_event_for(EventType::QpFatal, qpn);
    assert_eq!(p.qp_state(A), QpState::Err);
    assert_eq!(p.qp_state(B), QpState::Rts);
    p.assert_still_serving();
}

fn qp_moved_to_err_flushes_both_queues(t: Topology) {
    let mut p = Pair::new(t);
    let mr = p.mr(A, 8, ACCESS_ALL);
    let (drv, side) = p.side(A);
    // Send WQEs wait behind SQD; receives wait for messages.
    drv.set_qp_state(&mut side.qp, QpState::Sqd).ok();
    p.post_sends(
        A,
        &[
            SendWr::send(1, vec![mr.sge(0, 8)]),
            SendWr::send(2, vec![mr.sge(0, 8)]).signaled(),
        ],
    );
    p.post_recvs(
        A,
        &[RecvWr::new(3, vec![mr.sge(0, 8)]), RecvWr::new(4, vec![])],
    );

    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Err).ok();

    let sends = p.send_cqes(A, 2);
    let recvs = p.recv_cqes(A, 2);
    for (c, id) in sends.iter().chain(&recvs).zip([1u64, 2, 3, 4]) {
        assert_cqe_status(c, WcStatus::WrFlushErr, VendorErr::Flush);
        assert_eq!(c.wr_id.to_native(), id);
    }
    assert_eq!(
        (recvs[0].opcode, recvs[0].flags),
        (u8::from(WcOpcode::Recv), CQE_FLAG_RECV as u8)
    );
    p.assert_still_serving();
}

fn solicited_arm_fires_for_an_error_completion(t: Topology) {
    let mut p = Pair::new(t);
    let mr = p.mr(A, 64, ACCESS_ALL);
    let cqn = p.a.send_cq.cqn;
    let (drv, side) = p.side(A);
    drv.arm_cq(&mut side.send_cq, CqArm::Solicited);
    let mut bad = SendWr::send(1, vec![mr.sge(0, 64)]).signaled();
    bad.sges[0].lkey = 0xdead00.into();

    p.post_send(A, &bad);

    assert_cqe_status(&p.send_cqe(A), WcStatus::LocProtErr, VendorErr::BadLkey);
    let e = p.drv(A).wait_comp_event();
    assert_eq!(
        (EventType::try_from(e.event_type), e.obj.to_native()),
        (Ok(EventType::Completion), cqn)
    );
}

fn wqes_posted_in_err_are_flushed(t: Topology) {
    let mut p = Pair::new(t);
    let mr = p.mr(A, 8, ACCESS_ALL);
    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Err).ok();

    p.post_sends(
        A,
        &[
            SendWr::send(1, vec![mr.sge(0, 8)]),
            SendWr::send(2, vec![mr.sge(0, 8)]).signaled(),
        ],
    );
    p.post_recv(A, &RecvWr::new(3, vec![]));

    let sends = p.send_cqes(A, 2);
    let recv = p.recv_cqe(A);
    for (c, id) in sends.iter().chain([&recv]).zip([1u64, 2, 3]) {
        assert_cqe_status(c, WcStatus::WrFlushErr, VendorErr::Flush);
        assert_eq!(c.wr_id.to_native(), id);
    }
}

fn moving_to_reset_forgets_outstanding_wqes(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Sqd).ok();
    p.post_sends(
        A,
        &[
            SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
            SendWr::write(2, vec![src.sge(0, 8)], &dst, 0).signaled(),
        ],
    );
    p.post_recv(A, &RecvWr::new(3, vec![]));

    let (lid, qpn) = (p.lid(B), p.qpn(B));
    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    assert_eq!(
        (
            drv.db_load(side.qp.page, side.qp.slot, 0),
            drv.db_load(side.qp.page, side.qp.slot, 1)
        ),
        (0, 0),
        "the doorbell slot is zeroed"
    );
    drv.connect_qp(&side.qp, lid, qpn, &ConnectOpts::default());
    p.post_send(
        A,
        &SendWr::write(4, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );

    let c = p.send_cqe(A);
    assert_cqe_ok(&c, 4, WcOpcode::RdmaWrite);
    assert_eq!(c.wqe_index.to_native(), 0, "indices restart at 0");
    assert_eq!(p.poll_send_cq(A), None, "no CQE for the forgotten WQEs");
    assert_eq!(p.poll_recv_cq(A), None, "nor for the forgotten receive");
}

fn write_to_a_qp_connected_elsewhere_is_dropped(t: Topology) {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let (lid_a, stranger) = (p.lid(A), p.qpn(A) + 100);
    let (drv, side) = p.side(B);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    drv.connect_qp(&side.qp, lid_a, stranger, &ConnectOpts::default());
    // B's QP is RC-connected to another QP: A's packets are dropped and A times out.
    expect_write_dropped(&mut p);
    assert_eq!(p.qp_state(B), QpState::Rts, "the target is untouched");
}

/// A's WRITE to B times out (RETRY_EXC_ERR, the rest flushed) and nothing lands at B.
fn expect_write_dropped(p: &mut Pair) {
    let src = p.mr(A, 8, ACCESS_ALL);
    p.drv(A).mr_fill(&src, 0xab);
    let dst = p.mr(B, 8, ACCESS_ALL);

    expect_failure_and_flush(
        p,
        SendWr::write(1, vec![src.sge(0, 8)], &dst, 0),
        WcStatus::RetryExcErr,
        VendorErr::Unreachable,
    );

    assert_eq!(p.drv(B).mr_read(&dst, 0, 8), vec![0; 8], "nothing landed");
}

fn request_out_of_sequence_is_dropped(t: Topology) {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let (lid_a, qpn_a) = (p.lid(A), p.qpn(A));
    let (drv, side) = p.side(B);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    let elsewhere = ConnectOpts {
        rq_psn: opts.sq_psn + 7,
        ..opts
    };
    drv.connect_qp(&side.qp, lid_a, qpn_a, &elsewhere);

    // B expects a PSN that A's connection never sends: A's requests are not B's.
    expect_write_dropped(&mut p);
    assert_eq!(p.qp_state(B), QpState::Rts, "the target is untouched");
}

fn a_new_qp_does_not_answer_to_a_destroyed_qps_number(t: Topology) {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let (lid_a, qpn_a, old_b) = (p.lid(A), p.qpn(A), p.qpn(B));
    let (drv, side) = p.side(B);
    drv.destroy_qp(&side.qp).ok();
    // The same context creates a QP at once (the freed index) and connects it to A exactly
    // as the destroyed one was: A, still addressing the old QPN, must not reach it.
    side.qp = drv.create_qp(
        side.uctx,
        side.pd,
        &side.send_cq,
        &side.recv_cq,
        QpCaps::default(),
    );
    drv.connect_qp(&side.qp, lid_a, qpn_a, &opts);
    assert_ne!(side.qp.qpn, old_b, "a QPN names one QP only");

    expect_write_dropped(&mut p);
}

#[test]
fn a_failed_device_answers_no_requests() {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(Topology::TwoDevices, QpCaps::default(), opts);
    let src = p.mr(A, 8, ACCESS_ALL);
    p.drv(A).mr_fill(&src, 0xab);
    let dst = p.mr(B, 8, ACCESS_ALL);
    // B's device fails: its guest RAM is re-mapped read-only for it, so it cannot write
    // the next admin completion (FATAL, ADMIN_DMA). Its QP and MR still exist.
    let d = p.drv(B);
    let (base, size, fd) = (d.mem.ram_base(), d.mem.ram_size(), d.mem.ram_fd());
    d.unmap_range(base, size);
    d.vfio
        .dma_map(base, size, 0, harness::vfio::DMA_READ, Some(fd))
        .expect("DMA_MAP read-only");
    d.admin_submit_only(vm_memory::ByteValued::as_slice(&cmd_handle(
        AqOpcode::AllocPd,
        0,
        0,
    )));
    wait_for("B to fail", || {
        (d.read_reg(bar0::DEV_STATUS) & bar0::DEV_STATUS_FATAL_MASK != 0).then_some(())
    });

    // A FATAL device is gone from the fabric: A's request is dropped and A times out
    // (before, B still placed it, or failed it as its own memory fault).
    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    let cqe = p.send_cqe(A);

    assert_eq!(
        (
            WcStatus::try_from(cqe.status),
            VendorErr::try_from(cqe.vendor_err)
        ),
        (Ok(WcStatus::RetryExcErr), Ok(VendorErr::Unreachable))
    );
}
