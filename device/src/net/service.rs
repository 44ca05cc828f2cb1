//! The Ethernet side of one `vrnic serve` process: its guest ports (one vhost-user socket
//! each) on one switch, their threads, and their figures.

use super::switch::{PortStats, Switch, SwitchError};
use super::vhost::{self, ListenError, VhostNetPort};
use crate::addr::Mac;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use vmm_sys_util::eventfd::EventFd;

/// One guest interface: `--net name=N,socket=PATH,mac=M`, or `net=PATH` in a RoCE
/// device's spec (then `rnic` names the device, and the MAC is its).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPortConfig {
    pub name: String,
    pub socket: PathBuf,
    pub mac: Mac,
    pub rnic: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("net port {name}: {source}")]
    Listen {
        name: String,
        #[source]
        source: ListenError,
    },
    #[error("net port {name}: {source}")]
    Switch {
        name: String,
        #[source]
        source: SwitchError,
    },
    #[error("net port {name}: cannot start its thread: {source}")]
    Thread {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// A guest port's figures: the switch's and its own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NetPortStats {
    pub name: String,
    pub switch: PortStats,
    pub tx_frames: u64,
    pub tx_errors: u64,
    pub rx_frames: u64,
    pub rx_dropped: u64,
    pub rx_not_ready: u64,
    pub rx_oversize: u64,
    pub rx_errors: u64,
    pub connections: u64,
}

pub struct NetService {
    switch: Arc<Switch>,
    ports: Vec<Arc<VhostNetPort>>,
    threads: Vec<JoinHandle<()>>,
}

impl NetService {
    /// Binds every port's socket (all or none), attaches the ports to `switch` with their
    /// MACs as static addresses, and serves each on its own thread until `stop`.
    pub fn start(
        configs: &[NetPortConfig],
        switch: Arc<Switch>,
        stop: Arc<EventFd>,
    ) -> Result<NetService, NetError> {
        let mut listeners = Vec::new();
        for c in configs {
            let l = vhost::listen(&c.socket).map_err(|source| NetError::Listen {
                name: c.name.clone(),
                source,
            })?;
            listeners.push(l);
        }
        let mut service = NetService {
            switch: switch.clone(),
            ports: Vec::new(),
            threads: Vec::new(),
        };
        for (c, listener) in configs.iter().zip(listeners) {
            let ingress = switch.clone();
            let port = switch.attach(|id| Arc::new(VhostNetPort::new(&c.name, c.mac, id, ingress)));
            switch
                .add_static(c.mac, port.id())
                .map_err(|source| NetError::Switch {
                    name: c.name.clone(),
                    source,
                })?;
            let (p, path, stop) = (port.clone(), c.socket.clone(), stop.clone());
            let thread = std::thread::Builder::new()
                .name(format!("vhost-net-{}", c.name))
                .spawn(move || vhost::serve(p, listener, path, stop))
                .map_err(|source| NetError::Thread {
                    name: c.name.clone(),
                    source,
                })?;
            match &c.rnic {
                Some(d) => log::info!(
                    "net port {} (MAC {}, the interface of RoCE device {d}) listening on {}",
                    c.name,
                    c.mac,
                    c.socket.display()
                ),
                None => log::info!(
                    "net port {} (MAC {}) listening on {}",
                    c.name,
                    c.mac,
                    c.socket.display()
                ),
            }
            service.ports.push(port);
            service.threads.push(thread);
        }
        Ok(service)
    }

    pub fn switch(&self) -> &Arc<Switch> {
        &self.switch
    }

    pub fn stats(&self) -> Vec<NetPortStats> {
        let switch = self.switch.stats();
        self.ports
            .iter()
            .map(|p| {
                let c = &p.counters;
                NetPortStats {
                    name: crate::net::port::Port::name(&**p).into(),
                    switch: switch.get(p.id()).map(|s| s.1).unwrap_or_default(),
                    tx_frames: c.tx_frames.load(Relaxed),
                    tx_errors: c.tx_errors.load(Relaxed),
                    rx_frames: c.rx_frames.load(Relaxed),
                    rx_dropped: c.rx_dropped.load(Relaxed),
                    rx_not_ready: c.rx_not_ready.load(Relaxed),
                    rx_oversize: c.rx_oversize.load(Relaxed),
                    rx_errors: c.rx_errors.load(Relaxed),
                    connections: c.connections.load(Relaxed),
                }
            })
            .collect()
    }

    /// Ends every connection and joins the threads (the caller signalled `stop`).
    pub fn stop(&mut self) {
        for p in &self.ports {
            p.disconnect();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for s in self.stats() {
            log::info!("net port {}: {s:?}", s.name);
        }
    }
}
