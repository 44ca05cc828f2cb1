//! Fast-registration MRs (SPEC "Memory keys", "Memory operations"): ALLOC_MR, the REG_MR
//! work request, LOCAL_INV and SEND_WITH_INV, with their data and every error path, on
//! two devices and on one.

mod harness;

use harness::*;
use vrnic_hw::*;

const ALL: u32 = ACCESS_ALL;

/// Registers FRMR `key` of side `w` (allocated with room for `max_pages`) for `len` bytes
/// and waits for the REG_MR completion; returns the VALID registration.
fn register(p: &mut Pair, w: Which, key: u32, len: u64, first_offset: u64) -> Mr {
    let pd = p.side(w).1.pd;
    let fr = p.drv(w).fast_reg(key, pd, len, first_offset, 12, ALL);
    p.post_send_raw(w, &reg_mr_wqe(0x77, &fr));
    assert_cqe_ok(&p.send_cqe(w), 0x77, WcOpcode::RegMr);
    fr.mr
}

fn frmr_of(p: &mut Pair, w: Which, max_pages: u32) -> u32 {
    let pd = p.side(w).1.pd;
    p.drv(w).alloc_mr(pd, max_pages)
}

fn remote_writes_and_reads_reach_a_registered_frmr_byte_for_byte(t: Topology) {
    let mut p = kernel_pair(t);
    let key = frmr_of(&mut p, Which::B, 8);
    let target = register(&mut p, Which::B, key, 20_000, 0x123);
    let (a_pd, a_uctx) = (p.a.pd, p.a.uctx);
    let src = p.drv(Which::A).reg_mr(a_uctx, a_pd, 20_000, ALL);
    let back = p.drv(Which::A).reg_mr(a_uctx, a_pd, 20_000, ALL);
    let data = pattern(31, 20_000);
    p.write(Which::A, &src, 0, &data);

    p.post_send(
        Which::A,
        &SendWr::write(1, vec![src.sge(0, 20_000)], &target, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(Which::A), 1, WcOpcode::RdmaWrite);
    p.post_send(
        Which::A,
        &SendWr::read(2, vec![back.sge(0, 20_000)], &target, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(Which::A), 2, WcOpcode::RdmaRead);

    assert_same_bytes(&p.read(Which::B, &target, 0, 20_000), &data, "WRITE");
    assert_same_bytes(&p.read(Which::A, &back, 0, 20_000), &data, "READ");
}

fn a_registered_frmr_is_an_lkey_for_sends_and_receives(t: Topology) {
    let mut p = kernel_pair(t);
    let a_key = frmr_of(&mut p, Which::A, 4);
    let b_key = frmr_of(&mut p, Which::B, 4);
    let src = register(&mut p, Which::A, a_key, 9000, 0);
    let dst = register(&mut p, Which::B, b_key, 9000, 0x10);
    let data = pattern(32, 9000);
    p.write(Which::A, &src, 0, &data);

    p.post_recv(Which::B, &RecvWr::new(3, vec![dst.sge(0, 9000)]));
    p.post_send(
        Which::A,
        &SendWr::send(4, vec![src.sge(0, 9000)]).signaled(),
    );

    assert_cqe_ok(&p.send_cqe(Which::A), 4, WcOpcode::Send);
    assert_cqe_ok(&p.recv_cqe(Which::B), 3, WcOpcode::Recv);
    assert_same_bytes(&p.read(Which::B, &dst, 0, 9000), &data, "SEND");
}

fn local_inv_frees_the_frmr_and_its_key_stops_working(t: Topology) {
    let mut p = kernel_pair(t);
    let key = frmr_of(&mut p, Which::B, 1);
    let target = register(&mut p, Which::B, key, 512, 0);
    p.post_send(Which::B, &local_inv_wr(5, target.key));
    assert_cqe_ok(&p.send_cqe(Which::B), 5, WcOpcode::LocalInv);
    let (a_pd, a_uctx) = (p.a.pd, p.a.uctx);
    let src = p.drv(Which::A).reg_mr(a_uctx, a_pd, 512, ALL);

    p.post_send(
        Which::A,
        &SendWr::write(6, vec![src.sge(0, 512)], &target, 0).signaled(),
    );

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::RemAccessErr,
        VendorErr::BadRkey,
    );
}

fn a_frmr_registers_again_after_local_inv_and_only_the_new_key_works(t: Topology) {
    let mut p = kernel_pair(t);
    let key = frmr_of(&mut p, Which::B, 2);
    let first = register(&mut p, Which::B, key, 4096, 0);
    p.post_send(Which::B, &local_inv_wr(5, first.key));
    assert_cqe_ok(&p.send_cqe(Which::B), 5, WcOpcode::LocalInv);
    let second = register(&mut p, Which::B, first.key, 8192, 0);
    assert_ne!(second.key, first.key);
    let (a_pd, a_uctx) = (p.a.pd, p.a.uctx);
    let src = p.drv(Which::A).reg_mr(a_uctx, a_pd, 8192, ALL);
    let data = pattern(33, 8192);
    p.write(Which::A, &src, 0, &data);
    p.post_send(
        Which::A,
        &SendWr::write(7, vec![src.sge(0, 8192)], &second, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(Which::A), 7, WcOpcode::RdmaWrite);
    assert_same_bytes(&p.read(Which::B, &second, 0, 8192), &data, "new key");

    p.post_send(
        Which::A,
        &SendWr::write(8, vec![src.sge(0, 16)], &first, 0).signaled(),
    );

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::RemAccessErr,
        VendorErr::BadRkey,
    );
}

fn send_with_inv_invalidates_the_targets_frmr_and_reports_its_key(t: Topology) {
    let mut p = kernel_pair(t);
    let key = frmr_of(&mut p, Which::B, 1);
    let target = register(&mut p, Which::B, key, 4096, 0);
    let (a_pd, a_uctx, b_pd) = (p.a.pd, p.a.uctx, p.b.pd);
    let src = p.drv(Which::A).reg_mr(a_uctx, a_pd, 4096, ALL);
    let dst = p.drv(Which::B).reg_mr(KERNEL_UCTX, b_pd, 100, ALL);
    let data = pattern(34, 100);
    p.write(Which::A, &src, 0, &data);
    p.post_recv(Which::B, &RecvWr::new(9, vec![dst.sge(0, 100)]));

    p.post_send(
        Which::A,
        &send_inv_wr(10, vec![src.sge(0, 100)], target.key),
    );

    assert_cqe_ok(&p.send_cqe(Which::A), 10, WcOpcode::Send);
    let recv = p.recv_cqe(Which::B);
    assert_cqe_ok(&recv, 9, WcOpcode::Recv);
    assert_eq!(recv.wc_flags, u8::from(WcFlags::WithInv));
    assert_eq!(recv.imm_data, target.key.to_le_bytes());
    assert_same_bytes(&p.read(Which::B, &dst, 0, 100), &data, "SEND_WITH_INV");
    p.post_send(
        Which::A,
        &SendWr::write(11, vec![src.sge(0, 16)], &target, 0).signaled(),
    );
    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::RemAccessErr,
        VendorErr::BadRkey,
    );
}

fn send_with_inv_of_a_key_the_target_cannot_invalidate_fails_on_both_sides(t: Topology) {
    let mut p = kernel_pair(t);
    let (a_pd, a_uctx, b_pd) = (p.a.pd, p.a.uctx, p.b.pd);
    // A plain MR is no key SEND_WITH_INV may invalidate.
    let plain = p.drv(Which::B).reg_mr(KERNEL_UCTX, b_pd, 100, ALL);
    let src = p.drv(Which::A).reg_mr(a_uctx, a_pd, 100, ALL);
    p.post_recv(Which::B, &RecvWr::new(12, vec![plain.sge(0, 100)]));

    p.post_send(Which::A, &send_inv_wr(13, vec![src.sge(0, 100)], plain.key));

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
    let b_qpn = p.qpn(Which::B);
    let data = p
        .drv(Which::B)
        .wait_async_event_for(EventType::QpReqErr, b_qpn);
    assert_eq!(data, u32::from(u8::from(VendorErr::MkeyState)));
    assert_eq!(p.qp_state(Which::B), QpState::Err);
}

fn a_free_frmrs_key_is_no_lkey(t: Topology) {
    let mut p = kernel_pair(t);
    let key = frmr_of(&mut p, Which::A, 1);
    let sge = Sge {
        addr: 0.into(),
        length: 8.into(),
        lkey: key.into(),
    };

    p.post_send(Which::A, &SendWr::send(14, vec![sge]).signaled());

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::LocProtErr,
        VendorErr::BadLkey,
    );
}

fn a_kernel_uc_qp_registers_invalidates_and_sends_with_inv(t: Topology) {
    let mut p = kernel_pair_with(t, QpCaps::of(QpType::Uc), ConnectOpts::default());
    let key = frmr_of(&mut p, Which::B, 2);
    let target = register(&mut p, Which::B, key, 6000, 0x40);
    let (a_pd, a_uctx, b_pd) = (p.a.pd, p.a.uctx, p.b.pd);
    let src = p.drv(Which::A).reg_mr(a_uctx, a_pd, 6000, ALL);
    let data = pattern(35, 6000);
    p.write(Which::A, &src, 0, &data);
    p.post_send(
        Which::A,
        &SendWr::write(15, vec![src.sge(0, 6000)], &target, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(Which::A), 15, WcOpcode::RdmaWrite);
    assert_same_bytes(&p.read(Which::B, &target, 0, 6000), &data, "UC WRITE");
    let dst = p.drv(Which::B).reg_mr(KERNEL_UCTX, b_pd, 16, ALL);
    p.post_recv(Which::B, &RecvWr::new(16, vec![dst.sge(0, 16)]));

    p.post_send(Which::A, &send_inv_wr(17, vec![src.sge(0, 16)], target.key));

    assert_cqe_ok(&p.send_cqe(Which::A), 17, WcOpcode::Send);
    let recv = p.recv_cqe(Which::B);
    assert_eq!(
        (recv.wc_flags, recv.imm_data),
        (u8::from(WcFlags::WithInv), target.key.to_le_bytes())
    );
    // Invalidated: registering again is allowed, and LOCAL_INV of the new key too.
    let again = register(&mut p, Which::B, target.key, 64, 0);
    p.post_send(Which::B, &local_inv_wr(18, again.key));
    assert_cqe_ok(&p.send_cqe(Which::B), 18, WcOpcode::LocalInv);
}

fn atomics_reach_a_registered_frmr(t: Topology) {
    let opts = ConnectOpts {
        access: ALL | REMOTE_ATOMIC,
        ..ConnectOpts::default()
    };
    let mut p = kernel_pair_with(t, QpCaps::default(), opts);
    let key = frmr_of(&mut p, Which::B, 1);
    let pd = p.b.pd;
    let fr = p
        .drv(Which::B)
        .fast_reg(key, pd, 64, 0, 12, ALL | REMOTE_ATOMIC);
    p.post_send_raw(Which::B, &reg_mr_wqe(19, &fr));
    assert_cqe_ok(&p.send_cqe(Which::B), 19, WcOpcode::RegMr);
    p.write(Which::B, &fr.mr, 16, &7u64.to_le_bytes());
    let a_pd = p.a.pd;
    let result = p.drv(Which::A).reg_mr(KERNEL_UCTX, a_pd, 8, ALL);

    p.post_send(
        Which::A,
        &SendWr::cmp_and_swp(20, result.sge(0, 8), &fr.mr, 16, 7, 99).signaled(),
    );

    assert_cqe_ok(&p.send_cqe(Which::A), 20, WcOpcode::CompSwap);
    assert_eq!(p.read(Which::A, &result, 0, 8), 7u64.to_le_bytes());
    assert_eq!(p.read(Which::B, &fr.mr, 16, 8), 99u64.to_le_bytes());
}

on_both_topologies!(
    a_kernel_uc_qp_registers_invalidates_and_sends_with_inv,
    atomics_reach_a_registered_frmr,
    remote_writes_and_reads_reach_a_registered_frmr_byte_for_byte,
    a_registered_frmr_is_an_lkey_for_sends_and_receives,
    local_inv_frees_the_frmr_and_its_key_stops_working,
    a_frmr_registers_again_after_local_inv_and_only_the_new_key_works,
    send_with_inv_invalidates_the_targets_frmr_and_reports_its_key,
    send_with_inv_of_a_key_the_target_cannot_invalidate_fails_on_both_sides,
    a_free_frmrs_key_is_no_lkey,
);

// ---------------------------------------------------------------- REG_MR work request errors

/// Posts a REG_MR WQE on side A's QP and returns its completion.
fn post_reg(p: &mut Pair, wqe: &[u8]) -> Cqe {
    p.post_send_raw(Which::A, wqe);
    p.send_cqe(Which::A)
}

fn fresh_reg(p: &mut Pair, max_pages: u32, len: u64) -> FastReg {
    let key = frmr_of(p, Which::A, max_pages);
    let pd = p.a.pd;
    p.drv(Which::A).fast_reg(key, pd, len, 0, 12, ALL)
}

#[test]
fn reg_mr_on_a_user_qp_is_a_bad_opcode() {
    let mut p = Pair::new(Topology::Loopback);
    let kernel_pd = p.drv(Which::A).alloc_pd(KERNEL_UCTX);
    let key = p.drv(Which::A).alloc_mr(kernel_pd, 1);
    let fr = p.drv(Which::A).fast_reg(key, kernel_pd, 64, 0, 12, ALL);

    let cqe = post_reg(&mut p, &reg_mr_wqe(1, &fr));

    assert_cqe_status(&cqe, WcStatus::LocQpOpErr, VendorErr::BadOpcode);
    assert_eq!(cqe.opcode, u8::from(WcOpcode::RegMr));
}

#[test]
fn reg_mr_of_a_valid_frmr_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let fr = fresh_reg(&mut p, 1, 64);
    assert_cqe_ok(&post_reg(&mut p, &reg_mr_wqe(1, &fr)), 1, WcOpcode::RegMr);
    let mut again = fr.clone();
    again.mr.key = with_variant(fr.mr.key, fr.mr.key as u8 ^ 0x40);

    let cqe = post_reg(&mut p, &reg_mr_wqe(2, &again));

    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::MkeyState);
    assert_eq!(p.qp_state(Which::A), QpState::Err);
}

#[test]
fn reg_mr_with_more_pages_than_max_pages_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let fr = fresh_reg(&mut p, 2, 3 * 4096);

    let cqe = post_reg(&mut p, &reg_mr_wqe(1, &fr));

    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::MkeyState);
}

#[test]
fn reg_mr_longer_than_its_pages_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let mut fr = fresh_reg(&mut p, 4, 4096);
    fr.mr.len = 4097;

    let cqe = post_reg(&mut p, &reg_mr_wqe(1, &fr));

    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::MkeyState);
}

#[test]
fn reg_mr_with_a_misaligned_page_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let fr = fresh_reg(&mut p, 1, 64);
    let drv = p.drv(Which::A);
    drv.mem.write(fr.list, &(fr.mr.pages[0] + 8).to_le_bytes());

    let cqe = post_reg(&mut p, &reg_mr_wqe(1, &fr));

    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::MkeyState);
}

#[test]
fn reg_mr_with_an_unreadable_page_list_fails_with_dma_fault() {
    let mut p = kernel_pair(Topology::Loopback);
    let mut fr = fresh_reg(&mut p, 1, 64);
    fr.list = 0x7_0000_0000;

    let cqe = post_reg(&mut p, &reg_mr_wqe(1, &fr));

    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::DmaFault);
}

#[test]
fn reg_mr_with_mw_bind_access_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let mut fr = fresh_reg(&mut p, 1, 64);
    fr.mr.access |= u32::from(Access::MwBind);

    let cqe = post_reg(&mut p, &reg_mr_wqe(1, &fr));

    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::MkeyState);
}

#[test]
fn reg_mr_of_another_pds_frmr_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let other_pd = p.drv(Which::A).alloc_pd(KERNEL_UCTX);
    let key = p.drv(Which::A).alloc_mr(other_pd, 1);
    let fr = p.drv(Which::A).fast_reg(key, other_pd, 64, 0, 12, ALL);

    let cqe = post_reg(&mut p, &reg_mr_wqe(1, &fr));

    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::MkeyState);
}

#[test]
fn reg_mr_of_a_plain_mr_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let pd = p.a.pd;
    let plain = p.drv(Which::A).reg_mr(KERNEL_UCTX, pd, 64, ALL);
    let fr = p.drv(Which::A).fast_reg(plain.key, pd, 64, 0, 12, ALL);

    let cqe = post_reg(&mut p, &reg_mr_wqe(1, &fr));

    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::MkeyState);
}

#[test]
fn reg_mr_with_a_nonzero_reserved_byte_is_a_bad_wqe() {
    let mut p = kernel_pair(Topology::Loopback);
    let fr = fresh_reg(&mut p, 1, 64);
    let mut wqe = reg_mr_wqe(1, &fr);
    wqe[SendWqeHeader::SIZE + RegMrSeg::RESERVED0_OFF] = 1;

    let cqe = post_reg(&mut p, &wqe);

    assert_cqe_status(&cqe, WcStatus::LocQpOpErr, VendorErr::BadWqe);
}

#[test]
fn a_zero_length_registration_is_valid_and_covers_nothing() {
    let mut p = kernel_pair(Topology::Loopback);
    let fr = fresh_reg(&mut p, 1, 0);
    assert_cqe_ok(&post_reg(&mut p, &reg_mr_wqe(1, &fr)), 1, WcOpcode::RegMr);
    let b_pd = p.b.pd;
    let src = p.drv(Which::B).reg_mr(KERNEL_UCTX, b_pd, 8, ALL);

    p.post_send(
        Which::B,
        &SendWr::write(2, vec![src.sge(0, 8)], &fr.mr, 0).signaled(),
    );

    assert_cqe_status(
        &p.send_cqe(Which::B),
        WcStatus::RemAccessErr,
        VendorErr::RemoteBounds,
    );
}

// ---------------------------------------------------------------- LOCAL_INV errors

#[test]
fn local_inv_of_a_free_frmr_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let key = frmr_of(&mut p, Which::A, 1);

    p.post_send(Which::A, &local_inv_wr(1, key));

    let cqe = p.send_cqe(Which::A);
    assert_cqe_status(&cqe, WcStatus::LocProtErr, VendorErr::MkeyState);
    assert_eq!(cqe.opcode, u8::from(WcOpcode::LocalInv));
}

#[test]
fn local_inv_of_a_stale_variant_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let key = frmr_of(&mut p, Which::A, 1);
    let mr = register(&mut p, Which::A, key, 64, 0);

    p.post_send(Which::A, &local_inv_wr(1, key));

    assert_ne!(key, mr.key);
    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::LocProtErr,
        VendorErr::MkeyState,
    );
}

#[test]
fn local_inv_of_a_plain_mr_fails_with_mkey_state() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = p.mr(Which::A, 64, ALL);

    p.post_send(Which::A, &local_inv_wr(1, mr.key));

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::LocProtErr,
        VendorErr::MkeyState,
    );
}

#[test]
fn local_inv_of_another_pds_frmr_fails_with_mkey_state() {
    let mut p = kernel_pair(Topology::Loopback);
    let key = frmr_of(&mut p, Which::B, 1);
    let mr = register(&mut p, Which::B, key, 64, 0);

    p.post_send(Which::A, &local_inv_wr(1, mr.key));

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::LocProtErr,
        VendorErr::MkeyState,
    );
}

// ---------------------------------------------------------------- ALLOC_MR and DEREG_MR

#[test]
fn alloc_mr_is_for_the_kernel_context_only() {
    let t = TestDevices::start(1);
    let mut d = t.driver(0);
    let uctx = d.alloc_uctx();
    let user_pd = d.alloc_pd(uctx);
    let kernel_pd = d.alloc_pd(KERNEL_UCTX);

    d.admin(&cmd_alloc_mr(user_pd, uctx, 1))
        .expect_err(AqStatus::Permission, CmdAllocMr::UCTX_OFF);
    d.admin(&cmd_alloc_mr(user_pd, KERNEL_UCTX, 1))
        .expect_err(AqStatus::Permission, CmdAllocMr::PDN_OFF);
    d.admin(&cmd_alloc_mr(kernel_pd + 50, KERNEL_UCTX, 1))
        .expect_err(AqStatus::BadHandle, CmdAllocMr::PDN_OFF);
    d.admin(&cmd_alloc_mr(kernel_pd, KERNEL_UCTX, 1)).ok();
}

#[test]
fn alloc_mr_takes_1_to_max_fast_reg_pages() {
    let t = TestDevices::start(1);
    let mut d = t.driver(0);
    let pd = d.alloc_pd(KERNEL_UCTX);

    for bad in [0, MAX_FAST_REG_PAGES + 1] {
        d.admin(&cmd_alloc_mr(pd, KERNEL_UCTX, bad))
            .expect_err(AqStatus::BadSize, CmdAllocMr::MAX_PAGES_OFF);
    }
    d.admin(&cmd_alloc_mr(pd, KERNEL_UCTX, MAX_FAST_REG_PAGES))
        .ok();
    let mut reserved = cmd_alloc_mr(pd, KERNEL_UCTX, 1);
    reserved.reserved0[3] = 1;
    d.admin(&reserved)
        .expect_err(AqStatus::BadField, CmdAllocMr::RESERVED0_OFF);
}

#[test]
fn frmrs_and_mrs_share_one_key_space() {
    let t = TestDevices::start(1);
    let mut d = t.driver(0);
    let pd = d.alloc_pd(KERNEL_UCTX);
    let frmr = d.alloc_mr(pd, 1);
    let mr = d.reg_mr(KERNEL_UCTX, pd, 64, ALL);

    assert_ne!(frmr >> 8, mr.key >> 8, "one table: distinct indices");
    assert_ne!(frmr, LOCAL_DMA_LKEY);
}

#[test]
fn dereg_mr_destroys_a_frmr_in_either_state_and_pd_stays_busy_until_then() {
    let mut p = kernel_pair(Topology::Loopback);
    let free = frmr_of(&mut p, Which::A, 1);
    let valid_key = frmr_of(&mut p, Which::A, 1);
    let valid = register(&mut p, Which::A, valid_key, 64, 0);
    let d = p.drv(Which::A);
    // A PD whose only users are FRMRs: no QP, so only the FRMRs keep it busy.
    let lone_pd = d.alloc_pd(KERNEL_UCTX);
    let lone = d.alloc_mr(lone_pd, 1);

    d.dealloc_pd(KERNEL_UCTX, lone_pd)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.dereg_key(KERNEL_UCTX, free).ok();
    d.dereg_key(KERNEL_UCTX, valid.key).ok();
    d.dereg_key(KERNEL_UCTX, lone).ok();
    d.dealloc_pd(KERNEL_UCTX, lone_pd).ok();
    d.dereg_key(KERNEL_UCTX, free)
        .expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}
