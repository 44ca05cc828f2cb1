//! Memory windows (SPEC "Memory keys", "Memory operations"): ALLOC_MW and DEALLOC_MW, the
//! BIND_MW work request for type 1 and type 2 windows, remote access through a window's
//! rkey, its invalidation, and every error path, on two devices and on one.

mod harness;

use harness::*;
use vrnic_hw::*;

const MW_BIND: u32 = 0x10;
const REMOTE_RW: u32 = REMOTE_WRITE | REMOTE_READ;

/// An MR of side `w` that windows may be bound to.
fn bindable_mr(p: &mut Pair, w: Which, len: u64) -> Mr {
    p.mr(w, len, ACCESS_ALL | MW_BIND)
}

fn alloc_mw(p: &mut Pair, w: Which, kind: MwType) -> u32 {
    let (drv, side) = p.side(w);
    let (uctx, pd) = (side.uctx, side.pd);
    drv.alloc_mw(uctx, pd, kind)
}

/// Posts BIND_MW on side `w`'s QP: window `rkey` onto `[offset, offset + len)` of `mr`.
fn bind(p: &mut Pair, w: Which, rkey: u32, mr: &Mr, offset: u64, len: u64, access: u32) -> Cqe {
    p.post_send_raw(w, &bind_mw_wqe(0xb1, rkey, mr, offset, len, access));
    p.send_cqe(w)
}

/// Binds window `mw` of side `w` under its next variant and returns the window as a peer
/// sees it.
fn bound(p: &mut Pair, w: Which, mw: u32, mr: &Mr, offset: u64, len: u64, access: u32) -> Mr {
    let rkey = with_variant(mw, (mw as u8).wrapping_add(1));
    assert_cqe_ok(
        &bind(p, w, rkey, mr, offset, len, access),
        0xb1,
        WcOpcode::BindMw,
    );
    window_of(mr, rkey, offset, len)
}

/// Side A's RDMA WRITE of `len` pattern bytes to `window` at `offset`; its CQE.
fn write_through(p: &mut Pair, window: &Mr, offset: u64, len: u32, seed: u64) -> (Cqe, Vec<u8>) {
    let src = p.mr(Which::A, u64::from(len), ACCESS_ALL);
    let data = pattern(seed, len as usize);
    p.write(Which::A, &src, 0, &data);
    p.post_send(
        Which::A,
        &SendWr::write(seed, vec![src.sge(0, len)], window, offset).signaled(),
    );
    (p.send_cqe(Which::A), data)
}

#[track_caller]
fn assert_remote_refused(cqe: &Cqe, why: VendorErr) {
    assert_cqe_status(cqe, WcStatus::RemAccessErr, why);
}

// ---------------------------------------------------------------- data through windows

fn a_type_1_window_gives_writes_and_reads_its_range_of_the_mr(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x3000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type1);
    let window = bound(&mut p, Which::B, mw, &mr, 0x180, 0x2000, REMOTE_RW);

    let (cqe, data) = write_through(&mut p, &window, 0, 0x2000, 41);
    assert_cqe_ok(&cqe, 41, WcOpcode::RdmaWrite);
    let back = p.mr(Which::A, 0x2000, ACCESS_ALL);
    p.post_send(
        Which::A,
        &SendWr::read(42, vec![back.sge(0, 0x2000)], &window, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(Which::A), 42, WcOpcode::RdmaRead);

    assert_same_bytes(&p.read(Which::B, &mr, 0x180, 0x2000), &data, "WRITE");
    assert_same_bytes(&p.read(Which::A, &back, 0, 0x2000), &data, "READ");
    assert_eq!(
        p.read(Which::B, &mr, 0x17f, 1),
        vec![0],
        "before the window"
    );
}

fn a_type_2_window_works_for_its_qp_until_local_inv(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type2);
    let window = bound(&mut p, Which::B, mw, &mr, 0, 0x1000, REMOTE_RW);
    let (cqe, data) = write_through(&mut p, &window, 0x10, 0x100, 43);
    assert_cqe_ok(&cqe, 43, WcOpcode::RdmaWrite);
    assert_same_bytes(&p.read(Which::B, &mr, 0x10, 0x100), &data, "WRITE");

    p.post_send(Which::B, &local_inv_wr(44, window.key));
    assert_cqe_ok(&p.send_cqe(Which::B), 44, WcOpcode::LocalInv);

    let (cqe, _) = write_through(&mut p, &window, 0, 8, 45);
    assert_remote_refused(&cqe, VendorErr::BadRkey);
}

fn send_with_inv_invalidates_a_type_2_window_bound_to_the_target_qp(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type2);
    let window = bound(&mut p, Which::B, mw, &mr, 0, 0x1000, REMOTE_RW);
    let src = p.mr(Which::A, 64, ACCESS_ALL);
    let dst = p.mr(Which::B, 64, ACCESS_ALL);
    p.post_recv(Which::B, &RecvWr::new(46, vec![dst.sge(0, 64)]));

    p.post_send(Which::A, &send_inv_wr(47, vec![src.sge(0, 64)], window.key));

    assert_cqe_ok(&p.send_cqe(Which::A), 47, WcOpcode::Send);
    let recv = p.recv_cqe(Which::B);
    assert_cqe_ok(&recv, 46, WcOpcode::Recv);
    assert_eq!(
        (recv.wc_flags, recv.imm_data),
        (u8::from(WcFlags::WithInv), window.key.to_le_bytes())
    );
    let (cqe, _) = write_through(&mut p, &window, 0, 8, 48);
    assert_remote_refused(&cqe, VendorErr::BadRkey);
}

/// As pyverbs' MWTest does it: a SEND_WITH_INV with no data into a posted receive.
fn a_zero_length_send_with_inv_invalidates_a_type_2_window(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type2);
    let window = bound(&mut p, Which::B, mw, &mr, 0, 0x1000, REMOTE_WRITE);
    p.post_recv(Which::B, &RecvWr::new(68, vec![mr.sge(0, 64)]));

    p.post_send(Which::A, &send_inv_wr(69, vec![], window.key));

    assert_cqe_ok(&p.send_cqe(Which::A), 69, WcOpcode::Send);
    let recv = p.recv_cqe(Which::B);
    assert_cqe_ok(&recv, 68, WcOpcode::Recv);
    assert_eq!(
        (recv.byte_len.to_native(), recv.wc_flags, recv.imm_data),
        (0, u8::from(WcFlags::WithInv), window.key.to_le_bytes())
    );
    let (cqe, _) = write_through(&mut p, &window, 0, 8, 70);
    assert_remote_refused(&cqe, VendorErr::BadRkey);
}

fn rebinding_a_type_1_window_retires_its_old_rkey(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x2000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type1);
    let first = bound(&mut p, Which::B, mw, &mr, 0, 0x1000, REMOTE_RW);
    let second = bound(&mut p, Which::B, first.key, &mr, 0x1000, 0x1000, REMOTE_RW);

    let (cqe, data) = write_through(&mut p, &second, 0, 0x1000, 49);
    assert_cqe_ok(&cqe, 49, WcOpcode::RdmaWrite);
    assert_same_bytes(&p.read(Which::B, &mr, 0x1000, 0x1000), &data, "WRITE");
    let (cqe, _) = write_through(&mut p, &first, 0, 8, 50);
    assert_remote_refused(&cqe, VendorErr::BadRkey);
}

fn a_type_1_window_bound_with_length_0_is_unbound(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type1);
    let window = bound(&mut p, Which::B, mw, &mr, 0, 0x1000, REMOTE_RW);
    let unbound = bound(&mut p, Which::B, window.key, &mr, 0, 0, 0);

    let (cqe, _) = write_through(&mut p, &window_of(&mr, unbound.key, 0, 8), 0, 8, 51);

    assert_remote_refused(&cqe, VendorErr::BadRkey);
}

fn a_request_beyond_the_window_fails_with_remote_bounds(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x2000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type1);
    let window = bound(&mut p, Which::B, mw, &mr, 0x100, 0x100, REMOTE_RW);
    let wider = window_of(&mr, window.key, 0x100, 0x101);

    let (cqe, _) = write_through(&mut p, &wider, 0, 0x101, 52);

    assert_remote_refused(&cqe, VendorErr::RemoteBounds);
    assert_eq!(p.qp_state(Which::B), QpState::Err);
}

fn a_window_gives_only_its_own_access(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type1);
    let window = bound(&mut p, Which::B, mw, &mr, 0, 0x1000, REMOTE_READ);

    let (cqe, _) = write_through(&mut p, &window, 0, 8, 53);

    assert_remote_refused(&cqe, VendorErr::RemoteAccess);
}

fn a_window_is_no_lkey(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type1);
    let window = bound(&mut p, Which::A, mw, &mr, 0, 0x1000, REMOTE_RW);

    p.post_send(
        Which::A,
        &SendWr::send(54, vec![window.sge(0, 8)]).signaled(),
    );

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::LocProtErr,
        VendorErr::BadLkey,
    );
}

fn a_type_2_window_refuses_requests_arriving_at_another_qp(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type2);
    // A second QP of B's context and PD (connected to itself) binds the window: A's peer
    // QP may not use it.
    let (uctx, pd, b_drv) = (p.b.uctx, p.b.pd, p.b.drv);
    let drv = &mut p.drivers[b_drv];
    let mut cq = drv.create_cq(uctx, 6);
    let mut other = drv.create_qp(uctx, pd, &cq, &cq, QpCaps::default());
    let own = drv.addr();
    drv.connect_qp_to(&other, own, other.qpn, &ConnectOpts::default());
    let rkey = with_variant(mw, (mw as u8).wrapping_add(1));
    drv.post_send_raw(
        &mut other,
        &bind_mw_wqe(55, rkey, &mr, 0, 0x1000, REMOTE_RW),
    );
    assert_cqe_ok(&drv.wait_cqe(&mut cq), 55, WcOpcode::BindMw);

    let (cqe, _) = write_through(&mut p, &window_of(&mr, rkey, 0, 0x1000), 0, 8, 56);

    assert_remote_refused(&cqe, VendorErr::MkeyState);
}

fn a_window_of_another_pd_than_the_target_qps_fails_with_pd_mismatch(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type1);
    let window = bound(&mut p, Which::B, mw, &mr, 0, 0x1000, REMOTE_RW);
    // A fresh pair between the same devices, in other contexts and PDs.
    let (mut a2, _b2) = p.fresh();
    let src = p.drivers[a2.drv].reg_mr(a2.uctx, a2.pd, 8, ACCESS_ALL);
    let d = &mut p.drivers[a2.drv];

    d.post_send(
        &mut a2.qp,
        &SendWr::write(57, vec![src.sge(0, 8)], &window, 0).signaled(),
    );

    assert_remote_refused(&d.wait_cqe(&mut a2.send_cq), VendorErr::PdMismatch);
}

fn send_with_inv_of_a_type_1_window_fails_on_both_sides(t: Topology) {
    let mut p = Pair::new(t);
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type1);
    let window = bound(&mut p, Which::B, mw, &mr, 0, 0x1000, REMOTE_RW);
    let src = p.mr(Which::A, 64, ACCESS_ALL);
    let dst = p.mr(Which::B, 64, ACCESS_ALL);
    p.post_recv(Which::B, &RecvWr::new(58, vec![dst.sge(0, 64)]));

    p.post_send(Which::A, &send_inv_wr(59, vec![src.sge(0, 64)], window.key));

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::RemInvReqErr,
        VendorErr::MkeyState,
    );
    assert_cqe_status(
        &p.recv_cqe(Which::B),
        WcStatus::LocProtErr,
        VendorErr::MkeyState,
    );
}

fn atomics_reach_a_window_only_with_its_remote_atomic(t: Topology) {
    let opts = ConnectOpts {
        access: ACCESS_ALL | REMOTE_ATOMIC,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let mr = p.mr(Which::B, 0x1000, ACCESS_ALL | REMOTE_ATOMIC | MW_BIND);
    p.write(Which::B, &mr, 0x808, &40u64.to_le_bytes());
    let atomic = alloc_mw(&mut p, Which::B, MwType::Type1);
    let atomic = bound(&mut p, Which::B, atomic, &mr, 0x800, 0x100, REMOTE_ATOMIC);
    let plain = alloc_mw(&mut p, Which::B, MwType::Type1);
    let plain = bound(&mut p, Which::B, plain, &mr, 0x800, 0x100, REMOTE_RW);
    let result = p.mr(Which::A, 16, ACCESS_ALL);

    p.post_send(
        Which::A,
        &SendWr::fetch_and_add(62, result.sge(0, 8), &atomic, 8, 2).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(Which::A), 62, WcOpcode::FetchAdd);
    assert_eq!(p.read(Which::A, &result, 0, 8), 40u64.to_le_bytes());
    assert_eq!(p.read(Which::B, &mr, 0x808, 8), 42u64.to_le_bytes());
    p.post_send(
        Which::A,
        &SendWr::fetch_and_add(63, result.sge(8, 8), &plain, 8, 2).signaled(),
    );

    assert_remote_refused(&p.send_cqe(Which::A), VendorErr::RemoteAccess);
    assert_eq!(p.read(Which::B, &mr, 0x808, 8), 42u64.to_le_bytes());
}

/// UC: binding, remote writes through a type 2 window and SEND_WITH_INV of it.
fn a_type_2_window_serves_a_uc_qp_until_send_with_inv(t: Topology) {
    let mut p = Pair::with(t, QpCaps::of(QpType::Uc), ConnectOpts::default());
    let mr = bindable_mr(&mut p, Which::B, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type2);
    let window = bound(&mut p, Which::B, mw, &mr, 0x100, 0x200, REMOTE_WRITE);
    let (cqe, data) = write_through(&mut p, &window, 0, 0x200, 64);
    assert_cqe_ok(&cqe, 64, WcOpcode::RdmaWrite);
    let src = p.mr(Which::A, 16, ACCESS_ALL);
    let dst = p.mr(Which::B, 16, ACCESS_ALL);
    p.post_recv(Which::B, &RecvWr::new(65, vec![dst.sge(0, 16)]));

    p.post_send(Which::A, &send_inv_wr(66, vec![src.sge(0, 16)], window.key));

    assert_cqe_ok(&p.send_cqe(Which::A), 66, WcOpcode::Send);
    let recv = p.recv_cqe(Which::B);
    assert_cqe_ok(&recv, 65, WcOpcode::Recv);
    assert_eq!(
        (recv.wc_flags, recv.imm_data),
        (u8::from(WcFlags::WithInv), window.key.to_le_bytes())
    );
    assert_same_bytes(&p.read(Which::B, &mr, 0x100, 0x200), &data, "WRITE");
    // UC: a write to the invalidated rkey is dropped at the target, which stays usable.
    let (cqe, _) = write_through(&mut p, &window, 0, 8, 67);
    assert_cqe_ok(&cqe, 67, WcOpcode::RdmaWrite);
    assert_eq!(p.read(Which::B, &mr, 0x100, 8), data[..8].to_vec());
    assert_eq!(p.qp_state(Which::B), QpState::Rts);
}

on_both_topologies!(
    atomics_reach_a_window_only_with_its_remote_atomic,
    a_type_2_window_serves_a_uc_qp_until_send_with_inv,
    a_type_1_window_gives_writes_and_reads_its_range_of_the_mr,
    a_type_2_window_works_for_its_qp_until_local_inv,
    send_with_inv_invalidates_a_type_2_window_bound_to_the_target_qp,
    a_zero_length_send_with_inv_invalidates_a_type_2_window,
    rebinding_a_type_1_window_retires_its_old_rkey,
    a_type_1_window_bound_with_length_0_is_unbound,
    a_request_beyond_the_window_fails_with_remote_bounds,
    a_window_gives_only_its_own_access,
    a_window_is_no_lkey,
    a_type_2_window_refuses_requests_arriving_at_another_qp,
    a_window_of_another_pd_than_the_target_qps_fails_with_pd_mismatch,
    send_with_inv_of_a_type_1_window_fails_on_both_sides,
);

// ---------------------------------------------------------------- BIND_MW errors

/// Binds on side A (loopback) and expects MW_BIND_ERR with `why`.
#[track_caller]
fn assert_bind_fails(
    p: &mut Pair,
    rkey: u32,
    mr: &Mr,
    offset: u64,
    len: u64,
    access: u32,
    why: VendorErr,
) {
    let cqe = bind(p, Which::A, rkey, mr, offset, len, access);
    assert_cqe_status(&cqe, WcStatus::MwBindErr, why);
    assert_eq!(cqe.opcode, u8::from(WcOpcode::BindMw));
    assert_eq!(p.qp_state(Which::A), QpState::Err);
}

#[test]
fn binding_a_bound_type_2_window_fails_with_mkey_state() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type2);
    let window = bound(&mut p, Which::A, mw, &mr, 0, 0x100, REMOTE_RW);

    assert_bind_fails(
        &mut p,
        window.key,
        &mr,
        0,
        0x100,
        REMOTE_RW,
        VendorErr::MkeyState,
    );
}

#[test]
fn binding_to_an_mr_without_mw_bind_fails_with_local_access() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = p.mr(Which::A, 0x1000, ACCESS_ALL);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type1);

    assert_bind_fails(&mut p, mw, &mr, 0, 0x100, REMOTE_RW, VendorErr::LocalAccess);
}

#[test]
fn a_writable_window_needs_the_mrs_local_write() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = p.mr(Which::A, 0x1000, REMOTE_READ | MW_BIND);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type1);

    assert_bind_fails(
        &mut p,
        mw,
        &mr,
        0,
        0x100,
        REMOTE_WRITE,
        VendorErr::MkeyState,
    );
}

#[test]
fn a_window_may_hold_only_remote_access_bits() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type1);

    assert_bind_fails(&mut p, mw, &mr, 0, 0x100, LOCAL_WRITE, VendorErr::MkeyState);
}

#[test]
fn a_window_beyond_its_mr_fails_with_mkey_state() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type1);

    assert_bind_fails(
        &mut p,
        mw,
        &mr,
        0xf00,
        0x101,
        REMOTE_RW,
        VendorErr::MkeyState,
    );
}

#[test]
fn binding_another_pds_window_fails_with_mkey_state() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);
    let mw = alloc_mw(&mut p, Which::B, MwType::Type1);

    assert_bind_fails(&mut p, mw, &mr, 0, 0x100, REMOTE_RW, VendorErr::MkeyState);
}

#[test]
fn binding_an_mr_key_as_a_window_fails_with_mkey_state() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);

    assert_bind_fails(
        &mut p,
        mr.key,
        &mr,
        0,
        0x100,
        REMOTE_RW,
        VendorErr::MkeyState,
    );
}

#[test]
fn local_inv_of_a_type_1_window_fails_with_mkey_state() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type1);
    let window = bound(&mut p, Which::A, mw, &mr, 0, 0x100, REMOTE_RW);

    p.post_send(Which::A, &local_inv_wr(60, window.key));

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::LocProtErr,
        VendorErr::MkeyState,
    );
}

#[test]
fn a_bind_mw_wqe_with_a_nonzero_reserved_field_is_a_bad_wqe() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type1);
    let mut wqe = bind_mw_wqe(61, mw, &mr, 0, 0x100, REMOTE_RW);
    wqe[SendWqeHeader::SIZE + BindMwSeg::RESERVED0_OFF] = 1;

    p.post_send_raw(Which::A, &wqe);

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::LocQpOpErr,
        VendorErr::BadWqe,
    );
}

// ---------------------------------------------------------------- ALLOC_MW, DEALLOC_MW

#[test]
fn alloc_mw_checks_its_pd_context_and_type() {
    let t = TestDevices::start(1);
    let mut d = t.driver(0);
    let (u1, u2) = (d.alloc_uctx(), d.alloc_uctx());
    let pd = d.alloc_pd(u1);

    d.admin(&cmd_alloc_mw(pd + 40, u1, 1))
        .expect_err(AqStatus::BadHandle, CmdAllocMw::PDN_OFF);
    d.admin(&cmd_alloc_mw(pd, u2, 1))
        .expect_err(AqStatus::Permission, CmdAllocMw::UCTX_OFF);
    for bad in [0, 3] {
        d.admin(&cmd_alloc_mw(pd, u1, bad))
            .expect_err(AqStatus::BadField, CmdAllocMw::MW_TYPE_OFF);
    }
    let rkey = d.admin(&cmd_alloc_mw(pd, u1, 2)).ok()[0];
    assert_ne!(rkey >> 8, 0);
}

#[test]
fn dealloc_mw_takes_any_variant_of_a_window_and_nothing_else() {
    let t = TestDevices::start(1);
    let mut d = t.driver(0);
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let mr = d.reg_mr(uctx, pd, 64, ACCESS_ALL);
    let mw = d.alloc_mw(uctx, pd, MwType::Type1);
    let other = d.alloc_uctx();

    d.dealloc_mw(uctx, mr.key)
        .expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    d.dealloc_mw(other, mw)
        .expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    d.dealloc_mw(uctx, with_variant(mw, (mw as u8).wrapping_add(9)))
        .ok();
    d.dealloc_mw(uctx, mw)
        .expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}

#[test]
fn dereg_mr_is_busy_while_a_window_is_bound_to_it() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = bindable_mr(&mut p, Which::A, 0x1000);
    let mw = alloc_mw(&mut p, Which::A, MwType::Type1);
    let window = bound(&mut p, Which::A, mw, &mr, 0, 0x100, REMOTE_RW);
    let uctx = p.a.uctx;
    let d = p.drv(Which::A);

    d.dereg_mr(&mr)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.dealloc_mw(uctx, window.key).ok();
    d.dereg_mr(&mr).ok();
}

#[test]
fn a_pd_and_its_context_stay_busy_while_a_window_uses_them() {
    let t = TestDevices::start(1);
    let mut d = t.driver(0);
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let mw = d.alloc_mw(uctx, pd, MwType::Type2);

    d.dealloc_pd(uctx, pd)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.dealloc_mw(uctx, mw).ok();
    d.dealloc_pd(uctx, pd).ok();
    d.dealloc_uctx(uctx).ok();
}

#[test]
fn a_device_holds_at_most_max_mw_windows() {
    let t = TestDevices::start(1);
    let mut d = t.driver(0);
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let cmd = cmd_alloc_mw(pd, uctx, 1);
    let bytes = bytes_of(&cmd);
    let batch: Vec<&[u8]> = (0..8).map(|_| bytes.as_slice()).collect();

    for _ in 0..MAX_MW / 8 {
        for r in d.admin_batch(&batch) {
            r.ok();
        }
    }

    d.admin(&cmd).expect_general_err(AqStatus::NoResources);
    // Windows take no MR's room: MRs still register.
    d.reg_mr(uctx, pd, 64, ACCESS_ALL);
}
