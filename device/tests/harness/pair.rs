//! Two connected RC QPs for data-path tests: on two devices (two guests), or both on one
//! device (loopback, each in its own user context).

use vrnic_hw::{Cqe, QpState, WcOpcode};

use super::commands::{ConnectOpts, Layout, MrSpec, PeerAddr};
use super::devices::TestDevices;
use super::driver::FakeDriver;
use super::queues::{assert_cqe_ok, Cq, Mr, Qp, QpCaps, RecvWr, SendWr};
use super::{assert_same_bytes, pattern};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Requester and responder on two devices of the fabric.
    TwoDevices,
    /// Both QPs on one device.
    Loopback,
}

/// Generates `two_devices::NAME` and `loopback::NAME` tests calling `NAME(Topology)`, for
/// the test functions `NAME` of the calling test file.
macro_rules! on_both_topologies {
    ($($name:ident),* $(,)?) => {
        mod two_devices {
            $( #[test] fn $name() { super::$name(super::Topology::TwoDevices) } )*
        }
        mod loopback {
            $( #[test] fn $name() { super::$name(super::Topology::Loopback) } )*
        }
    };
}
pub(crate) use on_both_topologies;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    A,
    B,
}

/// One end: its driver (index into `Pair::drivers`), context, PD, CQs and QP.
#[derive(Debug)]
pub struct Side {
    pub drv: usize,
    pub uctx: u32,
    pub pd: u32,
    pub send_cq: Cq,
    pub recv_cq: Cq,
    pub qp: Qp,
}

/// Creates a context, a PD, two CQs and a QP on `drv`.
pub fn new_side(drv: &mut FakeDriver, index: usize, caps: QpCaps) -> Side {
    let uctx = drv.alloc_uctx();
    let pd = drv.alloc_pd(uctx);
    let send_cq = drv.create_cq(uctx, 8);
    let recv_cq = drv.create_cq(uctx, 8);
    let qp = drv.create_qp(uctx, pd, &send_cq, &recv_cq, caps);
    Side {
        drv: index,
        uctx,
        pd,
        send_cq,
        recv_cq,
        qp,
    }
}

/// A connected QP pair. Field order matters: drivers disconnect before devices stop.
pub struct Pair {
    pub drivers: Vec<FakeDriver>,
    pub a: Side,
    pub b: Side,
    pub topology: Topology,
    pub devices: TestDevices,
}

impl Pair {
    pub fn new(topology: Topology) -> Self {
        Self::with(topology, QpCaps::default(), ConnectOpts::default())
    }

    pub fn with(topology: Topology, caps: QpCaps, opts: ConnectOpts) -> Self {
        Self::with_devices(topology, caps, opts, 0)
    }

    /// As `with`, on a fabric with `extra` more devices than the pair needs.
    pub fn with_devices(topology: Topology, caps: QpCaps, opts: ConnectOpts, extra: usize) -> Self {
        let n = match topology {
            Topology::TwoDevices => 2,
            Topology::Loopback => 1,
        };
        Self::on(TestDevices::start(n + extra), topology, caps, opts)
    }

    /// A pair on RoCE-mode devices, connected by GID.
    pub fn roce(topology: Topology) -> Self {
        let n = match topology {
            Topology::TwoDevices => 2,
            Topology::Loopback => 1,
        };
        let devices = TestDevices::start_roce(n);
        Self::on(devices, topology, QpCaps::default(), ConnectOpts::default())
    }

    /// A pair on the first one or two of `devices` (addressed: RoCE devices get GID 0).
    pub fn on(devices: TestDevices, topology: Topology, caps: QpCaps, opts: ConnectOpts) -> Self {
        let n = match topology {
            Topology::TwoDevices => 2,
            Topology::Loopback => 1,
        };
        let mut drivers: Vec<FakeDriver> = (0..n).map(|i| devices.addressed_driver(i)).collect();
        let b_drv = n - 1;
        let a = new_side(&mut drivers[0], 0, caps);
        let b = new_side(&mut drivers[b_drv], b_drv, caps);
        let mut pair = Pair {
            drivers,
            a,
            b,
            topology,
            devices,
        };
        pair.connect(opts);
        pair
    }

    /// Connects a.qp and b.qp (both in RESET) to each other.
    pub fn connect(&mut self, opts: ConnectOpts) {
        let (a_addr, b_addr) = (self.addr(Which::A), self.addr(Which::B));
        let (a_qpn, b_qpn) = (self.a.qp.qpn, self.b.qp.qpn);
        let (drv, side) = self.side(Which::A);
        drv.connect_qp_to(&side.qp, b_addr, b_qpn, &opts);
        let (drv, side) = self.side(Which::B);
        drv.connect_qp_to(&side.qp, a_addr, a_qpn, &opts);
    }

    /// How peers name side `w`'s device (LID or GID).
    pub fn addr(&self, w: Which) -> PeerAddr {
        let side = match w {
            Which::A => &self.a,
            Which::B => &self.b,
        };
        self.drivers[side.drv].addr()
    }

    pub fn lid(&self, w: Which) -> u16 {
        let side = match w {
            Which::A => &self.a,
            Which::B => &self.b,
        };
        self.drivers[side.drv].lid
    }

    pub fn side(&mut self, w: Which) -> (&mut FakeDriver, &mut Side) {
        let side = match w {
            Which::A => &mut self.a,
            Which::B => &mut self.b,
        };
        (&mut self.drivers[side.drv], side)
    }

    pub fn drv(&mut self, w: Which) -> &mut FakeDriver {
        self.side(w).0
    }

    pub fn qpn(&self, w: Which) -> u32 {
        match w {
            Which::A => self.a.qp.qpn,
            Which::B => self.b.qp.qpn,
        }
    }

    /// An MR of side `w` (its context and PD) on scattered pages.
    pub fn mr(&mut self, w: Which, len: u64, access: u32) -> Mr {
        self.mr_with(w, len, access, Layout::Scattered)
    }

    pub fn mr_with(&mut self, w: Which, len: u64, access: u32, layout: Layout) -> Mr {
        let (drv, side) = self.side(w);
        let spec = MrSpec::new(side.uctx, side.pd, len, access).layout(layout);
        drv.reg_mr_with(spec)
    }

    pub fn write(&mut self, w: Which, mr: &Mr, offset: u64, data: &[u8]) {
        self.drv(w).mr_write(mr, offset, data);
    }

    pub fn read(&mut self, w: Which, mr: &Mr, offset: u64, len: u64) -> Vec<u8> {
        self.drv(w).mr_read(mr, offset, len)
    }

    pub fn post_send(&mut self, w: Which, wr: &SendWr) {
        let (drv, side) = self.side(w);
        drv.post_send(&mut side.qp, wr);
    }

    pub fn post_sends(&mut self, w: Which, wrs: &[SendWr]) {
        let (drv, side) = self.side(w);
        drv.post_sends(&mut side.qp, wrs);
    }

    pub fn post_send_raw(&mut self, w: Which, bytes: &[u8]) {
        let (drv, side) = self.side(w);
        drv.post_send_raw(&mut side.qp, bytes);
    }

    pub fn post_recv(&mut self, w: Which, wr: &RecvWr) {
        let (drv, side) = self.side(w);
        drv.post_recv(&mut side.qp, wr);
    }

    pub fn post_recvs(&mut self, w: Which, wrs: &[RecvWr]) {
        let (drv, side) = self.side(w);
        drv.post_recvs(&mut side.qp, wrs);
    }

    pub fn send_cqe(&mut self, w: Which) -> Cqe {
        let (drv, side) = self.side(w);
        drv.wait_cqe(&mut side.send_cq)
    }

    pub fn send_cqes(&mut self, w: Which, n: usize) -> Vec<Cqe> {
        let (drv, side) = self.side(w);
        drv.wait_cqes(&mut side.send_cq, n)
    }

    pub fn recv_cqe(&mut self, w: Which) -> Cqe {
        let (drv, side) = self.side(w);
        drv.wait_cqe(&mut side.recv_cq)
    }

    pub fn recv_cqes(&mut self, w: Which, n: usize) -> Vec<Cqe> {
        let (drv, side) = self.side(w);
        drv.wait_cqes(&mut side.recv_cq, n)
    }

    pub fn poll_send_cq(&mut self, w: Which) -> Option<Cqe> {
        let (drv, side) = self.side(w);
        drv.poll_cq(&mut side.send_cq)
    }

    pub fn poll_recv_cq(&mut self, w: Which) -> Option<Cqe> {
        let (drv, side) = self.side(w);
        drv.poll_cq(&mut side.recv_cq)
    }

    pub fn qp_state(&mut self, w: Which) -> QpState {
        let (drv, side) = self.side(w);
        drv.qp_state(&side.qp)
    }

    /// A fresh connected QP pair over the same drivers (new contexts, PDs, CQs and QPs).
    pub fn fresh(&mut self) -> (Side, Side) {
        let caps = QpCaps::default();
        let a_drv = self.a.drv;
        let b_drv = self.b.drv;
        let a = new_side(&mut self.drivers[a_drv], a_drv, caps);
        let b = new_side(&mut self.drivers[b_drv], b_drv, caps);
        let opts = ConnectOpts::default();
        let (a_addr, b_addr) = (self.drivers[a_drv].addr(), self.drivers[b_drv].addr());
        self.drivers[a_drv].connect_qp_to(&a.qp, b_addr, b.qp.qpn, &opts);
        self.drivers[b_drv].connect_qp_to(&b.qp, a_addr, a.qp.qpn, &opts);
        (a, b)
    }

    /// Proves the devices still move data: a fresh QP pair between the same devices does a
    /// verified WRITE and SEND; on two devices, each device also does a loopback transfer.
    pub fn assert_still_serving(&mut self) {
        let (mut a, mut b) = self.fresh();
        let mut ends = Ends::of(&mut self.drivers, a.drv, b.drv);
        transfer_and_verify(&mut ends, &mut a, &mut b, 0x5eed);
        if let Ends::Two(da, db) = ends {
            for d in [da, db] {
                let (mut x, mut y) = loopback_sides(d);
                transfer_and_verify(&mut Ends::One(d), &mut x, &mut y, 0x1005);
            }
        }
    }
}

/// The driver(s) of the two ends of a connection: one (loopback) or two.
pub enum Ends<'a> {
    One(&'a mut FakeDriver),
    Two(&'a mut FakeDriver, &'a mut FakeDriver),
}

impl<'a> Ends<'a> {
    /// Drivers `i` (end A) and `j` (end B) of `v`.
    pub fn of(v: &'a mut [FakeDriver], i: usize, j: usize) -> Self {
        if i == j {
            return Ends::One(&mut v[i]);
        }
        let (lo, hi) = v.split_at_mut(i.max(j));
        if i < j {
            Ends::Two(&mut lo[i], &mut hi[0])
        } else {
            Ends::Two(&mut hi[0], &mut lo[j])
        }
    }

    pub fn a(&mut self) -> &mut FakeDriver {
        match self {
            Ends::One(d) | Ends::Two(d, _) => d,
        }
    }

    pub fn b(&mut self) -> &mut FakeDriver {
        match self {
            Ends::One(d) | Ends::Two(_, d) => d,
        }
    }
}

/// Two connected sides on one driver (a loopback pair).
pub fn loopback_sides(d: &mut FakeDriver) -> (Side, Side) {
    let caps = QpCaps::default();
    let a = new_side(d, 0, caps);
    let b = new_side(d, 0, caps);
    let opts = ConnectOpts::default();
    let addr = d.addr();
    d.connect_qp_to(&a.qp, addr, b.qp.qpn, &opts);
    d.connect_qp_to(&b.qp, addr, a.qp.qpn, &opts);
    (a, b)
}

const CHECK_LEN: u64 = 12_345;

/// A verified RDMA WRITE and SEND from side `a` to side `b`.
pub fn transfer_and_verify(ends: &mut Ends<'_>, a: &mut Side, b: &mut Side, seed: u64) {
    let src = ends.a().reg_mr(a.uctx, a.pd, CHECK_LEN, super::ACCESS_ALL);
    let dst = ends.b().reg_mr(b.uctx, b.pd, CHECK_LEN, super::ACCESS_ALL);
    let data = pattern(seed, CHECK_LEN as usize);
    ends.a().mr_write(&src, 0, &data);
    let sge = src.sge(0, CHECK_LEN as u32);
    ends.b().post_recv(
        &mut b.qp,
        &RecvWr::new(7, vec![dst.sge(0, CHECK_LEN as u32)]),
    );
    ends.a()
        .post_send(&mut a.qp, &SendWr::write(1, vec![sge], &dst, 0).signaled());
    assert_cqe_ok(&ends.a().wait_cqe(&mut a.send_cq), 1, WcOpcode::RdmaWrite);
    assert_same_bytes(&ends.b().mr_read(&dst, 0, CHECK_LEN), &data, "check WRITE");
    ends.b().mr_fill(&dst, 0);
    ends.a()
        .post_send(&mut a.qp, &SendWr::send(2, vec![sge]).signaled());
    assert_cqe_ok(&ends.a().wait_cqe(&mut a.send_cq), 2, WcOpcode::Send);
    assert_cqe_ok(&ends.b().wait_cqe(&mut b.recv_cq), 7, WcOpcode::Recv);
    assert_same_bytes(&ends.b().mr_read(&dst, 0, CHECK_LEN), &data, "check SEND");
}
