//! The fabric: every device served by this process, reachable by LID (IB mode) or GID
//! (RoCE mode), and the pollers that move data between them.
//!
//! Devices are spread over poller shards (one thread each, `PollerConfig::threads`), so N
//! busy devices can use N cores. A transfer is carried out by the requester's shard; it
//! takes the target device's lock only for a moment on either side of the copy, whichever
//! shard serves the target.

mod poller;

use crate::addr::Address;
use crate::datapath::wire::WireDevice;
use crate::datapath::{Peers, Route};
use crate::rnic::gids::GidDirectory;
use crate::rnic::link::LinkMode;
use crate::rnic::waker::Waker;
use crate::rnic::{Rnic, RnicConfig};
use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

pub use poller::PollerConfig;

pub struct Fabric {
    /// Device `i` has `DeviceId` i.
    devices: Vec<Arc<Rnic>>,
    by_lid: HashMap<u16, Arc<Rnic>>,
    /// Which RoCE-mode device holds each GID (set by the devices' SET_GID).
    gids: Arc<GidDirectory>,
    /// Devices of each shard, and the shard's waker.
    shards: Vec<(Arc<Waker>, Vec<Arc<Rnic>>)>,
    /// The uplinks to the host's network (`Service::start_uplinks`), for the control socket.
    pub uplinks: crate::net::uplink::Uplinks,
    /// Each RoCE device's wire port, once `attach_wire` attached them to a switch.
    wires: std::sync::OnceLock<Vec<Option<Arc<WireDevice>>>>,
}

#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("devices {0} and {1} both use LID {2}")]
    DuplicateLid(String, String, u16),
    #[error("device {0}: LID 0 is reserved")]
    ZeroLid(String),
    #[error("devices {0} and {1} both use MAC {2}")]
    DuplicateMac(String, String, crate::addr::Mac),
    #[error("device {0}: {1}")]
    Io(String, std::io::Error),
}

/// Poller threads for `devices` devices: `wanted`, or one per core, never more than devices.
fn shard_count(devices: usize, wanted: Option<usize>) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    wanted.unwrap_or(cores).clamp(1, devices.max(1))
}

impl Fabric {
    /// Creates the devices; LIDs (IB mode) and MACs (RoCE mode) must be unique, LIDs
    /// non-zero. Device i is served by shard i mod the shard count.
    pub fn new(
        configs: Vec<RnicConfig>,
        poller: &PollerConfig,
    ) -> Result<Arc<Fabric>, FabricError> {
        let shards = shard_count(configs.len(), poller.threads);
        let wakers = (0..shards)
            .map(|_| Waker::new().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| FabricError::Io("poller".into(), e))?;
        let mut devices: Vec<Arc<Rnic>> = Vec::new();
        let mut by_lid = HashMap::new();
        let gids = Arc::new(GidDirectory::default());
        for (i, config) in configs.into_iter().enumerate() {
            match config.link {
                LinkMode::Ib { lid: 0, .. } => return Err(FabricError::ZeroLid(config.name)),
                LinkMode::Ib { lid, .. } => {
                    if let Some(other) = by_lid.get(&lid) {
                        let other: &Arc<Rnic> = other;
                        let other = other.name().into();
                        return Err(FabricError::DuplicateLid(other, config.name, lid));
                    }
                }
                LinkMode::Eth { mac } => {
                    if let Some(other) = devices.iter().find(|d| d.link().mac() == Some(mac)) {
                        let other = other.name().into();
                        return Err(FabricError::DuplicateMac(other, config.name, mac));
                    }
                }
            }
            let name = config.name.clone();
            let waker = wakers[i % shards].clone();
            let rnic =
                Rnic::new(config, waker, gids.clone(), i).map_err(|e| FabricError::Io(name, e))?;
            if !rnic.link().is_eth() {
                by_lid.insert(rnic.lid(), rnic.clone());
            }
            devices.push(rnic);
        }
        let shards = wakers
            .into_iter()
            .enumerate()
            .map(|(s, waker)| {
                let mine = devices
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % shards == s)
                    .map(|(_, d)| d.clone())
                    .collect();
                (waker, mine)
            })
            .collect();
        Ok(Arc::new(Fabric {
            devices,
            by_lid,
            gids,
            shards,
            uplinks: Default::default(),
            wires: std::sync::OnceLock::new(),
        }))
    }

    pub fn devices(&self) -> &[Arc<Rnic>] {
        &self.devices
    }

    /// Starts one poller thread per shard.
    pub fn start_pollers(self: &Arc<Self>, config: PollerConfig) -> std::io::Result<Pollers> {
        let mut threads = Vec::new();
        for shard in 0..self.shards.len() {
            let fabric = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("vrnic-poller{shard}"))
                .spawn(move || poller::run(&fabric, shard, config));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    self.stop_pollers();
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Pollers {
            fabric: self.clone(),
            threads,
        })
    }

    /// Attaches every RoCE device to `switch` as a wire port: RoCEv2 frames for its MAC
    /// come to it, and its QPs whose peer is no device of this process use it (once).
    pub fn attach_wire(
        &self,
        switch: &Arc<crate::net::switch::Switch>,
    ) -> Result<(), crate::net::switch::SwitchError> {
        if self.wire_attached() {
            // Attached once: a second set of ports would only take frames from the first.
            return Ok(());
        }
        let mut wires = Vec::new();
        for d in &self.devices {
            wires.push(match d.link().mac() {
                Some(mac) => Some(WireDevice::attach(switch, d, mac)?),
                None => None,
            });
        }
        let _ = self.wires.set(wires);
        Ok(())
    }

    /// The devices with a wire port, and their ports (none before `attach_wire`).
    pub fn wires(&self) -> Vec<(Arc<Rnic>, Arc<WireDevice>)> {
        let Some(wires) = self.wires.get() else {
            return Vec::new();
        };
        self.devices
            .iter()
            .zip(wires)
            .filter_map(|(d, w)| Some((d.clone(), w.clone()?)))
            .collect()
    }

    /// Whether `attach_wire` has run: GIDs no device holds then route to the wire.
    pub fn wire_attached(&self) -> bool {
        self.wires.get().is_some()
    }

    fn stop_pollers(&self) {
        for (waker, _) in &self.shards {
            waker.stop();
        }
    }
}

/// Routing: where a packet to an address goes. Today every route ends at a device of this
/// process; a wire transport (RoCE v2 over UDP to other processes) would be another
/// `Route`, chosen here for GIDs no local device holds.
impl Peers for Fabric {
    fn route(&self, to: &Address) -> Option<Route> {
        let device = match to {
            Address::Lid(lid) => self.by_lid.get(lid)?,
            Address::Gid(gid) => match self.gids.lookup(gid) {
                Some(dev) => self.devices.get(dev)?,
                None if self.wires.get().is_some() => return Some(Route::Wire),
                None => return None,
            },
        };
        Some(Route::Device(device.clone()))
    }

    fn wire(&self, rnic: &Rnic) -> Option<Arc<WireDevice>> {
        self.wires.get()?.get(rnic.id)?.clone()
    }
}

/// The running poller threads.
pub struct Pollers {
    fabric: Arc<Fabric>,
    threads: Vec<JoinHandle<()>>,
}

impl Pollers {
    /// Stops every poller and waits for it.
    pub fn stop(self) {
        self.fabric.stop_pollers();
        for t in self.threads {
            let _ = t.join();
        }
    }
}
