//! The RoCEv2 wire path (issue 11): RC WRITE, SEND with immediate data and READ between
//! two "hosts" (two services, each with its own fabric and switch) whose devices' wire
//! ports are joined by a forwarder, as IBTA packets through the reliability engine;
//! byte-exact, clean and over a seeded lossy, duplicating, reordering link, where every
//! transfer still completes and verifies and the retransmissions are counted.

mod harness;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use harness::cable::{join, Impairment, LinkEnd};
use harness::devices::{gid_of, mac_of, roce};
use harness::pair::{new_side, transfer_and_verify, Ends, Side};
use harness::*;
use vrnic::datapath::Peers;
use vrnic::net::port::Ingress;
use vrnic::net::switch::Switch;
use vrnic_hw::*;

/// Two hosts, one RoCE device each, their wire ports joined; a connected RC QP on each.
struct Hosts {
    a: Side,
    b: Side,
    da: FakeDriver,
    db: FakeDriver,
    cable: [Arc<LinkEnd>; 2],
    switches: [Arc<Switch>; 2],
    hosts: [TestDevices; 2],
}

impl Hosts {
    fn new(impair: Impairment, opts: ConnectOpts) -> Hosts {
        Self::with(impair, opts, QpCaps::default())
    }

    fn with(impair: Impairment, opts: ConnectOpts, caps: QpCaps) -> Hosts {
        let hosts = [
            TestDevices::start_links(vec![roce(0)]),
            TestDevices::start_links(vec![roce(1)]),
        ];
        let switches = [Switch::new(), Switch::new()];
        for (h, s) in hosts.iter().zip(&switches) {
            h.fabric().attach_wire(s).expect("wire attached");
        }
        let cable = join(&switches[0], &switches[1], impair);
        let mut da = hosts[0].driver(0);
        da.roce_up(gid_of(0));
        let mut db = hosts[1].driver(0);
        db.roce_up(gid_of(1));
        let a = new_side(&mut da, 0, caps);
        let b = new_side(&mut db, 1, caps);
        da.connect_qp_to(&a.qp, db.addr(), b.qp.qpn, &opts);
        db.connect_qp_to(&b.qp, da.addr(), a.qp.qpn, &opts);
        Hosts {
            a,
            b,
            da,
            db,
            cable,
            switches,
            hosts,
        }
    }

    /// Frames host `i`'s device sent on its wire port, and (retransmitted, timeouts).
    fn wire_figures(&self, i: usize) -> (u64, (u64, u64)) {
        let fabric = self.hosts[i].fabric();
        let rnic = self.hosts[i].rnic(0);
        let wire = fabric.wire(&rnic).expect("a wire port");
        let sent = wire.port.counters.tx_frames.load(Relaxed);
        (sent, wire.retransmissions(&rnic))
    }

    fn lost(&self) -> u64 {
        self.cable
            .iter()
            .map(|c| c.state.lock().unwrap().lost)
            .sum()
    }

    /// A WRITE and a SEND with immediate data of `len` bytes from A to B, verified.
    fn write_and_send_imm(&mut self, len: u64, seed: u64) {
        let (a, b) = (&mut self.a, &mut self.b);
        let (da, db) = (&mut self.da, &mut self.db);
        let src = da.reg_mr(a.uctx, a.pd, len, ACCESS_ALL);
        let dst = db.reg_mr(b.uctx, b.pd, len, ACCESS_ALL);
        let data = pattern(seed, len as usize);
        da.mr_write(&src, 0, &data);
        let sge = src.sge(0, len as u32);
        da.post_send(&mut a.qp, &SendWr::write(1, vec![sge], &dst, 0).signaled());
        assert_cqe_ok(&da.wait_cqe(&mut a.send_cq), 1, WcOpcode::RdmaWrite);
        wait_for("the WRITE's bytes at B", || {
            (db.mr_read(&dst, 0, len) == data).then_some(())
        });
        db.mr_fill(&dst, 0);
        db.post_recv(&mut b.qp, &RecvWr::new(7, vec![dst.sge(0, len as u32)]));
        let imm = [1, 2, 3, 4];
        da.post_send(&mut a.qp, &SendWr::send_imm(2, vec![sge], imm).signaled());
        assert_cqe_ok(&da.wait_cqe(&mut a.send_cq), 2, WcOpcode::Send);
        let rcqe = db.wait_cqe(&mut b.recv_cq);
        assert_cqe_ok(&rcqe, 7, WcOpcode::Recv);
        assert_eq!(
            (rcqe.byte_len.to_native() as u64, rcqe.imm_data),
            (len, imm)
        );
        assert_same_bytes(&db.mr_read(&dst, 0, len), &data, "UC SEND over the wire");
    }

    /// A WRITE, a SEND with immediate data and a READ of `len` bytes from A to B, each
    /// verified byte for byte.
    fn write_send_imm_read(&mut self, len: u64, seed: u64) {
        let (a, b) = (&mut self.a, &mut self.b);
        let (da, db) = (&mut self.da, &mut self.db);
        let src = da.reg_mr(a.uctx, a.pd, len, ACCESS_ALL);
        let dst = db.reg_mr(b.uctx, b.pd, len, ACCESS_ALL);
        let data = pattern(seed, len as usize);
        da.mr_write(&src, 0, &data);
        let sge = src.sge(0, len as u32);

        da.post_send(&mut a.qp, &SendWr::write(1, vec![sge], &dst, 0).signaled());
        assert_cqe_ok(&da.wait_cqe(&mut a.send_cq), 1, WcOpcode::RdmaWrite);
        assert_same_bytes(&db.mr_read(&dst, 0, len), &data, "WRITE over the wire");

        db.mr_fill(&dst, 0);
        db.post_recv(&mut b.qp, &RecvWr::new(7, vec![dst.sge(0, len as u32)]));
        let imm = [0xde, 0xad, 0xbe, 0xef];
        da.post_send(&mut a.qp, &SendWr::send_imm(2, vec![sge], imm).signaled());
        assert_cqe_ok(&da.wait_cqe(&mut a.send_cq), 2, WcOpcode::Send);
        let rcqe = db.wait_cqe(&mut b.recv_cq);
        assert_cqe_ok(&rcqe, 7, WcOpcode::Recv);
        assert_eq!(rcqe.byte_len.to_native() as u64, len);
        assert_eq!(rcqe.imm_data, imm);
        assert_ne!(rcqe.wc_flags & u8::from(WcFlags::WithImm), 0);
        assert_same_bytes(&db.mr_read(&dst, 0, len), &data, "SEND over the wire");

        let back = pattern(seed ^ 0xff, len as usize);
        db.mr_write(&dst, 0, &back);
        da.mr_fill(&src, 0);
        da.post_send(&mut a.qp, &SendWr::read(3, vec![sge], &dst, 0).signaled());
        assert_cqe_ok(&da.wait_cqe(&mut a.send_cq), 3, WcOpcode::RdmaRead);
        assert_same_bytes(&da.mr_read(&src, 0, len), &back, "READ over the wire");
    }
}

#[test]
fn rc_write_send_with_imm_and_read_cross_the_wire_byte_exact() {
    let mut h = Hosts::new(Impairment::default(), ConnectOpts::default());
    h.write_send_imm_read(12_345, 1);
    h.write_send_imm_read(1, 2);
    h.write_send_imm_read(200_000, 3);
    let (sent_a, (retx, _)) = h.wire_figures(0);
    let (sent_b, _) = h.wire_figures(1);
    // 200000 bytes at MTU 4096 take 49 packets: WRITE and SEND from A, READ responses
    // from B.
    assert!(sent_a > 2 * 49, "A sent {sent_a} frames");
    assert!(sent_b > 49, "B sent {sent_b} frames");
    assert_eq!(retx, 0, "a clean link needs no retransmission");
    // Both ends still serve: the helper's WRITE and SEND.
    let mut ends = Ends::Two(&mut h.da, &mut h.db);
    transfer_and_verify(&mut ends, &mut h.a, &mut h.b, 4);
}

#[test]
fn over_a_lossy_duplicating_reordering_link_every_transfer_completes_and_verifies() {
    let impair = Impairment {
        seed: 0x5eed_0011,
        loss: 30,
        dup: 20,
        reorder: 30,
    };
    let opts = ConnectOpts {
        path_mtu: Mtu::Size1024,
        ..ConnectOpts::default()
    };
    let mut h = Hosts::new(impair, opts);
    for i in 0..6 {
        h.write_send_imm_read(20_000 + i * 3_001, 10 + i);
    }
    let lost = h.lost();
    let (_, (retx_a, timeouts_a)) = h.wire_figures(0);
    let (_, (retx_b, _)) = h.wire_figures(1);
    assert!(lost > 0, "the link lost nothing");
    assert!(
        retx_a + retx_b > 0,
        "no retransmission after {lost} lost frames"
    );
    eprintln!("lost {lost} frames; A retransmitted {retx_a} ({timeouts_a} timeouts), B {retx_b}");
}

#[test]
fn a_write_beyond_the_target_mr_is_nakked_remote_access_and_fails_both_qps() {
    let mut h = Hosts::new(Impairment::default(), ConnectOpts::default());
    let (a, b) = (&mut h.a, &mut h.b);
    let src = h.da.reg_mr(a.uctx, a.pd, 4096, ACCESS_ALL);
    let dst = h.db.reg_mr(b.uctx, b.pd, 4096, ACCESS_ALL);
    let wr = SendWr::write(1, vec![src.sge(0, 4096)], &dst, 1).signaled();
    h.da.post_send(&mut a.qp, &wr);
    let cqe = h.da.wait_cqe(&mut a.send_cq);
    assert_cqe_status(&cqe, WcStatus::RemAccessErr, VendorErr::RemoteAccess);
    wait_for("A's QP in ERR", || {
        (h.da.qp_state(&a.qp) == QpState::Err).then_some(())
    });
    wait_for("B's QP in ERR", || {
        (h.db.qp_state(&b.qp) == QpState::Err).then_some(())
    });
}

#[test]
fn uc_write_and_send_with_imm_cross_the_wire_and_uc_read_is_bad_opcode() {
    let caps = QpCaps::of(QpType::Uc);
    let mut h = Hosts::with(Impairment::default(), ConnectOpts::default(), caps);
    h.write_and_send_imm(10_000, 21);
    h.write_and_send_imm(3, 22);
    let a = &mut h.a;
    let local = h.da.reg_mr(a.uctx, a.pd, 64, ACCESS_ALL);
    let wr = SendWr::read(9, vec![local.sge(0, 64)], &local, 0).signaled();
    h.da.post_send(&mut a.qp, &wr);
    let cqe = h.da.wait_cqe(&mut a.send_cq);
    assert_cqe_status(&cqe, WcStatus::LocQpOpErr, VendorErr::BadOpcode);
}

#[test]
fn devices_of_one_process_keep_the_in_process_path_with_a_wire_attached() {
    let devices = TestDevices::start_roce(2);
    let fabric = devices.fabric();
    fabric.attach_wire(&Switch::new()).expect("wire attached");
    let rnics = [devices.rnic(0), devices.rnic(1)];
    let mut p = Pair::on(
        devices,
        Topology::TwoDevices,
        QpCaps::default(),
        ConnectOpts::default(),
    );
    let (mut a, mut b) = p.fresh();
    let mut ends = Ends::of(&mut p.drivers, 0, 1);
    transfer_and_verify(&mut ends, &mut a, &mut b, 31);
    for r in &rnics {
        let wire = fabric.wire(r).expect("a wire port");
        assert_eq!(wire.port.counters.tx_frames.load(Relaxed), 0);
    }
}

/// A RoCEv2 SEND Only frame from B's GID to A's MAC and GID, for QP `qpn`.
fn stray_frame(qpn: u32) -> Vec<u8> {
    use vrnic::wire::bth::{Bth, Op, Opcode, DEFAULT_PKEY};
    use vrnic::wire::{Network, Packet, Transport};
    let ip = |i: usize| -> [u8; 4] { gid_of(i)[12..].try_into().unwrap() };
    let net = Network::V4 {
        src: ip(1),
        dst: ip(0),
        tos: 0,
        ttl: 64,
        ident: 0,
        dont_fragment: true,
    };
    let bth = Bth {
        opcode: Opcode::new(Transport::Rc, Op::SendOnly).unwrap(),
        solicited: false,
        migreq: true,
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn: qpn,
        ack_req: true,
        psn: 0,
    };
    let mut p = Packet::new(mac_of(1), mac_of(0), net, 0xc001, bth);
    p.payload = vec![0x5a; 64];
    p.encode().unwrap()
}

#[test]
fn frames_with_a_bad_icrc_for_an_unknown_qp_or_undecodable_are_dropped_and_counted() {
    let mut h = Hosts::new(Impairment::default(), ConnectOpts::default());
    let cable_port = h.switches[0].stats().len() - 1; // the cable's end on A's switch
    let unknown = stray_frame(0x7777);
    let mut bad_icrc = stray_frame(h.a.qp.qpn);
    let n = bad_icrc.len();
    bad_icrc[n - 20] ^= 0x40; // in the payload: only the ICRC covers it
    let mut garbage = stray_frame(h.a.qp.qpn);
    garbage.truncate(50); // still steered (UDP 4791), but cut in its BTH
    for f in [&unknown, &bad_icrc, &garbage] {
        h.switches[0].receive(cable_port, f);
    }
    let fabric = h.hosts[0].fabric();
    let wire = fabric.wire(&h.hosts[0].rnic(0)).expect("a wire port");
    let c = &wire.port.counters;
    wait_for("the three frames dropped", || {
        let got = (
            c.rx_unknown_qp.load(Relaxed),
            c.rx_bad_icrc.load(Relaxed),
            c.rx_bad.load(Relaxed),
        );
        (got == (1, 1, 1)).then_some(())
    });
    // A's QP is untouched and still carries data.
    h.write_send_imm_read(5_000, 41);
}
