//! The RoCEv2 wire path (issue 11): RC WRITE, SEND with immediate data and READ between
//! two "hosts" (two services, each with its own fabric and switch) whose devices' wire
//! ports are joined by a forwarder, as IBTA packets through the reliability engine;
//! byte-exact, clean and over a seeded lossy, duplicating, reordering link, where every
//! transfer still completes and verifies and the retransmissions are counted (in the
//! SPEC port and QP counters too). Atomics (each executed once, whatever the link does),
//! SEND with invalidate and the memory operations (REG_MR, LOCAL_INV) on wire QPs.

mod harness;

use std::sync::atomic::Ordering::Relaxed;

use harness::cable::{rc_packet, Impairment, WireHosts};
use harness::devices::{gid_of, mac_of};
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
    wire: WireHosts,
}

impl Hosts {
    fn new(impair: Impairment, opts: ConnectOpts) -> Hosts {
        Self::with(impair, opts, QpCaps::default())
    }

    fn with(impair: Impairment, opts: ConnectOpts, caps: QpCaps) -> Hosts {
        Self::with_sides(impair, opts, caps, new_side)
    }

    /// Hosts whose QPs are made by `side` (e.g. `kernel_side`, for fast registration).
    fn with_sides(
        impair: Impairment,
        opts: ConnectOpts,
        caps: QpCaps,
        side: fn(&mut FakeDriver, usize, QpCaps) -> Side,
    ) -> Hosts {
        let wire = WireHosts::start(impair);
        let mut da = wire.hosts[0].driver(0);
        da.roce_up(gid_of(0));
        let mut db = wire.hosts[1].driver(0);
        db.roce_up(gid_of(1));
        let a = side(&mut da, 0, caps);
        let b = side(&mut db, 1, caps);
        da.connect_qp_to(&a.qp, db.addr(), b.qp.qpn, &opts);
        db.connect_qp_to(&b.qp, da.addr(), a.qp.qpn, &opts);
        Hosts { a, b, da, db, wire }
    }

    /// Frames host `i`'s device sent on its wire port, and (retransmitted, timeouts).
    fn wire_figures(&self, i: usize) -> (u64, (u64, u64)) {
        let fabric = self.wire.hosts[i].fabric();
        let rnic = self.wire.hosts[i].rnic(0);
        let wire = fabric.wire(&rnic).expect("a wire port");
        let sent = wire.port.counters.tx_frames.load(Relaxed);
        (sent, wire.retransmissions(&rnic))
    }

    fn lost(&self) -> u64 {
        self.wire
            .cable
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

    // The guest sees the same in its SPEC counters, of the port and of the QP: every
    // frame the device sent, the retransmissions among them and the timeouts.
    let (sent_a, _) = h.wire_figures(0);
    let (qa, qb) = (h.a.qp.id(), h.b.qp.id());
    let (port_a, qp_a) = (h.da.counters(None), h.da.counters(Some(qa)));
    let (port_b, qp_b) = (h.db.counters(None), h.db.counters(Some(qb)));
    assert_eq!(port_a, qp_a, "A's one QP is all its port did");
    assert_eq!(port_b, qp_b, "B's one QP is all its port did");
    let c = |v: &[u64], c: Counter| v[c as usize];
    assert_eq!(c(&qp_a, Counter::TxPackets), sent_a);
    assert_eq!(
        c(&qp_a, Counter::RetransmittedPackets) + c(&qp_b, Counter::RetransmittedPackets),
        retx_a + retx_b
    );
    assert_eq!(c(&qp_a, Counter::LocalAckTimeouts), timeouts_a);
    let recovered = [
        Counter::SeqNaksSent,
        Counter::DuplicateRequests,
        Counter::OutOfSequenceRequests,
    ]
    .map(|k| c(&qp_b, k));
    assert!(
        recovered.iter().sum::<u64>() > 0,
        "B saw no loss: {recovered:?}"
    );
    assert_eq!(
        [
            Counter::TxWriteRequests,
            Counter::TxSendRequests,
            Counter::TxReadRequests
        ]
        .map(|k| c(&qp_a, k)),
        [6, 6, 6],
        "each message counted once, however often its packets went"
    );
    assert_eq!(
        [
            Counter::RxWriteRequests,
            Counter::RxSendRequests,
            Counter::RxReadRequests
        ]
        .map(|k| c(&qp_b, k)),
        [6, 6, 6]
    );
}

#[test]
fn on_a_clean_wire_the_counters_show_each_packet_message_and_ack_on_both_sides() {
    // A long ACK timeout: no retransmission, whatever the machine's load.
    let opts = ConnectOpts {
        timeout: 20,
        ..atomic_opts()
    };
    let mut h = Hosts::new(Impairment::default(), opts);
    let (a, b) = (&mut h.a, &mut h.b);
    let src = h.da.reg_mr(a.uctx, a.pd, 10_000, ACCESS_ALL);
    let dst = h.db.reg_mr(b.uctx, b.pd, 10_000, ATOMIC_ACCESS);
    let wrs = [
        SendWr::write(1, vec![src.sge(0, 10_000)], &dst, 0),
        SendWr::send(2, vec![src.sge(0, 100)]),
        SendWr::read(3, vec![src.sge(0, 5_000)], &dst, 0),
        SendWr::fetch_and_add(4, src.sge(0, 8), &dst, 0, 1),
    ];
    h.db.post_recv(&mut b.qp, &RecvWr::new(9, vec![dst.sge(0, 100)]));
    for wr in wrs {
        h.da.post_send(&mut a.qp, &wr.signaled());
        h.da.wait_cqe(&mut a.send_cq);
    }
    h.db.wait_cqe(&mut b.recv_cq);

    // MTU 4096: the WRITE is 3 packets, the READ's response 2; each message that has no
    // response is ACKed once.
    use Counter as C;
    let a_expected = counters_of(&[
        (C::TxPackets, 3 + 1 + 1 + 1),
        (C::TxBytes, 10_100),
        (C::TxWriteRequests, 1),
        (C::TxSendRequests, 1),
        (C::TxReadRequests, 1),
        (C::TxAtomicRequests, 1),
        (C::RxPackets, 1 + 1 + 2 + 1),
        (C::RxBytes, 5_000),
        (C::RxAcks, 2),
        (C::Completions, 4),
    ]);
    let b_expected = counters_of(&[
        (C::RxPackets, 3 + 1 + 1 + 1),
        (C::RxBytes, 10_100),
        (C::RxWriteRequests, 1),
        (C::RxSendRequests, 1),
        (C::RxReadRequests, 1),
        (C::RxAtomicRequests, 1),
        (C::TxPackets, 1 + 1 + 2 + 1),
        (C::TxBytes, 5_000),
        (C::TxAcks, 2),
        (C::Completions, 1),
    ]);
    let (qa, qb) = (h.a.qp.id(), h.b.qp.id());
    assert_eq!(
        nonzero_counters(&h.da.counters(Some(qa))),
        a_expected,
        "A's QP"
    );
    assert_eq!(
        nonzero_counters(&h.db.counters(Some(qb))),
        b_expected,
        "B's QP"
    );
    assert_eq!(
        nonzero_counters(&h.da.counters(None)),
        a_expected,
        "A's port"
    );
    assert_eq!(
        nonzero_counters(&h.db.counters(None)),
        b_expected,
        "B's port"
    );
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
    let mut p = rc_packet(1, 0, vrnic::wire::bth::Op::SendOnly, qpn, 0);
    p.bth.ack_req = true;
    p.payload = vec![0x5a; 64];
    p.encode().unwrap()
}

#[test]
fn frames_with_a_bad_icrc_for_an_unknown_qp_or_undecodable_are_dropped_and_counted() {
    let mut h = Hosts::new(Impairment::default(), ConnectOpts::default());
    let cable_port = h.wire.switches[0].stats().len() - 1; // the cable's end on A's switch
    let unknown = stray_frame(0x7777);
    let mut bad_icrc = stray_frame(h.a.qp.qpn);
    let n = bad_icrc.len();
    bad_icrc[n - 20] ^= 0x40; // in the payload: only the ICRC covers it
    let mut garbage = stray_frame(h.a.qp.qpn);
    garbage.truncate(50); // still steered (UDP 4791), but cut in its BTH
    for f in [&unknown, &bad_icrc, &garbage] {
        h.wire.switches[0].receive(cable_port, f);
    }
    let fabric = h.wire.hosts[0].fabric();
    let wire = fabric.wire(&h.wire.hosts[0].rnic(0)).expect("a wire port");
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
    // `vrnic ctl wire` shows the drops, and A's QP on the wire since it sent.
    let line =
        vrnic::control::handlers::handle(&fabric, &vrnic::control::Request::Wire {}).unwrap();
    let reply: vrnic::control::wire::WireReply = serde_json::from_slice(&line).unwrap();
    let view = &reply.wire[0];
    let c = view.counters;
    assert_eq!(
        (view.qps, c.rx_unknown_qp, c.rx_bad_icrc, c.rx_bad),
        (1, 1, 1, 1),
        "{view:?}"
    );
    assert!(c.tx_frames > 0 && c.rx_frames > 3, "{view:?}");
    assert_eq!(view.mac, mac_of(0).to_string());
    // A destroyed QP's engines go at the device's next pass (a frame for it wakes one).
    h.da.destroy_qp(&h.a.qp).ok();
    h.wire.switches[0].receive(cable_port, &stray_frame(h.a.qp.qpn));
    wait_for(
        "A's QP gone from the wire, the frame for it dropped",
        || {
            let unknown = wire.port.counters.rx_unknown_qp.load(Relaxed);
            (wire.qp_count() == 0 && unknown == 2).then_some(())
        },
    );
}

const ATOMIC_ACCESS: u32 = ACCESS_ALL | REMOTE_ATOMIC;

fn atomic_opts() -> ConnectOpts {
    ConnectOpts {
        access: ATOMIC_ACCESS,
        ..ConnectOpts::default()
    }
}

fn u64_at(bytes: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

#[test]
fn cmp_and_swp_and_fetch_and_add_cross_the_wire_and_return_the_original() {
    let mut h = Hosts::new(Impairment::default(), atomic_opts());
    let (a, b) = (&mut h.a, &mut h.b);
    let target = h.db.reg_mr(b.uctx, b.pd, 24, ATOMIC_ACCESS);
    h.db.mr_write(&target, 0, &[0xaa; 24]);
    h.db.mr_write(&target, 8, &0x1111_2222_3333_4444u64.to_le_bytes());
    let result = h.da.reg_mr(a.uctx, a.pd, 24, ACCESS_ALL);
    h.da.mr_fill(&result, 0xee);

    // A match swaps; a mismatch leaves the word; FETCH_AND_ADD wraps.
    let swap = SendWr::cmp_and_swp(1, result.sge(0, 8), &target, 8, 0x1111_2222_3333_4444, 7);
    let miss = SendWr::cmp_and_swp(2, result.sge(8, 8), &target, 8, 0x1111_2222_3333_4444, 9);
    let add = SendWr::fetch_and_add(3, result.sge(16, 8), &target, 8, u64::MAX);
    h.da.post_sends(
        &mut a.qp,
        &[swap.signaled(), miss.signaled(), add.signaled()],
    );

    let cqes = h.da.wait_cqes(&mut a.send_cq, 3);
    assert_cqe_ok(&cqes[0], 1, WcOpcode::CompSwap);
    assert_cqe_ok(&cqes[1], 2, WcOpcode::CompSwap);
    assert_cqe_ok(&cqes[2], 3, WcOpcode::FetchAdd);
    assert!(cqes.iter().all(|c| c.byte_len.to_native() == 8));
    let got = h.da.mr_read(&result, 0, 24);
    assert_eq!(
        [u64_at(&got, 0), u64_at(&got, 1), u64_at(&got, 2)],
        [0x1111_2222_3333_4444, 7, 7]
    );
    let word = h.db.mr_read(&target, 0, 24);
    assert_eq!(u64_at(&word, 1), 6, "7 + (2^64 - 1)");
    assert_eq!(
        (u64_at(&word, 0), u64_at(&word, 2)),
        (!0 / 0xff * 0xaa, !0 / 0xff * 0xaa)
    );
}

#[test]
fn over_a_lossy_link_every_fetch_and_add_executes_exactly_once() {
    let impair = Impairment {
        seed: 0xa70_1c5,
        loss: 60,
        dup: 40,
        reorder: 40,
    };
    let mut h = Hosts::new(impair, atomic_opts());
    let (a, b) = (&mut h.a, &mut h.b);
    const N: usize = 96;
    const ADD: u64 = 3;
    let target = h.db.reg_mr(b.uctx, b.pd, 8, ATOMIC_ACCESS);
    h.db.mr_fill(&target, 0);
    let result = h.da.reg_mr(a.uctx, a.pd, 8 * N as u64, ACCESS_ALL);
    // Batches of 16 outstanding: the responder's resources answer the duplicates.
    for batch in 0..N / 16 {
        let wrs: Vec<SendWr> = (0..16)
            .map(|i| {
                let n = batch * 16 + i;
                let sge = result.sge(8 * n as u64, 8);
                SendWr::fetch_and_add(n as u64, sge, &target, 0, ADD).signaled()
            })
            .collect();
        h.da.post_sends(&mut a.qp, &wrs);
        for (i, c) in h.da.wait_cqes(&mut a.send_cq, 16).iter().enumerate() {
            assert_cqe_ok(c, (batch * 16 + i) as u64, WcOpcode::FetchAdd);
        }
    }
    let word = u64_at(&h.db.mr_read(&target, 0, 8), 0);
    assert_eq!(word, N as u64 * ADD, "each FETCH_AND_ADD executed once");
    let got = h.da.mr_read(&result, 0, 8 * N as u64);
    let originals: Vec<u64> = (0..N).map(|i| u64_at(&got, i)).collect();
    let expected: Vec<u64> = (0..N as u64).map(|i| i * ADD).collect();
    assert_eq!(originals, expected, "the originals, in order, once each");
    assert!(h.lost() > 0, "the link lost nothing");
}

#[test]
fn a_misaligned_atomic_is_nakked_and_completes_rem_inv_req_err() {
    let mut h = Hosts::new(Impairment::default(), atomic_opts());
    let (a, b) = (&mut h.a, &mut h.b);
    let target = h.db.reg_mr(b.uctx, b.pd, 16, ATOMIC_ACCESS);
    let result = h.da.reg_mr(a.uctx, a.pd, 8, ACCESS_ALL);
    let wr = SendWr::fetch_and_add(1, result.sge(0, 8), &target, 4, 1).signaled();
    h.da.post_send(&mut a.qp, &wr);
    let cqe = h.da.wait_cqe(&mut a.send_cq);
    assert_eq!(cqe.status, u8::from(WcStatus::RemInvReqErr));
    wait_for("B's QP in ERR", || {
        (h.db.qp_state(&b.qp) == QpState::Err).then_some(())
    });
    assert_eq!(
        u64_at(&h.db.mr_read(&target, 0, 16), 0),
        0,
        "the word untouched"
    );
}

/// Hosts with kernel-context QPs (fast registration needs them).
fn kernel_hosts() -> Hosts {
    Hosts::with_sides(
        Impairment::default(),
        ConnectOpts::default(),
        QpCaps::default(),
        kernel_side,
    )
}

/// Registers FRMR `key` of B (allocated for one page) over `len` bytes with a REG_MR on
/// B's wire QP.
fn register_at_b(h: &mut Hosts, len: u64) -> Mr {
    let key = h.db.alloc_mr(h.b.pd, 1);
    let fr = h.db.fast_reg(key, h.b.pd, len, 0, 12, ACCESS_ALL);
    h.db.post_send_raw(&mut h.b.qp, &reg_mr_wqe(0x77, &fr));
    assert_cqe_ok(&h.db.wait_cqe(&mut h.b.send_cq), 0x77, WcOpcode::RegMr);
    fr.mr
}

#[test]
fn reg_mr_and_local_inv_on_a_wire_qp_register_and_revoke_a_remote_key() {
    let mut h = kernel_hosts();
    let target = register_at_b(&mut h, 4096);
    let src = h.da.reg_mr(h.a.uctx, h.a.pd, 4096, ACCESS_ALL);
    let data = pattern(51, 4096);
    h.da.mr_write(&src, 0, &data);
    let write = |id| SendWr::write(id, vec![src.sge(0, 4096)], &target, 0).signaled();
    h.da.post_send(&mut h.a.qp, &write(1));
    assert_cqe_ok(&h.da.wait_cqe(&mut h.a.send_cq), 1, WcOpcode::RdmaWrite);
    assert_same_bytes(&h.db.mr_read(&target, 0, 4096), &data, "WRITE to the FRMR");

    h.db.post_send(&mut h.b.qp, &local_inv_wr(5, target.key));
    assert_cqe_ok(&h.db.wait_cqe(&mut h.b.send_cq), 5, WcOpcode::LocalInv);

    h.da.post_send(&mut h.a.qp, &write(2));
    let cqe = h.da.wait_cqe(&mut h.a.send_cq);
    assert_eq!(cqe.status, u8::from(WcStatus::RemAccessErr));
}

#[test]
fn send_with_inv_crosses_the_wire_and_invalidates_the_targets_key() {
    let mut h = kernel_hosts();
    let target = register_at_b(&mut h, 4096);
    let src = h.da.reg_mr(h.a.uctx, h.a.pd, 4096, ACCESS_ALL);
    let dst = h.db.reg_mr(KERNEL_UCTX, h.b.pd, 100, ACCESS_ALL);
    let data = pattern(52, 100);
    h.da.mr_write(&src, 0, &data);
    h.db.post_recv(&mut h.b.qp, &RecvWr::new(9, vec![dst.sge(0, 100)]));

    let wr = send_inv_wr(10, vec![src.sge(0, 100)], target.key);
    h.da.post_send(&mut h.a.qp, &wr);

    assert_cqe_ok(&h.da.wait_cqe(&mut h.a.send_cq), 10, WcOpcode::Send);
    let recv = h.db.wait_cqe(&mut h.b.recv_cq);
    assert_cqe_ok(&recv, 9, WcOpcode::Recv);
    assert_eq!(recv.wc_flags, u8::from(WcFlags::WithInv));
    assert_eq!(recv.imm_data, target.key.to_le_bytes());
    assert_same_bytes(&h.db.mr_read(&dst, 0, 100), &data, "SEND_WITH_INV");
    let write = SendWr::write(11, vec![src.sge(0, 16)], &target, 0).signaled();
    h.da.post_send(&mut h.a.qp, &write);
    let cqe = h.da.wait_cqe(&mut h.a.send_cq);
    assert_eq!(cqe.status, u8::from(WcStatus::RemAccessErr));
}

#[test]
fn query_qp_reports_the_psns_of_the_wire_engines() {
    let mut h = Hosts::new(Impairment::default(), ConnectOpts::default());
    let (a, b) = (&mut h.a, &mut h.b);
    let src = h.da.reg_mr(a.uctx, a.pd, 10_000, ACCESS_ALL);
    let dst = h.db.reg_mr(b.uctx, b.pd, 10_000, ACCESS_ALL);
    // MTU 4096: the WRITE takes 3 PSNs, the READ of 5000 bytes 2.
    h.da.post_send(
        &mut a.qp,
        &SendWr::write(1, vec![src.sge(0, 10_000)], &dst, 0).signaled(),
    );
    h.da.wait_cqe(&mut a.send_cq);
    h.da.post_send(
        &mut a.qp,
        &SendWr::read(2, vec![src.sge(0, 5_000)], &dst, 0).signaled(),
    );
    h.da.wait_cqe(&mut a.send_cq);

    let (qa, qb) = (h.da.query_qp(&h.a.qp), h.db.query_qp(&h.b.qp));
    assert_eq!(
        (qa.sq_psn.to_native(), qb.rq_psn.to_native()),
        (0x105, 0x105)
    );
    assert_eq!(
        (qa.rq_psn.to_native(), qb.sq_psn.to_native()),
        (0x100, 0x100),
        "B sent no request"
    );
}

/// A's QP as `vrnic ctl` shows it: why its send queue waits, if it does.
fn a_waiting(h: &Hosts) -> Option<String> {
    use vrnic::objects::snapshot::ObjectKind;
    let view = h.wire.hosts[0].rnic(0).objects_view(&[ObjectKind::Qps]);
    let qps = view.qps.expect("the QPs");
    qps.into_iter()
        .find(|q| q.qpn == h.a.qp.qpn)
        .and_then(|q| q.waiting)
}

#[test]
fn an_rnr_nakked_send_shows_its_wait_counts_naks_and_retries_and_completes() {
    let opts = ConnectOpts {
        min_rnr_timer: 24, // 40.96 ms: the wait is there to be seen
        ..ConnectOpts::default()
    };
    let mut h = Hosts::new(Impairment::default(), opts);
    let (a, b) = (&mut h.a, &mut h.b);
    let src = h.da.reg_mr(a.uctx, a.pd, 64, ACCESS_ALL);
    let dst = h.db.reg_mr(b.uctx, b.pd, 64, ACCESS_ALL);
    h.da.post_send(&mut a.qp, &SendWr::send(1, vec![src.sge(0, 64)]).signaled());
    wait_for("A waiting for RNR", || {
        (a_waiting(&h).as_deref() == Some("RNR")).then_some(())
    });

    h.db.post_recv(&mut h.b.qp, &RecvWr::new(9, vec![dst.sge(0, 64)]));
    assert_cqe_ok(&h.da.wait_cqe(&mut h.a.send_cq), 1, WcOpcode::Send);
    assert_cqe_ok(&h.db.wait_cqe(&mut h.b.recv_cq), 9, WcOpcode::Recv);

    assert_eq!(a_waiting(&h), None, "the wait ended with the completion");
    let ca = h.da.counters(Some(h.a.qp.id()));
    let cb = h.db.counters(Some(h.b.qp.id()));
    let naks = cb[Counter::RnrNaksSent as usize];
    assert!(naks >= 1);
    assert_eq!(
        [Counter::RnrNaksReceived, Counter::RnrRetries].map(|c| ca[c as usize]),
        [naks, naks],
        "each NAK received, each waited out and sent again"
    );
    assert_eq!(cb[Counter::RxSendRequests as usize], 1, "one message");
}

#[test]
fn sqd_to_sqd_reaches_the_wire_requester_rnr_retry_0_fails_at_the_first_rnr_nak() {
    let mut h = Hosts::new(Impairment::default(), ConnectOpts::default());
    h.write_send_imm_read(100, 61); // the requester engine runs with rnr_retry 7
    let state = |s: QpState| QpAttr {
        qp_state: s.into(),
        ..Default::default()
    };
    let only_state = mask(&[QpAttrMask::State]);
    h.da.modify_qp(&h.a.qp, only_state, state(QpState::Sqd))
        .ok();
    let attr = QpAttr {
        rnr_retry: 0,
        ..state(QpState::Sqd)
    };
    let m = mask(&[QpAttrMask::State, QpAttrMask::RnrRetry]);
    h.da.modify_qp(&h.a.qp, m, attr).ok();
    h.da.modify_qp(&h.a.qp, only_state, state(QpState::Rts))
        .ok();

    let src = h.da.reg_mr(h.a.uctx, h.a.pd, 8, ACCESS_ALL);
    h.da.post_send(
        &mut h.a.qp,
        &SendWr::send(2, vec![src.sge(0, 8)]).signaled(),
    );
    let cqe = h.da.wait_cqe(&mut h.a.send_cq);
    assert_cqe_status(&cqe, WcStatus::RnrRetryExcErr, VendorErr::Rnr);
}

/// A's async events for its QP, event types only.
fn a_events(h: &mut Hosts) -> Vec<u8> {
    let qpn = h.a.qp.qpn;
    let d = &mut h.da;
    std::iter::from_fn(|| d.poll_async_event())
        .filter(|e| e.obj.to_native() == qpn)
        .map(|e| e.event_type)
        .collect()
}

#[test]
fn sqd_on_the_wire_drains_every_posted_wqe_before_sq_drained() {
    let mut h = Hosts::new(Impairment::default(), ConnectOpts::default());
    let (a, b) = (&mut h.a, &mut h.b);
    let src = h.da.reg_mr(a.uctx, a.pd, 32, ACCESS_ALL);
    let dst = h.db.reg_mr(b.uctx, b.pd, 64, ACCESS_ALL);
    let send = |id| SendWr::send(id, vec![src.sge(0, 32)]).signaled();
    // B has no receive: both SENDs are on the wire, RNR-NAKed, outstanding.
    h.da.post_sends(&mut a.qp, &[send(1), send(2)]);
    wait_for("an RNR NAK from B", || {
        let c = h.db.counters(Some(h.b.qp.id()));
        (c[Counter::RnrNaksSent as usize] > 0).then_some(())
    });
    let to_sqd = QpAttr {
        qp_state: QpState::Sqd.into(),
        en_sqd_async_notify: 1,
        ..Default::default()
    };
    let m = mask(&[QpAttrMask::State, QpAttrMask::EnSqdAsyncNotify]);
    h.da.modify_qp(&h.a.qp, m, to_sqd).ok();
    assert_eq!(h.da.query_qp(&h.a.qp).sq_draining, 1);

    h.db.post_recv(&mut h.b.qp, &RecvWr::new(7, vec![dst.sge(0, 32)]));
    assert_cqe_ok(&h.da.wait_cqe(&mut h.a.send_cq), 1, WcOpcode::Send);
    assert_eq!(
        a_events(&mut h),
        Vec::<u8>::new(),
        "the second SEND is still out"
    );
    assert_eq!(h.da.query_qp(&h.a.qp).sq_draining, 1);

    h.db.post_recv(&mut h.b.qp, &RecvWr::new(8, vec![dst.sge(32, 32)]));
    assert_cqe_ok(&h.da.wait_cqe(&mut h.a.send_cq), 2, WcOpcode::Send);
    let qpn = h.a.qp.qpn;
    h.da.wait_async_event_for(EventType::SqDrained, qpn);
    assert_eq!(h.da.query_qp(&h.a.qp).sq_draining, 0);
}

#[test]
fn an_atomic_on_an_mr_without_remote_atomic_is_nakked_rem_access_err() {
    let mut h = Hosts::new(Impairment::default(), atomic_opts());
    let (a, b) = (&mut h.a, &mut h.b);
    let target = h.db.reg_mr(b.uctx, b.pd, 8, ACCESS_ALL); // no REMOTE_ATOMIC
    h.db.mr_write(&target, 0, &5u64.to_le_bytes());
    let result = h.da.reg_mr(a.uctx, a.pd, 8, ACCESS_ALL);
    let wr = SendWr::cmp_and_swp(1, result.sge(0, 8), &target, 0, 5, 6).signaled();
    h.da.post_send(&mut a.qp, &wr);
    let cqe = h.da.wait_cqe(&mut a.send_cq);
    assert_eq!(cqe.status, u8::from(WcStatus::RemAccessErr));
    assert_eq!(
        u64_at(&h.db.mr_read(&target, 0, 8), 0),
        5,
        "the word untouched"
    );
}

#[test]
fn a_type_2_window_bound_on_a_wire_qp_takes_remote_writes_until_local_inv() {
    const MW_BIND: u32 = 0x10;
    let mut h = Hosts::new(Impairment::default(), ConnectOpts::default());
    let (a, b) = (&mut h.a, &mut h.b);
    let mr = h.db.reg_mr(b.uctx, b.pd, 0x1000, ACCESS_ALL | MW_BIND);
    let mw = h.db.alloc_mw(b.uctx, b.pd, MwType::Type2);
    let rkey = with_variant(mw, (mw as u8).wrapping_add(1));
    let access = REMOTE_WRITE | REMOTE_READ;
    h.db.post_send_raw(
        &mut b.qp,
        &bind_mw_wqe(0xb1, rkey, &mr, 0x100, 0x200, access),
    );
    assert_cqe_ok(&h.db.wait_cqe(&mut b.send_cq), 0xb1, WcOpcode::BindMw);
    let window = window_of(&mr, rkey, 0x100, 0x200);

    let src = h.da.reg_mr(a.uctx, a.pd, 0x200, ACCESS_ALL);
    let data = pattern(71, 0x200);
    h.da.mr_write(&src, 0, &data);
    let write = |id| SendWr::write(id, vec![src.sge(0, 0x200)], &window, 0).signaled();
    h.da.post_send(&mut a.qp, &write(1));
    assert_cqe_ok(&h.da.wait_cqe(&mut a.send_cq), 1, WcOpcode::RdmaWrite);
    assert_same_bytes(
        &h.db.mr_read(&mr, 0x100, 0x200),
        &data,
        "through the window",
    );

    h.db.post_send(&mut b.qp, &local_inv_wr(2, rkey));
    assert_cqe_ok(&h.db.wait_cqe(&mut b.send_cq), 2, WcOpcode::LocalInv);
    h.da.post_send(&mut a.qp, &write(3));
    let cqe = h.da.wait_cqe(&mut a.send_cq);
    assert_eq!(cqe.status, u8::from(WcStatus::RemAccessErr));
}
