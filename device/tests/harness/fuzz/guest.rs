//! Guest RAM for the in-process targets: a memfd sealed as QEMU's memory-backend-memfd seals
//! it (MFD_ALLOW_SEALING, then F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL), filled with a
//! position-dependent canary before every input.
//!
//! The target writes guest memory only through [`CanaryRam::write`], which also updates the
//! expected image; everything the input names as device-writable (rings, MRs, output
//! buffers, the admin completion queue) is recorded with [`CanaryRam::allow`]. After the
//! input, [`CanaryRam::check`] finds any byte the device changed outside those ranges.

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vm_memory::{
    AtomicAccess, ByteValued, Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap,
    MmapRegion,
};

pub const PAGE: u64 = 4096;

/// A memfd of `size` bytes sealed as QEMU seals guest RAM (the crate's one memfd helper).
pub fn sealed_memfd(name: &std::ffi::CStr, size: u64) -> File {
    vrnic::memfd::create(name, size).expect("sealed memfd")
}

/// The canary byte at offset `i` of a region: a hash of the position, never a constant, so
/// a stray write of any value is noticed with probability 255/256 per byte.
fn canary_byte(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x >> 56) as u8) ^ ((x >> 24) as u8) ^ 0x5a
}

/// One canary-checked region of guest-physical memory backed by a sealed memfd.
pub struct CanaryRam {
    pub base: u64,
    pub size: u64,
    file: File,
    mem: GuestMemoryMmap,
    canary: Vec<u8>,
    expected: Vec<u8>,
    allowed: Vec<(u64, u64)>,
}

impl CanaryRam {
    pub fn new(name: &std::ffi::CStr, base: u64, size: u64) -> Self {
        let file = sealed_memfd(name, size);
        let fo = FileOffset::new(file.try_clone().expect("dup"), 0);
        let region = MmapRegion::from_file(fo, usize::try_from(size).expect("size")).expect("mmap");
        let region = Arc::new(GuestRegionMmap::new(region, GuestAddress(base)).expect("region"));
        let mem = GuestMemoryMmap::from_arc_regions(vec![region]).expect("guest memory");
        let canary: Vec<u8> = (0..size).map(canary_byte).collect();
        let mut ram = CanaryRam {
            base,
            size,
            file,
            mem,
            expected: canary.clone(),
            canary,
            allowed: Vec::new(),
        };
        ram.restore();
        ram
    }

    /// A new fd for the memfd (to hand to DMA_MAP).
    pub fn fd(&self) -> File {
        self.file.try_clone().expect("dup memfd")
    }

    pub fn end(&self) -> u64 {
        self.base + self.size
    }

    /// Refills the canary and forgets the allowed ranges: the state before an input.
    pub fn restore(&mut self) {
        self.mem
            .write_slice(&self.canary, GuestAddress(self.base))
            .expect("canary fill");
        self.expected.copy_from_slice(&self.canary);
        self.allowed.clear();
    }

    /// Marks `[addr, addr + len)` as memory the device may write (clipped to this region).
    pub fn allow(&mut self, addr: u64, len: u64) {
        let start = addr.max(self.base);
        let end = addr.saturating_add(len).min(self.end());
        if start < end {
            self.allowed.push((start - self.base, end - self.base));
        }
    }

    fn offset(&self, gpa: u64, len: usize) -> Option<usize> {
        let off = gpa.checked_sub(self.base)?;
        let end = off.checked_add(len as u64)?;
        (end <= self.size).then_some(off as usize)
    }

    pub fn contains(&self, gpa: u64, len: usize) -> bool {
        self.offset(gpa, len).is_some()
    }

    /// A write by the "guest" (the target). Ignored outside the region.
    pub fn write(&mut self, gpa: u64, data: &[u8]) {
        if let Some(off) = self.offset(gpa, data.len()) {
            self.mem
                .write_slice(data, GuestAddress(gpa))
                .expect("guest write");
            self.expected[off..off + data.len()].copy_from_slice(data);
        }
    }

    pub fn write_obj<T: ByteValued>(&mut self, gpa: u64, value: &T) {
        self.write(gpa, value.as_slice());
    }

    pub fn read(&self, gpa: u64, buf: &mut [u8]) -> bool {
        self.offset(gpa, buf.len()).is_some() && self.mem.read_slice(buf, GuestAddress(gpa)).is_ok()
    }

    pub fn read_obj<T: ByteValued>(&self, gpa: u64) -> Option<T> {
        let mut v = T::zeroed();
        self.read(gpa, v.as_mut_slice()).then_some(v)
    }

    pub fn load<T: AtomicAccess>(&self, gpa: u64) -> Option<T> {
        self.offset(gpa, std::mem::size_of::<T>())?;
        self.mem.load(GuestAddress(gpa), Ordering::Acquire).ok()
    }

    /// Panics naming the first byte the device changed outside the allowed ranges.
    pub fn check(&self, what: &str) {
        let mut actual = vec![0u8; self.expected.len()];
        self.mem
            .read_slice(&mut actual, GuestAddress(self.base))
            .expect("guest read");
        let mut expected = self.expected.clone();
        for &(s, e) in &self.allowed {
            let (s, e) = (s as usize, e as usize);
            expected[s..e].copy_from_slice(&actual[s..e]);
        }
        if actual != expected {
            let i = actual
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            let n = actual[i..]
                .iter()
                .zip(&expected[i..])
                .take_while(|(a, b)| a != b)
                .count();
            let near: Vec<(u64, u64)> = self
                .allowed
                .iter()
                .filter(|&&(s, e)| s.abs_diff(i as u64) < 0x2000 || e.abs_diff(i as u64) < 0x2000)
                .map(|&(s, e)| (self.base + s, self.base + e))
                .collect();
            panic!(
                "{what}: the device wrote guest memory outside every ring, MR and buffer the \
                 input registered: {n} byte(s) at {:#x} (got {:#04x}, want {:#04x}); allowed nearby: {near:#x?}",
                self.base + i as u64,
                actual[i],
                expected[i]
            );
        }
    }
}
