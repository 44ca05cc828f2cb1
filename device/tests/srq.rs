//! Shared receive queues (SPEC "Shared receive queues"): CREATE/MODIFY/QUERY/DESTROY_SRQ
//! and each of their errors, CREATE_QP with QP_FLAG_SRQ, the BUSY rules, reset; and the
//! receive path: RC SEND and WRITE_WITH_IMM and UD datagrams taking SRQ WQEs in index
//! order (wqe_index = the SRQ slot), SGEs checked against the SRQ's PD, RNR on an empty
//! SRQ, the limit event, SRQ_ERR on a doorbell overflow, and the flush and
//! QP_LAST_WQE_REACHED of a QP entering ERR. Data paths run between two devices and on
//! one (loopback).

mod harness;

use harness::devices::roce;
use harness::*;
use vrnic_hw::*;

on_both_topologies!(
    sends_from_two_qps_take_srq_wqes_in_index_order_and_name_their_slot,
    write_with_imm_takes_an_srq_wqe_and_carries_the_immediate,
    receive_sges_are_checked_against_the_srqs_pd_not_the_qps,
    an_empty_srq_makes_rc_wait_for_rnr_until_a_wqe_is_posted,
    an_empty_srq_with_rnr_retry_0_fails_the_sender_with_rnr_retry_exc_err,
    the_limit_event_fires_once_when_the_srq_runs_low_and_disarms,
    a_producer_index_beyond_the_depth_posts_srq_err_and_the_srq_takes_no_more,
    an_srq_ring_the_device_cannot_read_posts_srq_err,
    a_qp_entering_err_flushes_its_taken_wqe_then_posts_last_wqe_reached,
    ud_qps_sharing_an_srq_take_its_wqes_in_order,
    uc_qps_take_srq_wqes_and_drop_messages_while_it_is_empty,
);

const SRQ_DEPTH_LOG2: u32 = 3;

/// Senders on device A, receivers on device B sharing one SRQ (both on one device for
/// loopback).
struct Shared {
    d: Vec<FakeDriver>,
    ia: usize,
    ib: usize,
    a_uctx: u32,
    a_pd: u32,
    a_cq: Cq,
    senders: Vec<Qp>,
    b_uctx: u32,
    /// The SRQ's PD (the receivers' QPs may be in another, `b_qp_pd`).
    b_pd: u32,
    b_qp_pd: u32,
    b_send_cq: Cq,
    b_recv_cq: Cq,
    srq: Srq,
    receivers: Vec<Qp>,
    /// Last: the drivers disconnect before the devices stop.
    _devices: TestDevices,
}

fn devices_for(t: Topology) -> TestDevices {
    match t {
        Topology::TwoDevices => TestDevices::start(2),
        Topology::Loopback => TestDevices::start(1),
    }
}

impl Shared {
    /// `n` connected RC pairs whose receivers share an SRQ.
    fn rc(t: Topology, n: usize) -> Self {
        Self::rc_with(t, n, ConnectOpts::default(), false)
    }

    /// As `rc`, the receivers' QPs in a PD of their own when `qp_pd_differs`.
    fn rc_with(t: Topology, n: usize, opts: ConnectOpts, qp_pd_differs: bool) -> Self {
        Self::connected(t, QpType::Rc, n, opts, qp_pd_differs)
    }

    /// `n` connected pairs of `kind` (RC or UC) whose receivers share an SRQ.
    fn connected(
        t: Topology,
        kind: QpType,
        n: usize,
        opts: ConnectOpts,
        qp_pd_differs: bool,
    ) -> Self {
        let mut s = Self::new(devices_for(t), kind, n, qp_pd_differs);
        for i in 0..n {
            let (a_addr, b_addr) = (s.d[s.ia].addr(), s.d[s.ib].addr());
            let (a_qpn, b_qpn) = (s.senders[i].qpn, s.receivers[i].qpn);
            s.d[s.ia].connect_qp_to(&s.senders[i], b_addr, b_qpn, &opts);
            s.d[s.ib].connect_qp_to(&s.receivers[i], a_addr, a_qpn, &opts);
        }
        s
    }

    fn new(devices: TestDevices, qp_type: QpType, n: usize, qp_pd_differs: bool) -> Self {
        let count = devices.len();
        let mut d: Vec<FakeDriver> = (0..count).map(|i| devices.addressed_driver(i)).collect();
        let (ia, ib) = (0, count - 1);
        let caps = QpCaps::of(qp_type);
        let a = &mut d[ia];
        let a_uctx = a.alloc_uctx();
        let a_pd = a.alloc_pd(a_uctx);
        let a_cq = a.create_cq(a_uctx, 8);
        let senders = (0..n)
            .map(|_| a.create_qp(a_uctx, a_pd, &a_cq, &a_cq, caps))
            .collect();
        let b = &mut d[ib];
        let b_uctx = b.alloc_uctx();
        let b_pd = b.alloc_pd(b_uctx);
        let b_qp_pd = match qp_pd_differs {
            true => b.alloc_pd(b_uctx),
            false => b_pd,
        };
        let b_send_cq = b.create_cq(b_uctx, 8);
        let b_recv_cq = b.create_cq(b_uctx, 8);
        let srq = b.create_srq(b_uctx, b_pd, SRQ_DEPTH_LOG2, 2);
        let receivers = (0..n)
            .map(|_| b.create_qp_on_srq(b_uctx, b_qp_pd, &b_send_cq, &b_recv_cq, caps, &srq))
            .collect();
        Shared {
            d,
            ia,
            ib,
            a_uctx,
            a_pd,
            a_cq,
            senders,
            b_uctx,
            b_pd,
            b_qp_pd,
            b_send_cq,
            b_recv_cq,
            srq,
            receivers,
            _devices: devices,
        }
    }

    fn a(&mut self) -> &mut FakeDriver {
        &mut self.d[self.ia]
    }

    fn b(&mut self) -> &mut FakeDriver {
        &mut self.d[self.ib]
    }

    /// An MR of the sending side holding `data`.
    fn source(&mut self, data: &[u8]) -> Mr {
        let (uctx, pd) = (self.a_uctx, self.a_pd);
        let mr = self.a().reg_mr(uctx, pd, data.len() as u64, ACCESS_ALL);
        self.a().mr_write(&mr, 0, data);
        mr
    }

    /// A receive buffer of `len` bytes in the SRQ's PD, filled with 0xEE.
    fn sink(&mut self, len: u64) -> Mr {
        let (uctx, pd) = (self.b_uctx, self.b_pd);
        let mr = self.b().reg_mr(uctx, pd, len, ACCESS_ALL);
        self.b().mr_fill(&mr, 0xee);
        mr
    }

    fn post_srq(&mut self, wrs: &[RecvWr]) {
        let (d, srq) = (&mut self.d[self.ib], &mut self.srq);
        d.post_srq_recvs(srq, wrs);
    }

    fn post_send(&mut self, i: usize, wr: &SendWr) {
        let (d, qp) = (&mut self.d[self.ia], &mut self.senders[i]);
        d.post_send(qp, wr);
    }

    fn send_cqe(&mut self) -> Cqe {
        let (d, cq) = (&mut self.d[self.ia], &mut self.a_cq);
        d.wait_cqe(cq)
    }

    fn recv_cqe(&mut self) -> Cqe {
        let (d, cq) = (&mut self.d[self.ib], &mut self.b_recv_cq);
        d.wait_cqe(cq)
    }

    fn poll_recv(&mut self) -> Option<Cqe> {
        let (d, cq) = (&mut self.d[self.ib], &mut self.b_recv_cq);
        d.poll_cq(cq)
    }

    fn receiver_state(&mut self, i: usize) -> QpState {
        let (d, qp) = (&mut self.d[self.ib], &self.receivers[i]);
        d.qp_state(qp)
    }
}

/// (opcode, status, vendor_err, byte_len, wqe_index, qpn, wr_id) of a CQE.
fn fields(c: &Cqe) -> (u8, u8, u8, u32, u16, u32, u64) {
    (
        c.opcode,
        c.status,
        c.vendor_err,
        c.byte_len.to_native(),
        c.wqe_index.to_native(),
        c.qpn.to_native(),
        c.wr_id.to_native(),
    )
}

fn ok_recv(len: u32, index: u16, qpn: u32, wr_id: u64) -> (u8, u8, u8, u32, u16, u32, u64) {
    (
        WcOpcode::Recv.into(),
        WcStatus::Success.into(),
        VendorErr::None.into(),
        len,
        index,
        qpn,
        wr_id,
    )
}

// ---------------------------------------------------------------------- RC receives

fn sends_from_two_qps_take_srq_wqes_in_index_order_and_name_their_slot(t: Topology) {
    let mut s = Shared::rc(t, 2);
    let bufs: Vec<Mr> = (0..4).map(|_| s.sink(300)).collect();
    let wrs: Vec<RecvWr> = bufs
        .iter()
        .enumerate()
        .map(|(i, b)| RecvWr::new(0x100 + i as u64, vec![b.sge(0, 100), b.sge(100, 200)]))
        .collect();
    s.post_srq(&wrs);
    let data: Vec<Vec<u8>> = (0..4).map(|i| pattern(40 + i, 150 + i as usize)).collect();
    let srcs: Vec<Mr> = data.iter().map(|d| s.source(d)).collect();
    let (q0, q1) = (s.receivers[0].qpn, s.receivers[1].qpn);

    // Messages one at a time, alternating between the QPs: each takes the next SRQ WQE.
    let mut cqes = Vec::new();
    for (i, (src, d)) in srcs.iter().zip(&data).enumerate() {
        s.post_send(
            i % 2,
            &SendWr::send(i as u64, vec![src.sge(0, d.len() as u32)]).signaled(),
        );
        assert_cqe_ok(&s.send_cqe(), i as u64, WcOpcode::Send);
        cqes.push(s.recv_cqe());
    }

    let got: Vec<_> = cqes.iter().map(fields).collect();
    assert_eq!(
        got,
        vec![
            ok_recv(150, 0, q0, 0x100),
            ok_recv(151, 1, q1, 0x101),
            ok_recv(152, 2, q0, 0x102),
            ok_recv(153, 3, q1, 0x103),
        ]
    );
    for (i, c) in cqes.iter().enumerate() {
        assert_eq!(c.flags, (CQE_FLAG_RECV | CQE_FLAG_SRQ) as u8);
        assert_eq!(c.srqn.to_native(), s.srq.srqn, "the SRQ is named");
        let src_qp = s.senders[i % 2].qpn;
        assert_eq!(c.src_qp.to_native(), src_qp);
        let len = data[i].len() as u64;
        assert_same_bytes(&s.b().mr_read(&bufs[i], 0, len), &data[i], "received data");
        assert_eq!(
            s.b().mr_read(&bufs[i], len, 1),
            vec![0xee],
            "nothing beyond"
        );
    }
}

fn write_with_imm_takes_an_srq_wqe_and_carries_the_immediate(t: Topology) {
    let mut s = Shared::rc(t, 1);
    let target = s.sink(64);
    let data = pattern(3, 64);
    let src = s.source(&data);
    s.post_srq(&[RecvWr::new(0x77, vec![])]);

    s.post_send(
        0,
        &SendWr::write_imm(1, vec![src.sge(0, 64)], &target, 0, [9, 8, 7, 6]).signaled(),
    );

    assert_cqe_ok(&s.send_cqe(), 1, WcOpcode::RdmaWrite);
    let r = s.recv_cqe();
    assert_cqe_ok(&r, 0x77, WcOpcode::RecvRdmaWithImm);
    let qpn = s.receivers[0].qpn;
    assert_eq!(
        (
            r.imm_data,
            r.wc_flags,
            r.byte_len.to_native(),
            r.wqe_index.to_native(),
            r.qpn.to_native()
        ),
        ([9, 8, 7, 6], u8::from(WcFlags::WithImm), 64, 0, qpn)
    );
    assert_eq!(
        (r.flags, r.srqn.to_native()),
        ((CQE_FLAG_RECV | CQE_FLAG_SRQ) as u8, s.srq.srqn)
    );
    assert_same_bytes(&s.b().mr_read(&target, 0, 64), &data, "written data");
}

fn receive_sges_are_checked_against_the_srqs_pd_not_the_qps(t: Topology) {
    let mut s = Shared::rc_with(t, 1, ConnectOpts::default(), true);
    let good = s.sink(32);
    let (uctx, qp_pd) = (s.b_uctx, s.b_qp_pd);
    let of_qp_pd = s.b().reg_mr(uctx, qp_pd, 32, ACCESS_ALL);
    let data = pattern(4, 32);
    let src = s.source(&data);
    s.post_srq(&[
        RecvWr::new(1, vec![good.sge(0, 32)]),
        RecvWr::new(2, vec![of_qp_pd.sge(0, 32)]),
    ]);

    // The SRQ's PD is not the QP's: its buffers are still fine.
    s.post_send(0, &SendWr::send(10, vec![src.sge(0, 32)]).signaled());
    assert_cqe_ok(&s.send_cqe(), 10, WcOpcode::Send);
    let qpn = s.receivers[0].qpn;
    assert_eq!(fields(&s.recv_cqe()), ok_recv(32, 0, qpn, 1));
    assert_same_bytes(&s.b().mr_read(&good, 0, 32), &data, "received data");

    // A buffer of the QP's PD is not of the SRQ's: the receive fails.
    s.post_send(0, &SendWr::send(11, vec![src.sge(0, 32)]).signaled());
    let c = s.send_cqe();
    assert_cqe_status(&c, WcStatus::RemOpErr, VendorErr::RemoteError);
    let r = s.recv_cqe();
    assert_cqe_status(&r, WcStatus::LocProtErr, VendorErr::PdMismatch);
    assert_eq!((r.wr_id.to_native(), r.wqe_index.to_native()), (2, 1));
    assert_eq!(
        (r.flags, r.srqn.to_native()),
        ((CQE_FLAG_RECV | CQE_FLAG_SRQ) as u8, s.srq.srqn),
        "an error completion of an SRQ WQE names its SRQ"
    );
    let data = s.b().wait_async_event_for(EventType::QpFatal, qpn);
    assert_eq!(data, u32::from(u8::from(VendorErr::PdMismatch)));
    assert_eq!(s.receiver_state(0), QpState::Err);
}

fn an_empty_srq_makes_rc_wait_for_rnr_until_a_wqe_is_posted(t: Topology) {
    let mut s = Shared::rc(t, 1);
    let buf = s.sink(16);
    let data = pattern(5, 16);
    let src = s.source(&data);

    s.post_send(0, &SendWr::send(1, vec![src.sge(0, 16)]).signaled());
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(s.poll_recv(), None, "nothing to receive into yet");
    s.post_srq(&[RecvWr::new(0x42, vec![buf.sge(0, 16)])]);

    assert_cqe_ok(&s.send_cqe(), 1, WcOpcode::Send);
    let qpn = s.receivers[0].qpn;
    assert_eq!(fields(&s.recv_cqe()), ok_recv(16, 0, qpn, 0x42));
    assert_same_bytes(&s.b().mr_read(&buf, 0, 16), &data, "received data");
}

fn an_empty_srq_with_rnr_retry_0_fails_the_sender_with_rnr_retry_exc_err(t: Topology) {
    let opts = ConnectOpts {
        rnr_retry: 0,
        ..ConnectOpts::default()
    };
    let mut s = Shared::rc_with(t, 1, opts, false);
    let src = s.source(&[1; 8]);

    s.post_send(0, &SendWr::send(1, vec![src.sge(0, 8)]).signaled());

    assert_cqe_status(&s.send_cqe(), WcStatus::RnrRetryExcErr, VendorErr::Rnr);
    assert_eq!(
        s.receiver_state(0),
        QpState::Rts,
        "the receiver is not at fault"
    );
}

fn the_limit_event_fires_once_when_the_srq_runs_low_and_disarms(t: Topology) {
    let mut s = Shared::rc(t, 2);
    let bufs: Vec<Mr> = (0..4).map(|_| s.sink(8)).collect();
    let wrs: Vec<RecvWr> = bufs
        .iter()
        .enumerate()
        .map(|(i, b)| RecvWr::new(i as u64, vec![b.sge(0, 8)]))
        .collect();
    s.post_srq(&wrs);
    // A second handle on the SRQ, for commands while the fixture is borrowed.
    let srq_view = s.srq.clone();
    s.b().arm_srq_limit(&srq_view, 2).ok();
    assert_eq!(srq_attr(&s.b().query_srq(&srq_view)), (8, 2, 2));
    let src = s.source(&[7; 8]);
    let srqn = s.srq.srqn;

    // 4 posted: taking the 1st leaves 3, the 2nd leaves 2 (not fewer than 2), the 3rd 1.
    for i in 0..2 {
        s.post_send(
            i % 2,
            &SendWr::send(i as u64, vec![src.sge(0, 8)]).signaled(),
        );
        assert_cqe_ok(&s.send_cqe(), i as u64, WcOpcode::Send);
        s.recv_cqe();
    }
    assert_eq!(
        s.b().poll_async_event().map(|e| e.event_type),
        None,
        "not yet"
    );
    s.post_send(0, &SendWr::send(2, vec![src.sge(0, 8)]).signaled());
    assert_cqe_ok(&s.send_cqe(), 2, WcOpcode::Send);
    s.recv_cqe();

    let e = s.b().wait_async_event();
    assert_eq!(
        (e.event_type, e.obj.to_native(), e.data.to_native()),
        (u8::from(EventType::SrqLimitReached), srqn, 0)
    );
    assert_eq!(srq_attr(&s.b().query_srq(&srq_view)), (8, 2, 0), "disarmed");
    s.post_send(1, &SendWr::send(3, vec![src.sge(0, 8)]).signaled());
    assert_cqe_ok(&s.send_cqe(), 3, WcOpcode::Send);
    assert_eq!(s.recv_cqe().wqe_index.to_native(), 3);
    assert_eq!(
        s.b().poll_async_event().map(|e| e.event_type),
        None,
        "only once"
    );
}

fn a_producer_index_beyond_the_depth_posts_srq_err_and_the_srq_takes_no_more(t: Topology) {
    let opts = ConnectOpts {
        rnr_retry: 0,
        ..ConnectOpts::default()
    };
    let mut s = Shared::rc_with(t, 1, opts, false);
    let src = s.source(&[1; 8]);
    let (page, slot, srqn) = (s.srq.page, s.srq.slot, s.srq.srqn);
    s.b().db_store(page, slot, 0, (1 << SRQ_DEPTH_LOG2) + 1);

    s.post_send(0, &SendWr::send(1, vec![src.sge(0, 8)]).signaled());

    assert_cqe_status(&s.send_cqe(), WcStatus::RnrRetryExcErr, VendorErr::Rnr);
    let e = s.b().wait_async_event();
    assert_eq!(
        (e.event_type, e.obj.to_native()),
        (u8::from(EventType::SrqErr), srqn)
    );
    assert_eq!(s.poll_recv(), None, "no WQE was taken");
    // Even a sane producer index now finds the SRQ failed.
    s.b().db_store(page, slot, 0, 1);
    let fresh = Shared::fresh_sender(&mut s, opts);
    s.post_send(fresh, &SendWr::send(2, vec![src.sge(0, 8)]).signaled());
    assert_cqe_status(&s.send_cqe(), WcStatus::RnrRetryExcErr, VendorErr::Rnr);
    assert_eq!(
        s.b().poll_async_event().map(|e| e.event_type),
        None,
        "SRQ_ERR once"
    );
}

fn an_srq_ring_the_device_cannot_read_posts_srq_err(t: Topology) {
    let opts = ConnectOpts {
        rnr_retry: 0,
        ..ConnectOpts::default()
    };
    let mut s = Shared::rc_with(t, 1, opts, false);
    let (uctx, pd) = (s.b_uctx, s.b_pd);
    let (mut cmd, _) = s.b().create_srq_cmd(uctx, pd, 1, 1);
    // A ring in guest-physical space nothing maps (CREATE_SRQ reads only the page list).
    let pages = [UNMAPPED_GPA];
    cmd.ring = s.b().page_list(&pages, 12, Layout::Direct);
    let [srqn, slot, page, _] = s.b().admin(&cmd).ok();
    let (b_send, b_recv) = (&s.b_send_cq, &s.b_recv_cq);
    let unreadable = Srq {
        srqn,
        uctx,
        pd,
        page,
        slot,
        ring: s.srq.ring.clone(),
        pi: 0,
    };
    let caps = QpCaps::default();
    let receiver = s.d[s.ib].create_qp_on_srq(uctx, pd, b_send, b_recv, caps, &unreadable);
    let (a_uctx, a_pd) = (s.a_uctx, s.a_pd);
    let sender = {
        let (d, cq) = (&mut s.d[s.ia], &s.a_cq);
        d.create_qp(a_uctx, a_pd, cq, cq, caps)
    };
    let (a_addr, b_addr) = (s.d[s.ia].addr(), s.d[s.ib].addr());
    s.d[s.ia].connect_qp_to(&sender, b_addr, receiver.qpn, &opts);
    s.d[s.ib].connect_qp_to(&receiver, a_addr, sender.qpn, &opts);
    s.senders.push(sender);
    s.receivers.push(receiver);
    s.b().db_store(page, slot, 0, 1);
    let src = s.source(&[1; 8]);

    s.post_send(1, &SendWr::send(1, vec![src.sge(0, 8)]).signaled());

    assert_cqe_status(&s.send_cqe(), WcStatus::RnrRetryExcErr, VendorErr::Rnr);
    let e = s.b().wait_async_event();
    assert_eq!(
        (e.event_type, e.obj.to_native()),
        (u8::from(EventType::SrqErr), srqn)
    );
    assert_eq!(s.receiver_state(1), QpState::Rts, "the QP is not at fault");
    assert_eq!(s.poll_recv(), None);
}

impl Shared {
    /// One more connected pair (sender on A, receiver on the SRQ); returns its index.
    fn fresh_sender(&mut self, opts: ConnectOpts) -> usize {
        let caps = QpCaps::default();
        let (a_uctx, a_pd) = (self.a_uctx, self.a_pd);
        let sender = {
            let (d, cq) = (&mut self.d[self.ia], &self.a_cq);
            d.create_qp(a_uctx, a_pd, cq, cq, caps)
        };
        let (b_uctx, b_pd) = (self.b_uctx, self.b_qp_pd);
        let receiver = {
            let d = &mut self.d[self.ib];
            d.create_qp_on_srq(
                b_uctx,
                b_pd,
                &self.b_send_cq,
                &self.b_recv_cq,
                caps,
                &self.srq,
            )
        };
        let (a_addr, b_addr) = (self.d[self.ia].addr(), self.d[self.ib].addr());
        self.d[self.ia].connect_qp_to(&sender, b_addr, receiver.qpn, &opts);
        self.d[self.ib].connect_qp_to(&receiver, a_addr, sender.qpn, &opts);
        self.senders.push(sender);
        self.receivers.push(receiver);
        self.senders.len() - 1
    }
}

/// 1 MiB pages of the sender's memory, then pages nothing maps: a SEND from them moves its
/// first chunk (1 MiB) and faults on the second.
const UNMAPPED_GPA: u64 = 0x60_0000_0000;

fn a_qp_entering_err_flushes_its_taken_wqe_then_posts_last_wqe_reached(t: Topology) {
    let mut s = Shared::rc(t, 2);
    let big = s.sink(2 << 20);
    s.post_srq(&[RecvWr::new(0x51, vec![big.sge(0, 2 << 20)])]);
    let (uctx, pd) = (s.a_uctx, s.a_pd);
    let mut pages = s.a().mem.alloc_scattered_pages(256, 12);
    pages.extend((0..256).map(|i| UNMAPPED_GPA + i * 4096));
    let src = s.a().reg_mr_on_pages(uctx, pd, pages, ACCESS_ALL);
    let (q0, q1) = (s.receivers[0].qpn, s.receivers[1].qpn);

    // The first chunk lands and the receiver takes the SRQ WQE; the second faults at the
    // sender, so the message never completes.
    s.post_send(0, &SendWr::send(1, vec![src.sge(0, 2 << 20)]).signaled());
    assert_cqe_status(&s.send_cqe(), WcStatus::LocProtErr, VendorErr::DmaFault);
    assert_eq!(s.poll_recv(), None, "the message did not complete");
    let (d, qp) = (&mut s.d[s.ib], &mut s.receivers[0]);
    d.set_qp_state(qp, QpState::Err).ok();

    let r = s.recv_cqe();
    assert_eq!(
        fields(&r),
        (
            WcOpcode::Recv.into(),
            WcStatus::WrFlushErr.into(),
            VendorErr::Flush.into(),
            0,
            0,
            q0,
            0x51
        )
    );
    assert_eq!(
        (r.flags, r.srqn.to_native()),
        ((CQE_FLAG_RECV | CQE_FLAG_SRQ) as u8, s.srq.srqn),
        "a flushed SRQ WQE names its SRQ too"
    );
    s.b().wait_async_event_for(EventType::QpLastWqeReached, q0);
    // A QP that took nothing: no CQE, only the event; once.
    let (d, qp) = (&mut s.d[s.ib], &mut s.receivers[1]);
    d.set_qp_state(qp, QpState::Err).ok();
    s.b().wait_async_event_for(EventType::QpLastWqeReached, q1);
    let (d, qp) = (&mut s.d[s.ib], &mut s.receivers[1]);
    d.set_qp_state(qp, QpState::Err).ok();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(s.poll_recv(), None);
    assert_eq!(
        s.b().poll_async_event().map(|e| e.event_type),
        None,
        "once per ERR"
    );
}

fn uc_qps_take_srq_wqes_and_drop_messages_while_it_is_empty(t: Topology) {
    let mut s = Shared::connected(t, QpType::Uc, 2, ConnectOpts::default(), false);
    let buf = s.sink(64);
    let data = pattern(9, 64);
    let src = s.source(&data);

    // Nothing posted: UC drops the message, the sender completes anyway.
    s.post_send(0, &SendWr::send(1, vec![src.sge(0, 64)]).signaled());
    assert_cqe_ok(&s.send_cqe(), 1, WcOpcode::Send);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(s.poll_recv(), None);
    s.post_srq(&[RecvWr::new(0x61, vec![buf.sge(0, 64)])]);
    s.post_send(1, &SendWr::send(2, vec![src.sge(0, 64)]).signaled());

    assert_cqe_ok(&s.send_cqe(), 2, WcOpcode::Send);
    let q1 = s.receivers[1].qpn;
    assert_eq!(fields(&s.recv_cqe()), ok_recv(64, 0, q1, 0x61));
    assert_same_bytes(&s.b().mr_read(&buf, 0, 64), &data, "received data");
    assert_eq!(
        (s.receiver_state(0), s.receiver_state(1)),
        (QpState::Rts, QpState::Rts)
    );
}

fn ud_qps_sharing_an_srq_take_its_wqes_in_order(t: Topology) {
    let mut s = Shared::new(devices_for(t), QpType::Ud, 2, false);
    for i in 0..2 {
        let (d, qp) = (&mut s.d[s.ia], &s.senders[i]);
        d.ud_to_rts(qp, TEST_QKEY);
        let (d, qp) = (&mut s.d[s.ib], &s.receivers[i]);
        d.ud_to_rts(qp, TEST_QKEY);
    }
    let bufs: Vec<Mr> = (0..2).map(|_| s.sink(200)).collect();
    let wrs: Vec<RecvWr> = bufs
        .iter()
        .enumerate()
        .map(|(i, b)| RecvWr::new(0x200 + i as u64, vec![b.sge(0, 200)]))
        .collect();
    s.post_srq(&wrs);
    let payload = pattern(8, 100);
    let src = s.source(&payload);
    let peer = s.d[s.ib].addr();

    let mut got = Vec::new();
    for i in [1usize, 0] {
        let av = ud_av(peer, s.receivers[i].qpn, TEST_QKEY);
        s.post_send(
            i,
            &SendWr::datagram(i as u64, vec![src.sge(0, 100)], av).signaled(),
        );
        assert_cqe_ok(&s.send_cqe(), i as u64, WcOpcode::Send);
        got.push(s.recv_cqe());
    }

    let (q0, q1) = (s.receivers[0].qpn, s.receivers[1].qpn);
    assert_eq!(
        got.iter().map(fields).collect::<Vec<_>>(),
        vec![ok_recv(140, 0, q1, 0x200), ok_recv(140, 1, q0, 0x201)]
    );
    for (c, i) in got.iter().zip([1usize, 0]) {
        assert_eq!(c.src_qp.to_native(), s.senders[i].qpn);
        assert_eq!(
            (c.flags & CQE_FLAG_SRQ as u8, c.srqn.to_native()),
            (CQE_FLAG_SRQ as u8, s.srq.srqn)
        );
    }
    for b in &bufs {
        assert_same_bytes(
            &s.b().mr_read(b, 40, 100),
            &payload,
            "payload after the GRH",
        );
    }
}

// ---------------------------------------------------------------------- admin commands

/// A device, a driver, a context with a PD.
fn device() -> (TestDevices, FakeDriver, u32, u32) {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    (devices, d, uctx, pd)
}

#[test]
fn create_srq_gives_a_slot_of_the_contexts_page_and_query_reports_its_attributes() {
    let (_devices, mut d, _, _) = device();
    let (uctx, page) = d.alloc_uctx_page();
    let pd = d.alloc_pd(uctx);
    let cq = d.create_cq(uctx, 4);

    let srq = d.create_srq(uctx, pd, 5, 3);
    let second = d.create_srq(uctx, pd, 1, 16);

    assert_eq!((srq.page, second.page), (page, page));
    assert_eq!(
        (cq.slot, srq.slot, second.slot),
        (0, 1, 2),
        "the lowest free slots"
    );
    assert_eq!(second.srqn, srq.srqn + 1);
    assert_eq!(d.db_load(page, srq.slot, 0), 0, "the slot starts zeroed");
    assert_eq!(srq_attr(&d.query_srq(&srq)), (32, 3, 0));
    assert_eq!(srq_attr(&d.query_srq(&second)), (2, 16, 0));
}

#[test]
fn create_srq_refuses_each_bad_field_with_its_offset() {
    let (_devices, mut d, uctx, pd) = device();
    let other = d.alloc_uctx();
    let other_pd = d.alloc_pd(other);
    let (good, _) = d.create_srq_cmd(uctx, pd, 3, 2);
    let with = |f: &dyn Fn(&mut CmdCreateSrq)| {
        let mut c = good;
        f(&mut c);
        c
    };
    let cases: Vec<(CmdCreateSrq, AqStatus, usize)> = vec![
        (
            with(&|c| c.uctx = 77.into()),
            AqStatus::BadHandle,
            CmdCreateSrq::UCTX_OFF,
        ),
        (
            with(&|c| c.pdn = 999.into()),
            AqStatus::BadHandle,
            CmdCreateSrq::PDN_OFF,
        ),
        (
            with(&|c| c.pdn = other_pd.into()),
            AqStatus::Permission,
            CmdCreateSrq::PDN_OFF,
        ),
        (
            with(&|c| c.depth_log2 = 0),
            AqStatus::BadSize,
            CmdCreateSrq::DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.depth_log2 = 13),
            AqStatus::BadSize,
            CmdCreateSrq::DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.max_sge = 0),
            AqStatus::BadSize,
            CmdCreateSrq::MAX_SGE_OFF,
        ),
        (
            with(&|c| c.max_sge = 17),
            AqStatus::BadSize,
            CmdCreateSrq::MAX_SGE_OFF,
        ),
        (
            with(&|c| c.max_sge = 4),
            AqStatus::BadSize,
            CmdCreateSrq::WQE_SHIFT_OFF,
        ),
        (
            with(&|c| c.wqe_shift = 10),
            AqStatus::BadSize,
            CmdCreateSrq::WQE_SHIFT_OFF,
        ),
        (
            with(&|c| c.srq_type = 2),
            AqStatus::BadField,
            CmdCreateSrq::SRQ_TYPE_OFF,
        ),
        (
            with(&|c| c.xrcdn = 1.into()),
            AqStatus::BadField,
            CmdCreateSrq::XRCDN_OFF,
        ),
        (
            with(&|c| c.cqn = 1.into()),
            AqStatus::BadField,
            CmdCreateSrq::CQN_OFF,
        ),
        (
            with(&|c| c.reserved2[83] = 1),
            AqStatus::BadField,
            CmdCreateSrq::RESERVED2_OFF,
        ),
        (
            with(&|c| c.ring.npages = 0.into()),
            AqStatus::BadSize,
            CmdCreateSrq::RING_OFF + PageList::NPAGES_OFF,
        ),
    ];

    for (cmd, status, offset) in cases {
        d.admin(&cmd).expect_err(status, offset);
    }
    let srq = d.create_srq(uctx, pd, 3, 2);
    assert_eq!(srq.srqn, 0, "the failed commands created nothing");
}

#[test]
fn modify_and_query_srq_check_their_fields_and_the_caller() {
    let (_devices, mut d, uctx, pd) = device();
    let other = d.alloc_uctx();
    let srq = d.create_srq(uctx, pd, 3, 1);
    let modify = |m: u32, limit: u32| FakeDriver::modify_srq_cmd(&srq, m, limit);
    let out = d.mem.alloc(64, 8);
    let query = FakeDriver::query_srq_cmd(&srq, out, SrqAttr::SIZE as u32);
    use srq_attr_mask::{LIMIT, MAX_WR};

    let cases: Vec<(CmdModifySrq, AqStatus, usize)> = vec![
        (
            modify(MAX_WR, 0),
            AqStatus::NotSupported,
            CmdModifySrq::ATTR_MASK_OFF,
        ),
        (
            modify(4, 0),
            AqStatus::BadField,
            CmdModifySrq::ATTR_MASK_OFF,
        ),
        (
            modify(LIMIT, 9),
            AqStatus::BadField,
            CmdModifySrq::ATTR_OFF + SrqAttr::SRQ_LIMIT_OFF,
        ),
        (
            CmdModifySrq {
                srqn: 55.into(),
                ..modify(LIMIT, 1)
            },
            AqStatus::BadHandle,
            CmdModifySrq::SRQN_OFF,
        ),
        (
            CmdModifySrq {
                uctx: other.into(),
                ..modify(LIMIT, 1)
            },
            AqStatus::Permission,
            CmdModifySrq::UCTX_OFF,
        ),
        (
            CmdModifySrq {
                out_addr: out.into(),
                ..modify(LIMIT, 1)
            },
            AqStatus::BadField,
            CmdModifySrq::OUT_ADDR_OFF,
        ),
        (
            CmdModifySrq {
                attr_mask: LIMIT.into(),
                ..query
            },
            AqStatus::BadField,
            CmdModifySrq::ATTR_MASK_OFF,
        ),
        (
            CmdModifySrq {
                attr: SrqAttr {
                    srq_limit: 1.into(),
                    ..Default::default()
                },
                ..query
            },
            AqStatus::BadField,
            CmdModifySrq::ATTR_OFF + SrqAttr::SRQ_LIMIT_OFF,
        ),
        (
            CmdModifySrq {
                out_len: 15.into(),
                ..query
            },
            AqStatus::BadSize,
            CmdModifySrq::OUT_LEN_OFF,
        ),
        (
            CmdModifySrq {
                out_addr: 0x7_0000_0000_0000.into(),
                ..query
            },
            AqStatus::BadAddress,
            CmdModifySrq::OUT_ADDR_OFF,
        ),
        (
            CmdModifySrq {
                reserved0: [1; 80],
                ..query
            },
            AqStatus::BadField,
            CmdModifySrq::RESERVED0_OFF,
        ),
    ];
    for (cmd, status, offset) in cases {
        d.admin(&cmd).expect_err(status, offset);
    }

    assert_eq!(srq_attr(&d.query_srq(&srq)), (8, 1, 0), "nothing changed");
    d.arm_srq_limit(&srq, 8).ok();
    assert_eq!(srq_attr(&d.query_srq(&srq)), (8, 1, 8), "at most max_wr");
    d.arm_srq_limit(&srq, 0).ok();
    assert_eq!(srq_attr(&d.query_srq(&srq)), (8, 1, 0), "0 disarms");
    d.admin(&modify(0, 0)).ok();
}

#[test]
fn destroy_srq_is_busy_while_a_qp_uses_it_and_the_srq_owner_is_busy_too() {
    let (_devices, mut d, uctx, pd) = device();
    let other = d.alloc_uctx();
    let cq = d.create_cq(uctx, 4);
    let srq = d.create_srq(uctx, pd, 3, 1);
    let qp = d.create_qp_on_srq(uctx, pd, &cq, &cq, QpCaps::default(), &srq);

    d.destroy_srq(&srq)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.admin(&cmd_handle(AqOpcode::DestroySrq, srq.srqn, other))
        .expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    d.destroy_qp(&qp).ok();
    d.destroy_cq(&cq).ok();
    d.dealloc_pd(uctx, pd)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.dealloc_uctx(uctx)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.destroy_srq(&srq).ok();

    d.destroy_srq(&srq)
        .expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    assert_eq!(d.db_load(srq.page, srq.slot, 0), 0);
    d.dealloc_pd(uctx, pd).ok();
    d.dealloc_uctx(uctx).ok();
}

#[test]
fn create_qp_on_an_srq_needs_a_live_srq_of_its_context_and_no_receive_queue() {
    let (_devices, mut d, uctx, pd) = device();
    let cq = d.create_cq(uctx, 4);
    let srq = d.create_srq(uctx, pd, 3, 1);
    let other = d.alloc_uctx();
    let other_pd = d.alloc_pd(other);
    let other_srq = d.create_srq(other, other_pd, 3, 1);
    let (good, _) = d.create_qp_on_srq_cmd(uctx, pd, &cq, &cq, QpCaps::default(), &srq);
    let (own_rq, _) = d.create_qp_cmd(uctx, pd, &cq, &cq, QpCaps::default());
    let with = |f: &dyn Fn(&mut CmdCreateQp)| {
        let mut c = good;
        f(&mut c);
        c
    };
    let cases: Vec<(CmdCreateQp, AqStatus, usize)> = vec![
        (
            with(&|c| c.rq_depth_log2 = 3),
            AqStatus::BadField,
            CmdCreateQp::RQ_DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.rq_wqe_shift = 6),
            AqStatus::BadField,
            CmdCreateQp::RQ_WQE_SHIFT_OFF,
        ),
        (
            with(&|c| c.max_recv_sge = 1),
            AqStatus::BadField,
            CmdCreateQp::MAX_RECV_SGE_OFF,
        ),
        (
            with(&|c| c.rq_ring = own_rq.rq_ring),
            AqStatus::BadField,
            CmdCreateQp::RQ_RING_OFF,
        ),
        (
            with(&|c| c.flags = 3),
            AqStatus::BadField,
            CmdCreateQp::FLAGS_OFF,
        ),
        (
            with(&|c| c.srqn = 9.into()),
            AqStatus::BadHandle,
            CmdCreateQp::SRQN_OFF,
        ),
        (
            with(&|c| c.srqn = other_srq.srqn.into()),
            AqStatus::Permission,
            CmdCreateQp::SRQN_OFF,
        ),
        (
            CmdCreateQp {
                srqn: other_srq.srqn.into(),
                ..own_rq
            },
            AqStatus::BadField,
            CmdCreateQp::SRQN_OFF,
        ),
    ];
    for (cmd, status, offset) in cases {
        d.admin(&cmd).expect_err(status, offset);
    }

    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let caps = QpCaps::of(qp_type);
        let qp = d.create_qp_on_srq(uctx, pd, &cq, &cq, caps, &srq);
        d.destroy_qp(&qp).ok();
    }
}

#[test]
fn the_gsi_qp_cannot_take_its_receives_from_an_srq() {
    let devices = TestDevices::start_links(vec![roce(0)]);
    let mut d = devices.addressed_driver(0);
    let pd = d.alloc_pd(KERNEL_UCTX);
    let cq = d.create_cq(KERNEL_UCTX, 4);
    let srq = d.create_srq(KERNEL_UCTX, pd, 3, 1);
    let caps = QpCaps::of(QpType::Gsi);

    let (cmd, _) = d.create_qp_on_srq_cmd(KERNEL_UCTX, pd, &cq, &cq, caps, &srq);

    d.admin(&cmd)
        .expect_err(AqStatus::BadField, CmdCreateQp::FLAGS_OFF);
}

#[test]
fn a_qp_on_an_srq_ignores_its_receive_producer_index() {
    let (_devices, mut d, uctx, pd) = device();
    let mut cq = d.create_cq(uctx, 4);
    let srq = d.create_srq(uctx, pd, 3, 1);
    let mut qp = d.create_qp_on_srq(uctx, pd, &cq, &cq, QpCaps::default(), &srq);
    d.qp_to_init(&qp, ACCESS_ALL).ok();

    // A receive doorbell far beyond any depth: no receive queue, so no doorbell error.
    qp.rq_pi = 1000;
    d.ring_rq(&qp);
    std::thread::sleep(std::time::Duration::from_millis(20));

    assert_eq!(d.qp_state(&qp), QpState::Init);
    assert_eq!(d.poll_cq(&mut cq), None);
}

#[test]
fn a_device_reset_destroys_every_srq() {
    let (_devices, mut d, uctx, pd) = device();
    let srq = d.create_srq(uctx, pd, 3, 1);

    d.reset_device();
    d.bring_up();
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);

    let stale = FakeDriver::query_srq_cmd(&srq, d.mem.alloc(64, 8), SrqAttr::SIZE as u32);
    d.admin(&stale)
        .expect_err(AqStatus::BadHandle, CmdModifySrq::SRQN_OFF);
    let again = d.create_srq(uctx, pd, 3, 1);
    assert_eq!(again.srqn, 0, "the table was emptied");
}

#[test]
fn create_srq_fails_with_no_resources_beyond_max_srq() {
    let (_devices, mut d, uctx, pd) = device();
    let (cmd, _) = d.create_srq_cmd(uctx, pd, 1, 1);
    let bytes = bytes_of(&cmd);

    for batch in 0..MAX_SRQ / 8 {
        let cmds: Vec<&[u8]> = (0..8).map(|_| bytes.as_slice()).collect();
        for (i, r) in d.admin_batch(&cmds).into_iter().enumerate() {
            assert_eq!(r.ok()[0], batch * 8 + i as u32);
        }
    }

    d.admin(&cmd).expect_general_err(AqStatus::NoResources);
}
