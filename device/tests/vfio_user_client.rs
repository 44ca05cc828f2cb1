//! The normal path, driven by an independent peer: the `vfio_user` crate's
//! `Client` (rust-vmm). It has no socket timeouts and hangs on error
//! replies, so every test body runs under a hang guard and error cases live
//! in `vfio_user_protocol.rs`.

mod harness;

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use harness::memory::memfd;
use harness::test_model::*;
use harness::with_hang_guard;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_REGION_INFO_FLAG_CAPS,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::Client;
use vm_memory::{FileOffset, MmapRegion, VolatileMemory};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Guest RAM for the DMA tests: 1 MiB at guest address 1 MiB.
const RAM_BASE: u64 = 0x10_0000;
const RAM_SIZE: u64 = 0x10_0000;

fn read_u32(client: &mut Client, offset: u64) -> u32 {
    let mut b = [0u8; 4];
    client.region_read(0, offset, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn write_u32(client: &mut Client, offset: u64, v: u32) {
    client.region_write(0, offset, &v.to_le_bytes()).unwrap();
}

#[test]
fn client_connects_and_sees_the_regions() {
    let server = TestServer::start();
    let path = server.path.clone();

    let (bar0, bar2, config) = with_hang_guard(move || {
        let client = Client::new(&path).unwrap();
        let r = |i| {
            let region = client.region(i).unwrap();
            (
                region.flags,
                region.size,
                region.file_offset.is_some(),
                region.sparse_areas.len(),
            )
        };
        (r(0), r(2), r(7))
    });

    let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    assert_eq!(bar0, (rw, BAR0_SIZE, false, 0));
    assert_eq!(
        bar2,
        (
            rw | VFIO_REGION_INFO_FLAG_MMAP | VFIO_REGION_INFO_FLAG_CAPS,
            BAR2_SIZE,
            true,
            1
        )
    );
    assert_eq!(config, (rw, CONFIG_SIZE, false, 0));
}

#[test]
fn mmapped_bar_shares_memory_with_the_server() {
    let server = TestServer::start();
    let path = server.path.clone();

    let (seen_by_client, seen_by_server) = with_hang_guard(move || {
        let mut client = Client::new(&path).unwrap();
        let region = client.region(2).unwrap();
        let fo = region.file_offset.as_ref().unwrap();
        let fo = FileOffset::new(fo.file().try_clone().unwrap(), fo.start());
        let area = region.sparse_areas[0];
        let map = MmapRegion::<()>::from_file(fo, area.size as usize).unwrap();
        let mut seen = vec![0u8; BAR2_PATTERN.len()];
        map.get_slice(area.offset as usize, seen.len())
            .unwrap()
            .copy_to(&mut seen[..]);
        map.get_slice(0x100, 4).unwrap().copy_from(&[1u8, 2, 3, 4]);
        let mut back = [0u8; 4];
        client.region_read(2, 0x100, &mut back).unwrap();
        (seen, back)
    });

    assert_eq!(seen_by_client, BAR2_PATTERN);
    assert_eq!(seen_by_server, [1, 2, 3, 4]);
}

#[test]
fn trapped_region_reads_and_writes_reach_the_model() {
    let server = TestServer::start();
    let path = server.path.clone();

    let (id, scratch, config) = with_hang_guard(move || {
        let mut client = Client::new(&path).unwrap();
        write_u32(&mut client, reg::SCRATCH, 0x1234_5678);
        client.region_write(7, 0x40, &[0xaa, 0xbb]).unwrap();
        let mut cfg = [0u8; 2];
        client.region_read(7, 0x40, &mut cfg).unwrap();
        (
            read_u32(&mut client, reg::ID),
            read_u32(&mut client, reg::SCRATCH),
            cfg,
        )
    });

    assert_eq!(id, DEVICE_ID);
    assert_eq!(scratch, 0x1234_5678);
    assert_eq!(config, [0xaa, 0xbb]);
}

#[test]
fn model_reaches_dma_mapped_guest_memory() {
    let server = TestServer::start();
    let path = server.path.clone();
    let ram = memfd(c"vrnic-test", RAM_SIZE);
    ram.write_all_at(&0xcafe_f00du32.to_le_bytes(), 0x40)
        .unwrap();
    let client_ram = ram.try_clone().unwrap();
    let model = server.model.clone();

    let (loaded, status, snapshot) = with_hang_guard(move || {
        let mut client = Client::new(&path).unwrap();
        client
            .dma_map(0, RAM_BASE, RAM_SIZE, client_ram.as_raw_fd())
            .unwrap();
        write_u32(&mut client, reg::DMA_ADDR_LO, (RAM_BASE + 0x40) as u32);
        write_u32(&mut client, reg::CMD, cmd::DMA_LOAD);
        let loaded = read_u32(&mut client, reg::RESULT);
        write_u32(&mut client, reg::SCRATCH, 0x600d_d00d);
        write_u32(&mut client, reg::DMA_ADDR_LO, (RAM_BASE + 0x80) as u32);
        write_u32(&mut client, reg::CMD, cmd::DMA_STORE);
        let snapshot = model.lock().unwrap().ram().unwrap().snapshot();
        (loaded, read_u32(&mut client, reg::STATUS), snapshot)
    });

    assert_eq!(loaded, 0xcafe_f00d);
    assert_eq!(status, 0);
    let mut stored = [0u8; 4];
    ram.read_exact_at(&mut stored, 0x80).unwrap();
    assert_eq!(u32::from_le_bytes(stored), 0x600d_d00d);
    // The snapshot outlives the client's connection and its maps.
    assert_eq!(
        snapshot
            .load_u32(RAM_BASE + 0x80, Ordering::Acquire)
            .unwrap(),
        0x600d_d00d
    );
}

#[test]
fn dma_outside_the_maps_fails_in_the_model_not_the_server() {
    let server = TestServer::start();
    let path = server.path.clone();
    let ram = memfd(c"vrnic-test", RAM_SIZE);

    let (status, id) = with_hang_guard(move || {
        let mut client = Client::new(&path).unwrap();
        client
            .dma_map(0, RAM_BASE, RAM_SIZE, ram.as_raw_fd())
            .unwrap();
        client.dma_unmap(RAM_BASE, RAM_SIZE).unwrap();
        write_u32(&mut client, reg::DMA_ADDR_LO, (RAM_BASE + 0x40) as u32);
        write_u32(&mut client, reg::CMD, cmd::DMA_LOAD);
        (
            read_u32(&mut client, reg::STATUS),
            read_u32(&mut client, reg::ID),
        )
    });

    assert_eq!(status, 1, "the unmapped load failed");
    assert_eq!(id, DEVICE_ID);
}

#[test]
fn eventfd_set_through_set_irqs_is_signalled_by_the_model() {
    let server = TestServer::start();
    let path = server.path.clone();
    let efd = EventFd::new(EFD_NONBLOCK).unwrap();
    let client_efd = efd.try_clone().unwrap();

    with_hang_guard(move || {
        let mut client = Client::new(&path).unwrap();
        let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        client
            .set_irqs(2, flags, 1, 1, &[client_efd.as_raw_fd()])
            .unwrap();
        write_u32(&mut client, reg::SCRATCH, 1);
        write_u32(&mut client, reg::CMD, cmd::IRQ);
    });

    // The model wrote the eventfd before the write was acknowledged.
    assert_eq!(efd.read().unwrap(), 1);
    assert_eq!(
        server.log.count(&Event::SetIrqs {
            index: 2,
            start: 1,
            fds: vec![true]
        }),
        1
    );
}

#[test]
fn reset_returns_the_model_to_its_initial_state() {
    let server = TestServer::start();
    let path = server.path.clone();

    let scratch = with_hang_guard(move || {
        let mut client = Client::new(&path).unwrap();
        write_u32(&mut client, reg::SCRATCH, 77);
        client.reset().unwrap();
        read_u32(&mut client, reg::SCRATCH)
    });

    assert_eq!(scratch, 0);
    assert_eq!(server.log.count(&Event::Reset), 1);
}

#[test]
fn a_second_client_is_served_after_the_first_disconnects() {
    let server = TestServer::start();
    let path = server.path.clone();
    let ram = memfd(c"vrnic-test", RAM_SIZE);
    let first_ram = {
        let path = path.clone();
        let fd = ram.try_clone().unwrap();
        with_hang_guard(move || {
            let mut client = Client::new(&path).unwrap();
            client
                .dma_map(0, RAM_BASE, RAM_SIZE, fd.as_raw_fd())
                .unwrap();
            client.shutdown().unwrap();
        });
        server.log.wait_for(&Event::Disconnected, 1);
        server.model.lock().unwrap().ram()
    };

    let id = with_hang_guard(move || {
        let mut client = Client::new(&path).unwrap();
        read_u32(&mut client, reg::ID)
    });

    assert!(
        first_ram.is_none(),
        "the model dropped the first client's GuestRam"
    );
    assert_eq!(id, DEVICE_ID);
    assert_eq!(server.log.count(&Event::Connected), 2);
}
