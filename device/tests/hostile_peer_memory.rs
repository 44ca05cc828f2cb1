//! A hostile socket peer against the memory it shares with the device: the doorbell BAR
//! memfd it receives cannot be resized, and guest RAM it maps must be sealed against
//! shrinking, so no truncation can make the device's next access raise SIGBUS.

mod harness;

use std::os::fd::AsRawFd;

use harness::memory::{memfd_sealed, seals_of, Sealing, PAGE};
use harness::pair::{loopback_sides, transfer_and_verify, Ends};
use harness::vfio::{DMA_READ, DMA_WRITE};
use harness::*;
use vm_memory::ByteValued;
use vrnic_hw::*;

/// A guest-physical address outside the harness's guest RAM.
const EXTRA_GPA: u64 = 0x40_0000_0000;

#[test]
fn truncating_the_doorbell_memfd_fails_and_the_device_keeps_working() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let bar = d.vfio.region_info(BAR_DB);
    let fd = bar.fd.expect("BAR2 info carries the fd");

    let shrink = fd.set_len(0).unwrap_err();
    let grow = fd.set_len(2 * u64::from(BAR_DB_SIZE)).unwrap_err();

    assert_eq!(shrink.raw_os_error(), Some(libc::EPERM), "{shrink}");
    assert_eq!(grow.raw_os_error(), Some(libc::EPERM), "{grow}");
    assert_eq!(fd.metadata().unwrap().len(), u64::from(BAR_DB_SIZE));
    let (mut a, mut b) = loopback_sides(&mut d);
    transfer_and_verify(&mut Ends::One(&mut d), &mut a, &mut b, 0xba2);
}

#[test]
fn dma_map_of_memory_that_could_shrink_is_refused_with_eperm() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let unsealable = memfd_sealed(c"vrnic-seal-off", PAGE, Sealing::Unsealable);
    let regular = vmm_sys_util::tempfile::TempFile::new().unwrap();
    regular.as_file().set_len(PAGE).unwrap();
    let pipe = pipe();

    for (what, fd) in [
        ("memfd without sealing (seal=off)", unsealable.as_raw_fd()),
        ("regular file", regular.as_file().as_raw_fd()),
        ("pipe", pipe[0].as_raw_fd()),
    ] {
        let result = d
            .vfio
            .dma_map(EXTRA_GPA, PAGE, 0, DMA_READ | DMA_WRITE, Some(fd));

        assert_eq!(result, Err(libc::EPERM), "{what}");
    }
    let attr = d.query_device();
    assert_ne!(
        attr.max_qp.to_native(),
        0,
        "the device still answers admin commands"
    );
}

#[test]
fn sealable_memfd_is_sealed_by_the_device_which_then_writes_it_safely() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let file = d.mem.add_range_sealed(EXTRA_GPA, PAGE, Sealing::Sealable);
    d.vfio
        .dma_map(
            EXTRA_GPA,
            PAGE,
            0,
            DMA_READ | DMA_WRITE,
            Some(file.as_raw_fd()),
        )
        .expect("DMA_MAP of a sealable memfd");

    let truncate = file.set_len(0).unwrap_err();

    assert_eq!(truncate.raw_os_error(), Some(libc::EPERM), "{truncate}");
    assert_ne!(seals_of(&file) & libc::F_SEAL_SHRINK, 0);
    let cmd = cmd_query(AqOpcode::QueryDevice, EXTRA_GPA, DeviceAttr::SIZE as u32, 0);
    d.admin(&cmd).ok();
    let written: DeviceAttr = d.mem.read_obj(EXTRA_GPA);
    assert_eq!(written.as_slice(), d.query_device().as_slice());
}

#[test]
fn qemu_sealed_guest_ram_is_accepted_with_its_seals_unchanged() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);

    let attr = d.query_device();

    assert_ne!(attr.max_qp.to_native(), 0);
    assert_eq!(
        seals_of(d.mem.ram_file()),
        libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL
    );
}
