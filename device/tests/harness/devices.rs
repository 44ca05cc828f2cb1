//! N vrnic devices served in this process, wired as `vrnic serve` wires them (the same
//! `serve::Service`): one fabric, a vfio-user server thread per device on a temporary
//! socket, the poller shards.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use vmm_sys_util::tempdir::TempDir;
use vrnic::fabric::PollerConfig;
use vrnic::pci::PciIds;
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

/// Running devices; dropping this stops the servers and the pollers and joins them.
pub struct TestDevices {
    service: Option<Service>,
    sockets: Vec<PathBuf>,
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
        let dir = TempDir::new().expect("temp dir");
        let configs: Vec<RnicConfig> = (0..n)
            .map(|i| RnicConfig {
                name: format!("rnic{i}"),
                socket: dir.as_path().join(format!("rnic{i}.sock")),
                lid: lid_of(i),
                ids: PciIds::default(),
            })
            .collect();
        let sockets = configs.iter().map(|c| c.socket.clone()).collect();
        let service = Service::start(configs, poller).expect("service");
        TestDevices {
            service: Some(service),
            sockets,
            _dir: dir,
        }
    }

    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    pub fn socket(&self, i: usize) -> &Path {
        &self.sockets[i]
    }

    pub fn lid(&self, i: usize) -> u16 {
        lid_of(i)
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
}

impl Drop for TestDevices {
    fn drop(&mut self) {
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
