//! The RoCEv2 wire against a hostile peer and against revocation (issue 22): a peer
//! holding an rkey cannot make the process hold memory or the device lock in proportion
//! to a READ it asks for (or asks for again and again), a long WRITE goes out within the
//! per-pass budget, and memory the guest deregistered or whose rights it revoked is never
//! read or written through the wire afterwards: a READ outstanding across DEREG_MR, a
//! WRITE retransmitted after it, a duplicate READ after REREG_MR took REMOTE_READ away.
//!
//! Two hosts (two services) as in `wire_path`; the attacker's frames are put on B's
//! switch as if they came over the cable from A's address. The tests measure the
//! process's memory, so they run one at a time.

mod harness;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};

use harness::cable::{rc_packet, Impairment, LinkEnd, WireHosts};
use harness::devices::gid_of;
use harness::pair::{new_side, Side};
use harness::*;
use vrnic::datapath::wire::port::WireCounters;
use vrnic::datapath::wire::DEVICE_PACKETS_PER_PASS;
use vrnic::datapath::Peers;
use vrnic::net::port::Ingress;
use vrnic::wire::bth::Op;
use vrnic::wire::ext::{AethKind, NAK_REMOTE_ACCESS};
use vrnic_hw::*;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's resident memory in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

const MIB: u64 = 1 << 20;
/// ConnectOpts' default path MTU.
const MTU: u64 = 4096;
/// ConnectOpts' default sq_psn and rq_psn: the first PSN A's requester sends.
const FIRST_PSN: u32 = 0x100;

/// Two hosts, one RoCE device each, their wire ports joined; a connected RC QP on each.
struct Hosts {
    a: Side,
    b: Side,
    da: FakeDriver,
    db: FakeDriver,
    wire: WireHosts,
}

impl Hosts {
    fn new() -> Hosts {
        let wire = WireHosts::start(Impairment::default());
        let mut da = wire.hosts[0].driver(0);
        da.roce_up(gid_of(0));
        let mut db = wire.hosts[1].driver(0);
        db.roce_up(gid_of(1));
        let a = new_side(&mut da, 0, QpCaps::default());
        let b = new_side(&mut db, 1, QpCaps::default());
        // A local ACK timeout of 268 ms, so that a test's own steps between a loss and
        // its retransmission never use up retry_cnt.
        let opts = ConnectOpts {
            timeout: 16,
            ..ConnectOpts::default()
        };
        da.connect_qp_to(&a.qp, db.addr(), b.qp.qpn, &opts);
        db.connect_qp_to(&b.qp, da.addr(), a.qp.qpn, &opts);
        Hosts { a, b, da, db, wire }
    }

    /// Host `i`'s wire (its port's counters).
    fn wire_of(&self, i: usize) -> Arc<vrnic::datapath::wire::WireDevice> {
        let fabric = self.wire.hosts[i].fabric();
        fabric
            .wire(&self.wire.hosts[i].rnic(0))
            .expect("a wire port")
    }

    /// The cable's end that carries host `i`'s frames to the other host.
    fn cable_out_of(&self, i: usize) -> &LinkEnd {
        &self.wire.cable[i]
    }

    /// `frame` put on B's switch as if it came over the cable from A.
    fn inject_at_b(&self, frame: &[u8]) {
        let cable_port = self.wire.switches[1].stats().len() - 1;
        self.wire.switches[1].receive(cable_port, frame);
    }

    /// An MR of `len` bytes at `d` whose pages are all one page (cheap at any length).
    fn one_page_mr(d: &mut FakeDriver, side: &Side, len: u64, access: u32) -> Mr {
        let page = d.reg_mr(side.uctx, side.pd, 4096, ACCESS_ALL).pages[0];
        d.reg_mr_on_pages(
            side.uctx,
            side.pd,
            vec![page; (len / 4096) as usize],
            access,
        )
    }
}

fn tx(c: &WireCounters) -> u64 {
    c.tx_frames.load(Relaxed)
}

/// An RC READ request from A's address to QP `qpn` at B.
fn read_request(psn: u32, qpn: u32, va: u64, rkey: u32, len: u32) -> Vec<u8> {
    let mut p = rc_packet(0, 1, Op::ReadRequest, qpn, psn);
    p.reth = Some(vrnic::wire::Reth {
        va,
        rkey,
        dma_len: len,
    });
    p.encode().unwrap()
}

#[test]
fn a_read_for_64_mib_and_64_copies_of_it_get_one_response_stream_in_bounded_passes() {
    let _one = one_at_a_time();
    let mut h = Hosts::new();
    let len = 64 * MIB;
    let mr = Hosts::one_page_mr(&mut h.db, &h.b, len, ACCESS_ALL);
    let stream = len / MTU;
    // B's answers are counted where they leave B's cable end, and go no further.
    h.cable_out_of(1).cut();
    let rss_before = rss();
    let request = read_request(FIRST_PSN, h.b.qp.qpn, mr.iova, mr.key, len as u32);
    for _ in 0..65 {
        h.inject_at_b(&request);
    }
    let sent = || h.cable_out_of(1).state.lock().unwrap().lost;
    wait_for("B's READ responses", || (sent() >= stream).then_some(()));
    // Whatever came after would have come by now: a copy may restart the stream once
    // (it arrived while the stream was under way), not queue 64 more.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (sent, grew) = (sent(), rss().saturating_sub(rss_before));
    assert!(
        sent <= 2 * stream,
        "{sent} frames for one {stream}-packet READ"
    );
    assert!(grew < 64 * MIB, "RSS grew by {} MiB", grew >> 20);
    let burst = h.wire_of(1).port.counters.tx_burst_max.load(Relaxed);
    assert!(
        burst <= DEVICE_PACKETS_PER_PASS as u64,
        "{burst} frames built in one hold of the device lock"
    );
    // B's device still answers its driver.
    assert_eq!(h.db.qp_state(&h.b.qp), QpState::Rts);
}

#[test]
fn a_256_mib_write_goes_out_within_the_budget_of_each_pass() {
    let _one = one_at_a_time();
    let mut h = Hosts::new();
    let len = 256 * MIB;
    let src = Hosts::one_page_mr(&mut h.da, &h.a, len, ACCESS_ALL);
    let dst = Hosts::one_page_mr(&mut h.db, &h.b, len, ACCESS_ALL);
    let rss_before = rss();
    let wr = SendWr::write(1, vec![src.sge(0, len as u32)], &dst, 0).signaled();
    h.da.post_send(&mut h.a.qp, &wr);
    // While it is under way, A's driver is answered.
    let mid = h.da.query_qp(&h.a.qp);
    assert_cqe_ok(&h.da.wait_cqe(&mut h.a.send_cq), 1, WcOpcode::RdmaWrite);
    let grew = rss().saturating_sub(rss_before);
    assert!(grew < 64 * MIB, "RSS grew by {} MiB", grew >> 20);
    let c = &h.wire_of(0).port.counters;
    let burst = c.tx_burst_max.load(Relaxed);
    assert!(
        burst <= DEVICE_PACKETS_PER_PASS as u64,
        "{burst} frames built in one hold of the device lock"
    );
    assert!(tx(c) >= len / MTU);
    assert_eq!(mid.qp_state, u8::from(QpState::Rts));
}

#[test]
fn a_read_outstanding_across_dereg_mr_completes_in_error_and_the_page_keeps_its_bytes() {
    let _one = one_at_a_time();
    let mut h = Hosts::new();
    let len = 64 * 1024;
    let remote = h.db.reg_mr(h.b.uctx, h.b.pd, len, ACCESS_ALL);
    h.db.mr_write(&remote, 0, &pattern(7, len as usize));
    let local = h.da.reg_mr(h.a.uctx, h.a.pd, len, ACCESS_ALL);
    h.cable_out_of(1).hold();
    let wr = SendWr::read(1, vec![local.sge(0, len as u32)], &remote, 0).signaled();
    h.da.post_send(&mut h.a.qp, &wr);
    wait_for("B's READ responses, held on the way", || {
        (h.cable_out_of(1).kept() as u64 >= len / MTU).then_some(())
    });
    h.da.dereg_mr(&local).ok();
    // The guest uses the page for something else.
    h.da.mr_fill(&local, 0x22);
    h.cable_out_of(1).release();
    let cqe = h.da.wait_cqe(&mut h.a.send_cq);
    assert_eq!(cqe.wr_id, 1);
    assert_eq!(cqe.status, u8::from(WcStatus::LocProtErr));
    assert!(
        h.da.mr_read(&local, 0, len).iter().all(|&b| b == 0x22),
        "READ data reached a deregistered page"
    );
}

#[test]
fn a_write_retransmitted_after_dereg_mr_sends_nothing_from_the_page() {
    let _one = one_at_a_time();
    let mut h = Hosts::new();
    let len = 64 * 1024;
    let src = h.da.reg_mr(h.a.uctx, h.a.pd, len, ACCESS_ALL);
    h.da.mr_fill(&src, 0x11);
    let dst = h.db.reg_mr(h.b.uctx, h.b.pd, len, ACCESS_ALL);
    h.db.mr_fill(&dst, 0);
    h.cable_out_of(0).cut();
    let wr = SendWr::write(1, vec![src.sge(0, len as u32)], &dst, 0).signaled();
    h.da.post_send(&mut h.a.qp, &wr);
    wait_for("the WRITE's packets lost on the way", || {
        (h.cable_out_of(0).state.lock().unwrap().lost >= len / MTU).then_some(())
    });
    h.da.dereg_mr(&src).ok();
    // The guest puts a secret where the WRITE's source was.
    h.da.mr_fill(&src, 0x5e);
    h.cable_out_of(0).release();
    let cqe = h.da.wait_cqe(&mut h.a.send_cq);
    assert_eq!(cqe.wr_id, 1);
    assert_eq!(cqe.status, u8::from(WcStatus::LocProtErr));
    assert!(
        !h.db.mr_read(&dst, 0, len).contains(&0x5e),
        "a retransmission carried the page's new contents"
    );
}

#[test]
fn a_duplicate_read_after_rereg_mr_revoked_remote_read_is_nakked_and_fails_the_qp() {
    let _one = one_at_a_time();
    let mut h = Hosts::new();
    let len = 16 * 1024;
    let remote = h.db.reg_mr(h.b.uctx, h.b.pd, len, ACCESS_ALL);
    let local = h.da.reg_mr(h.a.uctx, h.a.pd, len, ACCESS_ALL);
    let wr = SendWr::read(1, vec![local.sge(0, len as u32)], &remote, 0).signaled();
    h.da.post_send(&mut h.a.qp, &wr);
    assert_cqe_ok(&h.da.wait_cqe(&mut h.a.send_cq), 1, WcOpcode::RdmaRead);
    let flags = rereg_flags::CHANGE_ACCESS;
    let (cmd, _) =
        h.db.rereg_mr_cmd(&remote, flags, h.b.pd, ACCESS_ALL & !REMOTE_READ, 0);
    h.db.admin(&cmd).ok();
    // The same READ again (its PSN is behind B's now): a duplicate, checked again.
    h.cable_out_of(1).hold();
    h.inject_at_b(&read_request(
        FIRST_PSN,
        h.b.qp.qpn,
        remote.iova,
        remote.key,
        len as u32,
    ));
    let answers = wait_for("B's NAK remote access error", || {
        let answers = h.cable_out_of(1).kept_packets();
        let nak = AethKind::Nak {
            code: NAK_REMOTE_ACCESS,
        };
        answers
            .iter()
            .any(|p| p.aeth.is_some_and(|a| a.kind() == nak))
            .then_some(answers)
    });
    assert!(
        answers.iter().all(|p| p.bth.opcode.op == Op::Acknowledge),
        "no READ response: {answers:?}"
    );
    wait_for("B's QP in ERR", || {
        (h.db.qp_state(&h.b.qp) == QpState::Err).then_some(())
    });
}
