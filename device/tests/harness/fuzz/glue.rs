//! The fuzz targets' only contact with the device's code: a fabric of in-process devices
//! driven through `DeviceModel` (no socket), with guest RAM handed over as the vfio-user
//! server hands it (`connected`, then DMA maps), MSI-X eventfds and the poller thread.
//! When the device internals move, this file is the one to adapt.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vrnic::addr::Mac;
use vrnic::fabric::{Fabric, PollerConfig, Pollers};
use vrnic::guest_memory::{DmaMapRequest, GuestRam};
use vrnic::model::RnicModel;
use vrnic::net::port::{Ingress, Port, PortId};
use vrnic::net::switch::Switch;
use vrnic::rnic::link::LinkMode;
use vrnic::rnic::RnicConfig;
use vrnic::vfio_user::DeviceModel;
use vrnic_hw::MSIX_VECTORS;

/// vfio-user IRQ index of MSI-X.
const IRQ_MSIX: u32 = 2;

/// One device as its VMM sees it.
pub struct Dev {
    model: Box<dyn DeviceModel>,
    ram: GuestRam,
    irqs: Vec<EventFd>,
}

impl Dev {
    /// A trapped read; the caller keeps to the region's size (the server checks that).
    pub fn read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), i32> {
        self.model.region_read(region, offset, data)
    }

    pub fn write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        self.model.region_write(region, offset, data)
    }

    pub fn read32(&mut self, region: u32, offset: u64) -> u32 {
        let mut b = [0u8; 4];
        match self.read(region, offset, &mut b) {
            Ok(()) => u32::from_le_bytes(b),
            Err(e) => panic!("read of region {region} at {offset:#x} failed: errno {e}"),
        }
    }

    pub fn write32(&mut self, region: u32, offset: u64, value: u32) {
        if let Err(e) = self.write(region, offset, &value.to_le_bytes()) {
            panic!("write of region {region} at {offset:#x} failed: errno {e}");
        }
    }

    /// The size of region `index` (0 when absent).
    pub fn region_size(&self, index: u32) -> u64 {
        self.model.region_info(index).map_or(0, |r| r.size)
    }

    /// DMA_MAP as the server does it: the table changes, then the model is told.
    pub fn map(&mut self, req: DmaMapRequest) -> bool {
        let ok = self.ram.map(req).is_ok();
        if ok {
            self.model.dma_changed();
        }
        ok
    }

    pub fn unmap(&mut self, addr: u64, size: u64) -> bool {
        let ok = self.ram.unmap(addr, size).is_ok();
        if ok {
            self.model.dma_changed();
        }
        ok
    }

    pub fn unmap_all(&mut self) {
        if self.ram.unmap_all() > 0 {
            self.model.dma_changed();
        }
    }

    /// DEVICE_RESET (a function reset: registers, objects, config space).
    pub fn reset(&mut self) {
        self.model.reset();
    }

    /// Interrupts on `vector` since the last look; never blocks.
    pub fn take_irqs(&self, vector: usize) -> u64 {
        self.irqs
            .get(vector)
            .and_then(|e| e.read().ok())
            .unwrap_or(0)
    }

    /// Drains every interrupt eventfd.
    pub fn drain_irqs(&self) {
        for e in &self.irqs {
            let _ = e.read();
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        self.ram.unmap_all();
        self.model.disconnected();
    }
}

/// Devices of one fabric (IB mode with LIDs 1..=n, or the link modes given), each
/// "connected" with an empty DMA table and an eventfd per MSI-X vector, plus the pollers
/// (only when `poller` is set: the admin and register targets need none, as admin commands
/// run in the doorbell write), one shard per device so that transfers between devices
/// cross shards.
pub struct World {
    pub devs: Vec<Dev>,
    fabrics: Vec<Arc<Fabric>>,
    pollers: Vec<Pollers>,
}

impl World {
    pub fn new(n: usize, poller: bool) -> Self {
        Self::with_links((0..n).map(ib).collect(), poller)
    }

    pub fn with_links(links: Vec<LinkMode>, poller: bool) -> Self {
        let n = links.len();
        let configs = links
            .into_iter()
            .enumerate()
            .map(|(i, link)| {
                RnicConfig::new(
                    &format!("fuzz{i}"),
                    std::env::temp_dir().join(format!("vrnic-fuzz-unused-{i}.sock")),
                    link,
                )
            })
            .collect();
        let config = PollerConfig {
            idle: Duration::from_micros(200),
            give_way: false,
            threads: Some(n),
        };
        let fabric = Fabric::new(configs, &config).expect("fabric");
        let devs = fabric
            .devices()
            .iter()
            .map(|rnic| {
                let mut model: Box<dyn DeviceModel> = Box::new(RnicModel(rnic.clone()));
                let ram = GuestRam::new();
                model.connected(ram.clone());
                let irqs: Vec<EventFd> = (0..MSIX_VECTORS)
                    .map(|_| EventFd::new(EFD_NONBLOCK).expect("eventfd"))
                    .collect();
                let fds = irqs
                    .iter()
                    .map(|e| Some(e.try_clone().expect("dup eventfd")))
                    .collect();
                model.set_irqs(IRQ_MSIX, 0, fds).expect("SET_IRQS");
                Dev { model, ram, irqs }
            })
            .collect();
        let pollers = poller.then(|| fabric.start_pollers(config).expect("pollers"));
        World {
            devs,
            fabrics: vec![fabric],
            pollers: pollers.into_iter().collect(),
        }
    }

    /// Two RoCE devices, each in a fabric of its own (two hosts), their wire ports on two
    /// switches joined by a clean cable: what passes between them is RoCEv2 packets
    /// through the wire engines.
    pub fn wire_pair(poller: bool) -> Self {
        let mut hosts = [
            Self::with_links(vec![roce(0)], poller),
            Self::with_links(vec![roce(1)], poller),
        ];
        let switches = [Switch::new(), Switch::new()];
        for (host, switch) in hosts.iter().zip(&switches) {
            host.fabrics[0].attach_wire(switch).expect("wire attached");
        }
        let ends = switches
            .clone()
            .map(|s| s.attach(|_| Arc::new(Cable::default())));
        for (i, end) in ends.iter().enumerate() {
            let other = &switches[1 - i];
            let port = other.stats().len() - 1;
            end.peer.set((other.clone(), port)).ok();
        }
        let mut world = World {
            devs: Vec::new(),
            fabrics: Vec::new(),
            pollers: Vec::new(),
        };
        for host in &mut hosts {
            world.devs.append(&mut host.devs);
            world.fabrics.append(&mut host.fabrics);
            world.pollers.append(&mut host.pollers);
        }
        world
    }
}

impl World {
    /// Frames the devices sent on their wire ports so far (0 without a wire).
    pub fn wire_frames(&self) -> u64 {
        self.fabrics
            .iter()
            .flat_map(|f| f.wires())
            .map(|(_, w)| w.port.counters.read().tx_frames)
            .sum()
    }
}

/// One end of a clean cable between two switches: what its switch gives it enters the
/// other switch.
#[derive(Default)]
struct Cable {
    peer: OnceLock<(Arc<Switch>, PortId)>,
}

impl Port for Cable {
    fn name(&self) -> &str {
        "cable"
    }

    fn transmit(&self, frame: &[u8]) {
        if let Some((switch, port)) = self.peer.get() {
            switch.receive(*port, frame);
        }
    }

    fn transmit_batch(&self, frames: Vec<Vec<u8>>) {
        if let Some((switch, port)) = self.peer.get() {
            switch.receive_batch(*port, frames);
        }
    }
}

/// IB mode with LID `i + 1`.
pub fn ib(i: usize) -> LinkMode {
    LinkMode::Ib {
        lid: u16::try_from(i + 1).expect("lid"),
        guid: None,
    }
}

/// RoCE mode with a locally administered MAC of its own.
pub fn roce(i: usize) -> LinkMode {
    LinkMode::Eth {
        mac: Mac([0x02, 0xf0, 0, 0, 0, u8::try_from(i + 1).expect("mac")]),
    }
}

/// The link mode of `dev`'s port is RoCE (PORT_INFO.LINK_ETH).
pub fn is_roce(dev: &mut Dev) -> bool {
    dev.read32(vrnic_hw::BAR_CTRL, vrnic_hw::bar0::PORT_INFO)
        & vrnic_hw::bar0::PORT_INFO_LINK_ETH_MASK
        != 0
}

impl Drop for World {
    fn drop(&mut self) {
        self.devs.clear();
        for p in self.pollers.drain(..) {
            p.stop();
        }
    }
}
