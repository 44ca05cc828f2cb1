//! Atomics over RC (SPEC "Atomics"): CMP_AND_SWP and FETCH_AND_ADD on the 8-byte word at
//! remote_addr, the original value written to the local SGE, the completion (opcode,
//! byte_len 8), atomicity between QPs; and every error: the WQE layout (BAD_WQE), the
//! result buffer's LOCAL_WRITE, the target's rkey, bounds, REMOTE_ATOMIC of the MR and of
//! the QP, max_dest_rd_atomic, MISALIGNED, and non-RC QPs (BAD_OPCODE). Between two devices
//! and on one (loopback).

mod harness;

use harness::*;
use vrnic_hw::*;
use Which::{A, B};

on_both_topologies!(
    cmp_and_swp_swaps_only_on_a_match_and_returns_the_original,
    fetch_and_add_wraps_and_returns_the_original,
    the_result_may_straddle_a_page_of_the_local_buffer,
    atomics_from_two_qps_on_one_word_lose_no_update,
    misaligned_remote_addr_fails_with_rem_inv_req_err_misaligned,
    mr_without_remote_atomic_fails_with_rem_access_err,
    qp_without_remote_atomic_fails_with_rem_access_err,
    bad_rkey_fails_with_rem_access_err_bad_rkey,
    word_outside_the_mr_fails_with_remote_bounds,
    target_without_max_dest_rd_atomic_fails_with_rem_inv_req_err,
    result_buffer_without_local_write_fails_with_loc_access_err,
    malformed_atomic_wqes_fail_with_bad_wqe,
);

const ATOMIC_ACCESS: u32 = ACCESS_ALL | REMOTE_ATOMIC;

fn atomic_opts() -> ConnectOpts {
    ConnectOpts {
        access: ATOMIC_ACCESS,
        ..ConnectOpts::default()
    }
}

fn atomic_pair(t: Topology) -> Pair {
    Pair::with(t, QpCaps::default(), atomic_opts())
}

fn word(p: &mut Pair, mr: &Mr, offset: u64) -> u64 {
    u64::from_le_bytes(p.read(B, mr, offset, 8).try_into().expect("8 bytes"))
}

fn local_word(p: &mut Pair, mr: &Mr, offset: u64) -> u64 {
    u64::from_le_bytes(p.read(A, mr, offset, 8).try_into().expect("8 bytes"))
}

/// (opcode, status, vendor_err, byte_len, qpn, wr_id) of a CQE.
fn fields(c: &Cqe) -> (u8, u8, u8, u32, u32, u64) {
    (
        c.opcode,
        c.status,
        c.vendor_err,
        c.byte_len.to_native(),
        c.qpn.to_native(),
        c.wr_id.to_native(),
    )
}

fn ok(opcode: WcOpcode, qpn: u32, wr_id: u64) -> (u8, u8, u8, u32, u32, u64) {
    (
        opcode.into(),
        WcStatus::Success.into(),
        VendorErr::None.into(),
        8,
        qpn,
        wr_id,
    )
}

fn cmp_and_swp_swaps_only_on_a_match_and_returns_the_original(t: Topology) {
    let mut p = atomic_pair(t);
    let target = p.mr(B, 24, ATOMIC_ACCESS);
    p.write(B, &target, 0, &[0xaa; 24]);
    p.write(B, &target, 8, &0x1111_2222_3333_4444u64.to_le_bytes());
    let result = p.mr(A, 16, ACCESS_ALL);
    p.write(A, &result, 0, &[0xee; 16]);

    p.post_sends(
        A,
        &[
            SendWr::cmp_and_swp(1, result.sge(0, 8), &target, 8, 0x1111_2222_3333_4444, 7)
                .signaled(),
            SendWr::cmp_and_swp(2, result.sge(8, 8), &target, 8, 0x1111_2222_3333_4444, 9)
                .signaled(),
        ],
    );

    let c = p.send_cqes(A, 2);
    let qpn = p.qpn(A);
    assert_eq!(fields(&c[0]), ok(WcOpcode::CompSwap, qpn, 1));
    assert_eq!(fields(&c[1]), ok(WcOpcode::CompSwap, qpn, 2));
    assert_eq!(
        (c[0].wqe_index.to_native(), c[1].wqe_index.to_native()),
        (0, 1)
    );
    assert_eq!(local_word(&mut p, &result, 0), 0x1111_2222_3333_4444);
    assert_eq!(
        local_word(&mut p, &result, 8),
        7,
        "the second saw the first's swap"
    );
    assert_eq!(word(&mut p, &target, 8), 7, "no match, no swap");
    assert_eq!(
        p.read(B, &target, 0, 8),
        vec![0xaa; 8],
        "neighbours untouched"
    );
    assert_eq!(
        p.read(B, &target, 16, 8),
        vec![0xaa; 8],
        "neighbours untouched"
    );
    assert_eq!(p.poll_recv_cq(B), None, "an atomic consumes no receive");
}

fn fetch_and_add_wraps_and_returns_the_original(t: Topology) {
    let mut p = atomic_pair(t);
    let target = p.mr(B, 8, ATOMIC_ACCESS);
    p.write(B, &target, 0, &(u64::MAX - 1).to_le_bytes());
    let result = p.mr(A, 16, ACCESS_ALL);

    p.post_sends(
        A,
        &[
            SendWr::fetch_and_add(1, result.sge(0, 8), &target, 0, 3).signaled(),
            SendWr::fetch_and_add(2, result.sge(8, 8), &target, 0, 0x100).signaled(),
        ],
    );

    let c = p.send_cqes(A, 2);
    let qpn = p.qpn(A);
    assert_eq!(fields(&c[0]), ok(WcOpcode::FetchAdd, qpn, 1));
    assert_eq!(fields(&c[1]), ok(WcOpcode::FetchAdd, qpn, 2));
    assert_eq!(local_word(&mut p, &result, 0), u64::MAX - 1);
    assert_eq!(local_word(&mut p, &result, 8), 1);
    assert_eq!(word(&mut p, &target, 0), 0x101);
}

fn the_result_may_straddle_a_page_of_the_local_buffer(t: Topology) {
    let mut p = atomic_pair(t);
    let target = p.mr(B, 8, ATOMIC_ACCESS);
    p.write(B, &target, 0, &0x0102_0304_0506_0708u64.to_le_bytes());
    let result = p.mr(A, 8192, ACCESS_ALL);

    p.post_send(
        A,
        &SendWr::fetch_and_add(1, result.sge(4093, 8), &target, 0, 1).signaled(),
    );

    assert_eq!(fields(&p.send_cqe(A)), ok(WcOpcode::FetchAdd, p.qpn(A), 1));
    assert_eq!(local_word(&mut p, &result, 4093), 0x0102_0304_0506_0708);
    assert_eq!(word(&mut p, &target, 0), 0x0102_0304_0506_0709);
}

fn atomics_from_two_qps_on_one_word_lose_no_update(t: Topology) {
    let mut p = atomic_pair(t);
    let (mut a2, b2) = p.fresh();
    // Reconnect the fresh pair's target with REMOTE_ATOMIC.
    let (a_addr, a2_qpn) = (p.addr(A), a2.qp.qpn);
    let b_drv = p.b.drv;
    let mut b2 = b2;
    p.drivers[b_drv]
        .set_qp_state(&mut b2.qp, QpState::Reset)
        .ok();
    p.drivers[b_drv].connect_qp_to(&b2.qp, a_addr, a2_qpn, &atomic_opts());
    // One word, reached by each pair through an MR of its own PD (two keys, one page).
    let target = p.mr(B, 8, ATOMIC_ACCESS);
    let target2 =
        p.drivers[b_drv].reg_mr_on_pages(b2.uctx, b2.pd, target.pages.clone(), ATOMIC_ACCESS);
    let a_drv = p.a.drv;
    let n = 48u64;
    let result = p.mr(A, 8 * n, ACCESS_ALL);
    let result2 = p.drivers[a_drv].reg_mr(a2.uctx, a2.pd, 8 * n, ACCESS_ALL);

    let wrs = |base: u64, result: &Mr, target: &Mr| -> Vec<SendWr> {
        (0..4)
            .map(|i| {
                let at = (base + i) * 8;
                SendWr::fetch_and_add(at, result.sge(at, 8), target, 0, 1).signaled()
            })
            .collect()
    };
    for round in 0..n / 8 {
        let base = round * 4;
        p.post_sends(A, &wrs(base, &result, &target));
        p.drivers[a_drv].post_sends(&mut a2.qp, &wrs(base, &result2, &target2));
        for c in p.send_cqes(A, 4) {
            assert_eq!(status_of(&c), WcStatus::Success);
        }
        for c in p.drivers[a_drv].wait_cqes(&mut a2.send_cq, 4) {
            assert_eq!(status_of(&c), WcStatus::Success);
        }
    }

    assert_eq!(word(&mut p, &target, 0), n, "every add counted once");
    let mut seen: Vec<u64> = (0..n / 2)
        .flat_map(|i| {
            [local_word(&mut p, &result, i * 8), {
                let r2 = p.drivers[a_drv].mr_read(&result2, i * 8, 8);
                u64::from_le_bytes(r2.try_into().expect("8 bytes"))
            }]
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..n).collect::<Vec<_>>(),
        "each add saw a different original value"
    );
}

/// Posts `bad` (signaled) and a signaled SEND behind it on A: `bad` fails with (status,
/// vendor), the SEND is flushed, A is in ERR.
fn expect_failure(p: &mut Pair, bad: SendWr, status: WcStatus, vendor: VendorErr) {
    let src = p.mr(A, 8, ACCESS_ALL);
    let id = bad.wr_id;
    p.post_sends(
        A,
        &[
            bad.signaled(),
            SendWr::send(0xf2, vec![src.sge(0, 8)]).signaled(),
        ],
    );
    let c = p.send_cqe(A);
    assert_cqe_status(&c, status, vendor);
    assert_eq!((c.wr_id.to_native(), c.qpn.to_native()), (id, p.qpn(A)));
    assert_cqe_status(&p.send_cqe(A), WcStatus::WrFlushErr, VendorErr::Flush);
    assert_eq!(p.qp_state(A), QpState::Err);
}

/// The target QP B moved to ERR with `event`, whose data is `vendor`.
fn expect_target_errored(p: &mut Pair, event: EventType, vendor: VendorErr) {
    let qpn = p.qpn(B);
    let data = p.drv(B).wait_async_event_for(event, qpn);
    assert_eq!(
        data,
        u32::from(u8::from(vendor)),
        "event data is the vendor_err"
    );
    assert_eq!(p.qp_state(B), QpState::Err);
}

/// A remote refusal: A fails with (status, vendor), B errors with `event`, the word is
/// unchanged, and the devices still serve.
fn remote_refusal(
    p: &mut Pair,
    target: &Mr,
    bad: SendWr,
    (status, vendor): (WcStatus, VendorErr),
    event: EventType,
) {
    let before = p.read(B, target, 0, target.len);
    expect_failure(p, bad, status, vendor);
    expect_target_errored(p, event, vendor);
    assert_eq!(
        p.read(B, target, 0, target.len),
        before,
        "the word is unchanged"
    );
    p.assert_still_serving();
}

fn misaligned_remote_addr_fails_with_rem_inv_req_err_misaligned(t: Topology) {
    let mut p = atomic_pair(t);
    let target = p.mr(B, 24, ATOMIC_ACCESS);
    let result = p.mr(A, 8, ACCESS_ALL);
    let bad = SendWr::fetch_and_add(1, result.sge(0, 8), &target, 4, 1);
    let why = (WcStatus::RemInvReqErr, VendorErr::Misaligned);
    remote_refusal(&mut p, &target, bad, why, EventType::QpReqErr);
}

fn mr_without_remote_atomic_fails_with_rem_access_err(t: Topology) {
    let mut p = atomic_pair(t);
    let target = p.mr(B, 8, ACCESS_ALL);
    let result = p.mr(A, 8, ACCESS_ALL);
    let bad = SendWr::cmp_and_swp(1, result.sge(0, 8), &target, 0, 0, 1);
    let why = (WcStatus::RemAccessErr, VendorErr::RemoteAccess);
    remote_refusal(&mut p, &target, bad, why, EventType::QpAccessErr);
}

fn qp_without_remote_atomic_fails_with_rem_access_err(t: Topology) {
    let mut p = Pair::new(t);
    let target = p.mr(B, 8, ATOMIC_ACCESS);
    let result = p.mr(A, 8, ACCESS_ALL);
    let bad = SendWr::fetch_and_add(1, result.sge(0, 8), &target, 0, 1);
    let why = (WcStatus::RemAccessErr, VendorErr::RemoteAccess);
    remote_refusal(&mut p, &target, bad, why, EventType::QpAccessErr);
}

fn bad_rkey_fails_with_rem_access_err_bad_rkey(t: Topology) {
    let mut p = atomic_pair(t);
    let target = p.mr(B, 8, ATOMIC_ACCESS);
    let result = p.mr(A, 8, ACCESS_ALL);
    let bad = SendWr::fetch_and_add(1, result.sge(0, 8), &target, 0, 1)
        .remote(target.addr(0), target.key ^ 0x40);
    let why = (WcStatus::RemAccessErr, VendorErr::BadRkey);
    remote_refusal(&mut p, &target, bad, why, EventType::QpAccessErr);
}

fn word_outside_the_mr_fails_with_remote_bounds(t: Topology) {
    let mut p = atomic_pair(t);
    let target = p.mr(B, 12, ATOMIC_ACCESS);
    let result = p.mr(A, 8, ACCESS_ALL);
    let bad = SendWr::fetch_and_add(1, result.sge(0, 8), &target, 8, 1);
    let why = (WcStatus::RemAccessErr, VendorErr::RemoteBounds);
    remote_refusal(&mut p, &target, bad, why, EventType::QpAccessErr);
}

fn target_without_max_dest_rd_atomic_fails_with_rem_inv_req_err(t: Topology) {
    let opts = ConnectOpts {
        max_dest_rd_atomic: 0,
        ..atomic_opts()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let target = p.mr(B, 8, ATOMIC_ACCESS);
    let result = p.mr(A, 8, ACCESS_ALL);
    let bad = SendWr::fetch_and_add(1, result.sge(0, 8), &target, 0, 1);
    let why = (WcStatus::RemInvReqErr, VendorErr::RemoteAccess);
    remote_refusal(&mut p, &target, bad, why, EventType::QpReqErr);
}

fn result_buffer_without_local_write_fails_with_loc_access_err(t: Topology) {
    let mut p = atomic_pair(t);
    let target = p.mr(B, 8, ATOMIC_ACCESS);
    p.write(B, &target, 0, &5u64.to_le_bytes());
    let read_only = p.mr(A, 8, REMOTE_READ);

    let bad = SendWr::fetch_and_add(1, read_only.sge(0, 8), &target, 0, 1);
    expect_failure(&mut p, bad, WcStatus::LocAccessErr, VendorErr::LocalAccess);

    assert_eq!(word(&mut p, &target, 0), 5, "nothing was sent");
    assert_eq!(p.qp_state(B), QpState::Rts, "the responder is not at fault");
}

fn malformed_atomic_wqes_fail_with_bad_wqe(t: Topology) {
    let spoilers: [fn(&mut SendWr, &Mr); 4] = [
        |wr, mr| wr.sges.push(mr.sge(8, 8)),
        |wr, mr| wr.sges = vec![mr.sge(0, 4)],
        |wr, mr| wr.sges = vec![mr.sge(0, 16)],
        |wr, _| *wr = wr.clone().inline(vec![0; 8]),
    ];
    for spoil in spoilers {
        let mut p = atomic_pair(t);
        let target = p.mr(B, 8, ATOMIC_ACCESS);
        let result = p.mr(A, 16, ACCESS_ALL);
        let mut bad = SendWr::fetch_and_add(1, result.sge(0, 8), &target, 0, 1);
        spoil(&mut bad, &result);

        expect_failure(&mut p, bad, WcStatus::LocQpOpErr, VendorErr::BadWqe);

        assert_eq!(word(&mut p, &target, 0), 0);
        assert_eq!(p.qp_state(B), QpState::Rts);
    }
}

#[test]
fn atomics_on_ud_qps_fail_with_bad_opcode() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let mut end = d.ud_end(QpType::Ud, TEST_QKEY);
    let mr = d.reg_mr(end.uctx, end.pd, 8, ACCESS_ALL);
    let mut wr = SendWr::datagram(
        1,
        vec![mr.sge(0, 8)],
        ud_av(d.addr(), end.qp.qpn, TEST_QKEY),
    );
    wr.opcode = WrOpcode::AtomicFetchAndAdd.into();

    d.post_send(&mut end.qp, &wr.signaled());

    let c = d.wait_cqe(&mut end.send_cq);
    assert_cqe_status(&c, WcStatus::LocQpOpErr, VendorErr::BadOpcode);
    assert_eq!(c.opcode, u8::from(WcOpcode::FetchAdd));
}
