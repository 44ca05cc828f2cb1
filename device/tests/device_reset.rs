//! Resets and disconnects with work in flight: DEV_CTRL.RESET, vfio DEVICE_RESET and a
//! Function Level Reset through config space leave the device clean (registers, doorbells, no DMA afterwards) and ready for a new bring-up;
//! a VMM that disconnects (QEMU exiting) takes only its own device's state with it.

mod harness;

use std::time::Duration;

use harness::vfio::REGION_CONFIG;
use harness::*;
use vrnic_hw::*;
use Which::{A, B};

const MIB: u64 = 1 << 20;

/// Puts work in flight on A: big WRITEs to B, then a SEND that waits (RNR, forever) for a
/// receive B never posts, then more WRITEs queued behind it. Returns the WQEs posted.
fn work_in_flight(p: &mut Pair) -> u64 {
    let src = p.mr(A, MIB, ACCESS_ALL);
    let dst = p.mr(B, MIB, ACCESS_ALL);
    p.write(A, &src, 0, &pattern(1, MIB as usize));
    let mut wrs: Vec<SendWr> = (0..8)
        .map(|i| SendWr::write(i, vec![src.sge(0, MIB as u32)], &dst, 0).signaled())
        .collect();
    wrs.push(SendWr::send(8, vec![src.sge(0, 64)]).signaled());
    wrs.extend((9..20).map(|i| SendWr::write(i, vec![src.sge(0, 4096)], &dst, 0).signaled()));
    p.post_sends(A, &wrs);
    wrs.len() as u64
}

/// Every BAR0 register reads its reset value (PORT_INFO: the configured LID).
fn assert_registers_at_reset_values(d: &mut FakeDriver) {
    for (name, offset, access, reset) in bar0::REGISTERS {
        let value = d.read_reg(*offset);
        let want = match *offset {
            bar0::PORT_INFO => {
                u32::from(d.lid) | u32::from(u8::from(Mtu::Size4096)) << bar0::PORT_INFO_MTU_SHIFT
            }
            _ if *access == RegAccess::Wo => 0,
            _ => *reset,
        };
        assert_eq!(value, want, "register {name} after reset");
    }
}

/// Every doorbell slot of pages `pages` reads 0 through the mmapped BAR2.
fn assert_doorbells_zero(d: &FakeDriver, pages: &[u32]) {
    for &page in pages {
        for slot in 0..DB_SLOTS_PER_PAGE {
            assert_eq!(
                (d.db_load(page, slot, 0), d.db_load(page, slot, 1)),
                (0, 0),
                "doorbell page {page} slot {slot} after reset"
            );
        }
    }
}

/// The bytes of A's send CQ ring.
fn cq_ring_bytes(p: &mut Pair, w: Which) -> Vec<u8> {
    let (drv, side) = p.side(w);
    let ring = &side.send_cq.ring;
    let bytes = (ring.depth() as usize) << ring.entry_shift;
    drv.mem.read_vec(ring.pages[0], bytes)
}

/// After a reset of A: registers and doorbells are clean, nothing more is written to A's
/// memory, and a new bring-up moves data again.
fn assert_clean_and_reusable(p: &mut Pair) {
    let page = p.a.qp.page;
    let drv = p.drv(A);
    assert_eq!(drv.read_reg(bar0::DEV_STATUS), 0, "neither READY nor FATAL");
    assert_registers_at_reset_values(drv);
    assert_doorbells_zero(drv, &[0, page]);
    let before = cq_ring_bytes(p, A);
    // Give a device that wrongly kept working the time to write; no threshold is checked.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(cq_ring_bytes(p, A), before, "no DMA after the reset");

    p.drv(A).forget_device_state();
    p.drv(A).bring_up();
    p.assert_still_serving();
}

#[test]
fn dev_ctrl_reset_with_work_in_flight_leaves_the_device_clean_and_reusable() {
    let mut p = Pair::new(Topology::TwoDevices);
    work_in_flight(&mut p);

    p.drv(A)
        .write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_RESET_MASK);

    assert_clean_and_reusable(&mut p);
    assert_eq!(
        p.qp_state(B),
        QpState::Rts,
        "the other device's QP is untouched"
    );
}

#[test]
fn vfio_device_reset_with_work_in_flight_leaves_the_device_clean_and_reusable() {
    let mut p = Pair::new(Topology::TwoDevices);
    work_in_flight(&mut p);

    p.drv(A).vfio.device_reset().expect("DEVICE_RESET");

    assert_clean_and_reusable(&mut p);
    assert_eq!(p.qp_state(B), QpState::Rts);
}

#[test]
fn function_level_reset_through_devctl_with_work_in_flight_leaves_the_device_clean_and_reusable() {
    let mut p = Pair::new(Topology::TwoDevices);
    work_in_flight(&mut p);
    let devcap = u64::from(PCI_CAP_PCIE_OFF) + 4;
    let devctl = u64::from(PCI_CAP_PCIE_OFF) + 8;
    let config = |d: &mut FakeDriver, off: u64, len: u32| {
        let b = d
            .vfio
            .region_read(REGION_CONFIG, off, len)
            .expect("config read");
        b.iter().rev().fold(0u32, |v, &x| v << 8 | u32::from(x))
    };
    let cap = config(p.drv(A), devcap, 4);

    // What Linux's pcie_flr() does: read-modify-write DevCtl with Initiate FLR (bit 15).
    let ctl = config(p.drv(A), devctl, 2) as u16;
    p.drv(A)
        .vfio
        .region_write(REGION_CONFIG, devctl, &(ctl | 0x8000).to_le_bytes())
        .expect("FLR write");

    assert_ne!(cap & 1 << 28, 0, "DevCap advertises FLR");
    assert_eq!(
        config(p.drv(A), devctl, 2) & 0x8000,
        0,
        "Initiate FLR reads 0"
    );
    assert_clean_and_reusable(&mut p);
    assert_eq!(p.qp_state(B), QpState::Rts);
}

#[test]
fn dev_ctrl_reset_in_loopback_with_work_in_flight_leaves_the_device_clean_and_reusable() {
    let mut p = Pair::new(Topology::Loopback);
    work_in_flight(&mut p);

    p.drv(A)
        .write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_RESET_MASK);

    assert_clean_and_reusable(&mut p);
}

#[test]
fn clearing_enable_resets_the_device_like_reset() {
    let mut p = Pair::new(Topology::TwoDevices);
    work_in_flight(&mut p);

    p.drv(A).write_reg(bar0::DEV_CTRL, 0);

    assert_clean_and_reusable(&mut p);
}

#[test]
fn reset_of_the_target_fails_the_requesters_pending_work_with_retry_exc_err() {
    let opts = ConnectOpts {
        timeout: 4,
        retry_cnt: 3,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(Topology::TwoDevices, QpCaps::default(), opts);
    let n = work_in_flight(&mut p);
    // The SEND (wr 8) waits for a receive: everything before it has completed.
    let done = p.send_cqes(A, 8);

    p.drv(B)
        .write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_RESET_MASK);

    for (i, c) in done.iter().enumerate() {
        assert_cqe_ok(c, i as u64, WcOpcode::RdmaWrite);
    }
    let failed = p.send_cqe(A);
    assert_cqe_status(&failed, WcStatus::RetryExcErr, VendorErr::Unreachable);
    assert_eq!(failed.wr_id.to_native(), 8);
    for c in p.send_cqes(A, (n - 9) as usize) {
        assert_cqe_status(&c, WcStatus::WrFlushErr, VendorErr::Flush);
    }
    assert_eq!(p.qp_state(A), QpState::Err);
    p.drv(B).forget_device_state();
    p.drv(B).bring_up();
    p.assert_still_serving();
}

#[test]
fn reset_clears_fatal_and_the_device_can_be_brought_up_again() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);
    d.write_reg(bar0::AQ_DEPTH_LOG2, 0);
    d.write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_ENABLE_MASK);
    let status = d.read_reg(bar0::DEV_STATUS);
    let code = d.read_reg(bar0::FATAL_CODE);

    d.write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_RESET_MASK);
    let after = d.read_reg(bar0::DEV_STATUS);
    d.bring_up();

    assert_eq!(status, bar0::DEV_STATUS_FATAL_MASK);
    assert_eq!(code, u32::from(FatalCode::BadAdminConfig));
    assert_eq!(after, 0);
    assert_eq!(d.query_port().lid.to_native(), devices.lid(0));
}

#[test]
fn an_admin_queue_the_device_cannot_read_is_fatal_admin_dma_until_reset() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);
    let unmapped = 0x70_0000_0000u64;
    d.write_reg(bar0::AQ_BASE_LO, unmapped as u32);
    d.write_reg(bar0::AQ_BASE_HI, (unmapped >> 32) as u32);
    d.write_reg(bar0::ACQ_BASE_LO, unmapped as u32);
    d.write_reg(bar0::ACQ_BASE_HI, (unmapped >> 32) as u32);
    d.write_reg(bar0::AQ_DEPTH_LOG2, 2);
    d.write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_ENABLE_MASK);
    let ready = d.read_reg(bar0::DEV_STATUS);

    d.write_reg(bar0::AQ_DOORBELL, 1);
    let status = d.read_reg(bar0::DEV_STATUS);
    let code = d.read_reg(bar0::FATAL_CODE);
    d.reset_device();
    d.bring_up();

    assert_eq!(ready, bar0::DEV_STATUS_READY_MASK);
    assert_eq!(
        status & bar0::DEV_STATUS_FATAL_MASK,
        bar0::DEV_STATUS_FATAL_MASK
    );
    assert_eq!(code, u32::from(FatalCode::AdminDma));
    d.alloc_uctx();
}

// ---------------------------------------------------------------------- disconnects

#[test]
fn a_vmm_that_disconnects_mid_traffic_leaves_the_other_devices_working_and_can_reconnect() {
    // Devices 0 (A) and 1 (B) carry traffic; device 2 (C) talks to B throughout.
    let mut p = Pair::with_devices(
        Topology::TwoDevices,
        QpCaps::default(),
        ConnectOpts::default(),
        1,
    );
    let mut c = p.devices.driver(2);
    let lid_c = c.lid;
    let mut c_side = harness::pair::new_side(&mut c, 9, QpCaps::default());
    let mut b_side = harness::pair::new_side(p.drv(B), 1, QpCaps::default());
    let lid_b = p.lid(B);
    c.connect_qp(&c_side.qp, lid_b, b_side.qp.qpn, &ConnectOpts::default());
    p.drv(B)
        .connect_qp(&b_side.qp, lid_c, c_side.qp.qpn, &ConnectOpts::default());
    work_in_flight(&mut p);

    // QEMU exits: the socket closes with WQEs in flight.
    let a = p.drivers.remove(0);
    a.disconnect();

    // C <-> B keeps working while A is gone.
    {
        let b = &mut p.drivers[0];
        let mut ends = harness::pair::Ends::Two(&mut c, b);
        harness::pair::transfer_and_verify(&mut ends, &mut c_side, &mut b_side, 77);
    }
    // A new VMM connects to A's socket and moves data with B.
    let mut a = FakeDriver::connect(p.devices.socket(0), p.devices.lid(0));
    a.bring_up();
    assert_eq!(a.alloc_uctx(), 1, "the device starts from scratch");
    p.drivers.insert(0, a);
    p.assert_still_serving();
}

#[test]
fn a_vmm_that_disconnects_before_bring_up_can_reconnect() {
    let devices = TestDevices::start(2);
    let first = devices.connect(0);

    first.disconnect();
    let mut second = devices.driver(0);
    let mut other = devices.driver(1);

    assert_eq!(second.query_port().lid.to_native(), devices.lid(0));
    assert_eq!(other.query_port().lid.to_native(), devices.lid(1));
}

#[test]
fn many_reconnects_leave_no_state_behind() {
    let devices = TestDevices::start(1);
    for round in 0..5 {
        let mut d = devices.driver(0);
        let uctx = d.alloc_uctx();
        let pd = d.alloc_pd(uctx);
        let cq = d.create_cq(uctx, 4);
        let qp = d.create_qp(uctx, pd, &cq, &cq, QpCaps::default());

        assert_eq!((uctx, qp.slot), (1, 1), "round {round}: a fresh device");
        d.disconnect();
    }
}
