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
    Uplink(#[from] crate::net::uplink::UplinkError),
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

    /// Opens the uplinks (`vrnic serve --uplink`) and starts their threads. Until the
    /// switch lands they are joined by a hub (each frame to every other uplink); the
    /// switch plugs in here: `Uplinks::start` takes any `Arc<dyn Ingress>` and gives back
    /// the uplinks, each a `Port` with its id.
    pub fn start_uplinks(
        &self,
        configs: &[crate::net::uplink::UplinkConfig],
    ) -> Result<(), ServeError> {
        use crate::net::port::Port;
        let hub = Arc::new(crate::net::uplink::hub::Hub::default());
        let started = self.fabric.uplinks.start(configs, 0, hub.clone())?;
        hub.connect(
            started
                .into_iter()
                .map(|u| (u.id(), u as Arc<dyn Port>))
                .collect(),
        );
        Ok(())
    }

    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Stops the servers (their sockets are removed) and the pollers, and joins them.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        let _ = self.stop.write(1);
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
