//! A fake `DeviceModel` served by the real vfio-user `Server`, for the tests of the server
//! itself: `TestModel` (BAR0 registers, a memfd BAR2, config space, four MSI-X vectors)
//! records what the server asks of it in an `EventLog`; `TestServer` serves it on a
//! temporary socket in its own thread and hands out `RawClient`s.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::tempdir::TempDir;
use vrnic::guest_memory::GuestRam;
use vrnic::vfio_user::model::region_index;
use vrnic::vfio_user::{DeviceModel, RegionInfo, RegionMmap, Server, ServerError};

use super::memory::memfd;
use super::vfio::RawClient;
use super::{join_with_guard, TIMEOUT};

// ---------------------------------------------------------------- the model

/// BAR0 register map of the test device.
pub mod reg {
    /// Read-only identity.
    pub const ID: u64 = 0x00;
    /// Read-write scratch.
    pub const SCRATCH: u64 = 0x04;
    /// DMA address, low half.
    pub const DMA_ADDR_LO: u64 = 0x08;
    /// DMA address, high half.
    pub const DMA_ADDR_HI: u64 = 0x0c;
    /// Write a command: see `cmd`.
    pub const CMD: u64 = 0x10;
    /// Read-only result of the last command.
    pub const RESULT: u64 = 0x14;
    /// Read-only status of the last command (0 ok, else 1).
    pub const STATUS: u64 = 0x18;
}

/// Commands written to `reg::CMD`.
pub mod cmd {
    /// Load the u32 at DMA_ADDR (Acquire) into RESULT.
    pub const DMA_LOAD: u32 = 1;
    /// Store SCRATCH at DMA_ADDR (Release).
    pub const DMA_STORE: u32 = 2;
    /// Signal MSI-X vector SCRATCH.
    pub const IRQ: u32 = 3;
}

/// Value of `reg::ID`.
pub const DEVICE_ID: u32 = 0x5652_4e43;
/// Size of BAR0 (trapped registers).
pub const BAR0_SIZE: u64 = 0x1000;
/// Size of BAR2 (memfd, mmap-able).
pub const BAR2_SIZE: u64 = 0x10_0000;
/// Size of the config region.
pub const CONFIG_SIZE: u64 = 256;
/// MSI-X vectors.
pub const MSIX_VECTORS: u32 = 4;
/// Pattern the model puts at the start of BAR2.
pub const BAR2_PATTERN: &[u8] = b"vrnic-bar2";

/// What the server asked of the model, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Connected,
    Disconnected,
    Reset,
    DmaChanged,
    /// `fds[i]`: vector `start + i` got an eventfd.
    SetIrqs {
        index: u32,
        start: u32,
        fds: Vec<bool>,
    },
}

/// Events recorded by the model, with a condition variable to wait on.
#[derive(Default)]
pub struct EventLog {
    events: Mutex<Vec<Event>>,
    cond: Condvar,
}

impl EventLog {
    fn push(&self, e: Event) {
        self.events.lock().unwrap().push(e);
        self.cond.notify_all();
    }

    /// A copy of all events so far.
    pub fn all(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Number of times `e` happened.
    pub fn count(&self, e: &Event) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|x| *x == e)
            .count()
    }

    /// Waits until `e` happened at least `n` times (panics after TIMEOUT).
    pub fn wait_for(&self, e: &Event, n: usize) {
        let guard = self.events.lock().unwrap();
        let (_guard, timeout) = self
            .cond
            .wait_timeout_while(guard, TIMEOUT, |v| v.iter().filter(|x| *x == e).count() < n)
            .unwrap();
        assert!(!timeout.timed_out(), "timed out waiting for {e:?} x{n}");
    }
}

/// The test device: BAR0 registers, BAR2 memfd, 256-byte config space and
/// four MSI-X vectors.
pub struct TestModel {
    scratch: u32,
    dma_addr: u64,
    result: u32,
    status: u32,
    bar2: File,
    config: [u8; CONFIG_SIZE as usize],
    msix: Vec<Option<EventFd>>,
    ram: Option<GuestRam>,
    pub log: Arc<EventLog>,
}

impl TestModel {
    pub fn new(log: Arc<EventLog>) -> Self {
        let bar2 = memfd(c"vrnic-test-bar2", BAR2_SIZE);
        bar2.write_all_at(BAR2_PATTERN, 0).unwrap();
        Self {
            scratch: 0,
            dma_addr: 0,
            result: 0,
            status: 0,
            bar2,
            config: [0; CONFIG_SIZE as usize],
            msix: (0..MSIX_VECTORS).map(|_| None).collect(),
            ram: None,
            log,
        }
    }

    /// The GuestRam the model was given at connect, if a client is connected.
    pub fn ram(&self) -> Option<GuestRam> {
        self.ram.clone()
    }

    fn run_command(&mut self, c: u32) -> Result<(), ()> {
        let mem = self.ram.as_ref().ok_or(())?.snapshot();
        match c {
            cmd::DMA_LOAD => {
                self.result = mem
                    .load_u32(self.dma_addr, Ordering::Acquire)
                    .map_err(|_| ())?;
            }
            cmd::DMA_STORE => {
                mem.store_u32(self.dma_addr, self.scratch, Ordering::Release)
                    .map_err(|_| ())?;
            }
            cmd::IRQ => {
                let efd = self
                    .msix
                    .get(self.scratch as usize)
                    .and_then(Option::as_ref)
                    .ok_or(())?;
                efd.write(1).map_err(|_| ())?;
            }
            _ => return Err(()),
        }
        Ok(())
    }

    fn bar0_read(&self, offset: u64) -> u32 {
        match offset {
            reg::ID => DEVICE_ID,
            reg::SCRATCH => self.scratch,
            reg::DMA_ADDR_LO => self.dma_addr as u32,
            reg::DMA_ADDR_HI => (self.dma_addr >> 32) as u32,
            reg::RESULT => self.result,
            reg::STATUS => self.status,
            _ => 0,
        }
    }

    fn bar0_write(&mut self, offset: u64, v: u32) {
        match offset {
            reg::SCRATCH => self.scratch = v,
            reg::DMA_ADDR_LO => self.dma_addr = (self.dma_addr & !0xffff_ffff) | u64::from(v),
            reg::DMA_ADDR_HI => {
                self.dma_addr = (self.dma_addr & 0xffff_ffff) | (u64::from(v) << 32)
            }
            reg::CMD => self.status = u32::from(self.run_command(v).is_err()),
            _ => {}
        }
    }
}

impl DeviceModel for TestModel {
    fn region_info(&self, index: u32) -> Option<RegionInfo> {
        match index {
            0 => Some(RegionInfo {
                size: BAR0_SIZE,
                readable: true,
                writable: true,
                mmap: None,
            }),
            2 => Some(RegionInfo {
                size: BAR2_SIZE,
                readable: true,
                writable: true,
                mmap: Some(RegionMmap {
                    fd: self.bar2.as_raw_fd(),
                    fd_offset: 0,
                    areas: vec![],
                }),
            }),
            region_index::CONFIG => Some(RegionInfo {
                size: CONFIG_SIZE,
                readable: true,
                writable: true,
                mmap: None,
            }),
            _ => None,
        }
    }

    fn num_regions(&self) -> u32 {
        region_index::NUM_PCI_REGIONS
    }

    fn irq_count(&self, index: u32) -> u32 {
        if index == 2 {
            MSIX_VECTORS
        } else {
            0
        }
    }

    fn region_read(&mut self, index: u32, offset: u64, data: &mut [u8]) -> Result<(), i32> {
        match index {
            0 if data.len() == 4 && offset.is_multiple_of(4) => {
                data.copy_from_slice(&self.bar0_read(offset).to_le_bytes());
                Ok(())
            }
            2 => self.bar2.read_exact_at(data, offset).map_err(|_| libc::EIO),
            region_index::CONFIG => {
                let start = offset as usize;
                data.copy_from_slice(&self.config[start..start + data.len()]);
                Ok(())
            }
            _ => Err(libc::EINVAL),
        }
    }

    fn region_write(&mut self, index: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        match index {
            0 if data.len() == 4 && offset.is_multiple_of(4) => {
                self.bar0_write(offset, u32::from_le_bytes(data.try_into().unwrap()));
                Ok(())
            }
            2 => self.bar2.write_all_at(data, offset).map_err(|_| libc::EIO),
            region_index::CONFIG => {
                let start = offset as usize;
                self.config[start..start + data.len()].copy_from_slice(data);
                Ok(())
            }
            _ => Err(libc::EINVAL),
        }
    }

    fn set_irqs(&mut self, index: u32, start: u32, fds: Vec<Option<EventFd>>) -> Result<(), i32> {
        self.log.push(Event::SetIrqs {
            index,
            start,
            fds: fds.iter().map(Option::is_some).collect(),
        });
        if index != 2 {
            return Err(libc::EINVAL);
        }
        for (i, fd) in fds.into_iter().enumerate() {
            *self.msix.get_mut(start as usize + i).ok_or(libc::EINVAL)? = fd;
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.scratch = 0;
        self.dma_addr = 0;
        self.result = 0;
        self.status = 0;
        self.log.push(Event::Reset);
    }

    fn dma_changed(&mut self) {
        self.log.push(Event::DmaChanged);
    }

    fn connected(&mut self, ram: GuestRam) {
        self.ram = Some(ram);
        self.log.push(Event::Connected);
    }

    fn disconnected(&mut self) {
        self.ram = None;
        self.msix.iter_mut().for_each(|v| *v = None);
        self.log.push(Event::Disconnected);
    }
}

// --------------------------------------------------------- server harness

/// A server on a temporary socket, running in its own thread.
pub struct TestServer {
    pub path: PathBuf,
    pub model: Arc<Mutex<TestModel>>,
    pub log: Arc<EventLog>,
    stop: EventFd,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
    _dir: TempDir,
}

impl TestServer {
    pub fn start() -> Self {
        let dir = TempDir::new().unwrap();
        let path = dir.as_path().join("dev.sock");
        let log = Arc::new(EventLog::default());
        let model = Arc::new(Mutex::new(TestModel::new(log.clone())));
        let server = Server::bind(&path, model.clone()).unwrap();
        let stop = EventFd::new(EFD_NONBLOCK).unwrap();
        let thread_stop = stop.try_clone().unwrap();
        let thread = std::thread::spawn(move || server.run(&thread_stop));
        Self {
            path,
            model,
            log,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Fires the stop eventfd and waits for `run` to return.
    pub fn stop(mut self) -> Result<(), ServerError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ServerError> {
        self.stop.write(1).unwrap();
        match self.thread.take() {
            Some(t) => join_with_guard(t),
            None => Ok(()),
        }
    }

    pub fn raw(&self) -> RawClient {
        RawClient::connect(&self.path)
    }

    /// A raw client that already negotiated the version.
    pub fn negotiated(&self) -> RawClient {
        let mut c = self.raw();
        c.negotiate(false);
        c
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop_and_join();
        }
    }
}
