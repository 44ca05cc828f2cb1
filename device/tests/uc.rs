//! Unreliable connected QPs (SPEC "Unreliable connected (UC)"): SEND, SEND_WITH_IMM, RDMA
//! WRITE and WRITE_WITH_IMM arrive byte for byte; the requester completes with SUCCESS once
//! its data has left, whatever the target does with it; the target silently drops what it
//! cannot accept and stays in its state; a receive too short completes in error at the
//! target only; READ and atomics are BAD_OPCODE; UC's own QP transitions. Between two
//! devices and on one (loopback).

mod harness;

use std::time::Duration;

use harness::*;
use vrnic_hw::*;
use Which::{A, B};

on_both_topologies!(
    send_and_send_with_imm_arrive_byte_for_byte,
    rdma_write_and_write_with_imm_land_byte_for_byte,
    send_without_a_receive_completes_at_the_sender_and_is_dropped_at_the_target,
    write_with_a_bad_rkey_completes_at_the_sender_and_leaves_the_target_untouched,
    write_to_a_qp_without_remote_write_is_dropped,
    send_longer_than_the_receive_fails_only_the_receive_and_the_qp_stays_usable,
    a_message_dropped_part_way_does_not_desynchronize_the_next,
    send_to_a_destroyed_qp_completes_without_retry,
    rdma_read_and_atomics_fail_with_bad_opcode,
    uc_does_not_reach_an_rc_qp,
);

const MIB: u64 = 1 << 20;

fn uc_pair(t: Topology) -> Pair {
    Pair::with(t, QpCaps::of(QpType::Uc), ConnectOpts::default())
}

/// Nothing arrives at B within a short while (a drop makes no completion to wait for).
fn assert_nothing_received(p: &mut Pair) {
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(p.poll_recv_cq(B), None, "no receive completed");
}

/// B stayed in RTS and posted no async event (beyond COMM_EST, which RTS QPs never get).
fn assert_b_unharmed(p: &mut Pair) {
    assert_eq!(p.qp_state(B), QpState::Rts);
    assert_eq!(p.drv(B).poll_async_event().map(|e| e.event_type), None);
}

/// A verified SEND from A to B: the pair still works.
fn assert_send_arrives(p: &mut Pair, wr_id: u64) {
    let src = p.mr(A, 300, ACCESS_ALL);
    let dst = p.mr(B, 300, ACCESS_ALL);
    let data = pattern(wr_id, 300);
    p.write(A, &src, 0, &data);
    p.post_recv(B, &RecvWr::new(wr_id, vec![dst.sge(0, 300)]));
    p.post_send(A, &SendWr::send(wr_id, vec![src.sge(0, 300)]).signaled());
    assert_cqe_ok(&p.send_cqe(A), wr_id, WcOpcode::Send);
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, wr_id, WcOpcode::Recv);
    assert_eq!(r.byte_len.to_native(), 300);
    assert_same_bytes(&p.read(B, &dst, 0, 300), &data, "received data");
}

fn send_and_send_with_imm_arrive_byte_for_byte(t: Topology) {
    let mut p = uc_pair(t);
    let len = 3 * MIB + 17;
    let src = p.mr(A, len, ACCESS_ALL);
    let dst = p.mr(B, len, ACCESS_ALL);
    let data = pattern(1, len as usize);
    p.write(A, &src, 0, &data);

    p.post_recvs(
        B,
        &[
            RecvWr::new(0xb1, vec![dst.sge(0, len as u32)]),
            RecvWr::new(0xb2, vec![dst.sge(0, 64)]),
        ],
    );
    p.post_sends(
        A,
        &[
            SendWr::send(0xa1, vec![src.sge(0, len as u32)]).signaled(),
            SendWr::send_imm(0xa2, vec![src.sge(0, 64)], [1, 2, 3, 4]).signaled(),
        ],
    );

    let s = p.send_cqes(A, 2);
    assert_cqe_ok(&s[0], 0xa1, WcOpcode::Send);
    assert_cqe_ok(&s[1], 0xa2, WcOpcode::Send);
    assert_eq!(
        (
            s[0].byte_len.to_native(),
            s[0].wqe_index.to_native(),
            s[0].qpn.to_native()
        ),
        (len as u32, 0, p.qpn(A))
    );
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 0xb1, WcOpcode::Recv);
    assert_eq!(
        (
            r.byte_len.to_native(),
            r.wqe_index.to_native(),
            r.qpn.to_native(),
            r.src_qp.to_native()
        ),
        (len as u32, 0, p.qpn(B), p.qpn(A))
    );
    assert_same_bytes(&p.read(B, &dst, 0, len), &data, "the 3 MiB SEND");
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 0xb2, WcOpcode::Recv);
    assert_eq!(
        (
            r.imm_data,
            r.wc_flags,
            r.byte_len.to_native(),
            r.wqe_index.to_native()
        ),
        ([1, 2, 3, 4], u8::from(WcFlags::WithImm), 64, 1)
    );
}

fn rdma_write_and_write_with_imm_land_byte_for_byte(t: Topology) {
    let mut p = uc_pair(t);
    let src = p.mr(A, 5000, ACCESS_ALL);
    let dst = p.mr(B, 6000, ACCESS_ALL);
    let data = pattern(2, 5000);
    p.write(A, &src, 0, &data);

    p.post_recv(B, &RecvWr::new(0xb0, vec![]));
    p.post_sends(
        A,
        &[
            SendWr::write(1, vec![src.sge(0, 5000)], &dst, 1000).signaled(),
            SendWr::write_imm(2, vec![src.sge(0, 10)], &dst, 0, [5, 6, 7, 8]).signaled(),
        ],
    );

    let s = p.send_cqes(A, 2);
    assert_cqe_ok(&s[0], 1, WcOpcode::RdmaWrite);
    assert_cqe_ok(&s[1], 2, WcOpcode::RdmaWrite);
    assert_eq!(s[0].byte_len.to_native(), 5000);
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 0xb0, WcOpcode::RecvRdmaWithImm);
    assert_eq!((r.imm_data, r.byte_len.to_native()), ([5, 6, 7, 8], 10));
    assert_same_bytes(&p.read(B, &dst, 1000, 5000), &data, "written data");
    assert_same_bytes(&p.read(B, &dst, 0, 10), &data[..10], "written with imm");
    assert!(
        p.read(B, &dst, 10, 990).iter().all(|b| *b == 0),
        "untouched between"
    );
}

fn send_without_a_receive_completes_at_the_sender_and_is_dropped_at_the_target(t: Topology) {
    let mut p = uc_pair(t);
    let src = p.mr(A, 64, ACCESS_ALL);

    p.post_sends(
        A,
        &[
            SendWr::send(1, vec![src.sge(0, 64)]).signaled(),
            SendWr::write_imm(2, vec![], &src, 0, [0; 4]).signaled(),
        ],
    );

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::Send);
    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::RdmaWrite);
    assert_nothing_received(&mut p);
    assert_b_unharmed(&mut p);
    assert_send_arrives(&mut p, 3);
}

fn write_with_a_bad_rkey_completes_at_the_sender_and_leaves_the_target_untouched(t: Topology) {
    let mut p = uc_pair(t);
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64, ACCESS_ALL);
    p.write(A, &src, 0, &[0x5a; 64]);

    p.post_sends(
        A,
        &[
            SendWr::write(1, vec![src.sge(0, 64)], &dst, 0)
                .remote(dst.addr(0), dst.key ^ 0x80)
                .signaled(),
            SendWr::write(2, vec![src.sge(0, 64)], &dst, 32).signaled(),
        ],
    );

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::RdmaWrite);
    assert!(
        p.read(B, &dst, 0, 64).iter().all(|b| *b == 0),
        "nothing written"
    );
    assert_b_unharmed(&mut p);
    assert_send_arrives(&mut p, 3);
}

fn write_to_a_qp_without_remote_write_is_dropped(t: Topology) {
    let opts = ConnectOpts {
        access: LOCAL_WRITE,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::of(QpType::Uc), opts);
    let src = p.mr(A, 16, ACCESS_ALL);
    let dst = p.mr(B, 16, ACCESS_ALL);
    p.write(A, &src, 0, &[1; 16]);

    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 16)], &dst, 0).signaled(),
    );

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
    assert_eq!(p.read(B, &dst, 0, 16), vec![0; 16]);
    assert_b_unharmed(&mut p);
}

fn send_longer_than_the_receive_fails_only_the_receive_and_the_qp_stays_usable(t: Topology) {
    let mut p = uc_pair(t);
    let src = p.mr(A, 100, ACCESS_ALL);
    let dst = p.mr(B, 50, ACCESS_ALL);

    p.post_recv(B, &RecvWr::new(0xb1, vec![dst.sge(0, 50)]));
    p.post_send(A, &SendWr::send(1, vec![src.sge(0, 100)]).signaled());

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::Send);
    let r = p.recv_cqe(B);
    assert_cqe_status(&r, WcStatus::LocLenErr, VendorErr::Length);
    assert_eq!(
        (
            r.wr_id.to_native(),
            r.qpn.to_native(),
            r.wqe_index.to_native()
        ),
        (0xb1, p.qpn(B), 0)
    );
    assert_b_unharmed(&mut p);
    assert_send_arrives(&mut p, 2);
}

fn a_message_dropped_part_way_does_not_desynchronize_the_next(t: Topology) {
    let mut p = uc_pair(t);
    let len = 3 * MIB;
    let src = p.mr(A, len, ACCESS_ALL);

    // No receive: each of the 3 chunks is dropped; the PSNs move on at the sender only.
    p.post_send(A, &SendWr::send(1, vec![src.sge(0, len as u32)]).signaled());
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::Send);

    assert_nothing_received(&mut p);
    assert_send_arrives(&mut p, 2);
    assert_send_arrives(&mut p, 3);
}

fn send_to_a_destroyed_qp_completes_without_retry(t: Topology) {
    let mut p = uc_pair(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let (drv, side) = p.side(B);
    drv.destroy_qp(&side.qp).ok();

    p.post_send(A, &SendWr::send(1, vec![src.sge(0, 8)]).signaled());

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::Send);
    assert_eq!(p.qp_state(A), QpState::Rts);
}

fn rdma_read_and_atomics_fail_with_bad_opcode(t: Topology) {
    for opcode in [
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
    ] {
        let mut p = uc_pair(t);
        let local = p.mr(A, 8, ACCESS_ALL);
        let remote = p.mr(B, 8, ACCESS_ALL);
        let mut wr = SendWr::read(1, vec![local.sge(0, 8)], &remote, 0).signaled();
        wr.opcode = opcode.into();

        p.post_sends(A, &[wr, SendWr::send(2, vec![local.sge(0, 8)]).signaled()]);

        let c = p.send_cqe(A);
        assert_cqe_status(&c, WcStatus::LocQpOpErr, VendorErr::BadOpcode);
        assert_eq!((c.wr_id.to_native(), c.opcode), (1, wc_opcode_of(opcode)));
        assert_cqe_status(&p.send_cqe(A), WcStatus::WrFlushErr, VendorErr::Flush);
        assert_eq!(p.qp_state(A), QpState::Err);
        assert_b_unharmed(&mut p);
    }
}

fn wc_opcode_of(op: WrOpcode) -> u8 {
    match op {
        WrOpcode::RdmaRead => WcOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
        _ => WcOpcode::FetchAdd,
    }
    .into()
}

fn uc_does_not_reach_an_rc_qp(t: Topology) {
    // A is UC, B is RC, each connected to the other.
    let mut p = Pair::new(t);
    let caps = QpCaps::of(QpType::Uc);
    let (drv, side) = p.side(A);
    let uc = drv.create_qp(side.uctx, side.pd, &side.send_cq, &side.recv_cq, caps);
    let (b_addr, b_qpn) = (p.addr(B), p.qpn(B));
    p.drv(A)
        .connect_qp_to(&uc, b_addr, b_qpn, &ConnectOpts::default());
    let a_addr = p.addr(A);
    let (drv, side) = p.side(B);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    drv.connect_qp_to(&side.qp, a_addr, uc.qpn, &ConnectOpts::default());
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    p.post_recv(B, &RecvWr::new(9, vec![dst.sge(0, 8)]));
    let mut uc = uc;

    let (drv, side) = p.side(A);
    drv.post_send(&mut uc, &SendWr::send(1, vec![src.sge(0, 8)]).signaled());
    assert_cqe_ok(&drv.wait_cqe(&mut side.send_cq), 1, WcOpcode::Send);

    assert_nothing_received(&mut p);
    assert_b_unharmed(&mut p);
}

#[test]
fn uc_transitions_refuse_rc_only_attributes() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let cq = d.create_cq(uctx, 4);
    let qp = d.create_qp(uctx, pd, &cq, &cq, QpCaps::of(QpType::Uc));
    d.qp_to_init(&qp, ACCESS_ALL).ok();
    let o = ConnectOpts::default();
    let (rc_mask, attr) = FakeDriver::rtr_attr(1, 5, &o);
    use QpAttrMask::*;
    let rc_only = mask(&[MaxDestRdAtomic, MinRnrTimer]);

    d.modify_qp(&qp, rc_mask, attr)
        .expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    d.modify_qp(&qp, rc_mask & !rc_only, attr).ok();
    let (rts_mask, rts) = FakeDriver::rts_attr(&o);
    d.modify_qp(&qp, rts_mask, rts)
        .expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    d.modify_qp(&qp, mask(&[State, SqPsn]), rts).ok();

    assert_eq!(d.qp_state(&qp), QpState::Rts);
}
