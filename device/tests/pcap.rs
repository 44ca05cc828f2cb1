//! The packet tap: `vrnic ctl pcap` switches a device's capture on and off, and the pcap
//! file holds what a RoCEv2 wire would carry for its transfers, decoded here with the
//! codec (`vrnic::wire`): requests segmented at the path MTU with the QP's PSNs, RETH on
//! the first WRITE packet and on READ requests, READ responses and ACKs with AETH, ImmDt,
//! atomics and their acks, and the addresses of each link mode.

mod harness;

use harness::devices::{ib, mac_of, roce};
use harness::ud::{ud_av, TEST_QKEY};
use harness::*;
use std::path::Path;
use vmm_sys_util::tempdir::TempDir;
use vrnic::control::client;
use vrnic::control::Request;
use vrnic::wire::bth::Op;
use vrnic::wire::ext::AethKind;
use vrnic::wire::{Network, Packet, Transport};
use vrnic_hw::*;
use Which::{A, B};

/// Every frame of a classic pcap file, decoded.
fn read_pcap(path: &Path) -> Vec<Packet> {
    let bytes = std::fs::read(path).expect("pcap file");
    assert_eq!(&bytes[..4], &0xa1b2c3d4u32.to_ne_bytes(), "pcap magic");
    assert_eq!(
        u32::from_ne_bytes(bytes[20..24].try_into().unwrap()),
        1,
        "Ethernet"
    );
    let mut at = 24;
    let mut out = Vec::new();
    while at < bytes.len() {
        let len = u32::from_ne_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[at + 16..at + 16 + len];
        out.push(Packet::decode(frame).unwrap_or_else(|e| panic!("frame {}: {e}", out.len())));
        at += 16 + len;
    }
    out
}

fn ctl(devices: &TestDevices, request: Request) -> serde_json::Value {
    let line = client::call(devices.control_socket(), &request).expect("ctl");
    serde_json::from_str(&line).expect("json reply")
}

fn pcap_on(devices: &TestDevices, device: &str, path: &Path) {
    let r = ctl(
        devices,
        Request::Pcap {
            device: device.into(),
            path: Some(path.into()),
        },
    );
    assert_eq!(r["capturing"]["path"], path.display().to_string(), "{r}");
}

/// Stops the capture; the packets it wrote and dropped.
fn pcap_off(devices: &TestDevices, device: &str) -> (u64, u64) {
    let r = ctl(
        devices,
        Request::Pcap {
            device: device.into(),
            path: None,
        },
    );
    assert!(r["capturing"].is_null(), "{r}");
    let s = &r["stopped"];
    (
        s["packets"].as_u64().unwrap(),
        s["dropped"].as_u64().unwrap(),
    )
}

fn ops(packets: &[Packet]) -> Vec<(Op, u32)> {
    packets
        .iter()
        .map(|p| (p.bth.opcode.op, p.bth.psn))
        .collect()
}

fn ack(p: &Packet) -> (AethKind, u32) {
    let aeth = p.aeth.expect("AETH");
    (aeth.kind(), aeth.msn)
}

const ACKED: AethKind = AethKind::Ack { credits: 0x1f };

#[test]
fn a_write_read_and_send_appear_segmented_at_the_mtu_with_psns_reth_and_acks() {
    let devices = TestDevices::start_with_control(vec![ib(0), ib(1)], Default::default());
    let opts = ConnectOpts {
        path_mtu: Mtu::Size1024,
        ..Default::default()
    };
    let mut p = Pair::on(devices, Topology::TwoDevices, QpCaps::default(), opts);
    let tmp = TempDir::new().unwrap();
    let dir = tmp.as_path();
    let file = dir.join("rnic0.pcap");
    let src = p.mr(A, 8192, ACCESS_ALL);
    let dst = p.mr(B, 8192, ACCESS_ALL);
    let data = pattern(7, 2500);
    p.write(A, &src, 0, &data);
    p.write(B, &dst, 4096, &pattern(8, 1500));
    pcap_on(&p.devices, "rnic0", &file);

    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 2500)], &dst, 16).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
    p.post_send(
        A,
        &SendWr::read(2, vec![src.sge(4096, 1500)], &dst, 4096).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::RdmaRead);
    p.post_recv(B, &RecvWr::new(3, vec![dst.sge(0, 100)]));
    p.post_send(A, &SendWr::send(4, vec![src.sge(0, 100)]).signaled());
    assert_cqe_ok(&p.send_cqe(A), 4, WcOpcode::Send);
    let (written, dropped) = pcap_off(&p.devices, "rnic0");

    let pk = read_pcap(&file);
    let psn = opts.sq_psn;
    assert_eq!(
        ops(&pk),
        vec![
            (Op::WriteFirst, psn),
            (Op::WriteMiddle, psn + 1),
            (Op::WriteLast, psn + 2),
            (Op::Acknowledge, psn + 2),
            (Op::ReadRequest, psn + 3),
            (Op::ReadResponseFirst, psn + 3),
            (Op::ReadResponseLast, psn + 4),
            (Op::SendOnly, psn + 5),
            (Op::Acknowledge, psn + 5),
        ]
    );
    assert_eq!((written, dropped), (pk.len() as u64, 0));
    let (qa, qb) = (p.qpn(A), p.qpn(B));
    for p in &pk {
        assert_eq!(p.bth.opcode.transport, Transport::Rc);
        let to_b = p.bth.opcode.is_request();
        assert_eq!(p.bth.dest_qpn, if to_b { qb } else { qa });
    }
    // The WRITE: RETH with the whole message on the first packet only, 1024-byte segments.
    let reth = pk[0].reth.expect("RETH on WRITE First");
    assert_eq!(
        (reth.va, reth.rkey, reth.dma_len),
        (dst.addr(16), dst.key, 2500)
    );
    assert!(pk[1].reth.is_none() && pk[2].reth.is_none());
    let lens: Vec<usize> = pk[..3].iter().map(|p| p.payload.len()).collect();
    assert_eq!(lens, [1024, 1024, 452]);
    let sent: Vec<u8> = pk[..3].iter().flat_map(|p| p.payload.clone()).collect();
    assert_eq!(sent, data);
    assert!(pk[2].bth.ack_req && !pk[1].bth.ack_req);
    assert_eq!(ack(&pk[3]), (ACKED, 1));
    // The READ: RETH for the read range, responses with the data and AETH on both.
    let reth = pk[4].reth.expect("RETH on READ Request");
    assert_eq!(
        (reth.va, reth.rkey, reth.dma_len),
        (dst.addr(4096), dst.key, 1500)
    );
    assert_eq!(ack(&pk[5]), (ACKED, 2));
    assert_eq!(ack(&pk[6]), (ACKED, 2));
    let read: Vec<u8> = pk[5..7].iter().flat_map(|p| p.payload.clone()).collect();
    assert_eq!(read, pattern(8, 1500));
    // The SEND and its ACK, MSN 3.
    assert_eq!(pk[7].payload, data[..100]);
    assert_eq!(ack(&pk[8]), (ACKED, 3));
    // IB mode: MACs and link-local IPv6 addresses derived from the LIDs.
    let lid_mac = |lid: u16| vrnic::addr::Mac([2, 0, 0, 0, 0, lid as u8]);
    assert_eq!((pk[0].src_mac, pk[0].dst_mac), (lid_mac(1), lid_mac(2)));
    let Network::V6 { src, dst, .. } = pk[0].net else {
        panic!("IB mode frames are IPv6")
    };
    assert_eq!(src[..2], [0xfe, 0x80]);
    assert_eq!((src[15], dst[15]), (1, 2));
}

#[test]
fn roce_frames_use_the_gids_as_ipv4_and_show_atomics_immediates_and_rnr_naks() {
    let devices = TestDevices::start_with_control(vec![roce(0), roce(1)], Default::default());
    let mut p = Pair::on(
        devices,
        Topology::TwoDevices,
        QpCaps::default(),
        ConnectOpts {
            access: ACCESS_ALL | REMOTE_ATOMIC,
            ..Default::default()
        },
    );
    let tmp = TempDir::new().unwrap();
    let dir = tmp.as_path();
    let (fa, fb) = (dir.join("a.pcap"), dir.join("b.pcap"));
    let local = p.mr(A, 4096, ACCESS_ALL);
    let remote = p.mr(B, 4096, ACCESS_ALL | REMOTE_ATOMIC);
    p.write(B, &remote, 0, &40u64.to_le_bytes());
    pcap_on(&p.devices, "rnic0", &fa);
    pcap_on(&p.devices, "rnic1", &fb);

    let faa = SendWr::fetch_and_add(1, local.sge(0, 8), &remote, 0, 2).signaled();
    p.post_send(A, &faa);
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::FetchAdd);
    // No receive posted yet: RNR NAK, then the retry succeeds once one is.
    let wimm = SendWr::write_imm(2, vec![local.sge(8, 16)], &remote, 64, [1, 2, 3, 4]);
    p.post_send(A, &wimm.signaled());
    wait_for("an RNR NAK", || {
        let rnr = read_pcap_when_flushed(&fa).iter().any(|p| {
            p.aeth
                .is_some_and(|a| matches!(a.kind(), AethKind::RnrNak { .. }))
        });
        rnr.then_some(())
    });
    p.post_recv(B, &RecvWr::new(3, vec![]));
    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::RdmaWrite);
    pcap_off(&p.devices, "rnic0");
    pcap_off(&p.devices, "rnic1");

    let pk = read_pcap(&fa);
    // Both ends saw the same packets.
    assert_eq!(pk, read_pcap(&fb));
    let psn = ConnectOpts::default().sq_psn;
    let got = ops(&pk);
    assert_eq!(
        got[..2],
        [(Op::FetchAdd, psn), (Op::AtomicAcknowledge, psn)]
    );
    let atomic = pk[0].atomic_eth.expect("AtomicETH");
    assert_eq!(
        (atomic.va, atomic.rkey, atomic.swap_add),
        (remote.addr(0), remote.key, 2)
    );
    assert_eq!(pk[1].atomic_ack, Some(40));
    // Then WRITE Only with Immediate answered by RNR NAKs (the receiver's timer), until
    // one is ACKed.
    let rest = &pk[2..];
    assert!(
        rest.len() >= 4 && rest.len().is_multiple_of(2),
        "{:?}",
        ops(rest)
    );
    for (i, pair) in rest.chunks(2).enumerate() {
        assert_eq!(
            ops(pair),
            [(Op::WriteOnlyImm, psn + 1), (Op::Acknowledge, psn + 1)]
        );
        let want = match i + 1 == rest.len() / 2 {
            true => ACKED,
            false => AethKind::RnrNak { timer: 1 },
        };
        assert_eq!(ack(&pair[1]).0, want);
    }
    let w = &pk[pk.len() - 2];
    assert_eq!(w.imm, Some([1, 2, 3, 4]));
    assert_eq!(
        w.reth.map(|r| (r.va, r.dma_len)),
        Some((remote.addr(64), 16))
    );
    // RoCE mode: the devices' MACs, the IPv4 addresses of their IPv4-mapped GIDs.
    assert_eq!((pk[0].src_mac, pk[0].dst_mac), (mac_of(0), mac_of(1)));
    assert!(matches!(
        pk[0].net,
        Network::V4 {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            ..
        }
    ));
}

#[test]
fn bad_pcap_requests_get_clear_errors_and_change_nothing() {
    let devices = TestDevices::start_with_control(vec![ib(0)], Default::default());
    let tmp = TempDir::new().unwrap();
    let dir = tmp.as_path();
    let ask = |device: &str, path: Option<&Path>| {
        let req = Request::Pcap {
            device: device.into(),
            path: path.map(Into::into),
        };
        client::call(devices.control_socket(), &req)
    };
    let err = |r: Result<String, client::ClientError>| r.expect_err("an error").to_string();

    assert!(err(ask("rnic0", Some(Path::new("rel.pcap")))).contains("not an absolute path"));
    assert!(err(ask("rnic0", Some(dir))).contains("cannot open"));
    assert!(err(ask("rnic0", Some(&dir.join("no/such/dir.pcap")))).contains("cannot open"));
    std::os::unix::fs::symlink(dir.join("target"), dir.join("link")).unwrap();
    assert!(err(ask("rnic0", Some(&dir.join("link")))).contains("cannot open"));
    assert!(!dir.join("target").exists());
    assert!(err(ask("rnic9", None)).contains("unknown device"));
    let off: serde_json::Value = serde_json::from_str(&ask("rnic0", None).unwrap()).unwrap();
    assert!(
        off["capturing"].is_null() && off["stopped"].is_null(),
        "{off}"
    );
}

/// The file as written so far (the writer flushes whenever its queue is empty); frames
/// cut short at the end are not yet flushed and are left out.
fn read_pcap_when_flushed(path: &Path) -> Vec<Packet> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= bytes.len() {
        let len = u32::from_ne_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let Some(frame) = bytes.get(at + 16..at + 16 + len) else {
            break;
        };
        out.extend(Packet::decode(frame).ok());
        at += 16 + len;
    }
    out
}

#[test]
fn a_ud_datagram_is_one_send_only_with_deth_to_the_destination_qp() {
    let devices = TestDevices::start_with_control(vec![roce(0), roce(1)], Default::default());
    let mut da = devices.addressed_driver(0);
    let mut db = devices.addressed_driver(1);
    let mut a = da.ud_end(QpType::Ud, TEST_QKEY);
    let mut b = db.ud_end(QpType::Ud, TEST_QKEY);
    let tmp = TempDir::new().unwrap();
    let file = tmp.as_path().join("ud.pcap");
    let payload = pattern(5, 100);
    let src = da.reg_mr(a.uctx, a.pd, 100, ACCESS_ALL);
    da.mr_write(&src, 0, &payload);
    let dst = db.reg_mr(b.uctx, b.pd, 256, ACCESS_ALL);
    db.post_recv(&mut b.qp, &RecvWr::new(1, vec![dst.sge(0, 256)]));
    pcap_on(&devices, "rnic0", &file);

    let av = ud_av(db.addr(), b.qp.qpn, TEST_QKEY);
    let wr = SendWr {
        av: Some(av),
        ..SendWr::send_imm(2, vec![src.sge(0, 100)], [9, 8, 7, 6])
    };
    da.post_send(&mut a.qp, &wr.signaled());
    assert_cqe_ok(&da.wait_cqe(&mut a.send_cq), 2, WcOpcode::Send);
    assert_cqe_ok(&db.wait_cqe(&mut b.recv_cq), 1, WcOpcode::Recv);
    pcap_off(&devices, "rnic0");

    let pk = read_pcap(&file);
    assert_eq!(ops(&pk), [(Op::SendOnlyImm, 0x42)]);
    let p = &pk[0];
    assert_eq!(p.bth.opcode.transport, Transport::Ud);
    assert_eq!(p.bth.dest_qpn, b.qp.qpn);
    let deth = p.deth.expect("DETH");
    assert_eq!((deth.qkey, deth.src_qpn), (TEST_QKEY, a.qp.qpn));
    assert_eq!(p.imm, Some([9, 8, 7, 6]));
    assert_eq!(p.payload, payload);
    assert!(matches!(
        p.net,
        Network::V4 {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            ..
        }
    ));
}
