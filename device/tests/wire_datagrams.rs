//! UD and GSI datagrams on the RoCEv2 wire (issue 11): between two "hosts" (two services,
//! each with its own fabric and switch) whose devices' wire ports are joined by a cable,
//! a datagram leaves as a UD SEND Only packet with its DETH and is delivered by the
//! receiver's datagram rules: the payload byte-exact behind the GRH area that the packet's
//! IPv4 (or IPv6) header fills, the sender's QPN from the DETH, immediate data and the solicited
//! bit, a MAD between the GSI QPs (QPN 1, as ib_cm's CM MADs travel), the drops of a
//! wrong Q_Key or a missing receive WQE counted at the receiver, and the packet as the
//! two devices' captures show it.

mod harness;

use harness::cable::{Impairment, WireHosts};
use harness::devices::gid_of;
use harness::*;
use vrnic_hw::*;

/// Two hosts, one RoCE device each, their wire ports joined; a datagram QP of the same
/// type on each.
struct Hosts {
    da: FakeDriver,
    db: FakeDriver,
    a: UdEnd,
    b: UdEnd,
    wire: WireHosts,
}

/// An IPv6 link-local GID (fe80::2:0:0:N), as a guest's default RoCE v2 GID looks.
fn gid6(n: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..2].copy_from_slice(&[0xfe, 0x80]);
    g[8] = 2;
    g[15] = n;
    g
}

impl Hosts {
    fn new(qp_type: QpType) -> Hosts {
        Self::with_gids(qp_type, [gid_of(0), gid_of(1)])
    }

    fn with_gids(qp_type: QpType, gids: [[u8; 16]; 2]) -> Hosts {
        let wire = WireHosts::start(Impairment::default());
        let mut da = wire.hosts[0].driver(0);
        da.roce_up(gids[0]);
        let mut db = wire.hosts[1].driver(0);
        db.roce_up(gids[1]);
        let qkey = match qp_type {
            QpType::Gsi => GSI_QKEY,
            _ => TEST_QKEY,
        };
        let a = da.ud_end(qp_type, qkey);
        let b = db.ud_end(qp_type, qkey);
        Hosts { da, db, a, b, wire }
    }

    /// Posts a receive of `len` bytes at B into a fresh MR filled with 0xEE.
    fn post_recv(&mut self, wr_id: u64, len: u64) -> Mr {
        let mr = self.db.reg_mr(self.b.uctx, self.b.pd, len, ACCESS_ALL);
        self.db.mr_fill(&mr, 0xee);
        let wr = RecvWr::new(wr_id, vec![mr.sge(0, len as u32)]);
        self.db.post_recv(&mut self.b.qp, &wr);
        mr
    }

    /// Sends `payload` from A as `wr` makes it (a datagram WR of `av`); the sender's CQE.
    fn send(&mut self, payload: &[u8], wr: impl FnOnce(Sge) -> SendWr) -> Cqe {
        let len = payload.len() as u64;
        let src = self
            .da
            .reg_mr(self.a.uctx, self.a.pd, len.max(1), ACCESS_ALL);
        self.da.mr_write(&src, 0, payload);
        let wr = wr(src.sge(0, len as u32)).signaled();
        self.da.post_send(&mut self.a.qp, &wr);
        self.da.wait_cqe(&mut self.a.send_cq)
    }

    /// A's AV to B's QP `qpn` with `qkey`.
    fn av(&self, qpn: u32, qkey: u32) -> UdAv {
        ud_av(self.db.addr(), qpn, qkey)
    }

    fn dropped_at_b(&mut self) -> u64 {
        self.db.counters(None)[Counter::DatagramsDropped as usize]
    }
}

#[test]
fn a_ud_datagram_crosses_the_wire_byte_exact_behind_the_ipv4_header_of_its_packet() {
    let mut h = Hosts::new(QpType::Ud);
    let payload = pattern(0x5eed, 1000);
    let buf = h.post_recv(9, 40 + 1024);
    let av = h.av(h.b.qp.qpn, TEST_QKEY);

    let sent = h.send(&payload, |sge| SendWr::datagram(1, vec![sge], av));
    let cqe = h.db.wait_cqe(&mut h.b.recv_cq);

    assert_cqe_ok(&sent, 1, WcOpcode::Send);
    assert_cqe_ok(&cqe, 9, WcOpcode::Recv);
    assert_eq!(cqe.byte_len.to_native(), 40 + 1000);
    assert_eq!(cqe.src_qp.to_native(), h.a.qp.qpn, "the DETH's source QPN");
    assert_eq!(cqe.network_type, NetworkType::Ipv4 as u8);
    assert_ne!(cqe.wc_flags & u8::from(WcFlags::Grh), 0);
    assert_same_bytes(&h.db.mr_read(&buf, 40, 1000), &payload, "UD payload");
    let ip = h.db.mr_read(&buf, 20, 20);
    assert_eq!(ip[0], 0x45, "an IPv4 header at offset 20");
    assert_eq!(ip[8], 64, "the AV's hop limit as TTL");
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(&ip[12..16], &[10, 0, 0, 1], "from A's address");
    assert_eq!(&ip[16..20], &[10, 0, 0, 2], "to B's address");
    let total = u16::from_be_bytes([ip[2], ip[3]]);
    assert_eq!(
        total,
        20 + 8 + 12 + 8 + 1000 + 4,
        "IP+UDP+BTH+DETH+payload+ICRC"
    );
    assert_eq!(h.db.mr_read(&buf, 1040, 1), vec![0xee], "nothing beyond");
}

#[test]
fn between_ipv6_gids_a_datagram_crosses_the_wire_behind_an_ipv6_header() {
    let mut h = Hosts::with_gids(QpType::Ud, [gid6(1), gid6(2)]);
    let buf = h.post_recv(4, 40 + 300);
    let av = h.av(h.b.qp.qpn, TEST_QKEY);
    let payload = pattern(66, 300);

    let sent = h.send(&payload, |sge| SendWr::datagram(1, vec![sge], av));
    let cqe = h.db.wait_cqe(&mut h.b.recv_cq);

    assert_cqe_ok(&sent, 1, WcOpcode::Send);
    assert_cqe_ok(&cqe, 4, WcOpcode::Recv);
    assert_eq!(cqe.network_type, NetworkType::Ipv6 as u8);
    let ip = h.db.mr_read(&buf, 0, 40);
    assert_eq!(ip[0] >> 4, 6, "an IPv6 header in the 40 bytes");
    // ud_av's traffic class 0x20 and flow label 0x12345 went on the wire and came back
    let word = u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]]);
    assert_eq!((word >> 20 & 0xff, word & 0xf_ffff), (0x20, 0x12345));
    assert_eq!((ip[6], ip[7]), (17, 64), "UDP, the AV's hop limit");
    assert_eq!(&ip[8..24], &gid6(1), "source GID");
    assert_eq!(&ip[24..40], &gid6(2), "destination GID");
    assert_same_bytes(&h.db.mr_read(&buf, 40, 300), &payload, "payload");
}

#[test]
fn immediate_data_and_the_solicited_bit_cross_the_wire_with_a_datagram() {
    let mut h = Hosts::new(QpType::Ud);
    h.post_recv(3, 40 + 64);
    let av = h.av(h.b.qp.qpn, TEST_QKEY);
    let imm = [9, 8, 7, 6];

    let sent = h.send(&[0x42; 64], |sge| {
        let mut wr = SendWr::datagram(2, vec![sge], av).imm(imm).solicited();
        wr.opcode = WrOpcode::SendWithImm.into();
        wr
    });
    let cqe = h.db.wait_cqe(&mut h.b.recv_cq);

    assert_cqe_ok(&sent, 2, WcOpcode::Send);
    assert_cqe_ok(&cqe, 3, WcOpcode::Recv);
    assert_eq!(cqe.imm_data, imm);
    assert_ne!(cqe.wc_flags & u8::from(WcFlags::WithImm), 0);
    assert_ne!(cqe.flags & CQE_FLAG_SOLICITED as u8, 0);
}

#[test]
fn a_mad_to_qpn_1_reaches_the_gsi_qp_of_the_other_host_as_from_qp_1() {
    let mut h = Hosts::new(QpType::Gsi);
    let buf = h.post_recv(7, 40 + 256);
    let mad = pattern(0x4d4144, 256);
    let av = h.av(GSI_QPN, GSI_QKEY);

    let sent = h.send(&mad, |sge| SendWr::datagram(1, vec![sge], av));
    let cqe = h.db.wait_cqe(&mut h.b.recv_cq);

    assert_cqe_ok(&sent, 1, WcOpcode::Send);
    assert_cqe_ok(&cqe, 7, WcOpcode::Recv);
    assert_eq!(cqe.qpn.to_native(), h.b.qp.qpn);
    assert_eq!(
        cqe.src_qp.to_native(),
        GSI_QPN,
        "the sender is known as QP1"
    );
    assert_same_bytes(&h.db.mr_read(&buf, 40, 256), &mad, "MAD");
}

#[test]
fn datagrams_with_a_wrong_qkey_or_no_receive_are_dropped_at_the_receiver_and_counted() {
    let mut h = Hosts::new(QpType::Ud);
    let av = h.av(h.b.qp.qpn, TEST_QKEY);
    let wrong = h.av(h.b.qp.qpn, TEST_QKEY ^ 1);
    let before = h.dropped_at_b();

    // No receive posted: dropped. Then a receive, and a datagram with the wrong Q_Key
    // (dropped), then the right one (taken).
    let first = h.send(&[1; 16], |sge| SendWr::datagram(1, vec![sge], av));
    wait_for("the first datagram dropped at B", || {
        (h.dropped_at_b() == before + 1).then_some(())
    });
    let buf = h.post_recv(5, 40 + 16);
    let second = h.send(&[2; 16], |sge| SendWr::datagram(2, vec![sge], wrong));
    wait_for("the second datagram dropped at B", || {
        (h.dropped_at_b() == before + 2).then_some(())
    });
    let third = h.send(&[3; 16], |sge| SendWr::datagram(3, vec![sge], av));
    let cqe = h.db.wait_cqe(&mut h.b.recv_cq);

    for (c, id) in [(&first, 1), (&second, 2), (&third, 3)] {
        assert_cqe_ok(c, id, WcOpcode::Send);
    }
    assert_cqe_ok(&cqe, 5, WcOpcode::Recv);
    assert_eq!(h.db.mr_read(&buf, 40, 16), vec![3; 16], "only the third");
    assert_eq!(h.db.poll_cq(&mut h.b.recv_cq), None);
}

#[test]
fn both_devices_capture_the_datagram_packet_as_it_crossed_the_wire() {
    let mut h = Hosts::new(QpType::Ud);
    let dir = vmm_sys_util::tempdir::TempDir::new().expect("tempdir");
    let files = ["a.pcap", "b.pcap"].map(|f| dir.as_path().join(f));
    for (host, file) in h.wire.hosts.iter().zip(&files) {
        host.rnic(0).tap.start(file, "wire").expect("capture");
    }
    h.post_recv(1, 40 + 100);
    let av = h.av(h.b.qp.qpn, TEST_QKEY);

    h.send(&[7; 100], |sge| SendWr::datagram(1, vec![sge], av));
    h.db.wait_cqe(&mut h.b.recv_cq);
    let captured = h.wire.hosts.iter().zip(&files).map(|(host, file)| {
        host.rnic(0).tap.stop();
        let file = std::fs::File::open(file).expect("pcap");
        let records = vrnic::wire::pcap::PcapReader::new(file)
            .and_then(|r| r.records())
            .expect("records");
        records
            .iter()
            .map(|r| vrnic::wire::Packet::decode(&r.data).expect("a RoCEv2 frame"))
            .collect::<Vec<_>>()
    });

    for packets in captured {
        assert_eq!(packets.len(), 1, "one packet: {packets:?}");
        let p = &packets[0];
        assert_eq!(p.bth.dest_qpn, h.b.qp.qpn);
        assert_eq!(
            p.deth.map(|d| (d.qkey, d.src_qpn)),
            Some((TEST_QKEY, h.a.qp.qpn))
        );
        assert_eq!(p.payload, vec![7; 100]);
    }
}
