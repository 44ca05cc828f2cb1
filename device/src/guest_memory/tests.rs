//! Unit tests of `GuestRam` against memfd-backed "guest RAM".

use crate::memfd::Sealing;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::budget::MapBudget;
use super::*;

const PAGE: u64 = 4096;
/// Guard against hangs only: no passing test waits this long.
const HANG_GUARD: Duration = Duration::from_secs(30);
/// How long a test watches for something that must not happen.
const QUIET: Duration = Duration::from_millis(200);

/// Guest RAM as QEMU's memory-backend-memfd makes it: sealed against
/// growing, shrinking and further seals.
fn memfd(size: u64) -> File {
    crate::memfd::create(c"vrnic-test", size).unwrap()
}

/// A memfd created with `flags`, of `size` bytes, with no seal added.
fn raw_memfd(sealing: Sealing, size: u64) -> File {
    crate::memfd::create_sealed(c"vrnic-test-raw", size, sealing).unwrap()
}

fn map_request(addr: u64, size: u64, fd: Option<File>) -> DmaMapRequest {
    DmaMapRequest {
        addr,
        size,
        file_offset: 0,
        readable: true,
        writable: true,
        fd,
    }
}

/// Waits (bounded) until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + HANG_GUARD;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// A call running on another thread, to see whether it blocks.
struct Background<T> {
    done: mpsc::Receiver<T>,
    thread: std::thread::JoinHandle<()>,
}

impl<T: Send + 'static> Background<T> {
    fn run(f: impl FnOnce() -> T + Send + 'static) -> Self {
        let (tx, done) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        Self { done, thread }
    }

    /// True if the call has not returned within `QUIET`.
    fn still_blocked(&self) -> bool {
        self.done.recv_timeout(QUIET).is_err()
    }

    /// Waits (bounded) for the call to return; its result.
    fn finish(self) -> T {
        let result = self
            .done
            .recv_timeout(HANG_GUARD)
            .expect("the call returned");
        self.thread.join().unwrap();
        result
    }
}

/// Unmaps `addr+size` of `ram` on another thread.
fn unmap_in_background(ram: &GuestRam, addr: u64, size: u64) -> Background<bool> {
    let ram = ram.clone();
    Background::run(move || ram.unmap(addr, size).is_ok())
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
fn unmap_waits_for_an_older_snapshot_that_holds_the_range_and_returns_once_it_drops() {
    let file = memfd(PAGE);
    file.write_all_at(b"still here", 0).unwrap();
    let ram = GuestRam::new();
    map_rw(&ram, 0x2000, PAGE, &file, 0);
    let old = ram.snapshot();

    let unmap = unmap_in_background(&ram, 0x2000, PAGE);
    wait_until("the unmap to swap the table", || ram.is_empty());

    assert!(
        unmap.still_blocked(),
        "unmap returned while a snapshot holding the range lives"
    );
    let mut buf = [0u8; 10];
    old.read(0x2000, &mut buf).unwrap();
    assert_eq!(&buf, b"still here");
    drop(old);
    assert!(unmap.finish());
    assert!(matches!(
        ram.snapshot().read(0x2000, &mut buf),
        Err(DmaError::Unmapped { .. })
    ));
}

#[test]
fn unmap_does_not_wait_for_snapshots_taken_after_it() {
    let file = memfd(2 * PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, PAGE, &file, 0);
    map_rw(&ram, PAGE, PAGE, &file, PAGE);
    let old = ram.snapshot();
    let unmap = unmap_in_background(&ram, 0, PAGE);
    wait_until("the unmap to swap the table", || ram.len() == 1);

    let newer = ram.snapshot();
    drop(old);

    assert!(unmap.finish());
    assert_eq!(newer.len(), 1);
    newer.write(PAGE, b"newer").unwrap();
}

#[test]
fn unmap_does_not_wait_for_a_snapshot_without_the_range() {
    let file = memfd(2 * PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, PAGE, &file, 0);
    let before = ram.snapshot();
    map_rw(&ram, PAGE, PAGE, &file, PAGE);

    let unmap = unmap_in_background(&ram, PAGE, PAGE);

    assert!(unmap.finish());
    assert_eq!(before.len(), 1);
}

#[test]
fn unmap_all_waits_for_every_older_snapshot() {
    let file = memfd(2 * PAGE);
    let ram = GuestRam::new();
    map_rw(&ram, 0, PAGE, &file, 0);
    let first = ram.snapshot();
    map_rw(&ram, PAGE, PAGE, &file, PAGE);
    let second = ram.snapshot();
    let background = ram.clone();
    let unmap_all = Background::run(move || background.unmap_all());
    wait_until("unmap_all to swap the table", || ram.is_empty());

    drop(second);
    assert!(
        unmap_all.still_blocked(),
        "unmap_all returned while the first snapshot lives"
    );
    drop(first);

    assert_eq!(unmap_all.finish(), 2);
}

#[test]
fn qemu_style_sealed_memfd_is_accepted() {
    let file = memfd(PAGE);
    let ram = GuestRam::new();

    ram.map(map_request(0, PAGE, Some(file.try_clone().unwrap())))
        .unwrap();

    assert_eq!(ram.len(), 1);
    assert_eq!(
        crate::memfd::seals(&file).unwrap(),
        crate::memfd::SIZE_SEALS
    );
}

#[test]
fn sealable_memfd_is_sealed_against_shrinking_and_accepted() {
    let file = raw_memfd(Sealing::Sealable, 2 * PAGE);
    let ram = GuestRam::new();

    ram.map(map_request(0, 2 * PAGE, Some(file.try_clone().unwrap())))
        .unwrap();

    let err = file.set_len(PAGE).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    file.set_len(4 * PAGE).unwrap();
    ram.snapshot().write(2 * PAGE - 4, b"tail").unwrap();
}

#[test]
fn fds_that_cannot_be_sealed_against_shrinking_are_refused_with_eperm() {
    let regular = vmm_sys_util::tempfile::TempFile::new().unwrap();
    regular.as_file().set_len(PAGE).unwrap();
    let unsealable_memfd = raw_memfd(Sealing::Unsealable, PAGE);
    let sealed_without_shrink = raw_memfd(Sealing::Sealable, PAGE);
    crate::memfd::add_seals(&sealed_without_shrink, libc::F_SEAL_SEAL).unwrap();
    let mut pipe = [0; 2];
    // SAFETY: pipe writes two descriptors into the array; the result is checked.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (read_end, _write_end) =
        unsafe { (File::from_raw_fd(pipe[0]), File::from_raw_fd(pipe[1])) };
    let ram = GuestRam::new();

    for (what, fd) in [
        ("regular file", regular.as_file().try_clone().unwrap()),
        ("memfd without MFD_ALLOW_SEALING", unsealable_memfd),
        ("memfd sealed without F_SEAL_SHRINK", sealed_without_shrink),
        ("pipe", read_end),
    ] {
        let err = ram.map(map_request(0, PAGE, Some(fd))).unwrap_err();

        assert!(matches!(err, MapError::Unsealable { .. }), "{what}: {err}");
        assert_eq!(err.errno(), libc::EPERM, "{what}");
        assert!(
            err.to_string().contains("memory-backend-memfd"),
            "{what}: {err}"
        );
    }
    assert!(ram.is_empty());
}

#[test]
fn per_client_map_limit_is_enospc() {
    let file = memfd(2 * PAGE);
    let ram = GuestRam::with_limits(2, MapBudget::new(8));
    map_rw(&ram, 0, PAGE, &file, 0);
    ram.map(map_request(0x10_0000, PAGE, None)).unwrap();

    let err = ram.map(map_request(PAGE, PAGE, None)).unwrap_err();

    assert!(matches!(err, MapError::TooMany { max: 2 }), "{err}");
    assert_eq!(err.errno(), libc::ENOSPC);
}

#[test]
fn shared_budget_refuses_fd_maps_with_eagain_until_a_map_is_released() {
    let file = memfd(2 * PAGE);
    let budget = MapBudget::new(1);
    let a = GuestRam::with_limits(8, Arc::clone(&budget));
    let b = GuestRam::with_limits(8, Arc::clone(&budget));
    map_rw(&a, 0, PAGE, &file, 0);

    let err = b
        .map(map_request(0, PAGE, Some(file.try_clone().unwrap())))
        .unwrap_err();
    b.map(map_request(0x10_0000, PAGE, None)).unwrap();
    a.unmap(0, PAGE).unwrap();

    assert!(
        matches!(err, MapError::BudgetExhausted { limit: 1 }),
        "{err}"
    );
    assert_eq!(err.errno(), libc::EAGAIN);
    map_rw(&b, 0, PAGE, &file, 0);
    assert_eq!(budget.used(), 1);
}

#[test]
fn a_snapshot_keeps_the_budget_slot_of_an_unmapped_range_until_dropped() {
    let file = memfd(PAGE);
    let budget = MapBudget::new(4);
    let ram = GuestRam::with_limits(8, Arc::clone(&budget));
    map_rw(&ram, 0, PAGE, &file, 0);
    let old = ram.snapshot();
    let unmap = unmap_in_background(&ram, 0, PAGE);
    wait_until("the unmap to swap the table", || ram.is_empty());

    assert_eq!(budget.used(), 1);
    drop(old);

    assert!(unmap.finish());
    assert_eq!(budget.used(), 0);
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
