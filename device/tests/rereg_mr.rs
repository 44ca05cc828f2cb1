//! REREG_MR (SPEC "Memory keys"): a region's translation, PD and access change in place
//! under the same key; data then moves through the new translation byte-exact and never
//! through the old one, and remote access follows the new access and PD. Every refusal
//! (BAD_HANDLE for fast-registration MRs and windows, PERMISSION, BAD_FIELD for fields
//! the flags do not name, BUSY with a bound window, ...) leaves the region as it was.

mod harness;

use harness::*;
use vrnic_hw::*;

on_both_topologies!(
    a_new_translation_takes_remote_writes_and_the_old_pages_see_nothing,
    a_new_translation_serves_local_sges_and_reads,
    new_access_rights_grant_and_revoke_remote_access,
    a_new_pd_decides_which_qps_reach_the_region,
    all_three_changes_apply_at_once,
);

const LEN: u64 = 8192;

/// REREG_MR of side `w`'s `mr`; panics on failure.
fn rereg(p: &mut Pair, w: Which, mr: &Mr, flags: u32, pd: u32, access: u32, len: u64) -> Mr {
    let d = p.drv(w);
    let (cmd, new) = d.rereg_mr_cmd(mr, flags, pd, access, len);
    assert_eq!(d.admin(&cmd).ok()[0], mr.key, "the key stays");
    new
}

/// An RDMA WRITE of `data` from a into b's `dst` at `offset`; returns the send CQE.
fn write(p: &mut Pair, dst: &Mr, offset: u64, data: &[u8]) -> Cqe {
    let src = p.mr(Which::A, data.len() as u64, ACCESS_ALL);
    p.write(Which::A, &src, 0, data);
    let sge = src.sge(0, data.len() as u32);
    p.post_send(
        Which::A,
        &SendWr::write(1, vec![sge], dst, offset).signaled(),
    );
    p.send_cqe(Which::A)
}

fn a_new_translation_takes_remote_writes_and_the_old_pages_see_nothing(t: Topology) {
    let mut p = Pair::new(t);
    let old = p.mr(Which::B, LEN, ACCESS_ALL);
    p.drv(Which::B).mr_fill(&old, 0xee);
    let new = rereg(
        &mut p,
        Which::B,
        &old,
        rereg_flags::CHANGE_TRANSLATION,
        0,
        0,
        3 * 4096,
    );
    p.drv(Which::B).mr_fill(&new, 0x11);
    let data = pattern(1, 5000);

    assert_cqe_ok(&write(&mut p, &new, 100, &data), 1, WcOpcode::RdmaWrite);

    assert_same_bytes(&p.read(Which::B, &new, 100, 5000), &data, "new pages");
    assert_eq!(p.read(Which::B, &new, 99, 1), vec![0x11]);
    let untouched = p.read(Which::B, &old, 0, LEN);
    assert!(
        untouched.iter().all(|&b| b == 0xee),
        "the old pages were written"
    );
    // The old iova range is gone from the key.
    let c = write(&mut p, &old, 0, &data[..16]);
    assert_cqe_status(&c, WcStatus::RemAccessErr, VendorErr::RemoteBounds);
}

fn a_new_translation_serves_local_sges_and_reads(t: Topology) {
    let mut p = Pair::new(t);
    let remote = p.mr(Which::B, 4096, ACCESS_ALL);
    let data = pattern(2, 4096);
    p.write(Which::B, &remote, 0, &data);
    let old = p.mr(Which::A, 4096, ACCESS_ALL);
    p.drv(Which::A).mr_fill(&old, 0xee);
    let new = rereg(
        &mut p,
        Which::A,
        &old,
        rereg_flags::CHANGE_TRANSLATION,
        0,
        0,
        4096,
    );

    p.post_send(
        Which::A,
        &SendWr::read(2, vec![new.sge(0, 4096)], &remote, 0).signaled(),
    );

    assert_cqe_ok(&p.send_cqe(Which::A), 2, WcOpcode::RdmaRead);
    assert_same_bytes(
        &p.read(Which::A, &new, 0, 4096),
        &data,
        "read into the new pages",
    );
    assert!(p.read(Which::A, &old, 0, 4096).iter().all(|&b| b == 0xee));
}

fn new_access_rights_grant_and_revoke_remote_access(t: Topology) {
    let mut p = Pair::new(t);
    let local_only = p.mr(Which::B, 64, LOCAL_WRITE);
    let granted = rereg(
        &mut p,
        Which::B,
        &local_only,
        rereg_flags::CHANGE_ACCESS,
        0,
        ACCESS_ALL,
        0,
    );
    assert_cqe_ok(
        &write(&mut p, &granted, 0, &[7; 64]),
        1,
        WcOpcode::RdmaWrite,
    );
    assert_eq!(p.read(Which::B, &granted, 0, 64), vec![7; 64]);

    let revoked = rereg(
        &mut p,
        Which::B,
        &granted,
        rereg_flags::CHANGE_ACCESS,
        0,
        LOCAL_WRITE,
        0,
    );

    let c = write(&mut p, &revoked, 0, &[8; 64]);
    assert_cqe_status(&c, WcStatus::RemAccessErr, VendorErr::RemoteAccess);
    assert_eq!(p.read(Which::B, &revoked, 0, 64), vec![7; 64]);
}

fn a_new_pd_decides_which_qps_reach_the_region(t: Topology) {
    let mut p = Pair::new(t);
    let uctx = p.b.uctx;
    let other_pd = p.drv(Which::B).alloc_pd(uctx);
    let elsewhere = p.drv(Which::B).reg_mr(uctx, other_pd, 64, ACCESS_ALL);
    let b_pd = p.b.pd;
    let mr = rereg(
        &mut p,
        Which::B,
        &elsewhere,
        rereg_flags::CHANGE_PD,
        b_pd,
        0,
        0,
    );
    assert_cqe_ok(&write(&mut p, &mr, 0, &[3; 64]), 1, WcOpcode::RdmaWrite);

    let away = rereg(
        &mut p,
        Which::B,
        &mr,
        rereg_flags::CHANGE_PD,
        other_pd,
        0,
        0,
    );

    let c = write(&mut p, &away, 0, &[4; 64]);
    assert_cqe_status(&c, WcStatus::RemAccessErr, VendorErr::PdMismatch);
    assert_eq!(p.read(Which::B, &away, 0, 64), vec![3; 64]);
}

fn all_three_changes_apply_at_once(t: Topology) {
    let mut p = Pair::new(t);
    let uctx = p.b.uctx;
    let other_pd = p.drv(Which::B).alloc_pd(uctx);
    let mr = p.drv(Which::B).reg_mr(uctx, other_pd, 64, ACCESS_ALL);
    let (b_pd, all) = (p.b.pd, rereg_flags::ALL);
    let new = rereg(&mut p, Which::B, &mr, all, b_pd, ACCESS_ALL, 3000);
    let data = pattern(5, 3000);

    assert_cqe_ok(&write(&mut p, &new, 0, &data), 1, WcOpcode::RdmaWrite);
    assert_same_bytes(&p.read(Which::B, &new, 0, 3000), &data, "written");
}

#[test]
fn every_refusal_leaves_the_region_as_it_was() {
    let mut p = Pair::new(Topology::Loopback);
    let mr = p.mr(Which::B, 4096, ACCESS_ALL | MW_BIND);
    let (a_uctx, a_pd, b_uctx) = (p.a.uctx, p.a.pd, p.b.uctx);
    let d = p.drv(Which::B);
    let kernel_pd = d.alloc_pd(KERNEL_UCTX);
    let frmr = d.alloc_mr(kernel_pd, 4);
    let mw = d.alloc_mw(b_uctx, mr.pd, MwType::Type1);
    let (good, _) = d.rereg_mr_cmd(&mr, rereg_flags::ALL, mr.pd, ACCESS_ALL, 4096);
    let with = |f: &dyn Fn(&mut CmdReregMr)| {
        let mut c = good;
        f(&mut c);
        c
    };
    let only = |flags: u32, f: &dyn Fn(&mut CmdReregMr)| {
        let mut c = good;
        c.flags = flags.into();
        (c.pdn, c.access, c.iova, c.length) = (0.into(), 0.into(), 0.into(), 0.into());
        c.pages = PageList::default();
        f(&mut c);
        c
    };
    use rereg_flags::*;
    let cases = [
        (
            with(&|c| c.mkey = (mr.key ^ 1).into()),
            AqStatus::BadHandle,
            CmdReregMr::MKEY_OFF,
        ),
        (
            with(&|c| c.mkey = frmr.into()),
            AqStatus::BadHandle,
            CmdReregMr::MKEY_OFF,
        ),
        (
            with(&|c| c.mkey = mw.into()),
            AqStatus::BadHandle,
            CmdReregMr::MKEY_OFF,
        ),
        (
            with(&|c| c.uctx = a_uctx.into()),
            AqStatus::Permission,
            CmdReregMr::UCTX_OFF,
        ),
        (
            with(&|c| c.flags = 0.into()),
            AqStatus::BadField,
            CmdReregMr::FLAGS_OFF,
        ),
        (
            with(&|c| c.flags = 8.into()),
            AqStatus::BadField,
            CmdReregMr::FLAGS_OFF,
        ),
        (
            only(CHANGE_ACCESS, &|c| {
                c.access = ACCESS_ALL.into();
                c.pdn = 1.into();
            }),
            AqStatus::BadField,
            CmdReregMr::PDN_OFF,
        ),
        (
            only(CHANGE_PD, &|c| {
                c.pdn = mr.pd.into();
                c.access = 1.into();
            }),
            AqStatus::BadField,
            CmdReregMr::ACCESS_OFF,
        ),
        (
            only(CHANGE_PD, &|c| {
                c.pdn = mr.pd.into();
                c.iova = 1.into();
            }),
            AqStatus::BadField,
            CmdReregMr::IOVA_OFF,
        ),
        (
            only(CHANGE_PD, &|c| {
                c.pdn = mr.pd.into();
                c.length = 1.into();
            }),
            AqStatus::BadField,
            CmdReregMr::LENGTH_OFF,
        ),
        (
            only(CHANGE_PD, &|c| {
                c.pdn = mr.pd.into();
                c.pages.npages = 1.into();
            }),
            AqStatus::BadField,
            CmdReregMr::PAGES_OFF,
        ),
        (
            with(&|c| c.pdn = 999.into()),
            AqStatus::BadHandle,
            CmdReregMr::PDN_OFF,
        ),
        (
            with(&|c| c.pdn = a_pd.into()),
            AqStatus::Permission,
            CmdReregMr::PDN_OFF,
        ),
        (
            with(&|c| c.access = REMOTE_WRITE.into()),
            AqStatus::BadField,
            CmdReregMr::ACCESS_OFF,
        ),
        (
            with(&|c| c.access = 0x40.into()),
            AqStatus::BadField,
            CmdReregMr::ACCESS_OFF,
        ),
        (
            with(&|c| c.length = 0.into()),
            AqStatus::BadSize,
            CmdReregMr::LENGTH_OFF,
        ),
        (
            with(&|c| c.iova = u64::MAX.into()),
            AqStatus::BadField,
            CmdReregMr::IOVA_OFF,
        ),
        (
            with(&|c| c.pages.npages = 0.into()),
            AqStatus::BadSize,
            CmdReregMr::PAGES_OFF + PageList::NPAGES_OFF,
        ),
        (
            with(&|c| c.reserved0[3] = 1),
            AqStatus::BadField,
            CmdReregMr::RESERVED0_OFF,
        ),
    ];
    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }
    let window = bound_window(&mut p, mw, &mr);
    let d = p.drv(Which::B);
    d.admin(&good)
        .expect_err(AqStatus::Busy, CmdReregMr::MKEY_OFF);
    let _ = window;

    // The region is what REG_MR made it: same pages, PD and access.
    let data = pattern(9, 4096);
    assert_cqe_ok(&write(&mut p, &mr, 0, &data), 1, WcOpcode::RdmaWrite);
    assert_same_bytes(&p.read(Which::B, &mr, 0, 4096), &data, "the original pages");
}

const MW_BIND: u32 = 0x10;

/// Binds type 1 window `mw` of side B onto the first 256 bytes of `mr` (through B's QP).
fn bound_window(p: &mut Pair, mw: u32, mr: &Mr) -> Mr {
    let rkey = with_variant(mw, (mw as u8).wrapping_add(1));
    let access = REMOTE_WRITE | REMOTE_READ;
    p.post_send_raw(Which::B, &bind_mw_wqe(0xb1, rkey, mr, 0, 256, access));
    assert_cqe_ok(&p.send_cqe(Which::B), 0xb1, WcOpcode::BindMw);
    window_of(mr, rkey, 0, 256)
}

#[test]
fn once_rereg_mr_completes_no_transfer_in_flight_writes_the_old_pages() {
    const BIG: u64 = 4 << 20;
    let caps = QpCaps {
        sq_depth_log2: 6,
        ..QpCaps::default()
    };
    let mut p = Pair::with(Topology::TwoDevices, caps, ConnectOpts::default());
    // Two sources of different bytes, so that each WRITE changes what the last one left.
    let src = p.mr(Which::A, 2 * BIG, ACCESS_ALL);
    p.write(Which::A, &src, 0, &vec![0x5a; BIG as usize]);
    p.write(Which::A, &src, BIG, &vec![0xa5; BIG as usize]);
    let old = p.mr(Which::B, BIG, ACCESS_ALL);
    p.drv(Which::B).mr_fill(&old, 0xee);
    // Many multi-chunk WRITEs into the region, the last one signalled.
    let wrs: Vec<SendWr> = (0..16)
        .map(|i| SendWr::write(i, vec![src.sge((i % 2) * BIG, BIG as u32)], &old, 0))
        .collect();
    let last = wrs.len() as u64 - 1;
    let mut wrs = wrs;
    wrs[last as usize] = wrs[last as usize].clone().signaled();
    p.post_sends(Which::A, &wrs);

    // Meanwhile the region moves to new pages at the same iova.
    let d = p.drv(Which::B);
    let (mut cmd, new) = d.rereg_mr_cmd(&old, rereg_flags::CHANGE_TRANSLATION, 0, 0, BIG);
    cmd.iova = old.iova.into();
    d.mr_fill(&new, 0);
    d.admin(&cmd).ok();
    let after_completion = d.mr_read(&old, 0, BIG);

    assert_cqe_ok(&p.send_cqe(Which::A), last, WcOpcode::RdmaWrite);
    assert_same_bytes(
        &p.read(Which::B, &old, 0, BIG),
        &after_completion,
        "the old pages after REREG_MR completed",
    );
}
