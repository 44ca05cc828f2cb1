//! XRC (SPEC "XRC"): an XRC_INI QP on one device reaches the XRC SRQs of several
//! processes on another (or the same) device through one XRC_TGT QP of the kernel: SEND,
//! WRITE, WRITE_WITH_IMM, READ and atomics byte-exact, completions on each SRQ's CQ with
//! qpn = TGT, src_qp = INI, CQE_FLAG_SRQ and srqn; the BAD_SRQ rules, the SRQ's PD for
//! rkeys, the initiator's opcode restrictions, RNR on an empty XRC SRQ, flush and
//! QP_LAST_WQE_REACHED; and the admin side: ALLOC/DEALLOC_XRCD, XRC SRQs, XRC_INI and
//! XRC_TGT QPs with every validation rule, BUSY and limit.

mod harness;

use harness::*;
use vrnic_hw::*;

on_both_topologies!(
    send_and_write_with_imm_land_in_the_named_srq_and_complete_on_its_cq,
    write_read_and_atomics_are_checked_against_the_srqs_pd,
    two_srqs_of_two_processes_are_served_through_one_tgt_qp,
    a_request_for_an_unknown_srqn_fails_with_bad_srq,
    a_request_for_a_basic_srq_fails_with_bad_srq,
    a_request_for_an_srq_of_another_domain_fails_with_bad_srq,
    an_rkey_of_another_pd_than_the_srqs_is_refused,
    a_tgt_qp_not_ready_to_receive_leaves_the_initiator_to_retry_exc_err,
    the_initiator_refuses_the_opcodes_xrc_does_not_carry,
    an_xrc_seg_with_reserved_bits_is_a_bad_wqe,
    an_empty_xrc_srq_makes_the_initiator_wait_for_rnr_until_a_wqe_is_posted,
    an_empty_xrc_srq_with_rnr_retry_0_fails_the_initiator,
    a_tgt_qp_entering_err_flushes_its_taken_wqe_then_posts_last_wqe_reached,
    a_destroyed_xrc_srq_is_not_busy_and_later_requests_for_it_fail,
    xrc_messages_count_at_the_ini_and_tgt_qps_as_rc_ones_do,
);

/// A process on the target device: a context, a PD, a CQ and an XRC SRQ completing on it.
struct Proc {
    uctx: u32,
    pd: u32,
    cq: Cq,
    srq: Srq,
}

/// An XRC_INI QP on device A connected to an XRC_TGT QP of device B (one device for
/// loopback), whose XRC domain holds the SRQs of two processes of B.
struct Xrc {
    d: Vec<FakeDriver>,
    ia: usize,
    ib: usize,
    a_uctx: u32,
    a_pd: u32,
    a_cq: Cq,
    ini: Qp,
    tgt: Qp,
    procs: Vec<Proc>,
    opts: ConnectOpts,
    /// Last: the drivers disconnect before the devices stop.
    _devices: TestDevices,
}

const WITH_ATOMICS: u32 = ACCESS_ALL | Access::RemoteAtomic as u32;

fn devices_for(t: Topology) -> TestDevices {
    match t {
        Topology::TwoDevices => TestDevices::start(2),
        Topology::Loopback => TestDevices::start(1),
    }
}

impl Xrc {
    fn new(t: Topology) -> Self {
        Self::with(devices_for(t), ConnectOpts::default())
    }

    fn with(devices: TestDevices, opts: ConnectOpts) -> Self {
        let count = devices.len();
        let mut d: Vec<FakeDriver> = (0..count).map(|i| devices.addressed_driver(i)).collect();
        let (ia, ib) = (0, count - 1);
        let a = &mut d[ia];
        let a_uctx = a.alloc_uctx();
        let a_pd = a.alloc_pd(a_uctx);
        let a_cq = a.create_cq(a_uctx, 8);
        let ini = a.create_xrc_ini(a_uctx, a_pd, &a_cq);
        let b = &mut d[ib];
        let xrcd = b.alloc_xrcd();
        let tgt = b.create_xrc_tgt(xrcd);
        let procs = (0..2)
            .map(|_| {
                let uctx = b.alloc_uctx();
                let pd = b.alloc_pd(uctx);
                let cq = b.create_cq(uctx, 8);
                let srq = b.create_xrc_srq(uctx, pd, xrcd, &cq, 3, 2);
                Proc { uctx, pd, cq, srq }
            })
            .collect();
        let mut x = Xrc {
            d,
            ia,
            ib,
            a_uctx,
            a_pd,
            a_cq,
            ini,
            tgt,
            procs,
            opts,
            _devices: devices,
        };
        x.connect();
        x
    }

    /// Connects ini and tgt (both in RESET) to each other.
    fn connect(&mut self) {
        let (a_addr, b_addr) = (self.d[self.ia].addr(), self.d[self.ib].addr());
        let (ini, tgt, o) = (self.ini.qpn, self.tgt.qpn, self.opts);
        self.d[self.ia].connect_qp_to(&self.ini, b_addr, tgt, &o);
        self.d[self.ib].connect_qp_to(&self.tgt, a_addr, ini, &o);
    }

    fn a(&mut self) -> &mut FakeDriver {
        &mut self.d[self.ia]
    }

    fn b(&mut self) -> &mut FakeDriver {
        &mut self.d[self.ib]
    }

    fn srqn(&self, p: usize) -> u32 {
        self.procs[p].srq.srqn
    }

    /// An MR of the initiator holding `data`.
    fn source(&mut self, data: &[u8]) -> Mr {
        let (uctx, pd) = (self.a_uctx, self.a_pd);
        let mr = self.a().reg_mr(uctx, pd, data.len() as u64, ACCESS_ALL);
        self.a().mr_write(&mr, 0, data);
        mr
    }

    /// A buffer of `len` bytes in process `p`'s PD, filled with 0xEE (remote atomics too).
    fn sink(&mut self, p: usize, len: u64) -> Mr {
        let (uctx, pd) = (self.procs[p].uctx, self.procs[p].pd);
        let mr = self.b().reg_mr(uctx, pd, len, WITH_ATOMICS);
        self.b().mr_fill(&mr, 0xee);
        mr
    }

    fn post_srq(&mut self, p: usize, wrs: &[RecvWr]) {
        let (d, srq) = (&mut self.d[self.ib], &mut self.procs[p].srq);
        d.post_srq_recvs(srq, wrs);
    }

    fn post(&mut self, wr: &SendWr) {
        let (d, qp) = (&mut self.d[self.ia], &mut self.ini);
        d.post_send(qp, wr);
    }

    fn post_raw(&mut self, bytes: &[u8]) {
        let (d, qp) = (&mut self.d[self.ia], &mut self.ini);
        d.post_send_raw(qp, bytes);
    }

    fn send_cqe(&mut self) -> Cqe {
        let (d, cq) = (&mut self.d[self.ia], &mut self.a_cq);
        d.wait_cqe(cq)
    }

    fn recv_cqe(&mut self, p: usize) -> Cqe {
        let (d, cq) = (&mut self.d[self.ib], &mut self.procs[p].cq);
        d.wait_cqe(cq)
    }

    fn poll_recv(&mut self, p: usize) -> Option<Cqe> {
        let (d, cq) = (&mut self.d[self.ib], &mut self.procs[p].cq);
        d.poll_cq(cq)
    }

    fn tgt_state(&mut self) -> QpState {
        let (d, qp) = (&mut self.d[self.ib], &self.tgt);
        d.qp_state(qp)
    }

    fn ini_state(&mut self) -> QpState {
        let (d, qp) = (&mut self.d[self.ia], &self.ini);
        d.qp_state(qp)
    }

    /// Moves the initiator through RESET and connects it again (after a local failure
    /// that sent nothing, so the target's PSN still matches).
    fn reconnect_ini(&mut self) {
        let (d, qp) = (&mut self.d[self.ia], &mut self.ini);
        d.set_qp_state(qp, QpState::Reset).ok();
        let b_addr = self.d[self.ib].addr();
        let (tgt, o) = (self.tgt.qpn, self.opts);
        self.d[self.ia].connect_qp_to(&self.ini, b_addr, tgt, &o);
    }

    /// What a successful receive through the TGT QP on SRQ `p` looks like: (opcode,
    /// status, byte_len, wqe_index, qpn, src_qp, flags, srqn, wr_id).
    fn ok_recv(&self, p: usize, opcode: WcOpcode, len: u32, index: u16, wr_id: u64) -> RecvFields {
        (
            opcode.into(),
            WcStatus::Success.into(),
            len,
            index,
            self.tgt.qpn,
            self.ini.qpn,
            (CQE_FLAG_RECV | CQE_FLAG_SRQ) as u8,
            self.srqn(p),
            wr_id,
        )
    }
}

type RecvFields = (u8, u8, u32, u16, u32, u32, u8, u32, u64);

fn recv_fields(c: &Cqe) -> RecvFields {
    (
        c.opcode,
        c.status,
        c.byte_len.to_native(),
        c.wqe_index.to_native(),
        c.qpn.to_native(),
        c.src_qp.to_native(),
        c.flags,
        c.srqn.to_native(),
        c.wr_id.to_native(),
    )
}

// ---------------------------------------------------------------------- data path

fn send_and_write_with_imm_land_in_the_named_srq_and_complete_on_its_cq(t: Topology) {
    send_and_write_with_imm_on(Xrc::new(t));
}

fn send_and_write_with_imm_on(mut x: Xrc) {
    let buf = x.sink(0, 5000);
    let target = x.sink(0, 300);
    x.post_srq(
        0,
        &[
            RecvWr::new(0x10, vec![buf.sge(0, 1000), buf.sge(1000, 4000)]),
            RecvWr::new(0x11, vec![]),
        ],
    );
    let data = pattern(1, 4321);
    let src = x.source(&data);
    let small = pattern(2, 300);
    let src2 = x.source(&small);
    let srqn = x.srqn(0);

    x.post(
        &SendWr::send(1, vec![src.sge(0, 4321)])
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 1, WcOpcode::Send);
    let r = x.recv_cqe(0);
    assert_eq!(recv_fields(&r), x.ok_recv(0, WcOpcode::Recv, 4321, 0, 0x10));
    assert_same_bytes(&x.b().mr_read(&buf, 0, 4321), &data, "received data");
    assert_eq!(x.b().mr_read(&buf, 4321, 1), vec![0xee], "nothing beyond");

    x.post(
        &SendWr::write_imm(2, vec![src2.sge(0, 300)], &target, 0, [1, 2, 3, 4])
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 2, WcOpcode::RdmaWrite);
    let r = x.recv_cqe(0);
    assert_eq!(
        recv_fields(&r),
        x.ok_recv(0, WcOpcode::RecvRdmaWithImm, 300, 1, 0x11)
    );
    assert_eq!(
        (r.imm_data, r.wc_flags),
        ([1, 2, 3, 4], u8::from(WcFlags::WithImm))
    );
    assert_same_bytes(&x.b().mr_read(&target, 0, 300), &small, "written data");
    assert_eq!(x.poll_recv(1), None, "the other process's CQ saw nothing");
}

fn write_read_and_atomics_are_checked_against_the_srqs_pd(t: Topology) {
    let opts = ConnectOpts {
        access: WITH_ATOMICS,
        ..ConnectOpts::default()
    };
    let mut x = Xrc::with(devices_for(t), opts);
    let remote = x.sink(0, 4096);
    let data = pattern(3, 3000);
    let src = x.source(&data);
    let (uctx, pd) = (x.a_uctx, x.a_pd);
    let back = x.a().reg_mr(uctx, pd, 3000, ACCESS_ALL);
    let result = x.a().reg_mr(uctx, pd, 16, ACCESS_ALL);
    let srqn = x.srqn(0);

    x.post(
        &SendWr::write(1, vec![src.sge(0, 3000)], &remote, 8)
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 1, WcOpcode::RdmaWrite);
    assert_same_bytes(&x.b().mr_read(&remote, 8, 3000), &data, "written data");
    x.post(
        &SendWr::read(2, vec![back.sge(0, 3000)], &remote, 8)
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 2, WcOpcode::RdmaRead);
    assert_same_bytes(&x.a().mr_read(&back, 0, 3000), &data, "read data");

    x.b().mr_write(&remote, 4000, &41u64.to_le_bytes());
    x.post(
        &SendWr::cmp_and_swp(3, result.sge(0, 8), &remote, 4000, 41, 99)
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 3, WcOpcode::CompSwap);
    x.post(
        &SendWr::fetch_and_add(4, result.sge(8, 8), &remote, 4000, 5)
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 4, WcOpcode::FetchAdd);
    let old: Vec<u8> = [41u64, 99].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(x.a().mr_read(&result, 0, 16), old, "the original values");
    assert_eq!(
        x.b().mr_read(&remote, 4000, 8),
        104u64.to_le_bytes().to_vec()
    );
    assert_eq!(
        (x.poll_recv(0), x.poll_recv(1)),
        (None, None),
        "no receive consumed"
    );
}

fn two_srqs_of_two_processes_are_served_through_one_tgt_qp(t: Topology) {
    let mut x = Xrc::new(t);
    let bufs: Vec<Mr> = (0..2).map(|p| x.sink(p, 100)).collect();
    for (p, b) in bufs.iter().enumerate() {
        x.post_srq(p, &[RecvWr::new(0x20 + p as u64, vec![b.sge(0, 100)])]);
    }
    let data: Vec<Vec<u8>> = (0..2).map(|i| pattern(10 + i, 60 + i as usize)).collect();
    let srcs: Vec<Mr> = data.iter().map(|d| x.source(d)).collect();

    // The second process first: each message names its SRQ, whichever came first.
    for p in [1usize, 0] {
        let wr = SendWr::send(p as u64, vec![srcs[p].sge(0, data[p].len() as u32)]);
        x.post(&wr.for_srq(x.srqn(p)).signaled());
        assert_cqe_ok(&x.send_cqe(), p as u64, WcOpcode::Send);
    }

    for p in 0..2 {
        let r = x.recv_cqe(p);
        let len = data[p].len() as u32;
        assert_eq!(
            recv_fields(&r),
            x.ok_recv(p, WcOpcode::Recv, len, 0, 0x20 + p as u64)
        );
        assert_same_bytes(
            &x.b().mr_read(&bufs[p], 0, len as u64),
            &data[p],
            "received",
        );
        assert_eq!(x.poll_recv(p), None, "one completion per SRQ");
    }
    assert_eq!(x.tgt_state(), QpState::Rts);
}

/// A SEND naming `srqn` fails with REM_INV_REQ_ERR (BAD_SRQ); the TGT QP moves to ERR
/// with QP_REQ_ERR and no SRQ's CQ sees anything.
fn assert_bad_srq(x: &mut Xrc, srqn: u32) {
    let src = x.source(&[5; 32]);
    x.post(
        &SendWr::send(9, vec![src.sge(0, 32)])
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_status(&x.send_cqe(), WcStatus::RemInvReqErr, VendorErr::BadSrq);
    let tgt = x.tgt.qpn;
    let data = x.b().wait_async_event_for(EventType::QpReqErr, tgt);
    assert_eq!(data, u32::from(u8::from(VendorErr::BadSrq)));
    assert_eq!((x.tgt_state(), x.ini_state()), (QpState::Err, QpState::Err));
    assert_eq!((x.poll_recv(0), x.poll_recv(1)), (None, None));
}

fn a_request_for_an_unknown_srqn_fails_with_bad_srq(t: Topology) {
    let mut x = Xrc::new(t);
    assert_bad_srq(&mut x, 999);
}

fn a_request_for_a_basic_srq_fails_with_bad_srq(t: Topology) {
    let mut x = Xrc::new(t);
    let (uctx, pd) = (x.procs[0].uctx, x.procs[0].pd);
    let basic = x.b().create_srq(uctx, pd, 2, 1);
    let buf = x.sink(0, 64);
    x.b()
        .post_srq_recv(&mut basic.clone(), &RecvWr::new(1, vec![buf.sge(0, 64)]));
    assert_bad_srq(&mut x, basic.srqn);
}

fn a_request_for_an_srq_of_another_domain_fails_with_bad_srq(t: Topology) {
    let mut x = Xrc::new(t);
    let other = x.b().alloc_xrcd();
    let (uctx, pd) = (x.procs[0].uctx, x.procs[0].pd);
    let cq = x.b().create_cq(uctx, 4);
    let mut foreign = x.b().create_xrc_srq(uctx, pd, other, &cq, 2, 1);
    let buf = x.sink(0, 64);
    x.b()
        .post_srq_recv(&mut foreign, &RecvWr::new(1, vec![buf.sge(0, 64)]));
    assert_bad_srq(&mut x, foreign.srqn);
    let mut cq = cq;
    assert_eq!(x.b().poll_cq(&mut cq), None);
}

fn an_rkey_of_another_pd_than_the_srqs_is_refused(t: Topology) {
    let mut x = Xrc::new(t);
    // An MR of process 1: fine for requests naming process 1's SRQ...
    let remote = x.sink(1, 64);
    let src = x.source(&pattern(4, 64));
    x.post(
        &SendWr::write(1, vec![src.sge(0, 64)], &remote, 0)
            .for_srq(x.srqn(1))
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 1, WcOpcode::RdmaWrite);

    // ...not for those naming process 0's, whose PD it is not in.
    x.post(
        &SendWr::write(2, vec![src.sge(0, 64)], &remote, 0)
            .for_srq(x.srqn(0))
            .signaled(),
    );
    assert_cqe_status(&x.send_cqe(), WcStatus::RemAccessErr, VendorErr::PdMismatch);
    let tgt = x.tgt.qpn;
    let data = x.b().wait_async_event_for(EventType::QpAccessErr, tgt);
    assert_eq!(data, u32::from(u8::from(VendorErr::PdMismatch)));
    assert_eq!(x.tgt_state(), QpState::Err);
}

fn a_tgt_qp_not_ready_to_receive_leaves_the_initiator_to_retry_exc_err(t: Topology) {
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    };
    let mut x = Xrc::with(devices_for(t), opts);
    let (d, qp) = (&mut x.d[x.ib], &mut x.tgt);
    d.set_qp_state(qp, QpState::Reset).ok();
    d.qp_to_init(qp, ACCESS_ALL).ok();
    let src = x.source(&[1; 16]);

    x.post(
        &SendWr::send(1, vec![src.sge(0, 16)])
            .for_srq(x.srqn(0))
            .signaled(),
    );

    assert_cqe_status(&x.send_cqe(), WcStatus::RetryExcErr, VendorErr::Unreachable);
    assert_eq!(
        x.tgt_state(),
        QpState::Init,
        "a TGT QP in INIT takes no requests"
    );
}

fn the_initiator_refuses_the_opcodes_xrc_does_not_carry(t: Topology) {
    let mut x = Xrc::new(t);
    let src = x.source(&[1; 16]);
    let srqn = x.srqn(0);
    let refused = [
        local_inv_wr(1, 0x100),
        send_inv_wr(2, vec![src.sge(0, 16)], 0x100),
        SendWr {
            opcode: WrOpcode::BindMw.into(),
            ..SendWr::send(3, vec![])
        },
        SendWr {
            opcode: WrOpcode::RegMr.into(),
            ..SendWr::send(4, vec![])
        },
    ];
    for wr in refused {
        let wr_id = wr.wr_id;
        x.post(&wr.for_srq(srqn).signaled());
        let c = x.send_cqe();
        assert_eq!(c.wr_id.to_native(), wr_id);
        assert_cqe_status(&c, WcStatus::LocQpOpErr, VendorErr::BadOpcode);
        x.reconnect_ini();
    }

    // The connection still works for what XRC carries.
    let buf = x.sink(0, 16);
    x.post_srq(0, &[RecvWr::new(7, vec![buf.sge(0, 16)])]);
    x.post(
        &SendWr::send(5, vec![src.sge(0, 16)])
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 5, WcOpcode::Send);
    assert_cqe_ok(&x.recv_cqe(0), 7, WcOpcode::Recv);
}

fn an_xrc_seg_with_reserved_bits_is_a_bad_wqe(t: Topology) {
    let mut x = Xrc::new(t);
    let src = x.source(&[1; 16]);
    let mut wqe = SendWr::send(1, vec![src.sge(0, 16)])
        .for_srq(x.srqn(0))
        .signaled()
        .encode();
    wqe[SendWqeHeader::SIZE + XrcSeg::RESERVED0_OFF] = 1;

    x.post_raw(&wqe);

    assert_cqe_status(&x.send_cqe(), WcStatus::LocQpOpErr, VendorErr::BadWqe);
    assert_eq!((x.ini_state(), x.tgt_state()), (QpState::Err, QpState::Rts));
}

fn an_empty_xrc_srq_makes_the_initiator_wait_for_rnr_until_a_wqe_is_posted(t: Topology) {
    let mut x = Xrc::new(t);
    let buf = x.sink(1, 16);
    let data = pattern(5, 16);
    let src = x.source(&data);

    x.post(
        &SendWr::send(1, vec![src.sge(0, 16)])
            .for_srq(x.srqn(1))
            .signaled(),
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(x.poll_recv(1), None, "nothing to receive into yet");
    x.post_srq(1, &[RecvWr::new(0x42, vec![buf.sge(0, 16)])]);

    assert_cqe_ok(&x.send_cqe(), 1, WcOpcode::Send);
    let r = x.recv_cqe(1);
    assert_eq!(recv_fields(&r), x.ok_recv(1, WcOpcode::Recv, 16, 0, 0x42));
    assert_same_bytes(&x.b().mr_read(&buf, 0, 16), &data, "received data");
}

fn an_empty_xrc_srq_with_rnr_retry_0_fails_the_initiator(t: Topology) {
    let opts = ConnectOpts {
        rnr_retry: 0,
        ..ConnectOpts::default()
    };
    let mut x = Xrc::with(devices_for(t), opts);
    let src = x.source(&[1; 8]);

    x.post(
        &SendWr::send(1, vec![src.sge(0, 8)])
            .for_srq(x.srqn(0))
            .signaled(),
    );

    assert_cqe_status(&x.send_cqe(), WcStatus::RnrRetryExcErr, VendorErr::Rnr);
    assert_eq!(x.tgt_state(), QpState::Rts, "the target is not at fault");
}

const UNMAPPED_GPA: u64 = 0x60_0000_0000;

fn a_tgt_qp_entering_err_flushes_its_taken_wqe_then_posts_last_wqe_reached(t: Topology) {
    let mut x = Xrc::new(t);
    let big = x.sink(1, 2 << 20);
    x.post_srq(1, &[RecvWr::new(0x51, vec![big.sge(0, 2 << 20)])]);
    let (uctx, pd) = (x.a_uctx, x.a_pd);
    let mut pages = x.a().mem.alloc_scattered_pages(256, 12);
    pages.extend((0..256).map(|i| UNMAPPED_GPA + i * 4096));
    let src = x.a().reg_mr_on_pages(uctx, pd, pages, ACCESS_ALL);

    // The first chunk lands and the TGT QP takes the SRQ WQE; the second faults at the
    // initiator, so the message never completes.
    x.post(
        &SendWr::send(1, vec![src.sge(0, 2 << 20)])
            .for_srq(x.srqn(1))
            .signaled(),
    );
    assert_cqe_status(&x.send_cqe(), WcStatus::LocProtErr, VendorErr::DmaFault);
    assert_eq!(x.poll_recv(1), None, "the message did not complete");
    let (d, qp) = (&mut x.d[x.ib], &mut x.tgt);
    d.set_qp_state(qp, QpState::Err).ok();

    let r = x.recv_cqe(1);
    assert_cqe_status(&r, WcStatus::WrFlushErr, VendorErr::Flush);
    let mut want = x.ok_recv(1, WcOpcode::Recv, 0, 0, 0x51);
    want.1 = WcStatus::WrFlushErr.into();
    want.5 = 0;
    assert_eq!(
        recv_fields(&r),
        want,
        "flushed to the SRQ's CQ, naming the SRQ"
    );
    let tgt = x.tgt.qpn;
    x.b().wait_async_event_for(EventType::QpLastWqeReached, tgt);
    assert_eq!(x.poll_recv(0), None);
}

fn a_destroyed_xrc_srq_is_not_busy_and_later_requests_for_it_fail(t: Topology) {
    let mut x = Xrc::new(t);
    let srq = x.procs[0].srq.clone();
    x.b().destroy_srq(&srq).ok();
    assert_bad_srq(&mut x, srq.srqn);
}

#[test]
fn roce_mode_carries_xrc_between_two_devices() {
    send_and_write_with_imm_on(Xrc::with(
        TestDevices::start_roce(2),
        ConnectOpts::default(),
    ));
}

#[test]
fn roce_mode_carries_xrc_in_loopback() {
    send_and_write_with_imm_on(Xrc::with(
        TestDevices::start_roce(1),
        ConnectOpts::default(),
    ));
}

// ---------------------------------------------------------------------- admin commands

/// A device, a driver, a user context with a PD and a CQ.
fn device() -> (TestDevices, FakeDriver, u32, u32, Cq) {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let cq = d.create_cq(uctx, 4);
    (devices, d, uctx, pd, cq)
}

#[test]
fn xrc_domains_belong_to_the_kernel_and_are_busy_while_srqs_or_tgt_qps_use_them() {
    let (_devices, mut d, uctx, pd, cq) = device();
    d.admin(&FakeDriver::alloc_xrcd_cmd(uctx))
        .expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    d.admin(&cmd_handle(AqOpcode::AllocXrcd, 5, KERNEL_UCTX))
        .expect_err(AqStatus::BadField, CmdHandle::HANDLE_OFF);
    let x = d.alloc_xrcd();
    let y = d.alloc_xrcd();
    assert_eq!(y, x + 1);
    d.dealloc_xrcd(77)
        .expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    d.admin(&cmd_handle(AqOpcode::DeallocXrcd, x, uctx))
        .expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);

    let srq = d.create_xrc_srq(uctx, pd, x, &cq, 2, 1);
    let tgt = d.create_xrc_tgt(y);
    d.dealloc_xrcd(x)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.dealloc_xrcd(y)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.destroy_srq(&srq).ok();
    d.destroy_qp(&tgt).ok();
    d.dealloc_xrcd(x).ok();
    d.dealloc_xrcd(y).ok();
    d.dealloc_xrcd(x)
        .expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}

#[test]
fn alloc_xrcd_fails_with_no_resources_beyond_max_xrcd() {
    let (_devices, mut d, _, _, _) = device();
    let first = d.alloc_xrcd();
    for _ in 1..MAX_XRCD {
        d.alloc_xrcd();
    }
    d.admin(&FakeDriver::alloc_xrcd_cmd(KERNEL_UCTX))
        .expect_general_err(AqStatus::NoResources);
    d.dealloc_xrcd(first).ok();
    assert_eq!(d.alloc_xrcd(), first, "a freed domain number is reused");
    let attr = d.query_device();
    assert_eq!(attr.max_xrcd.to_native(), MAX_XRCD);
}

#[test]
fn create_xrc_srq_needs_a_live_domain_and_a_cq_of_its_context() {
    let (_devices, mut d, uctx, pd, cq) = device();
    let other = d.alloc_uctx();
    let other_cq = d.create_cq(other, 4);
    let x = d.alloc_xrcd();
    let (good, _) = d.create_xrc_srq_cmd(uctx, pd, x, &cq, 2, 1);
    let with = |f: &dyn Fn(&mut CmdCreateSrq)| {
        let mut c = good;
        f(&mut c);
        c
    };
    let cases = [
        (
            with(&|c| c.xrcdn = (x + 9).into()),
            AqStatus::BadHandle,
            CmdCreateSrq::XRCDN_OFF,
        ),
        (
            with(&|c| c.cqn = 99.into()),
            AqStatus::BadHandle,
            CmdCreateSrq::CQN_OFF,
        ),
        (
            with(&|c| c.cqn = other_cq.cqn.into()),
            AqStatus::Permission,
            CmdCreateSrq::CQN_OFF,
        ),
        (
            with(&|c| c.srq_type = 7),
            AqStatus::BadField,
            CmdCreateSrq::SRQ_TYPE_OFF,
        ),
    ];
    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }

    // A user context uses the kernel's domain; its SRQ holds its CQ and PD.
    let srq = d.create_xrc_srq(uctx, pd, x, &cq, 2, 1);
    assert_eq!(srq.srqn, 0, "the failed commands created nothing");
    assert_eq!(srq_attr(&d.query_srq(&srq)), (4, 1, 0));
    d.destroy_cq(&cq)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.dealloc_pd(uctx, pd)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    d.destroy_srq(&srq).ok();
    d.destroy_cq(&cq).ok();
}

#[test]
fn a_qp_cannot_take_its_receives_from_an_xrc_srq() {
    let (_devices, mut d, uctx, pd, cq) = device();
    let x = d.alloc_xrcd();
    let srq = d.create_xrc_srq(uctx, pd, x, &cq, 2, 1);
    let (cmd, _) = d.create_qp_on_srq_cmd(uctx, pd, &cq, &cq, QpCaps::default(), &srq);
    d.admin(&cmd)
        .expect_err(AqStatus::BadField, CmdCreateQp::SRQN_OFF);
}

#[test]
fn create_xrc_tgt_is_the_kernels_names_a_live_domain_and_nothing_else() {
    let (_devices, mut d, uctx, _, _) = device();
    let x = d.alloc_xrcd();
    let good = FakeDriver::create_xrc_tgt_cmd(x);
    let with = |f: &dyn Fn(&mut CmdCreateQp)| {
        let mut c = good;
        f(&mut c);
        c
    };
    let mut cases = vec![
        (
            with(&|c| c.uctx = uctx.into()),
            AqStatus::Permission,
            CmdCreateQp::UCTX_OFF,
        ),
        (
            with(&|c| c.xrcdn = (x + 1).into()),
            AqStatus::BadHandle,
            CmdCreateQp::XRCDN_OFF,
        ),
        (
            with(&|c| c.reserved2[0] = 1),
            AqStatus::BadField,
            CmdCreateQp::RESERVED2_OFF,
        ),
    ];
    type Set = fn(&mut CmdCreateQp);
    let nonzero: [(Set, usize); 8] = [
        (|c| c.pdn = 1.into(), CmdCreateQp::PDN_OFF),
        (|c| c.send_cqn = 1.into(), CmdCreateQp::SEND_CQN_OFF),
        (|c| c.recv_cqn = 1.into(), CmdCreateQp::RECV_CQN_OFF),
        (|c| c.sq_depth_log2 = 1, CmdCreateQp::SQ_DEPTH_LOG2_OFF),
        (|c| c.max_send_sge = 1, CmdCreateQp::MAX_SEND_SGE_OFF),
        (|c| c.flags = 1, CmdCreateQp::FLAGS_OFF),
        (|c| c.max_inline = 1.into(), CmdCreateQp::MAX_INLINE_OFF),
        (|c| c.sq_ring.npages = 1.into(), CmdCreateQp::SQ_RING_OFF),
    ];
    for (f, off) in nonzero {
        cases.push((with(&|c| f(c)), AqStatus::BadField, off));
    }
    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }

    let tgt = d.create_xrc_tgt(x);
    let a = d.query_qp(&tgt);
    assert_eq!(a.qp_state, u8::from(QpState::Reset));
    d.destroy_qp(&tgt).ok();
    d.dealloc_xrcd(x).ok();
}

#[test]
fn create_xrc_ini_has_no_receive_side_and_room_for_the_xrc_seg() {
    let (_devices, mut d, uctx, pd, cq) = device();
    let other_cq = d.create_cq(uctx, 4);
    let (good, _) = d.create_xrc_ini_cmd(uctx, pd, &cq, xrc_ini_caps());
    let with = |f: &dyn Fn(&mut CmdCreateQp)| {
        let mut c = good;
        f(&mut c);
        c
    };
    let cases = [
        (
            with(&|c| c.recv_cqn = other_cq.cqn.into()),
            AqStatus::BadField,
            CmdCreateQp::RECV_CQN_OFF,
        ),
        (
            with(&|c| c.rq_depth_log2 = 2),
            AqStatus::BadField,
            CmdCreateQp::RQ_DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.max_recv_sge = 1),
            AqStatus::BadField,
            CmdCreateQp::MAX_RECV_SGE_OFF,
        ),
        (
            with(&|c| c.xrcdn = 1.into()),
            AqStatus::BadField,
            CmdCreateQp::XRCDN_OFF,
        ),
        (
            with(&|c| c.flags = QP_FLAG_SRQ as u8),
            AqStatus::BadField,
            CmdCreateQp::FLAGS_OFF,
        ),
        (
            with(&|c| c.sq_wqe_shift = 6),
            AqStatus::BadSize,
            CmdCreateQp::SQ_WQE_SHIFT_OFF,
        ),
    ];
    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }
    let ini = d.create_xrc_ini(uctx, pd, &cq);
    assert_ne!(ini.qpn, 0);
    d.destroy_cq(&cq)
        .expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
}

#[test]
fn modify_qp_takes_the_xrc_columns_of_ib_modify_qp_is_ok() {
    let (_devices, mut d, uctx, pd, cq) = device();
    let x = d.alloc_xrcd();
    let tgt = d.create_xrc_tgt(x);
    let ini = d.create_xrc_ini(uctx, pd, &cq);
    let o = ConnectOpts::default();
    for qp in [&tgt, &ini] {
        d.qp_to_init(qp, ACCESS_ALL).ok();
    }
    use QpAttrMask::*;
    // INI: no responder attributes for RTR.
    let (m, attr) = FakeDriver::rtr_attr(d.lid, tgt.qpn, &o);
    d.modify_qp(&ini, m, attr)
        .expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    d.modify_qp(&ini, m & !mask(&[MaxDestRdAtomic, MinRnrTimer]), attr)
        .ok();
    // TGT: the responder attributes are required for RTR...
    let (m, attr) = FakeDriver::rtr_attr(d.lid, ini.qpn, &o);
    d.modify_qp(&tgt, m & !mask(&[MinRnrTimer]), attr)
        .expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    d.modify_qp(&tgt, m, attr).ok();
    // ...and only SQ_PSN and TIMEOUT for RTS, no retry attributes.
    let (m, attr) = FakeDriver::rts_attr(&o);
    d.modify_qp(&tgt, m, attr)
        .expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    d.modify_qp(&tgt, mask(&[State, SqPsn, Timeout]), attr).ok();
    d.modify_qp(&ini, mask(&[State, SqPsn, Timeout]), attr)
        .expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    d.modify_qp(&ini, m, attr).ok();
    assert_eq!(
        (d.qp_state(&tgt), d.qp_state(&ini)),
        (QpState::Rts, QpState::Rts)
    );
    let a = d.query_qp(&tgt);
    assert_eq!(
        (a.timeout, a.sq_psn.to_native(), a.dest_qp_num.to_native()),
        (o.timeout, o.sq_psn, ini.qpn)
    );
}

#[test]
fn a_device_reset_destroys_every_xrc_domain() {
    let (_devices, mut d, _, _, _) = device();
    let x = d.alloc_xrcd();
    d.alloc_xrcd();
    d.reset_device();
    d.bring_up();
    d.dealloc_xrcd(x + 1)
        .expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    assert_eq!(d.alloc_xrcd(), x, "the table was emptied");
}

// ---------------------------------------------------------------------- counters

fn xrc_messages_count_at_the_ini_and_tgt_qps_as_rc_ones_do(t: Topology) {
    let mut x = Xrc::new(t); // path MTU 4096
    let buf = x.sink(0, 5000);
    x.post_srq(0, &[RecvWr::new(0x10, vec![buf.sge(0, 5000)])]);
    let src = x.source(&pattern(3, 5000));
    let srqn = x.srqn(0);

    x.post(
        &SendWr::send(1, vec![src.sge(0, 5000)])
            .for_srq(srqn)
            .signaled(),
    );
    assert_cqe_ok(&x.send_cqe(), 1, WcOpcode::Send);
    assert_cqe_ok(&x.recv_cqe(0), 0x10, WcOpcode::Recv);

    let (ini, tgt) = (x.ini.id(), x.tgt.id());
    let at_ini = x.a().counters(Some(ini));
    let at_tgt = x.b().counters(Some(tgt));
    use Counter as C;
    // Two packets at MTU 4096, one ACK; the receive completes at the TGT QP.
    let want_ini = [
        (C::TxPackets, 2),
        (C::TxBytes, 5000),
        (C::TxSendRequests, 1),
        (C::RxPackets, 1),
        (C::RxAcks, 1),
        (C::Completions, 1),
    ];
    let want_tgt = [
        (C::RxPackets, 2),
        (C::RxBytes, 5000),
        (C::RxSendRequests, 1),
        (C::TxPackets, 1),
        (C::TxAcks, 1),
        (C::Completions, 1),
    ];
    assert_eq!(nonzero_counters(&at_ini), counters_of(&want_ini), "XRC_INI");
    assert_eq!(nonzero_counters(&at_tgt), counters_of(&want_tgt), "XRC_TGT");
}
