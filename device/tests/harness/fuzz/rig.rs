//! The test rig of the in-process targets: a `World` of devices, each with canary-filled
//! guest RAM mapped read-write, a read-only range and a range without an fd (as QEMU maps
//! ROM), kept across inputs and returned to a known state before each.

use vrnic::guest_memory::DmaMapRequest;

use super::glue::World;
use super::guest::{sealed_memfd, CanaryRam, PAGE};
use super::objs::Heap;

/// Guest RAM: above 4 GiB, so every `_HI` register and 64-bit field matters.
pub const RAM_BASE: u64 = 0x1_0000_0000;
pub const RAM_SIZE: u64 = 4 << 20;
/// A range the device may only read.
pub const RO_BASE: u64 = 0x2_0000_0000;
pub const RO_SIZE: u64 = 64 << 10;
/// A range mapped without an fd: DMA into it must fail cleanly.
pub const NOFD_BASE: u64 = 0x3_0000_0000;
pub const NOFD_SIZE: u64 = 1 << 20;

/// The driver's admin queue pair lives in its own small map, out of the reach of the
/// addresses inputs aim DMA at: an input that points an output buffer at the admin queue
/// would break the admin oracles without the device being at fault.
pub const AQ_BASE: u64 = 0x6_0000_0000;
pub const AQ_SIZE: u64 = 2 * PAGE;
/// Where the admin queue and its completion queue are.
pub const AQ_ADDR: u64 = AQ_BASE;
pub const ACQ_ADDR: u64 = AQ_BASE + PAGE;

/// Addresses an input may aim at: RAM, its edges, the read-only and fd-less ranges, holes.
pub const INTERESTING_ADDRS: &[u64] = &[
    RAM_BASE,
    RAM_BASE + RAM_SIZE - PAGE,
    RAM_BASE + RAM_SIZE,
    RAM_BASE - PAGE,
    RO_BASE,
    NOFD_BASE,
    0,
    0x1000,
    !0xfff,
];

/// Addresses outside guest RAM an input may aim MR pages at (read-only, fd-less, unmapped):
/// unlike RAM addresses, they can never make an MR overlap the input's own rings.
pub const OUTSIDE_ADDRS: &[u64] = &[
    RAM_BASE + RAM_SIZE,
    RAM_BASE - 16 * PAGE,
    RO_BASE,
    NOFD_BASE,
    0,
    0x1000,
    !0xfff,
];

pub struct Rig {
    pub world: World,
    pub rams: Vec<CanaryRam>,
    /// The admin queue maps, one per device.
    pub aqs: Vec<CanaryRam>,
}

impl Rig {
    pub fn new(devices: usize, poller: bool) -> Self {
        Self::with_world(World::new(devices, poller))
    }

    /// A rig of devices in the link modes given.
    pub fn with_links(links: Vec<vrnic::rnic::link::LinkMode>, poller: bool) -> Self {
        Self::with_world(World::with_links(links, poller))
    }

    /// Two RoCE devices on two hosts joined by a RoCEv2 wire (`World::wire_pair`).
    pub fn wire_pair(poller: bool) -> Self {
        Self::with_world(World::wire_pair(poller))
    }

    fn with_world(mut world: World) -> Self {
        let mut rams = Vec::new();
        let mut aqs = Vec::new();
        for dev in &mut world.devs {
            let aq = CanaryRam::new(c"vrnic-fuzz-aq", AQ_BASE, AQ_SIZE);
            assert!(dev.map(DmaMapRequest {
                addr: AQ_BASE,
                size: AQ_SIZE,
                file_offset: 0,
                readable: true,
                writable: true,
                fd: Some(aq.fd()),
            }));
            aqs.push(aq);
            let ram = CanaryRam::new(c"vrnic-fuzz-ram", RAM_BASE, RAM_SIZE);
            let mapped = dev.map(DmaMapRequest {
                addr: RAM_BASE,
                size: RAM_SIZE,
                file_offset: 0,
                readable: true,
                writable: true,
                fd: Some(ram.fd()),
            });
            assert!(mapped, "DMA_MAP of sealed guest RAM refused");
            let ro = sealed_memfd(c"vrnic-fuzz-ro", RO_SIZE);
            assert!(dev.map(DmaMapRequest {
                addr: RO_BASE,
                size: RO_SIZE,
                file_offset: 0,
                readable: true,
                writable: false,
                fd: Some(ro),
            }));
            assert!(dev.map(DmaMapRequest {
                addr: NOFD_BASE,
                size: NOFD_SIZE,
                file_offset: 0,
                readable: true,
                writable: true,
                fd: None,
            }));
            rams.push(ram);
        }
        Rig { world, rams, aqs }
    }

    /// Device reset, interrupts drained, canaries refilled: the state before an input.
    pub fn begin(&mut self) {
        for (dev, ram) in self.world.devs.iter_mut().zip(&mut self.rams) {
            dev.reset();
            dev.drain_irqs();
            ram.restore();
        }
        for aq in &mut self.aqs {
            aq.restore();
        }
    }

    /// Resets the devices (no more DMA from the input's objects), then checks the canaries.
    pub fn finish(&mut self, what: &str) {
        for dev in &mut self.world.devs {
            dev.reset();
        }
        for ram in self.rams.iter().chain(&self.aqs) {
            ram.check(what);
        }
    }

    /// A heap over device `i`'s RAM, leaving the first `reserved` pages to the caller.
    pub fn heap(reserved: u64) -> Heap {
        Heap::new(RAM_BASE + reserved * PAGE, RAM_BASE + RAM_SIZE)
    }
}
