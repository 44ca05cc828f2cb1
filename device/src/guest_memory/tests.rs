//! Unit tests of `GuestRam` against memfd-backed "guest RAM".

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use super::*;

const PAGE: u64 = 4096;

fn memfd(size: u64) -> File {
    // SAFETY: memfd_create takes a NUL-terminated name and flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c"vrnic-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is owned by nobody else.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(size).unwrap();
    file
}

fn map_rw(ram: &GuestRam, addr: u64, size: u64, file: &File, file_offset: u64) {
    ram.map(DmaMapRequest {
        addr,
        size,
        file_offset,
        readable: true,
        writable: true,
        fd: Some(file.try_clone().unwrap()),
    })
    .unwrap();
}

#[test]
fn write_then_read_round_trips_through_the_memfd() {
    let file = memfd(4 * PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0x10_0000, 4 * PAGE, &file, 0);

    let mem = ram.snapshot();
    mem.write(0x10_0010, b"hello").unwrap();
    let mut buf = [0u8; 5];
    mem.read(0x10_0010, &mut buf).unwrap();

    assert_eq!(&buf, b"hello");
    let mut in_file = [0u8; 5];
    file.read_exact_at(&mut in_file, 0x10).unwrap();
    assert_eq!(&in_file, b"hello");
}

#[test]
fn file_offset_selects_the_backing_bytes() {
    let file = memfd(4 * PAGE);
    file.write_all_at(b"at-page-2", 2 * PAGE).unwrap();
    let ram = GuestRam::new();
    map_rw(&ram, 0x8000, PAGE, &file, 2 * PAGE);

    let mut buf = [0u8; 9];
    ram.snapshot().read(0x8000, &mut buf).unwrap();

    assert_eq!(&buf, b"at-page-2");
}

#[test]
fn write_into_read_only_map_is_refused_before_touching_memory() {
    let file = memfd(PAGE);
    let ram = GuestRam::new();
    ram.map(DmaMapRequest {
        addr: 0,
        size: PAGE,
        file_offset: 0,
        readable: true,
        writable: false,
        fd: Some(file.try_clone().unwrap()),
    })
    .unwrap();
    let mem = ram.snapshot();

    let err = mem.write(0x10, &[1, 2, 3]).unwrap_err();
    let store = mem.store_u32(0x10, 7, Ordering::Release).unwrap_err();

    assert!(matches!(err, DmaError::ReadOnly { at: 0x10, .. }), "{err}");
    assert!(matches!(store, DmaError::ReadOnly { .. }), "{store}");
    assert!(mem.read_obj::<u32>(0x10).is_ok());
}

#[test]
fn write_spanning_writable_and_read_only_maps_changes_nothing() {
    let file = memfd(2 * PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, PAGE, &file, 0);
    ram.map(DmaMapRequest {
        addr: PAGE,
        size: PAGE,
        file_offset: PAGE,
        readable: true,
        writable: false,
        fd: Some(file.try_clone().unwrap()),
    })
    .unwrap();

    let err = ram.snapshot().write(PAGE - 4, &[0xaa; 8]).unwrap_err();

    assert!(
        matches!(err, DmaError::ReadOnly { at, .. } if at == PAGE),
        "{err}"
    );
    let mut first = [0u8; 4];
    file.read_exact_at(&mut first, PAGE - 4).unwrap();
    assert_eq!(first, [0; 4]);
}

#[test]
fn unmapped_address_is_reported_with_the_first_bad_byte() {
    let file = memfd(PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0x1000, PAGE, &file, 0);

    let mut buf = [0u8; 16];
    let err = ram.snapshot().read(0x1ff8, &mut buf).unwrap_err();

    assert!(
        matches!(
            err,
            DmaError::Unmapped {
                addr: 0x1ff8,
                len: 16,
                at: 0x2000
            }
        ),
        "{err}"
    );
}

#[test]
fn map_without_fd_is_recorded_and_refuses_dma() {
    let ram = GuestRam::new();
    ram.map(DmaMapRequest {
        addr: 0xfffc_0000,
        size: 0x4_0000,
        file_offset: 0,
        readable: true,
        writable: false,
        fd: None,
    })
    .unwrap();

    let err = ram.snapshot().read_obj::<u64>(0xfffc_0000).unwrap_err();

    assert!(matches!(err, DmaError::NoFd { .. }), "{err}");
    assert_eq!(ram.len(), 1);
}

#[test]
fn range_overflowing_the_address_space_is_refused() {
    let ram = GuestRam::new();
    let mut buf = [0u8; 2];

    let err = ram.snapshot().read(u64::MAX, &mut buf).unwrap_err();

    assert!(matches!(err, DmaError::Overflow { .. }), "{err}");
}

#[test]
fn read_and_write_cross_adjacent_maps_of_different_files() {
    let a = memfd(PAGE);
    let b = memfd(PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, PAGE, &a, 0);
    map_rw(&ram, PAGE, PAGE, &b, 0);
    let mem = ram.snapshot();

    mem.write(PAGE - 3, b"abcdef").unwrap();
    let mut back = [0u8; 6];
    mem.read(PAGE - 3, &mut back).unwrap();

    assert_eq!(&back, b"abcdef");
    let mut tail = [0u8; 3];
    a.read_exact_at(&mut tail, PAGE - 3).unwrap();
    assert_eq!(&tail, b"abc");
    let mut head = [0u8; 3];
    b.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(&head, b"def");
    assert_eq!(mem.slices_for_read(PAGE - 3, 6).unwrap().len(), 2);
    assert!(matches!(
        mem.slice_for_read(PAGE - 3, 6),
        Err(DmaError::Discontiguous { .. })
    ));
}

#[test]
fn copy_within_one_guest_crosses_map_boundaries() {
    let a = memfd(PAGE);
    let b = memfd(PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, PAGE, &a, 0);
    map_rw(&ram, PAGE, PAGE, &b, 0);
    let mem = ram.snapshot();
    let pattern: Vec<u8> = (0..=255u8).cycle().take(300).collect();
    mem.write(PAGE - 100, &pattern).unwrap();

    mem.copy_from(0x10, &mem, PAGE - 100, pattern.len())
        .unwrap();

    let mut back = vec![0u8; pattern.len()];
    mem.read(0x10, &mut back).unwrap();
    assert_eq!(back, pattern);
}

#[test]
fn copy_between_two_guests_moves_bytes_without_a_buffer() {
    let src_file = memfd(2 * PAGE);
    let dst_file = memfd(2 * PAGE);
    let src_ram = GuestRam::new();
    let dst_ram = GuestRam::new();
    map_rw(&src_ram, 0x4000, PAGE, &src_file, 0);
    map_rw(&src_ram, 0x5000, PAGE, &src_file, PAGE);
    map_rw(&dst_ram, 0x9000_0000, 2 * PAGE, &dst_file, 0);
    src_file.write_all_at(&[0x5a; 64], PAGE - 32).unwrap();

    dst_ram
        .snapshot()
        .copy_from(0x9000_0100, &src_ram.snapshot(), 0x4000 + PAGE - 32, 64)
        .unwrap();

    let mut got = [0u8; 64];
    dst_file.read_exact_at(&mut got, 0x100).unwrap();
    assert_eq!(got, [0x5a; 64]);
}

#[test]
fn copy_into_read_only_destination_is_refused() {
    let file = memfd(PAGE);
    let ram = GuestRam::new();
    ram.map(DmaMapRequest {
        addr: 0,
        size: PAGE,
        file_offset: 0,
        readable: true,
        writable: false,
        fd: Some(file.try_clone().unwrap()),
    })
    .unwrap();
    let mem = ram.snapshot();

    let err = mem.copy_from(0, &mem, 0x100, 16).unwrap_err();

    assert!(matches!(err, DmaError::ReadOnly { .. }), "{err}");
}

#[test]
fn snapshot_keeps_working_after_the_range_is_unmapped() {
    let file = memfd(PAGE);
    file.write_all_at(b"still here", 0).unwrap();
    let ram = GuestRam::new();
    map_rw(&ram, 0x2000, PAGE, &file, 0);
    let old = ram.snapshot();

    ram.unmap(0x2000, PAGE).unwrap();
    drop(file);

    let mut buf = [0u8; 10];
    old.read(0x2000, &mut buf).unwrap();
    assert_eq!(&buf, b"still here");
    assert!(matches!(
        ram.snapshot().read(0x2000, &mut buf),
        Err(DmaError::Unmapped { .. })
    ));
}

#[test]
fn overlapping_map_is_refused_with_eexist() {
    let file = memfd(4 * PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0x1000, 2 * PAGE, &file, 0);

    let err = ram
        .map(DmaMapRequest {
            addr: 0x2000,
            size: PAGE,
            file_offset: 0,
            readable: true,
            writable: true,
            fd: None,
        })
        .unwrap_err();

    assert!(
        matches!(
            err,
            MapError::Overlap {
                existing_addr: 0x1000,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.errno(), libc::EEXIST);
}

#[test]
fn unmap_must_match_a_map_exactly() {
    let file = memfd(2 * PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, 2 * PAGE, &file, 0);

    let err = ram.unmap(0, PAGE).unwrap_err();

    assert_eq!(err.errno(), libc::ENOENT);
    assert_eq!(ram.len(), 1);
}

#[test]
fn map_past_the_end_of_the_file_is_refused() {
    let file = memfd(PAGE);
    let ram = GuestRam::new();

    let err = ram
        .map(DmaMapRequest {
            addr: 0,
            size: 2 * PAGE,
            file_offset: 0,
            readable: true,
            writable: true,
            fd: Some(file),
        })
        .unwrap_err();

    assert!(matches!(err, MapError::BeyondFile { .. }), "{err}");
    assert_eq!(err.errno(), libc::EINVAL);
}

#[test]
fn zero_sized_and_overflowing_maps_are_refused() {
    let ram = GuestRam::new();
    let req = |addr, size| DmaMapRequest {
        addr,
        size,
        file_offset: 0,
        readable: true,
        writable: true,
        fd: None,
    };

    assert!(matches!(ram.map(req(0, 0)), Err(MapError::ZeroSize { .. })));
    assert!(matches!(
        ram.map(req(u64::MAX, 2)),
        Err(MapError::Overflow { .. })
    ));
    assert!(ram.is_empty());
}

#[test]
fn atomics_use_the_mapping_and_reject_misalignment() {
    let file = memfd(PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, PAGE, &file, 0);
    let mem = ram.snapshot();

    mem.store_u32(0x40, 0xdead_beef, Ordering::Release).unwrap();
    mem.store_u8(0x44, 0x7f, Ordering::Release).unwrap();

    assert_eq!(mem.load_u32(0x40, Ordering::Acquire).unwrap(), 0xdead_beef);
    assert_eq!(mem.load_u8(0x44, Ordering::Acquire).unwrap(), 0x7f);
    assert!(matches!(
        mem.load_u32(0x41, Ordering::Acquire),
        Err(DmaError::Memory { .. })
    ));
}

#[test]
fn unmap_all_empties_the_table() {
    let file = memfd(2 * PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, PAGE, &file, 0);
    map_rw(&ram, PAGE, PAGE, &file, PAGE);

    assert_eq!(ram.unmap_all(), 2);
    assert!(ram.snapshot().is_empty());
}
