//! UD and GSI datagrams (SPEC "Datagrams (UD and GSI)"): the GRH in front of every payload
//! (byte-exact for IPv4 and IPv6 GIDs in RoCE mode, and IB mode with and without a GRH),
//! the CQE's datagram fields, Q_Key checks, the MTU limit, drops, receive errors that leave
//! the QP usable, routing by GID, a MAD between two devices' GSI QPs, and the CREATE_QP /
//! MODIFY_QP rules of datagram QPs.

mod harness;

use harness::devices::{gid_of, ib, roce};
use harness::*;
use vrnic_hw::*;

/// Two datagram ends: `a` on driver `ia`, `b` on driver `ib` (the same for loopback).
struct Ends {
    d: Vec<FakeDriver>,
    ia: usize,
    ib: usize,
    a: UdEnd,
    b: UdEnd,
}

/// Datagram ends of `qp_type` on devices 0 and 1 of `devices` (or both on device 0).
fn ends(devices: &TestDevices, loopback: bool, qp_type: QpType) -> Ends {
    let n = if loopback { 1 } else { 2 };
    let mut d: Vec<FakeDriver> = (0..n).map(|i| devices.addressed_driver(i)).collect();
    let ib = n - 1;
    let a = d[0].ud_end(qp_type, TEST_QKEY);
    let b = d[ib].ud_end(qp_type, TEST_QKEY);
    Ends { d, ia: 0, ib, a, b }
}

impl Ends {
    /// Posts a receive of `len` bytes at `b` into a fresh MR filled with 0xEE.
    fn post_recv(&mut self, wr_id: u64, len: u64) -> Mr {
        let d = &mut self.d[self.ib];
        let mr = d.reg_mr(self.b.uctx, self.b.pd, len, ACCESS_ALL);
        d.mr_fill(&mr, 0xee);
        d.post_recv(
            &mut self.b.qp,
            &RecvWr::new(wr_id, vec![mr.sge(0, len as u32)]),
        );
        mr
    }

    /// Sends `payload` from `a` with `av`; returns the sender's CQE.
    fn send(&mut self, wr_id: u64, payload: &[u8], av: UdAv) -> Cqe {
        let d = &mut self.d[self.ia];
        let len = payload.len() as u64;
        let src = d.reg_mr(self.a.uctx, self.a.pd, len.max(1), ACCESS_ALL);
        d.mr_write(&src, 0, payload);
        let wr = SendWr::datagram(wr_id, vec![src.sge(0, len as u32)], av).signaled();
        d.post_send(&mut self.a.qp, &wr);
        d.wait_cqe(&mut self.a.send_cq)
    }

    fn recv_cqe(&mut self) -> Cqe {
        self.d[self.ib].wait_cqe(&mut self.b.recv_cq)
    }

    fn poll_recv(&mut self) -> Option<Cqe> {
        self.d[self.ib].poll_cq(&mut self.b.recv_cq)
    }

    fn read(&self, mr: &Mr, offset: u64, len: u64) -> Vec<u8> {
        self.d[self.ib].mr_read(mr, offset, len)
    }

    /// An AV from `a` to `b`'s QP (by GID in RoCE mode, LID in IB mode).
    fn av(&self, qkey: u32) -> UdAv {
        ud_av(self.d[self.ib].addr(), self.b.qp.qpn, qkey)
    }

    fn a_qp_state(&mut self) -> QpState {
        self.d[self.ia].qp_state(&self.a.qp)
    }

    fn b_qp_state(&mut self) -> QpState {
        self.d[self.ib].qp_state(&self.b.qp)
    }
}

/// The IPv4 header checksum, computed here independently of the device.
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(w[0]) << 8 | u32::from(w[1]))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends 100 bytes from a to b and returns (receive CQE, the 40 GRH bytes, payload).
fn exchange(e: &mut Ends, av: UdAv) -> (Cqe, Vec<u8>, Vec<u8>) {
    let payload = pattern(21, 100);
    let buf = e.post_recv(9, 256);
    assert_cqe_ok(&e.send(1, &payload, av), 1, WcOpcode::Send);
    let cqe = e.recv_cqe();
    assert_cqe_ok(&cqe, 9, WcOpcode::Recv);
    assert_eq!(cqe.byte_len.to_native(), 140, "40 GRH bytes + payload");
    let got = e.read(&buf, 40, 100);
    assert_same_bytes(&got, &payload, "payload after the GRH");
    assert_eq!(
        e.read(&buf, 140, 1),
        vec![0xee],
        "nothing beyond the payload"
    );
    (cqe, e.read(&buf, 0, 40), got)
}

// ---------------------------------------------------------------------- GRH placement

fn roce_ipv4_datagrams_carry_an_ipv4_header_at_offset_20(loopback: bool) {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, loopback, QpType::Ud);
    let av = e.av(TEST_QKEY);

    let (cqe, grh, _) = exchange(&mut e, av);

    let (src, dst) = (gid_of(0), gid_of(e.ib));
    let mut want = vec![0u8; 20];
    // Version/IHL, TOS = traffic class, total length 20+8+12+8+100+4, id 0, DF, TTL = hop
    // limit, UDP, checksum, addresses.
    want.extend_from_slice(&[0x45, 0x20, 0, 152, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    want.extend_from_slice(&src[12..]);
    want.extend_from_slice(&dst[12..]);
    let sum = ipv4_checksum(&want[20..]);
    want[30..32].copy_from_slice(&sum.to_be_bytes());
    assert_same_bytes(&grh, &want, "IPv4 GRH");
    assert_eq!(cqe.network_type, u8::from(NetworkType::Ipv4));
    assert_eq!(
        cqe.wc_flags & u8::from(WcFlags::Grh),
        u8::from(WcFlags::Grh)
    );
    assert_eq!(cqe.src_qp.to_native(), e.a.qp.qpn);
    assert_eq!(
        (cqe.slid.to_native(), cqe.sl, cqe.pkey_index.to_native()),
        (0, 3, 0)
    );
    assert_eq!(cqe.qpn.to_native(), e.b.qp.qpn);
}

fn roce_ipv6_datagrams_carry_an_ipv6_header(loopback: bool) {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, loopback, QpType::Ud);
    let (src, dst) = (ipv6_gid(0x100), ipv6_gid(0x200 + e.ib as u16));
    e.d[0].set_gid(1, Some(src)).ok();
    let ib = e.ib;
    e.d[ib].set_gid(2, Some(dst)).ok();
    let mut av = e.av(TEST_QKEY);
    av.sgid_index = 1;
    av.dgid = dst;

    let (cqe, grh, _) = exchange(&mut e, av);

    // Version 6, traffic class 0x20, flow label 0x12345; payload length 8+12+8+100+4;
    // next header UDP; hop limit 64; the GIDs.
    let mut want = vec![0x62, 0x01, 0x23, 0x45, 0, 132, 17, 64];
    want.extend_from_slice(&src);
    want.extend_from_slice(&dst);
    assert_same_bytes(&grh, &want, "IPv6 GRH");
    assert_eq!(cqe.network_type, u8::from(NetworkType::Ipv6));
    assert_eq!(
        cqe.wc_flags & u8::from(WcFlags::Grh),
        u8::from(WcFlags::Grh)
    );
}

mod two_devices {
    #[test]
    fn roce_ipv4_datagrams_carry_an_ipv4_header_at_offset_20() {
        super::roce_ipv4_datagrams_carry_an_ipv4_header_at_offset_20(false)
    }
    #[test]
    fn roce_ipv6_datagrams_carry_an_ipv6_header() {
        super::roce_ipv6_datagrams_carry_an_ipv6_header(false)
    }
}

mod loopback {
    #[test]
    fn roce_ipv4_datagrams_carry_an_ipv4_header_at_offset_20() {
        super::roce_ipv4_datagrams_carry_an_ipv4_header_at_offset_20(true)
    }
    #[test]
    fn roce_ipv6_datagrams_carry_an_ipv6_header() {
        super::roce_ipv6_datagrams_carry_an_ipv6_header(true)
    }
}

#[test]
fn ib_datagrams_with_a_grh_carry_an_ib_grh_and_without_leave_the_40_bytes_alone() {
    let devices = TestDevices::start(2);
    let mut e = ends(&devices, false, QpType::Ud);
    let sgid = e.d[0].query_port().gid;
    let dgid = e.d[1].query_port().gid;
    let mut with = e.av(TEST_QKEY);
    with.is_global = 1;
    with.dgid = dgid;
    with.hop_limit = 9;
    with.traffic_class = 0x10;
    with.flow_label = 0xabcde.into();

    let (cqe, grh, _) = exchange(&mut e, with);
    let plain = e.av(TEST_QKEY);
    let (cqe2, untouched, _) = exchange(&mut e, plain);

    // Next header 0x1B (BTH), payload length 12+8+100+4.
    let mut want = vec![0x61, 0x0a, 0xbc, 0xde, 0, 124, 0x1b, 9];
    want.extend_from_slice(&sgid);
    want.extend_from_slice(&dgid);
    assert_same_bytes(&grh, &want, "IB GRH");
    assert_eq!(
        cqe.wc_flags & u8::from(WcFlags::Grh),
        u8::from(WcFlags::Grh)
    );
    assert_eq!(cqe.network_type, u8::from(NetworkType::Ib));
    assert_eq!(untouched, vec![0xee; 40]);
    assert_eq!(cqe2.wc_flags & u8::from(WcFlags::Grh), 0);
    assert_eq!(
        (cqe2.slid.to_native(), cqe2.sl, cqe2.network_type),
        (devices.lid(0), 3, u8::from(NetworkType::Ib))
    );
}

#[test]
fn a_datagram_send_completes_only_after_its_receive_completed() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Ud);
    let av = e.av(TEST_QKEY);
    e.post_recv(1, 4096 + 40);

    let sent = e.send(1, &pattern(5, 4096), av);
    let received = e.poll_recv();

    assert_cqe_ok(&sent, 1, WcOpcode::Send);
    let received = received.expect("the receive CQE is written before the send's");
    assert_cqe_ok(&received, 1, WcOpcode::Recv);
}

#[test]
fn send_with_imm_and_solicited_reach_the_datagram_receiver() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Ud);
    let buf = e.post_recv(4, 64);
    let d = &mut e.d[0];
    let src = d.reg_mr(e.a.uctx, e.a.pd, 8, ACCESS_ALL);
    let av = ud_av(e.d[1].addr(), e.b.qp.qpn, TEST_QKEY);
    let mut wr = SendWr::datagram(2, vec![src.sge(0, 8)], av)
        .imm([1, 2, 3, 4])
        .solicited()
        .signaled();
    wr.opcode = WrOpcode::SendWithImm.into();
    e.d[0].post_send(&mut e.a.qp, &wr);
    assert_cqe_ok(&e.d[0].wait_cqe(&mut e.a.send_cq), 2, WcOpcode::Send);

    let cqe = e.recv_cqe();

    assert_cqe_ok(&cqe, 4, WcOpcode::Recv);
    assert_eq!(cqe.imm_data, [1, 2, 3, 4]);
    assert_ne!(cqe.wc_flags & u8::from(WcFlags::WithImm), 0);
    assert_ne!(u32::from(cqe.flags) & CQE_FLAG_SOLICITED, 0);
    // With ImmDt the IPv4 total length grows by 4: 20+8+12+8+4+8+4.
    assert_eq!(e.read(&buf, 22, 2), vec![0, 64]);
}

// ---------------------------------------------------------------------- Q_Key, MTU, drops

#[test]
fn a_datagram_with_the_wrong_qkey_is_dropped_and_the_sender_succeeds() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Ud);
    let buf = e.post_recv(1, 256);

    let wrong = e.av(TEST_QKEY + 1);
    assert_cqe_ok(&e.send(1, &[7; 16], wrong), 1, WcOpcode::Send);
    // Bit 31 of remote_qkey: the sender's own Q_Key (TEST_QKEY) is carried.
    let own = e.av(0x8000_0000);
    assert_cqe_ok(&e.send(2, &[8; 16], own), 2, WcOpcode::Send);

    let cqe = e.recv_cqe();
    assert_cqe_ok(&cqe, 1, WcOpcode::Recv);
    assert_eq!(cqe.byte_len.to_native(), 56);
    assert_eq!(e.read(&buf, 40, 16), vec![8; 16], "only the second arrived");
    assert_eq!(e.poll_recv(), None);
}

#[test]
fn a_datagram_larger_than_the_mtu_fails_the_sender_with_loc_len_err() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Ud);
    e.post_recv(1, 4096 + 40);
    let av = e.av(TEST_QKEY);

    let full = e.send(1, &pattern(1, 4096), av);
    let too_big = e.send(2, &pattern(2, 4097), av);

    assert_cqe_ok(&full, 1, WcOpcode::Send);
    assert_eq!(e.recv_cqe().byte_len.to_native(), 4096 + 40);
    assert_cqe_status(&too_big, WcStatus::LocLenErr, VendorErr::Length);
    assert_eq!(e.a_qp_state(), QpState::Err);
}

#[test]
fn datagrams_without_a_receive_wqe_or_to_no_qp_are_dropped_and_the_sender_succeeds() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Ud);
    let av = e.av(TEST_QKEY);
    let mut nobody = av;
    nobody.remote_qpn = (e.b.qp.qpn + 1).into();
    let mut nowhere = av;
    nowhere.dgid = ipv6_gid(0x77);

    let cqes = [
        e.send(1, &[1; 8], av),
        e.send(2, &[2; 8], nobody),
        e.send(3, &[3; 8], nowhere),
    ];
    e.post_recv(5, 64);
    let after = e.send(4, &[4; 8], av);

    for (i, cqe) in cqes.iter().enumerate() {
        assert_cqe_ok(cqe, i as u64 + 1, WcOpcode::Send);
    }
    assert_cqe_ok(&after, 4, WcOpcode::Send);
    assert_eq!(e.recv_cqe().wr_id.to_native(), 5);
    assert_eq!(e.poll_recv(), None, "the dropped ones left nothing");
}

#[test]
fn a_receive_too_short_for_grh_and_payload_fails_but_the_qp_stays_usable() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Ud);
    e.post_recv(1, 40 + 15);
    let buf = e.post_recv(2, 40 + 16);
    let av = e.av(TEST_QKEY);

    assert_cqe_ok(&e.send(1, &[9; 16], av), 1, WcOpcode::Send);
    let short = e.recv_cqe();
    assert_cqe_ok(&e.send(2, &[9; 16], av), 2, WcOpcode::Send);
    let fits = e.recv_cqe();

    assert_cqe_status(&short, WcStatus::LocLenErr, VendorErr::Length);
    assert_eq!(short.wr_id.to_native(), 1);
    assert_cqe_ok(&fits, 2, WcOpcode::Recv);
    assert_eq!(e.read(&buf, 40, 16), vec![9; 16]);
    assert_eq!(e.b_qp_state(), QpState::Rts);
}

#[test]
fn datagram_wqes_take_only_sends_and_in_roce_mode_only_a_grh() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Ud);
    let mut no_grh = e.av(TEST_QKEY);
    no_grh.is_global = 0;

    let cqe = e.send(1, &[1; 8], no_grh);
    let d = &mut e.d[0];
    d.set_qp_state(&mut e.a.qp, QpState::Reset).ok();
    d.ud_to_rts(&e.a.qp, TEST_QKEY);
    let mut write = SendWr::datagram(2, vec![], e.av(TEST_QKEY)).signaled();
    write.opcode = WrOpcode::RdmaWrite.into();
    e.d[0].post_send(&mut e.a.qp, &write);
    let bad_opcode = e.d[0].wait_cqe(&mut e.a.send_cq);

    assert_cqe_status(&cqe, WcStatus::LocQpOpErr, VendorErr::BadWqe);
    assert_cqe_status(&bad_opcode, WcStatus::LocQpOpErr, VendorErr::BadOpcode);
}

// ---------------------------------------------------------------------- routing by GID

#[test]
fn datagrams_route_by_gid_and_a_removed_gid_no_longer_routes() {
    let devices = TestDevices::start_roce(3);
    let mut e = ends(&devices, false, QpType::Ud);
    let _bystander = devices.addressed_driver(2);
    let av = e.av(TEST_QKEY);
    e.post_recv(1, 64);
    e.post_recv(2, 64);

    assert_cqe_ok(&e.send(1, &[1; 8], av), 1, WcOpcode::Send);
    let first = e.recv_cqe();
    e.d[1].set_gid(0, None).ok();
    assert_cqe_ok(&e.send(2, &[2; 8], av), 2, WcOpcode::Send);
    let after_removal = e.poll_recv();
    e.d[1].set_gid(4, Some(gid_of(1))).ok();
    assert_cqe_ok(&e.send(3, &[3; 8], av), 3, WcOpcode::Send);
    let after_readding = e.recv_cqe();

    assert_cqe_ok(&first, 1, WcOpcode::Recv);
    assert_eq!(after_removal, None, "the removed GID routes nowhere");
    assert_cqe_ok(&after_readding, 2, WcOpcode::Recv);
}

// ---------------------------------------------------------------------- GSI

#[test]
fn a_mad_travels_between_the_gsi_qps_of_two_devices() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Gsi);
    let buf = e.post_recv(7, 40 + 256);
    let mad = pattern(0x4d4144, 256);
    // To QPN 1 of the peer with the well-known Q_Key, as ib_mad sends.
    let av = ud_av(e.d[1].addr(), GSI_QPN, GSI_QKEY);

    let sent = e.send(1, &mad, av);
    let cqe = e.recv_cqe();

    assert_cqe_ok(&sent, 1, WcOpcode::Send);
    assert_cqe_ok(&cqe, 7, WcOpcode::Recv);
    assert_eq!(cqe.byte_len.to_native(), 40 + 256);
    assert_eq!(
        cqe.src_qp.to_native(),
        GSI_QPN,
        "the sender is known as QP1"
    );
    assert_eq!(cqe.qpn.to_native(), e.b.qp.qpn);
    assert_same_bytes(&e.read(&buf, 40, 256), &mad, "MAD");
}

#[test]
fn a_gsi_qp_is_reached_as_qpn_1_only_and_a_ud_qp_never_as_qpn_1() {
    let devices = TestDevices::start_roce(2);
    let mut e = ends(&devices, false, QpType::Ud);
    let mut gsi = e.d[1].ud_end(QpType::Gsi, GSI_QKEY);
    let gsi_buf = e.d[1].reg_mr(KERNEL_UCTX, gsi.pd, 64, ACCESS_ALL);
    e.d[1].post_recv(&mut gsi.qp, &RecvWr::new(1, vec![gsi_buf.sge(0, 64)]));
    e.post_recv(1, 64);
    // The UD QP owns GSI_QKEY (bit 31 set: only a QP whose own Q_Key it is sends it). A
    // datagram to the GSI QP's own QPN with it, one to QPN 1 with another Q_Key, then one
    // to QPN 1 with GSI_QKEY.
    e.d[0].set_qp_state(&mut e.a.qp, QpState::Reset).ok();
    e.d[0].ud_to_rts(&e.a.qp, GSI_QKEY);
    let own_key = 0x8000_0000;
    let mut by_qpn = e.av(own_key);
    by_qpn.remote_qpn = gsi.qp.qpn.into();
    let mut wrong_key = e.av(TEST_QKEY);
    wrong_key.remote_qpn = GSI_QPN.into();
    let mut right = e.av(own_key);
    right.remote_qpn = GSI_QPN.into();

    e.send(1, &[1; 8], by_qpn);
    e.send(2, &[2; 8], wrong_key);
    let before = e.d[1].poll_cq(&mut gsi.recv_cq);
    e.send(3, &[3; 8], right);
    let cqe = e.d[1].wait_cqe(&mut gsi.recv_cq);

    assert_eq!(before, None, "neither reached the GSI QP");
    assert_eq!(e.poll_recv(), None, "nor the UD QP");
    assert_cqe_ok(&cqe, 1, WcOpcode::Recv);
    assert_eq!(
        cqe.src_qp.to_native(),
        e.a.qp.qpn,
        "a UD sender keeps its QPN"
    );
    assert_eq!(e.d[1].mr_read(&gsi_buf, 40, 8), vec![3; 8]);
}

#[test]
fn create_qp_of_gsi_is_for_the_kernel_of_a_roce_device_once() {
    let devices = TestDevices::start_links(vec![roce(0), ib(1)]);
    let mut d = devices.driver(0);
    let mut on_ib = devices.driver(1);
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let cq = d.create_cq(uctx, 2);
    let caps = QpCaps::of(QpType::Gsi);
    let (user, _) = d.create_qp_cmd(uctx, pd, &cq, &cq, caps);
    let kpd = d.alloc_pd(KERNEL_UCTX);
    let kcq = d.create_cq(KERNEL_UCTX, 2);
    let (kernel, _) = d.create_qp_cmd(KERNEL_UCTX, kpd, &kcq, &kcq, caps);
    let ib_pd = on_ib.alloc_pd(KERNEL_UCTX);
    let ib_cq = on_ib.create_cq(KERNEL_UCTX, 2);
    let (ib_gsi, _) = on_ib.create_qp_cmd(KERNEL_UCTX, ib_pd, &ib_cq, &ib_cq, caps);

    let by_user = d.admin(&user);
    let first = d.admin(&kernel);
    let second = d.admin(&kernel);
    let ib_result = on_ib.admin(&ib_gsi);
    d.admin(&cmd_handle(
        AqOpcode::DestroyQp,
        first.results[0],
        KERNEL_UCTX,
    ))
    .ok();
    let again = d.admin(&kernel);

    by_user.expect_err(AqStatus::Permission, CmdCreateQp::UCTX_OFF);
    first.ok();
    second.expect_err(AqStatus::Busy, CmdCreateQp::QP_TYPE_OFF);
    ib_result.expect_err(AqStatus::NotSupported, CmdCreateQp::QP_TYPE_OFF);
    again.ok();
}

#[test]
fn ud_qps_need_room_for_the_address_vector_and_a_qkey_to_leave_reset() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let cq = d.create_cq(uctx, 2);
    let caps = QpCaps::of(QpType::Ud);
    let (mut small, _) = d.create_qp_cmd(uctx, pd, &cq, &cq, caps);
    small.sq_wqe_shift = 6;
    small.max_send_sge = 1;
    small.max_inline = 0.into();
    let qp = d.create_qp(uctx, pd, &cq, &cq, caps);
    use QpAttrMask::*;
    let init = QpAttr {
        qp_state: QpState::Init.into(),
        port_num: PORT_NUM as u8,
        ..Default::default()
    };

    let too_small = d.admin(&small);
    let no_qkey = d.modify_qp(&qp, mask(&[State, PkeyIndex, Port]), init);
    let with_av = d.modify_qp(&qp, mask(&[State, PkeyIndex, Port, Qkey, Av]), init);
    let with_qkey = d.modify_qp(&qp, mask(&[State, PkeyIndex, Port, Qkey]), init);

    too_small.expect_err(AqStatus::BadSize, CmdCreateQp::SQ_WQE_SHIFT_OFF);
    no_qkey.expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    with_av.expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    with_qkey.ok();
}
