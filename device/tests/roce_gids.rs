//! RoCE mode: SET_GID and its errors, routing by destination GID (a GID set routes to its
//! device, a removed one no longer does, a GID held twice routes to the first setter, a
//! reset clears the table), and RC between devices named by GID (SPEC "Link modes", "Send
//! queue processing (RoCE mode, RC)").

mod harness;

use harness::devices::{gid_of, ib, roce};
use harness::pair::{new_side, transfer_and_verify, Ends, Side};
use harness::*;
use vrnic_hw::*;

use Which::{A, B};

/// Short retries: a dropped request fails fast with RETRY_EXC_ERR.
fn quick() -> ConnectOpts {
    ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    }
}

// ---------------------------------------------------------------------- SET_GID

#[test]
fn set_gid_checks_context_port_index_type_valid_gid_and_reserved_fields() {
    let devices = TestDevices::start_roce(1);
    let mut d = devices.driver(0);
    let uctx = d.alloc_uctx();
    let good = cmd_set_gid(3, Some(gid_of(0)));
    let with = |f: &dyn Fn(&mut CmdSetGid)| {
        let mut c = good;
        f(&mut c);
        c
    };
    let cases: Vec<(CmdSetGid, AqStatus, usize)> = vec![
        (
            with(&|c| c.uctx = uctx.into()),
            AqStatus::Permission,
            CmdSetGid::UCTX_OFF,
        ),
        (
            with(&|c| c.port = 2),
            AqStatus::BadField,
            CmdSetGid::PORT_OFF,
        ),
        (
            with(&|c| c.index = GID_TABLE_LEN as u8),
            AqStatus::BadField,
            CmdSetGid::INDEX_OFF,
        ),
        (
            with(&|c| c.gid_type = GidType::RoceV1.into()),
            AqStatus::BadField,
            CmdSetGid::GID_TYPE_OFF,
        ),
        (
            with(&|c| c.gid_type = GidType::Ib.into()),
            AqStatus::BadField,
            CmdSetGid::GID_TYPE_OFF,
        ),
        (
            with(&|c| c.valid = 2),
            AqStatus::BadField,
            CmdSetGid::VALID_OFF,
        ),
        (
            with(&|c| c.gid = [0; 16]),
            AqStatus::BadField,
            CmdSetGid::GID_OFF,
        ),
        (
            with(&|c| c.reserved0[95] = 1),
            AqStatus::BadField,
            CmdSetGid::RESERVED0_OFF,
        ),
        // Clearing names no type and no GID.
        (
            with(&|c| c.valid = 0),
            AqStatus::BadField,
            CmdSetGid::GID_TYPE_OFF,
        ),
        (
            with(&|c| {
                c.valid = 0;
                c.gid_type = 0
            }),
            AqStatus::BadField,
            CmdSetGid::GID_OFF,
        ),
    ];

    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }
    d.admin(&good).ok();
    d.admin(&cmd_set_gid(3, None)).ok();
    d.admin(&cmd_set_gid(3, None)).ok();
}

#[test]
fn set_gid_on_an_ib_device_is_not_supported() {
    let devices = TestDevices::start_links(vec![ib(0)]);
    let mut d = devices.driver(0);

    d.set_gid(0, Some(gid_of(0)))
        .expect_general_err(AqStatus::NotSupported);
}

// ---------------------------------------------------------------------- MODIFY_QP

#[test]
fn rtr_in_roce_mode_needs_a_grh_with_a_set_source_gid() {
    let devices = TestDevices::start_roce(1);
    let mut d = devices.addressed_driver(0);
    let side = new_side(&mut d, 0, QpCaps::default());
    let o = ConnectOpts::default();
    d.qp_to_init(&side.qp, ACCESS_ALL).ok();
    let (m, good, dmac) = FakeDriver::rtr_attr_to(d.addr(), 0x1234, &o);
    let attr_at = |off: usize| CmdModifyQp::ATTR_OFF + off;

    let no_grh = d.modify_qp(
        &side.qp,
        m,
        QpAttr {
            is_global: 0,
            ..good
        },
    );
    let unset = d.modify_qp(
        &side.qp,
        m,
        QpAttr {
            sgid_index: 1,
            ..good
        },
    );
    let outside = d.modify_qp(
        &side.qp,
        m,
        QpAttr {
            sgid_index: 200,
            ..good
        },
    );
    let ok = d.modify_qp_dmac(&side.qp, m, good, dmac);

    no_grh.expect_err(AqStatus::BadField, attr_at(QpAttr::IS_GLOBAL_OFF));
    unset.expect_err(AqStatus::BadField, attr_at(QpAttr::SGID_INDEX_OFF));
    outside.expect_err(AqStatus::BadField, attr_at(QpAttr::SGID_INDEX_OFF));
    ok.ok();
    assert_eq!(d.query_qp(&side.qp).dgid, good.dgid);
}

#[test]
fn a_dmac_without_a_roce_address_vector_is_bad_field() {
    let devices = TestDevices::start_links(vec![ib(0)]);
    let mut d = devices.driver(0);
    let side = new_side(&mut d, 0, QpCaps::default());
    d.qp_to_init(&side.qp, ACCESS_ALL).ok();
    let (m, attr) = FakeDriver::rtr_attr(d.lid, 0x1234, &ConnectOpts::default());

    let r = d.modify_qp_dmac(&side.qp, m, attr, [2, 0, 0, 0, 0, 1]);

    r.expect_err(AqStatus::BadField, CmdModifyQp::DMAC_OFF);
}

// ---------------------------------------------------------------------- RC by GID

fn rc_between_roce_devices_moves_verified_data(t: Topology) {
    let mut p = Pair::roce(t);

    p.assert_still_serving();
}

on_both_topologies!(rc_between_roce_devices_moves_verified_data);

#[test]
fn ib_and_roce_devices_of_one_fabric_each_keep_their_own_addressing() {
    let devices = TestDevices::start_links(vec![ib(0), roce(1), ib(2), roce(3)]);
    let mut d: Vec<FakeDriver> = (0..4).map(|i| devices.addressed_driver(i)).collect();

    for (i, j) in [(0, 2), (1, 3)] {
        let mut a = new_side(&mut d[i], i, QpCaps::default());
        let mut b = new_side(&mut d[j], j, QpCaps::default());
        let (a_addr, b_addr) = (d[i].addr(), d[j].addr());
        d[i].connect_qp_to(&a.qp, b_addr, b.qp.qpn, &ConnectOpts::default());
        d[j].connect_qp_to(&b.qp, a_addr, a.qp.qpn, &ConnectOpts::default());
        transfer_and_verify(&mut Ends::of(&mut d, i, j), &mut a, &mut b, 7);
    }
}

/// An 8-byte WRITE from A to B that B never sees: A retries and fails.
fn expect_write_unreachable(p: &mut Pair) {
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    assert_cqe_status(
        &p.send_cqe(A),
        WcStatus::RetryExcErr,
        VendorErr::Unreachable,
    );
}

#[test]
fn a_removed_gid_no_longer_routes_and_a_gid_set_again_does() {
    let devices = TestDevices::start_roce(2);
    let mut p = Pair::on(devices, Topology::TwoDevices, QpCaps::default(), quick());
    p.drv(B).set_gid(0, None).ok();

    expect_write_unreachable(&mut p);

    p.drv(B).set_gid(0, Some(gid_of(1))).ok();
    p.assert_still_serving();
}

#[test]
fn the_target_accepts_only_the_source_gid_its_qp_is_connected_to() {
    let devices = TestDevices::start_roce(2);
    let mut p = Pair::on(devices, Topology::TwoDevices, QpCaps::default(), quick());
    // A also holds a second GID and sends from it: B's QP names A's first GID.
    let second = ipv6_gid(0xa);
    p.drv(A).set_gid(1, Some(second)).ok();
    let b_addr = p.addr(B);
    let PeerAddr::Gid { dgid, dmac, .. } = b_addr else {
        panic!("RoCE")
    };
    let b_qpn = p.qpn(B);
    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    let from_second = PeerAddr::Gid {
        dgid,
        sgid_index: 1,
        dmac,
    };
    drv.connect_qp_to(&side.qp, from_second, b_qpn, &quick());

    expect_write_unreachable(&mut p);
}

#[test]
fn a_gid_held_by_two_devices_routes_to_the_first_setter_then_to_the_other() {
    let devices = TestDevices::start_roce(3);
    let mut d: Vec<FakeDriver> = (0..3).map(|i| devices.addressed_driver(i)).collect();
    let shared = ipv6_gid(0x5);
    d[1].set_gid(1, Some(shared)).ok();
    d[2].set_gid(1, Some(shared)).ok();
    // The same QPN, rkey and address on devices 1 and 2 (both fresh): only the routing
    // decides whose memory a WRITE from device 0 lands in.
    let a = new_side(&mut d[0], 0, QpCaps::default());
    let mut sides = Vec::new();
    let mut mrs = Vec::new();
    for i in [1, 2] {
        let s = new_side(&mut d[i], i, QpCaps::default());
        let mr = d[i].reg_mr(s.uctx, s.pd, 64, ACCESS_ALL);
        let a_addr = d[0].addr();
        // Device 2 gets the second WRITE: it expects the PSN after the first.
        let o = ConnectOpts {
            rq_psn: ConnectOpts::default().sq_psn + (i as u32 - 1),
            ..ConnectOpts::default()
        };
        d[i].connect_qp_to(&s.qp, a_addr, a.qp.qpn, &o);
        sides.push(s);
        mrs.push(mr);
    }
    assert_eq!(sides[0].qp.qpn, sides[1].qp.qpn);
    assert_eq!((mrs[0].key, mrs[0].iova), (mrs[1].key, mrs[1].iova));
    let mut a = a;
    let to_shared = PeerAddr::Gid {
        dgid: shared,
        sgid_index: 0,
        dmac: [2, 0, 0, 0, 0, 9],
    };
    d[0].connect_qp_to(&a.qp, to_shared, sides[0].qp.qpn, &ConnectOpts::default());
    let src = d[0].reg_mr(a.uctx, a.pd, 64, ACCESS_ALL);
    let data = pattern(3, 64);
    d[0].mr_write(&src, 0, &data);
    let write = |d: &mut [FakeDriver], a: &mut Side, id: u64| {
        let wr = SendWr::write(id, vec![src.sge(0, 64)], &mrs[0], 0).signaled();
        d[0].post_send(&mut a.qp, &wr);
        assert_cqe_ok(&d[0].wait_cqe(&mut a.send_cq), id, WcOpcode::RdmaWrite);
    };

    write(&mut d, &mut a, 1);
    let first = (d[1].mr_read(&mrs[0], 0, 64), d[2].mr_read(&mrs[1], 0, 64));
    d[1].set_gid(1, None).ok();
    write(&mut d, &mut a, 2);
    let second = d[2].mr_read(&mrs[1], 0, 64);

    assert_same_bytes(&first.0, &data, "device 1 set the GID first");
    assert_eq!(
        first.1,
        vec![0; 64],
        "device 2 got nothing while device 1 held it"
    );
    assert_same_bytes(&second, &data, "device 2 holds it once device 1 let go");
}

#[test]
fn a_device_reset_clears_its_gid_table_and_its_routes() {
    let devices = TestDevices::start_roce(2);
    let mut d: Vec<FakeDriver> = (0..2).map(|i| devices.addressed_driver(i)).collect();
    let b_addr = d[1].addr();
    d[1].reset_device();
    d[1].bring_up();
    let side = new_side(&mut d[1], 1, QpCaps::default());
    d[1].qp_to_init(&side.qp, ACCESS_ALL).ok();
    let (m, attr, dmac) = FakeDriver::rtr_attr_to(b_addr, 0x1234, &ConnectOpts::default());
    let mut a = new_side(&mut d[0], 0, QpCaps::default());
    d[0].connect_qp_to(&a.qp, b_addr, side.qp.qpn, &quick());
    let src = d[0].reg_mr(a.uctx, a.pd, 8, ACCESS_ALL);

    let rtr = d[1].modify_qp_dmac(&side.qp, m, attr, dmac);
    d[0].post_send(&mut a.qp, &SendWr::send(1, vec![src.sge(0, 8)]).signaled());
    let cqe = d[0].wait_cqe(&mut a.send_cq);

    rtr.expect_err(
        AqStatus::BadField,
        CmdModifyQp::ATTR_OFF + QpAttr::SGID_INDEX_OFF,
    );
    assert_cqe_status(&cqe, WcStatus::RetryExcErr, VendorErr::Unreachable);
}
