//! The fabric: every device served by this process, reachable by LID, and the poller that
//! moves data between them.

use crate::datapath::{run_poller, PollerConfig, Waker};
use crate::rnic::{Rnic, RnicConfig};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct Fabric {
    devices: Vec<Arc<Rnic>>,
    waker: Arc<Waker>,
}

#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("devices {0} and {1} both use LID {2}")]
    DuplicateLid(String, String, u16),
    #[error("device {0}: LID 0 is reserved")]
    ZeroLid(String),
    #[error("device {0}: {1}")]
    Io(String, std::io::Error),
}

impl Fabric {
    /// Creates the devices; their LIDs must be unique and non-zero.
    pub fn new(configs: Vec<RnicConfig>) -> Result<Arc<Fabric>, FabricError> {
        let waker = Arc::new(Waker::new().map_err(|e| FabricError::Io("poller".into(), e))?);
        let mut devices: Vec<Arc<Rnic>> = Vec::new();
        for config in configs {
            if config.lid == 0 {
                return Err(FabricError::ZeroLid(config.name));
            }
            if let Some(other) = devices.iter().find(|d| d.lid() == config.lid) {
                return Err(FabricError::DuplicateLid(
                    other.name().into(),
                    config.name,
                    config.lid,
                ));
            }
            let name = config.name.clone();
            devices.push(Rnic::new(config, waker.clone()).map_err(|e| FabricError::Io(name, e))?);
        }
        Ok(Arc::new(Fabric { devices, waker }))
    }

    pub fn devices(&self) -> &[Arc<Rnic>] {
        &self.devices
    }

    pub fn by_lid(&self, lid: u16) -> Option<Arc<Rnic>> {
        self.devices.iter().find(|d| d.lid() == lid).cloned()
    }

    pub fn waker(&self) -> &Arc<Waker> {
        &self.waker
    }

    /// Starts the poller thread; `stop()` on the waker ends it.
    pub fn start_poller(self: &Arc<Self>, config: PollerConfig) -> std::io::Result<JoinHandle<()>> {
        let fabric = self.clone();
        std::thread::Builder::new()
            .name("vrnic-poller".into())
            .spawn(move || run_poller(fabric, config))
    }
}
