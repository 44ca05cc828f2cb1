//! The device as the guest first meets it over vfio-user: regions and config space,
//! registers, bring-up, the doorbell BAR shared by mmap, and the POLL_STATE/KICK protocol.

mod harness;

use std::time::Duration;

use harness::vfio::{REGION_CONFIG, REGION_FLAG_MMAP, REGION_FLAG_READ, REGION_FLAG_WRITE};
use harness::*;
use vrnic_hw::*;

#[test]
fn bring_up_enables_the_admin_queue_and_creates_eqs() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);

    let status = d.read_reg(bar0::DEV_STATUS);

    assert_eq!(status, bar0::DEV_STATUS_READY_MASK);
    assert!(d.async_eq.is_some() && d.comp_eq.is_some());
}

#[test]
fn regions_have_the_spec_sizes_and_only_bar2_is_mmapped() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);

    let bar0 = d.vfio.region_info(BAR_CTRL);
    let bar2 = d.vfio.region_info(BAR_DB);
    let bar4 = d.vfio.region_info(BAR_KICK);
    let config = d.vfio.region_info(REGION_CONFIG);

    let rw = REGION_FLAG_READ | REGION_FLAG_WRITE;
    assert_eq!((bar0.size, bar0.flags & !rw), (u64::from(BAR_CTRL_SIZE), 0));
    assert_eq!(bar2.size, u64::from(BAR_DB_SIZE));
    assert_ne!(bar2.flags & REGION_FLAG_MMAP, 0);
    assert_eq!((bar4.size, bar4.flags & !rw), (u64::from(BAR_KICK_SIZE), 0));
    assert_eq!(config.size, u64::from(PCI_CONFIG_SIZE));
    assert!(bar0.fd.is_none() && bar4.fd.is_none());
}

#[test]
fn config_space_carries_the_spec_identity() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);

    let cfg = d
        .vfio
        .region_read(REGION_CONFIG, 0, 64)
        .expect("config read");

    let u16_at = |o: usize| u16::from_le_bytes([cfg[o], cfg[o + 1]]);
    assert_eq!(u32::from(u16_at(0)), PCI_VENDOR_ID);
    assert_eq!(u32::from(u16_at(2)), PCI_DEVICE_ID);
    assert_eq!(u32::from(cfg[8]), PCI_REVISION);
    assert_eq!(
        u32::from_le_bytes([cfg[9], cfg[10], cfg[11], 0]),
        PCI_CLASS_CODE
    );
    assert_eq!(cfg[0x3d], 0, "no INTx pin");
}

#[test]
fn identity_and_limit_registers_read_their_spec_values_and_ignore_writes() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);
    let ro: Vec<(u64, u32)> = bar0::REGISTERS
        .iter()
        .filter(|r| r.2 == RegAccess::Ro && r.1 != bar0::PORT_INFO && r.1 < bar0::DEV_CTRL)
        .map(|r| (r.1, r.3))
        .collect();

    for &(offset, _) in &ro {
        d.write_reg(offset, 0xdead_beef);
    }

    for (offset, reset) in ro {
        assert_eq!(d.read_reg(offset), reset, "register at {offset:#x}");
    }
    assert_eq!(
        d.read_reg(bar0::CAPS),
        bar0::CAPS_READABLE_MASK,
        "every feature"
    );
    assert_ne!(
        d.read_reg(bar0::CAPS) & bar0::CAPS_XRC_MASK,
        0,
        "XRC included"
    );
    assert_ne!(
        d.read_reg(bar0::CAPS) & bar0::CAPS_COUNTERS_MASK,
        0,
        "COUNTERS included"
    );
    assert_eq!(d.read_reg(0xffc), 0, "undefined offsets read 0");
    assert_eq!(d.read_reg(bar0::AQ_DOORBELL), 0, "write-only reads 0");
}

#[test]
fn port_info_carries_each_devices_own_lid() {
    let devices = TestDevices::start(3);

    let lids: Vec<u32> = (0..3)
        .map(|i| devices.connect(i).read_reg(bar0::PORT_INFO) & bar0::PORT_INFO_LID_MASK)
        .collect();

    assert_eq!(lids, vec![1, 2, 3]);
}

#[test]
fn misaligned_or_short_register_writes_are_refused() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);

    let short = d.vfio.region_write(BAR_CTRL, bar0::DRIVER_VERSION, &[1, 2]);
    let misaligned = d
        .vfio
        .region_write(BAR_CTRL, bar0::DRIVER_VERSION + 1, &[1, 2, 3, 4]);
    d.write_reg(bar0::DRIVER_VERSION, 0x0102_0304);

    assert_eq!(short, Err(libc::EINVAL));
    assert_eq!(misaligned, Err(libc::EINVAL));
    assert_eq!(d.read_reg(bar0::DRIVER_VERSION), 0x0102_0304);
}

#[test]
fn enable_with_an_invalid_admin_queue_sets_fatal_bad_admin_config() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);
    d.write_reg(bar0::AQ_BASE_LO, 0x1000_0800); // not 4 KiB aligned
    d.write_reg(bar0::AQ_BASE_HI, 1);
    d.write_reg(bar0::ACQ_BASE_LO, 0x1000_2000);
    d.write_reg(bar0::ACQ_BASE_HI, 1);
    d.write_reg(bar0::AQ_DEPTH_LOG2, 3);

    d.write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_ENABLE_MASK);

    assert_eq!(d.read_reg(bar0::DEV_STATUS), bar0::DEV_STATUS_FATAL_MASK);
    assert_eq!(
        d.read_reg(bar0::FATAL_CODE),
        u32::from(FatalCode::BadAdminConfig)
    );
}

#[test]
fn the_doorbell_bar_is_shared_memory_between_mmap_and_trapped_access() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);

    d.db_store(3, 7, 1, 0x1234_5678);
    let trapped = d
        .vfio
        .region_read(BAR_DB, 3 * 4096 + db_slot_offset(7) + 4, 4)
        .expect("BAR2 read");
    d.vfio
        .region_write(BAR_DB, 5 * 4096 + db_slot_offset(2), &[9, 0, 0, 0])
        .expect("BAR2 write");

    assert_eq!(trapped, 0x1234_5678u32.to_le_bytes());
    assert_eq!(d.db_load(5, 2, 0), 9);
}

#[test]
fn the_kick_bar_reads_zero() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);

    let v = d.vfio.region_read(BAR_KICK, 4096, 4).expect("BAR4 read");

    assert_eq!(v, vec![0; 4]);
}

/// A loopback pair on its own fabric whose poller polls for `idle` after work.
fn loopback_with_idle(idle: Duration) -> (TestDevices, FakeDriver, pair::Side, pair::Side) {
    let devices = TestDevices::start_with_idle(1, idle);
    let mut d = devices.driver(0);
    let (a, b) = pair::loopback_sides(&mut d);
    (devices, d, a, b)
}

#[test]
fn a_doorbell_written_while_the_device_sleeps_is_seen_after_the_kick() {
    let (_devices, mut d, mut a, b) = loopback_with_idle(Duration::from_micros(100));
    let src = d.reg_mr(a.uctx, a.pd, 8, ACCESS_ALL);
    let dst = d.reg_mr(b.uctx, b.pd, 8, ACCESS_ALL);
    let kicks = d.kicks;

    for i in 0..3 {
        d.wait_poller_asleep(a.qp.page);
        d.post_send(
            &mut a.qp,
            &SendWr::write(i, vec![src.sge(0, 8)], &dst, 0).signaled(),
        );
        assert_cqe_ok(&d.wait_cqe(&mut a.send_cq), i, WcOpcode::RdmaWrite);
    }

    assert!(d.kicks > kicks, "POLLING read 0, so the driver kicked");
}

#[test]
fn doorbells_written_while_the_device_polls_need_no_kick() {
    // The poller keeps polling for a minute after work: longer than the test.
    let (_devices, mut d, mut a, b) = loopback_with_idle(Duration::from_secs(60));
    let src = d.reg_mr(a.uctx, a.pd, 8, ACCESS_ALL);
    let dst = d.reg_mr(b.uctx, b.pd, 8, ACCESS_ALL);
    d.post_send(
        &mut a.qp,
        &SendWr::write(0, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    d.wait_cqe(&mut a.send_cq);
    let page = a.qp.page;
    wait_for("the poller to announce polling", || {
        (d.poll_state(page) & db_page::POLL_STATE_POLLING_MASK != 0).then_some(())
    });
    let kicks = d.kicks;

    for i in 1..=20 {
        d.post_send(
            &mut a.qp,
            &SendWr::write(i, vec![src.sge(0, 8)], &dst, 0).signaled(),
        );
        assert_cqe_ok(&d.wait_cqe(&mut a.send_cq), i, WcOpcode::RdmaWrite);
    }

    assert_eq!(
        d.kicks, kicks,
        "POLLING read 1 every time: no trapped write"
    );
}
