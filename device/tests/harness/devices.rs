//! N vrnic devices served in this process, wired as `vrnic serve` wires them (the same
//! `serve::Service`): one fabric, a vfio-user server thread per device on a temporary
//! socket, the poller shards.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use vmm_sys_util::tempdir::TempDir;
use vrnic::addr::Mac;
use vrnic::control::contract::ContractReply;
use vrnic::control::Limits;
use vrnic::control::Request;
use vrnic::fabric::PollerConfig;
use vrnic::pci::PciIds;
use vrnic::rnic::contract::{ContractMode, ContractView};
use vrnic::rnic::link::LinkMode;
use vrnic::rnic::RnicConfig;
use vrnic::serve::Service;

use super::driver::FakeDriver;
use super::TIMEOUT;

/// How long the poller keeps polling after the last work, in tests: short, so that both the
/// polling and the sleeping (kick) paths of the doorbell protocol are exercised.
pub const TEST_POLL_IDLE: Duration = Duration::from_micros(500);

/// LID of device `i` (LIDs start at 1; 0 is reserved).
pub fn lid_of(i: usize) -> u16 {
    u16::try_from(i + 1).expect("device index")
}

/// MAC of device `i` of a RoCE fabric (locally administered, unicast).
pub fn mac_of(i: usize) -> Mac {
    Mac([
        0x02,
        0,
        0,
        0,
        0x10,
        u8::try_from(i + 1).expect("device index"),
    ])
}

/// GID 0 of RoCE device `i` in tests: ::ffff:10.0.0.`i+1`.
pub fn gid_of(i: usize) -> [u8; 16] {
    super::commands::ipv4_gid([10, 0, 0, u8::try_from(i + 1).expect("device index")])
}

/// IB mode with LID `lid_of(i)`.
pub fn ib(i: usize) -> LinkMode {
    LinkMode::Ib {
        lid: lid_of(i),
        guid: None,
    }
}

/// RoCE mode with MAC `mac_of(i)`.
pub fn roce(i: usize) -> LinkMode {
    LinkMode::Eth { mac: mac_of(i) }
}

/// Running devices; dropping this stops the servers and the pollers and joins them.
pub struct TestDevices {
    service: Option<Service>,
    sockets: Vec<PathBuf>,
    /// The control socket, if started with one.
    control: Option<PathBuf>,
    links: Vec<LinkMode>,
    _dir: TempDir,
}

impl TestDevices {
    /// Starts `n` devices (LIDs 1..=n) with the test poll idle time.
    pub fn start(n: usize) -> Self {
        Self::start_with_idle(n, TEST_POLL_IDLE)
    }

    pub fn start_with_idle(n: usize, idle: Duration) -> Self {
        Self::start_with(
            n,
            PollerConfig {
                idle,
                // Tests reason about POLL_STATE: pollers must not give way to a busy machine.
                give_way: false,
                threads: None,
            },
        )
    }

    pub fn start_with(n: usize, poller: PollerConfig) -> Self {
        Self::start_links_with((0..n).map(ib).collect(), poller)
    }

    /// Starts `n` RoCE-mode devices (MACs `mac_of(i)`).
    pub fn start_roce(n: usize) -> Self {
        Self::start_links((0..n).map(roce).collect())
    }

    /// Starts one device per link mode, device `i` named rnic`i`.
    pub fn start_links(links: Vec<LinkMode>) -> Self {
        Self::start_links_with(
            links,
            PollerConfig {
                idle: TEST_POLL_IDLE,
                give_way: false,
                threads: None,
            },
        )
    }

    pub fn start_links_with(links: Vec<LinkMode>, poller: PollerConfig) -> Self {
        Self::start_full(links, poller, None, ContractMode::default())
    }

    /// One device per link mode, and a control socket (`vrnic serve --control`) with
    /// `limits`, at `control_socket()`.
    pub fn start_with_control(links: Vec<LinkMode>, limits: Limits) -> Self {
        let poller = PollerConfig {
            idle: TEST_POLL_IDLE,
            give_way: false,
            threads: None,
        };
        Self::start_full(links, poller, Some(limits), ContractMode::default())
    }

    /// One device per link mode checking the contract in `mode`, and a control socket to
    /// read its counts (`contract`).
    pub fn start_checked(links: Vec<LinkMode>, mode: ContractMode) -> Self {
        let poller = PollerConfig {
            idle: TEST_POLL_IDLE,
            give_way: false,
            threads: None,
        };
        Self::start_full(links, poller, Some(Limits::default()), mode)
    }

    /// Device `i`'s contract checker as `vrnic ctl contract` reports it.
    pub fn contract(&self, i: usize) -> ContractView {
        let request = Request::Contract {
            device: format!("rnic{i}"),
        };
        let line = vrnic::control::client::call(self.control_socket(), &request)
            .expect("contract request");
        let reply: ContractReply = serde_json::from_str(&line).expect("a contract reply");
        reply.contract
    }

    fn start_full(
        links: Vec<LinkMode>,
        poller: PollerConfig,
        control: Option<Limits>,
        contract: ContractMode,
    ) -> Self {
        let dir = TempDir::new().expect("temp dir");
        let configs: Vec<RnicConfig> = links
            .iter()
            .enumerate()
            .map(|(i, link)| RnicConfig {
                contract,
                ..RnicConfig::new(
                    &format!("rnic{i}"),
                    dir.as_path().join(format!("rnic{i}.sock")),
                    *link,
                )
            })
            .collect();
        let sockets = configs.iter().map(|c| c.socket.clone()).collect();
        let control_path = control.map(|limits| (dir.as_path().join("control.sock"), limits));
        let service = Service::start_with_limits(
            configs,
            poller,
            control_path.as_ref().map(|(p, l)| (p.as_path(), *l)),
        )
        .expect("service");
        TestDevices {
            service: Some(service),
            sockets,
            control: control_path.map(|(p, _)| p),
            links,
            _dir: dir,
        }
    }

    /// Device `i` itself, for what only the host sees or switches (its tracer, its packet tap).
    pub fn rnic(&self, i: usize) -> std::sync::Arc<vrnic::rnic::Rnic> {
        let service = self.service.as_ref().expect("devices stopped");
        service.fabric().devices()[i].clone()
    }

    /// The fabric of the devices (to attach their wire ports to a switch).
    pub fn fabric(&self) -> std::sync::Arc<vrnic::fabric::Fabric> {
        let service = self.service.as_ref().expect("devices stopped");
        service.fabric().clone()
    }

    /// The control socket (started with `start_with_control`).
    pub fn control_socket(&self) -> &Path {
        self.control
            .as_deref()
            .expect("started without a control socket")
    }

    pub fn link(&self, i: usize) -> LinkMode {
        self.links[i]
    }

    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    pub fn socket(&self, i: usize) -> &Path {
        &self.sockets[i]
    }

    /// LID of device `i` (0 in RoCE mode).
    pub fn lid(&self, i: usize) -> u16 {
        self.links[i].lid()
    }

    /// A driver connected to device `i` (vfio-user set up, device not enabled yet).
    pub fn connect(&self, i: usize) -> FakeDriver {
        FakeDriver::connect(self.socket(i), self.lid(i))
    }

    /// A driver connected to device `i` and brought up (admin queue, async and completion EQs).
    pub fn driver(&self, i: usize) -> FakeDriver {
        let mut d = self.connect(i);
        d.bring_up();
        d
    }

    /// `driver(i)`, and in RoCE mode GID 0 set to `gid_of(i)` (`FakeDriver::roce_up`).
    pub fn addressed_driver(&self, i: usize) -> FakeDriver {
        let mut d = self.driver(i);
        if self.links[i].is_eth() {
            d.roce_up(gid_of(i));
        }
        d
    }
}

impl TestDevices {
    /// Stops the service now (sockets removed, threads joined) instead of at drop; fails
    /// the test if that takes longer than `TIMEOUT`.
    pub fn stop(&mut self) {
        let Some(service) = self.service.take() else {
            return;
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            service.stop();
            let _ = tx.send(());
        });
        if rx.recv_timeout(TIMEOUT).is_err() && !std::thread::panicking() {
            panic!("device threads did not stop within {TIMEOUT:?}");
        }
    }
}

impl Drop for TestDevices {
    fn drop(&mut self) {
        self.stop();
    }
}
