//! Raw-message tests of the vfio-user server over a real UNIX socket:
//! the normal replies, and robustness against malformed, truncated and
//! hostile input. Every client socket has a timeout, so a broken server
//! fails a test instead of hanging it.

mod harness;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use harness::join_with_guard;
use harness::memory::memfd;
use harness::test_model::*;
use harness::vfio::command::*;
use harness::vfio::*;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vrnic::vfio_user::{DeviceModel, Server};

const DATA_EVENTFD_TRIGGER: u32 = IRQ_DATA_EVENTFD | IRQ_ACTION_TRIGGER;
const DATA_NONE_TRIGGER: u32 = IRQ_DATA_NONE | IRQ_ACTION_TRIGGER;

#[test]
fn test_model_registers_behave() {
    let mut m = TestModel::new(std::sync::Arc::new(EventLog::default()));
    let mut buf = [0u8; 4];
    m.region_write(0, reg::SCRATCH, &7u32.to_le_bytes())
        .unwrap();
    m.region_read(0, reg::SCRATCH, &mut buf).unwrap();

    assert_eq!(u32::from_le_bytes(buf), 7);
}

#[test]
fn version_reply_is_0_0_with_capabilities() {
    let server = TestServer::start();
    let mut c = server.raw();

    let json = c.negotiate(false);

    let caps = &json["capabilities"];
    assert_eq!(caps["max_msg_fds"], 16);
    assert_eq!(caps["max_data_xfer_size"], 1048576);
    assert_eq!(caps["pgsizes"], 4096);
    assert!(caps.get("write_multiple").is_none());
}

#[test]
fn write_multiple_is_advertised_when_the_client_offers_it() {
    let server = TestServer::start();
    let mut c = server.raw();

    let json = c.negotiate(true);

    assert_eq!(json["capabilities"]["write_multiple"], true);
}

#[test]
fn version_reply_fits_in_the_buffer_of_qemus_request() {
    // QEMU 11 receives a reply into the buffer of its request.
    let qemu = br#"{"capabilities":{"migration":{"pgsize":4096,"max_bitmap_size":268435456},"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}"#;
    let request = Payload::new().u16(0).u16(0).bytes(qemu).bytes(&[0]).0;
    let server = TestServer::start();
    let mut c = server.raw();

    let reply = c.request(VERSION, &request);

    assert!(!reply.is_error());
    assert!(reply.payload.len() <= request.len());
    assert_eq!((reply.payload[0], reply.payload[2]), (0, 0), "version 0.0");
}

#[test]
fn version_with_unsupported_major_is_refused_and_closed() {
    let server = TestServer::start();
    let mut c = server.raw();

    c.expect_errno(VERSION, &Payload::new().u16(1).u16(0).0, libc::ENOTSUP);

    assert!(c.at_eof());
}

#[test]
fn version_with_malformed_json_is_einval_and_can_be_retried() {
    let server = TestServer::start();
    let mut c = server.raw();

    c.expect_errno(
        VERSION,
        &Payload::new().u16(0).u16(0).bytes(b"{oops\0").0,
        libc::EINVAL,
    );

    c.negotiate(false);
}

#[test]
fn commands_before_version_are_einval() {
    let server = TestServer::start();
    let mut c = server.raw();

    c.expect_errno(
        DEVICE_GET_INFO,
        &Payload::new().u32(16).u32(0).u32(0).u32(0).0,
        libc::EINVAL,
    );

    c.negotiate(false);
    assert!(!c.device_info().is_error());
}

#[test]
fn device_info_reports_pci_reset_regions_and_three_irq_indexes() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    let info = c.device_info();

    assert_eq!(info.u32_at(0), 16);
    assert_eq!(info.u32_at(4), 0b11, "PCI | RESET");
    assert_eq!(info.u32_at(8), 9);
    assert_eq!(info.u32_at(12), 3);
}

#[test]
fn unknown_command_is_enosys_and_the_stream_stays_in_sync() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    // DEVICE_FEATURE with a payload, then an invented command.
    c.expect_errno(DEVICE_FEATURE, &[0xab; 40], libc::ENOSYS);
    c.expect_errno(0x7777, &[0xcd; 1000], libc::ENOSYS);

    assert_eq!(c.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn truncated_message_then_eof_drops_only_that_client() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let mut msg = header(1, REGION_WRITE, 64, 0);
    msg.extend_from_slice(&[0; 10]);

    c.send_raw(&msg);
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();

    assert!(c.at_eof());
    server.log.wait_for(&Event::Disconnected, 1);
    let mut next = server.negotiated();
    assert_eq!(next.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn absurd_message_size_gets_emsgsize_and_the_client_is_dropped() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    c.send_raw(&header(7, REGION_WRITE, 0xffff_ffff, 0));

    let reply = c.recv();
    assert_eq!(reply.id, 7);
    assert!(reply.is_error());
    assert_eq!(reply.error, libc::EMSGSIZE as u32);
    assert!(c.at_eof());
    let mut next = server.negotiated();
    assert_eq!(next.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn message_size_below_the_header_drops_the_client() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    c.send_raw(&header(1, DEVICE_GET_INFO, 8, 0));

    assert!(c.at_eof());
    let mut next = server.negotiated();
    assert!(!next.device_info().is_error());
}

#[test]
fn garbage_bytes_drop_the_client_and_the_next_one_is_served() {
    let server = TestServer::start();
    let mut c = server.raw();
    // A fixed pseudo-random stream (xorshift), so failures reproduce.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let garbage: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();

    let _ = c.stream.write_all(&garbage);
    drop(c);

    server.log.wait_for(&Event::Disconnected, 1);
    let mut next = server.negotiated();
    assert_eq!(next.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn client_vanishing_mid_header_or_mid_payload_leaves_the_server_serving() {
    let server = TestServer::start();
    let mut a = server.negotiated();
    a.send_raw(&header(1, REGION_READ, 32, 0)[..9]);
    drop(a);
    server.log.wait_for(&Event::Disconnected, 1);
    let mut b = server.negotiated();
    let mut msg = header(2, REGION_WRITE, 1000, 0);
    msg.extend_from_slice(&[1; 100]);
    b.send_raw(&msg);
    drop(b);
    server.log.wait_for(&Event::Disconnected, 2);

    let mut c = server.negotiated();

    assert_eq!(c.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn region_accesses_out_of_range_are_einval() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let read =
        |offset: u64, region: u32, count: u32| Payload::new().u64(offset).u32(region).u32(count).0;

    c.expect_errno(REGION_READ, &read(BAR0_SIZE - 4, 0, 8), libc::EINVAL);
    c.expect_errno(REGION_READ, &read(u64::MAX - 1, 0, 4), libc::EINVAL);
    c.expect_errno(REGION_READ, &read(0, 3, 4), libc::EINVAL);
    c.expect_errno(REGION_READ, &read(0, 99, 4), libc::EINVAL);
    c.expect_errno(REGION_READ, &read(0, 2, (1 << 20) + 1), libc::EINVAL);
    c.expect_errno(REGION_READ, &[0; 8], libc::EINVAL);

    assert_eq!(c.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn megabyte_region_write_and_read_cross_the_socket_buffers() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let data: Vec<u8> = (0..BAR2_SIZE as u32).map(|i| (i % 251) as u8).collect();
    let write = Payload::new()
        .u64(0)
        .u32(2)
        .u32(BAR2_SIZE as u32)
        .bytes(&data)
        .0;

    let w = c.request(REGION_WRITE, &write);
    let r = c.region_read(2, 0, BAR2_SIZE as u32);

    assert!(!w.is_error());
    assert_eq!(r.u32_at(12), BAR2_SIZE as u32);
    assert!(r.payload[16..] == data[..], "read back what was written");
}

#[test]
fn region_write_with_wrong_data_length_is_einval() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    let p = Payload::new().u64(reg::SCRATCH).u32(0).u32(4).u16(1).0;
    c.expect_errno(REGION_WRITE, &p, libc::EINVAL);

    assert_eq!(c.read_u32(0, reg::SCRATCH), 0);
}

#[test]
fn model_errors_reach_the_client_as_their_errno() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    // The test model refuses BAR0 accesses that are not 4 aligned bytes.
    c.expect_errno(
        REGION_READ,
        &Payload::new().u64(1).u32(0).u32(2).0,
        libc::EINVAL,
    );
}

#[test]
fn posted_write_gets_no_reply() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let write = Payload::new().u64(reg::SCRATCH).u32(0).u32(4).u32(0x55aa).0;

    c.send(REGION_WRITE, FLAG_NO_REPLY, &write, &[]);
    let read_id = c.send(
        REGION_READ,
        0,
        &Payload::new().u64(reg::SCRATCH).u32(0).u32(4).0,
        &[],
    );

    let reply = c.recv();
    assert_eq!(reply.id, read_id, "the posted write must not be answered");
    assert_eq!(reply.u32_at(16), 0x55aa);
}

#[test]
fn failed_posted_write_is_silent_and_the_stream_continues() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    c.send(
        REGION_WRITE,
        FLAG_NO_REPLY,
        &Payload::new().u64(0).u32(42).u32(4).u32(1).0,
        &[],
    );

    assert_eq!(c.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn write_multi_applies_every_write_in_order() {
    let server = TestServer::start();
    let mut c = server.raw();
    c.negotiate(true);
    let entry = |offset: u64, v: u32| Payload::new().u64(offset).u32(0).u32(4).u32(v).u32(0).0;
    let mut p = Payload::new().u64(2).0;
    p.extend(entry(reg::SCRATCH, 11));
    p.extend(entry(reg::DMA_ADDR_LO, 22));

    let reply = c.request(REGION_WRITE_MULTI, &p);

    assert_eq!(reply.u64_at(0), 2);
    assert_eq!(c.read_u32(0, reg::SCRATCH), 11);
    assert_eq!(c.read_u32(0, reg::DMA_ADDR_LO), 22);
}

#[test]
fn write_multi_with_a_bad_entry_writes_nothing() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let mut p = Payload::new().u64(2).0;
    p.extend(Payload::new().u64(reg::SCRATCH).u32(0).u32(4).u64(5).0);
    p.extend(Payload::new().u64(BAR0_SIZE).u32(0).u32(4).u64(5).0);

    c.expect_errno(REGION_WRITE_MULTI, &p, libc::EINVAL);

    assert_eq!(c.read_u32(0, reg::SCRATCH), 0);
}

#[test]
fn region_info_with_small_argsz_asks_for_more_then_sends_cap_and_fd() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    let short = c.request(DEVICE_GET_REGION_INFO, &region_info_payload(32, 2));
    let needed = short.u32_at(0);
    let full = c.request(DEVICE_GET_REGION_INFO, &region_info_payload(needed, 2));

    assert_eq!(short.payload.len(), 32);
    assert!(short.fds.is_empty());
    assert_eq!(
        short.u32_at(4) & 0b1000,
        0,
        "no CAPS flag without the capability"
    );
    assert_eq!(needed, 32 + 8 + 8 + 16);
    assert_eq!(full.u32_at(4), 0b1111, "READ | WRITE | MMAP | CAPS");
    assert_eq!(full.u32_at(12), 32, "cap_offset");
    assert_eq!(full.u64_at(16), BAR2_SIZE);
    assert_eq!(full.u32_at(32) & 0xffff, 1, "sparse mmap capability id");
    assert_eq!(full.u32_at(40), 1, "one area");
    assert_eq!((full.u64_at(48), full.u64_at(56)), (0, BAR2_SIZE));
    assert_eq!(full.fds.len(), 1);
}

#[test]
fn trapped_and_absent_regions_have_no_fd() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    let bar0 = c.request(DEVICE_GET_REGION_INFO, &region_info_payload(256, 0));
    let bar1 = c.request(DEVICE_GET_REGION_INFO, &region_info_payload(256, 1));

    assert_eq!(bar0.u32_at(4), 0b11);
    assert_eq!(bar0.u64_at(16), BAR0_SIZE);
    assert!(bar0.fds.is_empty());
    assert_eq!((bar1.u32_at(4), bar1.u64_at(16)), (0, 0));
    c.expect_errno(
        DEVICE_GET_REGION_INFO,
        &region_info_payload(256, 9),
        libc::EINVAL,
    );
}

#[test]
fn irq_info_exposes_msix_vectors_and_refuses_err_and_req() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    let msix = c.request(
        DEVICE_GET_IRQ_INFO,
        &Payload::new().u32(16).u32(0).u32(2).u32(0).0,
    );

    assert_eq!(msix.u32_at(4), 1, "EVENTFD, not NORESIZE");
    assert_eq!(msix.u32_at(12), MSIX_VECTORS);
    c.expect_errno(
        DEVICE_GET_IRQ_INFO,
        &Payload::new().u32(16).u32(0).u32(3).u32(0).0,
        libc::EINVAL,
    );
}

#[test]
fn set_irqs_forms_qemu_sends_reach_the_model() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let efd = EventFd::new(EFD_NONBLOCK).unwrap();

    // Enabling MSI-X: start 0 count 1, DATA_EVENTFD without fd.
    c.request(
        DEVICE_SET_IRQS,
        &set_irqs_payload(DATA_EVENTFD_TRIGGER, 2, 0, 1),
    );
    // One vector with its eventfd.
    c.request_with_fds(
        DEVICE_SET_IRQS,
        &set_irqs_payload(DATA_EVENTFD_TRIGGER, 2, 3, 1),
        &[efd.as_raw_fd()],
    );
    // Disabling: count 0, DATA_NONE.
    c.request(
        DEVICE_SET_IRQS,
        &set_irqs_payload(DATA_NONE_TRIGGER, 2, 0, 0),
    );

    let sets: Vec<Event> = server
        .log
        .all()
        .into_iter()
        .filter(|e| matches!(e, Event::SetIrqs { .. }))
        .collect();
    assert_eq!(
        sets,
        vec![
            Event::SetIrqs {
                index: 2,
                start: 0,
                fds: vec![false]
            },
            Event::SetIrqs {
                index: 2,
                start: 3,
                fds: vec![true]
            },
            Event::SetIrqs {
                index: 2,
                start: 0,
                fds: vec![false; 4]
            },
        ]
    );
}

#[test]
fn malformed_set_irqs_are_refused_with_the_right_errno() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let a = EventFd::new(EFD_NONBLOCK).unwrap();

    // Two vectors, one fd.
    let reply = c.request_with_fds(
        DEVICE_SET_IRQS,
        &set_irqs_payload(DATA_EVENTFD_TRIGGER, 2, 0, 2),
        &[a.as_raw_fd()],
    );
    assert_eq!(reply.error, libc::EINVAL as u32);
    // Past the last vector.
    c.expect_errno(
        DEVICE_SET_IRQS,
        &set_irqs_payload(DATA_EVENTFD_TRIGGER, 2, 3, 2),
        libc::EINVAL,
    );
    // start + count overflows.
    c.expect_errno(
        DEVICE_SET_IRQS,
        &set_irqs_payload(DATA_EVENTFD_TRIGGER, 2, u32::MAX, 2),
        libc::EINVAL,
    );
    // Two data types at once.
    c.expect_errno(
        DEVICE_SET_IRQS,
        &set_irqs_payload(0b101 | (1 << 5), 2, 0, 1),
        libc::EINVAL,
    );
    // MASK action.
    c.expect_errno(
        DEVICE_SET_IRQS,
        &set_irqs_payload(1 | (1 << 3), 2, 0, 1),
        libc::ENOTSUP,
    );
    // ERR index is not exposed.
    c.expect_errno(
        DEVICE_SET_IRQS,
        &set_irqs_payload(DATA_NONE_TRIGGER, 3, 0, 0),
        libc::EINVAL,
    );

    assert_eq!(
        server.log.count(&Event::SetIrqs {
            index: 2,
            start: 0,
            fds: vec![true, true]
        }),
        0
    );
}

#[test]
fn more_than_16_fds_is_einval_and_the_stream_continues() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let efds: Vec<EventFd> = (0..17)
        .map(|_| EventFd::new(EFD_NONBLOCK).unwrap())
        .collect();
    let raw: Vec<i32> = efds.iter().map(|e| e.as_raw_fd()).collect();

    let reply = c.request_with_fds(
        DEVICE_SET_IRQS,
        &set_irqs_payload(DATA_EVENTFD_TRIGGER, 2, 0, 17),
        &raw,
    );

    assert_eq!(reply.error, libc::EINVAL as u32);
    assert_eq!(c.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn dma_map_with_two_fds_or_unknown_flags_is_einval() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let a = memfd(c"vrnic-test", 0x1000);
    let b = memfd(c"vrnic-test", 0x1000);

    let two = c.request_with_fds(
        DMA_MAP,
        &dma_map_payload(3, 0, 0x1000, 0x1000),
        &[a.as_raw_fd(), b.as_raw_fd()],
    );
    let flags = c.request_with_fds(
        DMA_MAP,
        &dma_map_payload(3 | 4, 0, 0x1000, 0x1000),
        &[a.as_raw_fd()],
    );

    assert_eq!(two.error, libc::EINVAL as u32);
    assert_eq!(flags.error, libc::EINVAL as u32);
    assert_eq!(server.log.count(&Event::DmaChanged), 0);
}

#[test]
fn dma_map_overlap_is_eexist_and_unmap_of_unknown_range_is_enoent() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let ram = memfd(c"vrnic-test", 0x4000);

    let ok = c.request_with_fds(
        DMA_MAP,
        &dma_map_payload(3, 0, 0x10000, 0x4000),
        &[ram.as_raw_fd()],
    );
    let overlap = c.request(DMA_MAP, &dma_map_payload(1, 0, 0x12000, 0x1000));

    assert!(!ok.is_error());
    assert_eq!(overlap.error, libc::EEXIST as u32);
    c.expect_errno(
        DMA_UNMAP,
        &dma_unmap_payload(0, 0x10000, 0x1000),
        libc::ENOENT,
    );
    c.expect_errno(
        DMA_UNMAP,
        &dma_unmap_payload(0, 0x90000, 0x1000),
        libc::ENOENT,
    );
}

#[test]
fn dma_maps_beyond_the_advertised_max_dma_maps_are_enospc() {
    let server = TestServer::start();
    let mut c = server.raw();
    let max = c.negotiate(false)["capabilities"]["max_dma_maps"]
        .as_u64()
        .expect("max_dma_maps is a number");
    assert!(
        max < 65535,
        "max_dma_maps {max} bounds what one client pins"
    );
    let map =
        |c: &mut RawClient, i: u64| c.request(DMA_MAP, &dma_map_payload(1, 0, i << 12, 0x1000));
    let accepted = (0..max).filter(|&i| !map(&mut c, i).is_error()).count();

    let beyond = map(&mut c, max);
    let unmapped = c.request(DMA_UNMAP, &dma_unmap_payload(0, 0, 0x1000));
    let again = map(&mut c, max);

    assert_eq!(accepted as u64, max);
    assert_eq!(beyond.error, libc::ENOSPC as u32);
    assert!(!unmapped.is_error());
    assert!(!again.is_error(), "a freed entry can be used again");
}

#[test]
fn dma_map_beyond_the_end_of_the_file_is_einval() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let ram = memfd(c"vrnic-test", 0x1000);

    let reply = c.request_with_fds(
        DMA_MAP,
        &dma_map_payload(3, 0, 0, 0x2000),
        &[ram.as_raw_fd()],
    );

    assert_eq!(reply.error, libc::EINVAL as u32);
}

#[test]
fn dma_unmap_echoes_the_request_and_unmap_all_empties_the_table() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let ram = memfd(c"vrnic-test", 0x3000);
    for (i, addr) in [0x1000u64, 0x2000, 0x8000].into_iter().enumerate() {
        let reply = c.request_with_fds(
            DMA_MAP,
            &dma_map_payload(3, i as u64 * 0x1000, addr, 0x1000),
            &[ram.as_raw_fd()],
        );
        assert!(!reply.is_error());
    }
    // A map without fd (a ROM, say) is accepted too.
    assert!(!c
        .request(DMA_MAP, &dma_map_payload(1, 0, 0xf0000, 0x10000))
        .is_error());
    let guest_ram = server.model.lock().unwrap().ram().unwrap();

    let one = c.request(DMA_UNMAP, &dma_unmap_payload(0, 0x2000, 0x1000));
    assert_eq!(one.payload, dma_unmap_payload(0, 0x2000, 0x1000));
    assert_eq!(guest_ram.len(), 3);
    c.expect_errno(DMA_UNMAP, &dma_unmap_payload(2, 0x1000, 0), libc::EINVAL);
    let all = c.request(DMA_UNMAP, &dma_unmap_payload(2, 0, 0));

    assert!(!all.is_error());
    assert!(guest_ram.is_empty());
    assert_eq!(server.log.count(&Event::DmaChanged), 6);
}

#[test]
fn reset_reaches_the_model() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    c.write_u32(0, reg::SCRATCH, 9);

    let reply = c.request(DEVICE_RESET, &[]);

    assert!(!reply.is_error());
    assert_eq!(server.log.count(&Event::Reset), 1);
    assert_eq!(c.read_u32(0, reg::SCRATCH), 0);
}

#[test]
fn reply_messages_from_the_client_are_ignored() {
    let server = TestServer::start();
    let mut c = server.negotiated();

    c.send(DEVICE_GET_INFO, FLAG_REPLY, &[0; 16], &[]);

    assert_eq!(c.read_u32(0, reg::ID), DEVICE_ID);
}

#[test]
fn second_concurrent_client_is_turned_away() {
    let server = TestServer::start();
    let mut first = server.negotiated();

    let mut second = server.raw();

    assert!(second.at_eof());
    assert_eq!(first.read_u32(0, reg::ID), DEVICE_ID);
    assert_eq!(server.log.count(&Event::Connected), 1);
}

#[test]
fn disconnect_empties_the_dma_table_and_notifies_the_model() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    let ram = memfd(c"vrnic-test", 0x1000);
    c.request_with_fds(
        DMA_MAP,
        &dma_map_payload(3, 0, 0, 0x1000),
        &[ram.as_raw_fd()],
    );
    let guest_ram = server.model.lock().unwrap().ram().unwrap();

    drop(c);
    server.log.wait_for(&Event::Disconnected, 1);

    assert!(guest_ram.is_empty());
    assert!(server.model.lock().unwrap().ram().is_none());
}

#[test]
fn stop_while_a_client_is_mid_message_returns_and_removes_the_socket() {
    let server = TestServer::start();
    let mut c = server.negotiated();
    c.send_raw(&header(1, REGION_WRITE, 100, 0)[..16]);
    let path = server.path.clone();

    server.stop().unwrap();

    assert!(!path.exists());
    assert!(c.at_eof());
}

#[test]
fn bind_replaces_a_stale_socket_but_not_a_live_one_or_a_file() {
    let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
    let stale = dir.as_path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let plain = dir.as_path().join("plain");
    std::fs::write(&plain, b"keep me").unwrap();
    let log = std::sync::Arc::new(EventLog::default());
    let model = std::sync::Arc::new(std::sync::Mutex::new(TestModel::new(log)));

    let server = Server::bind(&stale, model.clone()).unwrap();
    let live = Server::bind(&stale, model.clone());
    let file = Server::bind(&plain, model);

    assert!(UnixStream::connect(&stale).is_ok());
    assert!(matches!(
        live,
        Err(vrnic::vfio_user::ServerError::InUse { .. })
    ));
    assert!(matches!(
        file,
        Err(vrnic::vfio_user::ServerError::NotASocket { .. })
    ));
    assert_eq!(std::fs::read(&plain).unwrap(), b"keep me");
    drop(server);
    assert!(!stale.exists());
}

#[test]
fn servers_sharing_a_stop_eventfd_run_independently_and_all_stop() {
    let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
    let stop = EventFd::new(EFD_NONBLOCK).unwrap();
    let mut threads = Vec::new();
    let mut paths = Vec::new();
    for i in 0..2 {
        let path = dir.as_path().join(format!("dev{i}.sock"));
        let log = std::sync::Arc::new(EventLog::default());
        let model = std::sync::Arc::new(std::sync::Mutex::new(TestModel::new(log)));
        let server = Server::bind(&path, model).unwrap();
        let s = stop.try_clone().unwrap();
        threads.push(std::thread::spawn(move || server.run(&s)));
        paths.push(path);
    }
    let mut a = RawClient::connect(&paths[0]);
    let mut b = RawClient::connect(&paths[1]);
    a.negotiate(false);
    b.negotiate(false);
    a.write_u32(0, reg::SCRATCH, 1);
    b.write_u32(0, reg::SCRATCH, 2);

    assert_eq!(a.read_u32(0, reg::SCRATCH), 1);
    assert_eq!(b.read_u32(0, reg::SCRATCH), 2);
    stop.write(1).unwrap();
    for t in threads {
        join_with_guard(t).unwrap();
    }
    assert!(paths.iter().all(|p| !p.exists()));
}
