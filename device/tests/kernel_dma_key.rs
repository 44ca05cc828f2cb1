//! LOCAL_DMA_LKEY (SPEC "Kernel DMA key"): QPs of the kernel context name guest DMA
//! addresses directly in their SGEs; every other context gets BAD_LKEY for it, and it is
//! never a key anybody can use remotely.

mod harness;

use harness::pair::Side;
use harness::*;
use vrnic_hw::*;

/// A side of the kernel context: PD, CQs and an RC QP of KERNEL_UCTX.
fn kernel_side(d: &mut FakeDriver, index: usize) -> Side {
    let pd = d.alloc_pd(KERNEL_UCTX);
    let send_cq = d.create_cq(KERNEL_UCTX, 6);
    let recv_cq = d.create_cq(KERNEL_UCTX, 6);
    let qp = d.create_qp(KERNEL_UCTX, pd, &send_cq, &recv_cq, QpCaps::default());
    Side {
        drv: index,
        uctx: KERNEL_UCTX,
        pd,
        send_cq,
        recv_cq,
        qp,
    }
}

fn dma_sge(addr: u64, len: u32) -> Sge {
    Sge {
        addr: addr.into(),
        length: len.into(),
        lkey: LOCAL_DMA_LKEY.into(),
    }
}

fn connect(d: &mut [FakeDriver], a: &Side, b: &Side) {
    let (a_addr, b_addr) = (d[a.drv].addr(), d[b.drv].addr());
    let o = ConnectOpts::default();
    d[a.drv].connect_qp_to(&a.qp, b_addr, b.qp.qpn, &o);
    d[b.drv].connect_qp_to(&b.qp, a_addr, a.qp.qpn, &o);
}

#[test]
fn kernel_qps_send_and_receive_through_guest_dma_addresses() {
    let devices = TestDevices::start(2);
    let mut d = vec![devices.driver(0), devices.driver(1)];
    let mut a = kernel_side(&mut d[0], 0);
    let mut b = kernel_side(&mut d[1], 1);
    connect(&mut d, &a, &b);
    let data = pattern(11, 5000);
    let src = d[0].mem.alloc(5000, 8);
    d[0].mem.write(src, &data);
    // The receive buffer is two pieces of guest memory, named by their DMA addresses.
    let (dst1, dst2) = (d[1].mem.alloc(3000, 8), d[1].mem.alloc(2000, 8));

    d[1].post_recv(
        &mut b.qp,
        &RecvWr::new(5, vec![dma_sge(dst1, 3000), dma_sge(dst2, 2000)]),
    );
    d[0].post_send(
        &mut a.qp,
        &SendWr::send(6, vec![dma_sge(src, 5000)]).signaled(),
    );

    assert_cqe_ok(&d[0].wait_cqe(&mut a.send_cq), 6, WcOpcode::Send);
    let recv = d[1].wait_cqe(&mut b.recv_cq);
    assert_cqe_ok(&recv, 5, WcOpcode::Recv);
    assert_eq!(recv.byte_len.to_native(), 5000);
    let mut got = vec![0u8; 5000];
    d[1].mem.read(dst1, &mut got[..3000]);
    d[1].mem.read(dst2, &mut got[3000..]);
    assert_same_bytes(&got, &data, "SEND through DMA addresses");
}

#[test]
fn a_kernel_qp_reads_and_writes_remote_mrs_with_dma_addressed_buffers() {
    let devices = TestDevices::start(1);
    let mut d = vec![devices.driver(0)];
    let mut a = kernel_side(&mut d[0], 0);
    let b = kernel_side(&mut d[0], 0);
    connect(&mut d, &a, &b);
    let remote = d[0].reg_mr(KERNEL_UCTX, b.pd, 4096, ACCESS_ALL);
    let data = pattern(12, 4096);
    let (src, back) = (d[0].mem.alloc(4096, 8), d[0].mem.alloc(4096, 8));
    d[0].mem.write(src, &data);

    d[0].post_send(
        &mut a.qp,
        &SendWr::write(1, vec![dma_sge(src, 4096)], &remote, 0).signaled(),
    );
    assert_cqe_ok(&d[0].wait_cqe(&mut a.send_cq), 1, WcOpcode::RdmaWrite);
    d[0].post_send(
        &mut a.qp,
        &SendWr::read(2, vec![dma_sge(back, 4096)], &remote, 0).signaled(),
    );
    assert_cqe_ok(&d[0].wait_cqe(&mut a.send_cq), 2, WcOpcode::RdmaRead);

    assert_same_bytes(&d[0].mr_read(&remote, 0, 4096), &data, "WRITE");
    let mut got = vec![0u8; 4096];
    d[0].mem.read(back, &mut got);
    assert_same_bytes(&got, &data, "READ into a DMA address");
}

#[test]
fn a_user_qp_naming_the_dma_key_fails_with_bad_lkey() {
    let mut p = Pair::new(Topology::Loopback);
    let buf = p.drv(Which::A).mem.alloc(64, 8);

    p.post_send(
        Which::A,
        &SendWr::send(1, vec![dma_sge(buf, 64)]).signaled(),
    );

    assert_cqe_status(
        &p.send_cqe(Which::A),
        WcStatus::LocProtErr,
        VendorErr::BadLkey,
    );
}

#[test]
fn the_dma_key_is_no_rkey() {
    let devices = TestDevices::start(1);
    let mut d = vec![devices.driver(0)];
    let mut a = kernel_side(&mut d[0], 0);
    let b = kernel_side(&mut d[0], 0);
    connect(&mut d, &a, &b);
    let src = d[0].mem.alloc(64, 8);
    let target = d[0].mem.alloc(64, 8);

    let wr = SendWr {
        opcode: WrOpcode::RdmaWrite.into(),
        ..SendWr::send(1, vec![dma_sge(src, 64)])
    };
    d[0].post_send(&mut a.qp, &wr.remote(target, LOCAL_DMA_LKEY).signaled());

    let cqe = d[0].wait_cqe(&mut a.send_cq);
    assert_cqe_status(&cqe, WcStatus::RemAccessErr, VendorErr::BadRkey);
}
