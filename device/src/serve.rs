//! `vrnic serve` wired up: the fabric of devices, one vfio-user server thread per device,
//! the poller shards, and the control socket if asked for. `main` and the test harness both
//! start the service this way.

use crate::control::{ControlError, ControlServer, Limits};
use crate::fabric::{Fabric, FabricError, PollerConfig, Pollers};
use crate::model::RnicModel;
use crate::rnic::RnicConfig;
use crate::vfio_user::{DeviceModel, Server, ServerError};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Fabric(#[from] FabricError),
    #[error("device {device}: {source}")]
    Server {
        device: String,
        #[source]
        source: ServerError,
    },
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Net(#[from] crate::net::service::NetError),
    #[error(transparent)]
    Uplink(#[from] crate::net::uplink::UplinkError),
    #[error("wire ports: {0}")]
    Wire(#[from] crate::net::switch::SwitchError),
    #[error("cannot start: {0}")]
    Io(#[from] std::io::Error),
}

/// The running service. Dropping it (or `stop`) stops every thread and removes the sockets.
pub struct Service {
    fabric: Arc<Fabric>,
    stop: Arc<EventFd>,
    servers: Vec<JoinHandle<()>>,
    pollers: Option<Pollers>,
    /// The control socket's accept thread.
    control: Option<JoinHandle<()>>,
    /// The guests' Ethernet ports and their switch (`start_net`).
    net: Option<crate::net::service::NetService>,
}

impl Service {
    /// Binds every device's socket, then starts its server thread and the pollers.
    pub fn start(devices: Vec<RnicConfig>, poller: PollerConfig) -> Result<Service, ServeError> {
        Self::start_with_control(devices, poller, None)
    }

    /// `start`, with a control socket at `control` (`vrnic serve --control`) serving with
    /// the default limits.
    pub fn start_with_control(
        devices: Vec<RnicConfig>,
        poller: PollerConfig,
        control: Option<&Path>,
    ) -> Result<Service, ServeError> {
        Self::start_with_limits(devices, poller, control.map(|p| (p, Limits::default())))
    }

    /// `start`, with a control socket at the path given, serving within its limits.
    pub fn start_with_limits(
        devices: Vec<RnicConfig>,
        poller: PollerConfig,
        control: Option<(&Path, Limits)>,
    ) -> Result<Service, ServeError> {
        let fabric = Fabric::new(devices, &poller)?;
        let control = control
            .map(|(path, limits)| ControlServer::bind(path, fabric.clone(), limits))
            .transpose()?;
        let stop = Arc::new(EventFd::new(EFD_NONBLOCK)?);
        let mut bound = Vec::new();
        for rnic in fabric.devices() {
            let model: Arc<Mutex<dyn DeviceModel>> = Arc::new(Mutex::new(RnicModel(rnic.clone())));
            let server =
                Server::bind(&rnic.config.socket, model).map_err(|source| ServeError::Server {
                    device: rnic.name().into(),
                    source,
                })?;
            bound.push((rnic.name().to_string(), server));
        }
        let mut service = Service {
            fabric: fabric.clone(),
            stop,
            servers: Vec::new(),
            pollers: None,
            control: None,
            net: None,
        };
        for (name, server) in bound {
            let stop = service.stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("vfio-user-{name}"))
                .spawn(move || {
                    if let Err(e) = server.run(&stop) {
                        log::error!("device {name}: server failed: {e}");
                    }
                })?;
            service.servers.push(thread);
        }
        service.pollers = Some(fabric.start_pollers(poller)?);
        if let Some(control) = control {
            let stop = service.stop.clone();
            service.control = Some(
                std::thread::Builder::new()
                    .name("vrnic-control".into())
                    .spawn(move || control.run(&stop))?,
            );
        }
        for rnic in fabric.devices() {
            let link = match rnic.link().mac() {
                Some(mac) => format!("RoCE, MAC {mac}"),
                None => format!("IB, LID {}", rnic.lid()),
            };
            log::info!(
                "device {} ({link}) listening on {}",
                rnic.name(),
                rnic.config.socket.display()
            );
        }
        Ok(service)
    }

    /// Opens the uplinks (`vrnic serve --uplink`), attaches them to the switch of the
    /// guests' ports (started here if `start_net` has not run) and starts their threads.
    pub fn start_uplinks(
        &mut self,
        configs: &[crate::net::uplink::UplinkConfig],
    ) -> Result<(), ServeError> {
        if configs.is_empty() {
            return Ok(());
        }
        if self.net.is_none() {
            self.start_net(&[])?;
        }
        let switch = self.net.as_ref().expect("started above").switch().clone();
        // Each uplink sends with the port number it will have: the next ones of the switch.
        // Until attached its frames find no port and are dropped (start-up only).
        let first = switch.port_count();
        let started = self.fabric.uplinks.start(configs, first, switch.clone())?;
        for uplink in started {
            switch.attach(|id| {
                debug_assert_eq!(id, uplink.id(), "ports attach only at start-up");
                uplink
            });
        }
        // Other hosts are reachable now: RoCE to them goes onto the wire.
        self.fabric.attach_wire(&switch)?;
        Ok(())
    }

    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Serves the guests' Ethernet interfaces (vhost-user sockets) on one switch, which
    /// `net()` gives to whatever else attaches to it (uplinks, wire engines).
    pub fn start_net(
        &mut self,
        ports: &[crate::net::service::NetPortConfig],
    ) -> Result<(), ServeError> {
        let switch = crate::net::switch::Switch::new();
        let net = crate::net::service::NetService::start(ports, switch.clone(), self.stop.clone())?;
        self.net = Some(net);
        if !ports.is_empty() {
            // Something outside the process is on the segment now (say a Soft-RoCE guest):
            // RoCE devices reach what no device of the process holds through the wire.
            self.fabric.attach_wire(&switch)?;
        }
        Ok(())
    }

    pub fn net(&self) -> Option<&crate::net::service::NetService> {
        self.net.as_ref()
    }

    /// Stops the servers (their sockets are removed) and the pollers, and joins them.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        let _ = self.stop.write(1);
        if let Some(mut net) = self.net.take() {
            net.stop();
        }
        if let Some(t) = self.control.take() {
            let _ = t.join();
        }
        for t in self.servers.drain(..) {
            let _ = t.join();
        }
        if let Some(pollers) = self.pollers.take() {
            pollers.stop();
        }
        self.fabric.uplinks.stop();
        // Every event is made by now: the trace files get all of them.
        for rnic in self.fabric.devices() {
            rnic.trace.finish_file();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.shut_down();
    }
}
