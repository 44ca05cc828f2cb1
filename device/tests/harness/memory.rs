//! Guest RAM: a memfd mapped here and handed to the device with DMA_MAP, as QEMU's
//! `memory-backend-memfd,share=on` is (sealed the way QEMU seals it); plus a
//! guest-physical allocator over it.
//!
//! The harness touches guest memory only through vm-memory's `Bytes` (explicit atomic
//! orderings for owner bits and indices), never through raw pointers.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vm_memory::{
    AtomicAccess, ByteValued, Bytes, FileOffset, GuestAddress, GuestMemoryBackend as _,
    GuestMemoryMmap, GuestRegionMmap, MmapRegion,
};

/// How a test memfd is sealed: the device's own memfd module makes every variant.
pub use vrnic::memfd::Sealing;

/// Guest-physical address of guest RAM: above 4 GiB, so every `_HI` register and 64-bit
/// address field is exercised.
pub const RAM_BASE: u64 = 0x1_0000_0000;
/// Default guest RAM size. The memfd is sparse: only touched pages cost memory.
pub const RAM_SIZE: u64 = 256 << 20;
pub const PAGE: u64 = 4096;

/// A zero-filled memfd of `size` bytes sealed as QEMU seals guest RAM, and as the device
/// seals its own memfds (`vrnic::memfd::create`).
pub fn memfd(name: &std::ffi::CStr, size: u64) -> File {
    memfd_sealed(name, size, Sealing::Size)
}

/// A zero-filled memfd of `size` bytes with the given sealing (`vrnic::memfd::create_sealed`).
pub fn memfd_sealed(name: &std::ffi::CStr, size: u64, sealing: Sealing) -> File {
    vrnic::memfd::create_sealed(name, size, sealing)
        .unwrap_or_else(|e| panic!("memfd of {size} bytes ({sealing:?}): {e}"))
}

/// The seals of the memfd `file` (F_GET_SEALS).
pub fn seals_of(file: &File) -> i32 {
    vrnic::memfd::seals(file).unwrap_or_else(|e| panic!("F_GET_SEALS: {e}"))
}

/// Guest memory as the test (the "guest") sees it: guest RAM plus any extra ranges a test
/// maps (e.g. a range the device may only read).
pub struct GuestMemory {
    mem: GuestMemoryMmap,
    ram: File,
    ram_size: u64,
    /// Bump allocator: next free guest-physical address in RAM.
    next: u64,
}

fn mmap_region(file: &File, gpa: u64, size: u64) -> Arc<GuestRegionMmap> {
    let fo = FileOffset::new(file.try_clone().expect("dup"), 0);
    let region = MmapRegion::from_file(fo, usize::try_from(size).expect("size")).expect("mmap");
    Arc::new(GuestRegionMmap::new(region, GuestAddress(gpa)).expect("region"))
}

impl GuestMemory {
    pub fn new(size: u64) -> Self {
        let ram = memfd(c"vrnic-guest-ram", size);
        let mem = GuestMemoryMmap::from_arc_regions(vec![mmap_region(&ram, RAM_BASE, size)])
            .expect("guest memory");
        GuestMemory {
            mem,
            ram,
            ram_size: size,
            next: RAM_BASE + PAGE,
        }
    }

    pub fn ram_fd(&self) -> RawFd {
        self.ram.as_raw_fd()
    }

    /// The memfd behind guest RAM.
    pub fn ram_file(&self) -> &File {
        &self.ram
    }

    pub fn ram_base(&self) -> u64 {
        RAM_BASE
    }

    pub fn ram_size(&self) -> u64 {
        self.ram_size
    }

    /// Adds a range at `gpa` backed by a new memfd (mapped read-write here); the caller
    /// decides how to DMA_MAP it. Returns the memfd.
    pub fn add_range(&mut self, gpa: u64, size: u64) -> File {
        self.add_range_sealed(gpa, size, Sealing::Size)
    }

    /// As `add_range`, with a memfd sealed as `sealing` says.
    pub fn add_range_sealed(&mut self, gpa: u64, size: u64, sealing: Sealing) -> File {
        let file = memfd_sealed(c"vrnic-guest-extra", size, sealing);
        self.mem = self
            .mem
            .insert_region(mmap_region(&file, gpa, size))
            .expect("extra range");
        file
    }

    /// `size` bytes aligned to `align` (a power of two), zeroed (the allocator never reuses).
    pub fn alloc(&mut self, size: u64, align: u64) -> u64 {
        let start = self.next.next_multiple_of(align);
        let end = start + size.max(1);
        assert!(
            end <= RAM_BASE + self.ram_size,
            "guest RAM exhausted ({} MiB): allocation of {size} bytes",
            self.ram_size >> 20
        );
        self.next = end;
        start
    }

    /// `n` physically contiguous pages of `1 << shift` bytes.
    pub fn alloc_pages(&mut self, n: u64, shift: u32) -> Vec<u64> {
        let size = 1u64 << shift;
        let first = self.alloc(n * size, size);
        (0..n).map(|i| first + i * size).collect()
    }

    /// `n` pages of `1 << shift` bytes, none physically adjacent to the next in the list
    /// (taken backwards from every other page of a block).
    pub fn alloc_scattered_pages(&mut self, n: u64, shift: u32) -> Vec<u64> {
        let size = 1u64 << shift;
        let first = self.alloc(2 * n * size, size);
        (0..n).rev().map(|i| first + 2 * i * size).collect()
    }

    pub fn write(&self, gpa: u64, data: &[u8]) {
        self.mem
            .write_slice(data, GuestAddress(gpa))
            .unwrap_or_else(|e| panic!("guest write at {gpa:#x}: {e}"));
    }

    pub fn read(&self, gpa: u64, buf: &mut [u8]) {
        self.mem
            .read_slice(buf, GuestAddress(gpa))
            .unwrap_or_else(|e| panic!("guest read at {gpa:#x}: {e}"));
    }

    pub fn read_vec(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(gpa, &mut v);
        v
    }

    pub fn fill(&self, gpa: u64, len: usize, byte: u8) {
        self.write(gpa, &vec![byte; len]);
    }

    pub fn write_obj<T: ByteValued>(&self, gpa: u64, value: &T) {
        self.write(gpa, value.as_slice());
    }

    pub fn read_obj<T: ByteValued>(&self, gpa: u64) -> T {
        let mut v = T::zeroed();
        self.read(gpa, v.as_mut_slice());
        v
    }

    pub fn load<T: AtomicAccess>(&self, gpa: u64, order: Ordering) -> T {
        self.mem
            .load(GuestAddress(gpa), order)
            .unwrap_or_else(|e| panic!("guest load at {gpa:#x}: {e}"))
    }

    pub fn store<T: AtomicAccess>(&self, gpa: u64, value: T, order: Ordering) {
        self.mem
            .store(value, GuestAddress(gpa), order)
            .unwrap_or_else(|e| panic!("guest store at {gpa:#x}: {e}"))
    }

    /// A read-only view of this memory that another thread can use while the driver posts
    /// work (e.g. to watch the last byte of a message land).
    pub fn view(&self) -> MemView {
        MemView {
            mem: self.mem.clone(),
        }
    }

    /// Whether `gpa` lies in guest memory known to the test.
    pub fn contains(&self, gpa: u64) -> bool {
        self.mem.address_in_range(GuestAddress(gpa))
    }
}

/// A shareable view of guest memory (see `GuestMemory::view`).
#[derive(Clone)]
pub struct MemView {
    mem: GuestMemoryMmap,
}

impl MemView {
    pub fn read(&self, gpa: u64, buf: &mut [u8]) {
        self.mem
            .read_slice(buf, GuestAddress(gpa))
            .unwrap_or_else(|e| panic!("guest read at {gpa:#x}: {e}"));
    }

    pub fn load<T: AtomicAccess>(&self, gpa: u64, order: Ordering) -> T {
        self.mem
            .load(GuestAddress(gpa), order)
            .unwrap_or_else(|e| panic!("guest load at {gpa:#x}: {e}"))
    }
}
