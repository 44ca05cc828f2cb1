//! Test support shared by the vfio-user integration tests (included with
//! `#[path]`): a small device model, a server harness and a raw-message
//! client that can send anything, including malformed messages.
#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;
use vmm_sys_util::tempdir::TempDir;
use vrnic::guest_memory::GuestRam;
use vrnic::vfio_user::model::region_index;
use vrnic::vfio_user::{DeviceModel, RegionInfo, RegionMmap, Server, ServerError};

/// The harness's guest memory helpers (one memfd helper for every test).
#[path = "harness/memory.rs"]
pub mod memory;

/// Guard against hangs only: no test waits this long when it passes.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

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

    /// Waits until `e` happened at least `n` times (panics after HANG_GUARD).
    pub fn wait_for(&self, e: &Event, n: usize) {
        let guard = self.events.lock().unwrap();
        let (_guard, timeout) = self
            .cond
            .wait_timeout_while(guard, HANG_GUARD, |v| {
                v.iter().filter(|x| *x == e).count() < n
            })
            .unwrap();
        assert!(!timeout.timed_out(), "timed out waiting for {e:?} x{n}");
    }
}

/// A memfd of `size` bytes, sealed as QEMU seals guest RAM (the harness's helper).
pub fn memfd(size: u64) -> File {
    memory::memfd(c"vrnic-test", size)
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
        let bar2 = memfd(BAR2_SIZE);
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

/// Joins a thread, panicking if it takes longer than HANG_GUARD.
pub fn join_with_guard<T: Send + 'static>(t: JoinHandle<T>) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(t.join());
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("thread did not finish"),
    }
}

/// Runs `f` on another thread; panics if it hangs (for clients without
/// socket timeouts, like the `vfio_user` crate's).
pub fn with_hang_guard<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    join_with_guard(std::thread::spawn(f))
}

// -------------------------------------------------------------- raw client

pub const VERSION: u16 = 1;
pub const DMA_MAP: u16 = 2;
pub const DMA_UNMAP: u16 = 3;
pub const DEVICE_GET_INFO: u16 = 4;
pub const DEVICE_GET_REGION_INFO: u16 = 5;
pub const DEVICE_GET_IRQ_INFO: u16 = 7;
pub const DEVICE_SET_IRQS: u16 = 8;
pub const REGION_READ: u16 = 9;
pub const REGION_WRITE: u16 = 10;
pub const DEVICE_RESET: u16 = 13;
pub const REGION_WRITE_MULTI: u16 = 15;
pub const DEVICE_FEATURE: u16 = 16;

pub const FLAG_REPLY: u32 = 1;
pub const FLAG_NO_REPLY: u32 = 1 << 4;
pub const FLAG_ERROR: u32 = 1 << 5;

/// A reply as received.
#[derive(Debug)]
pub struct RawReply {
    pub id: u16,
    pub command: u16,
    pub size: u32,
    pub flags: u32,
    pub error: u32,
    pub payload: Vec<u8>,
    pub fds: Vec<File>,
}

impl RawReply {
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }

    pub fn u32_at(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.payload[off..off + 4].try_into().unwrap())
    }

    pub fn u64_at(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.payload[off..off + 8].try_into().unwrap())
    }
}

/// Builds little-endian payloads.
#[derive(Default)]
pub struct Payload(pub Vec<u8>);

impl Payload {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

/// Encodes a header.
pub fn header(id: u16, command: u16, size: u32, flags: u32) -> Vec<u8> {
    Payload::new()
        .u16(id)
        .u16(command)
        .u32(size)
        .u32(flags)
        .u32(0)
        .0
}

/// A client speaking raw vfio-user messages, with socket timeouts so a
/// broken server fails the test instead of hanging it.
pub struct RawClient {
    pub stream: UnixStream,
    next_id: u16,
}

impl RawClient {
    pub fn connect(path: &Path) -> Self {
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
        stream.set_write_timeout(Some(HANG_GUARD)).unwrap();
        Self {
            stream,
            next_id: 0x100,
        }
    }

    /// Sends a command; returns its message id.
    pub fn send(&mut self, command: u16, flags: u32, payload: &[u8], fds: &[RawFd]) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let size = (16 + payload.len()) as u32;
        let mut bytes = header(id, command, size, flags);
        bytes.extend_from_slice(payload);
        let n = self.stream.send_with_fds(&[&bytes[..]], fds).unwrap();
        self.stream.write_all(&bytes[n..]).unwrap();
        id
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Receives one message (reply), with any fds.
    pub fn recv(&mut self) -> RawReply {
        let mut hdr = [0u8; 16];
        let (n, file) = self.stream.recv_with_fd(&mut hdr).unwrap();
        assert!(n > 0, "server closed the connection");
        self.stream.read_exact(&mut hdr[n..]).unwrap();
        let u16_at = |o: usize| u16::from_le_bytes(hdr[o..o + 2].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(hdr[o..o + 4].try_into().unwrap());
        let size = u32_at(4);
        let mut payload = vec![0u8; size as usize - 16];
        self.stream.read_exact(&mut payload).unwrap();
        RawReply {
            id: u16_at(0),
            command: u16_at(2),
            size,
            flags: u32_at(8),
            error: u32_at(12),
            payload,
            fds: file.into_iter().collect(),
        }
    }

    /// Sends a command and receives its reply, checking the id and REPLY flag.
    pub fn request_with_fds(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> RawReply {
        let id = self.send(command, 0, payload, fds);
        let reply = self.recv();
        assert_eq!(reply.id, id, "reply to the wrong message");
        assert_eq!(reply.command, command);
        assert_eq!(reply.flags & 0xf, FLAG_REPLY);
        reply
    }

    pub fn request(&mut self, command: u16, payload: &[u8]) -> RawReply {
        self.request_with_fds(command, payload, &[])
    }

    /// Expects an error reply with `errno`.
    pub fn expect_errno(&mut self, command: u16, payload: &[u8], errno: i32) {
        let reply = self.request(command, payload);
        assert!(
            reply.is_error(),
            "command {command} succeeded, expected errno {errno}"
        );
        assert_eq!(reply.error, errno as u32, "command {command}");
        assert_eq!(reply.size, 16, "error replies carry only the header");
    }

    /// VERSION 0.0, optionally offering write_multiple; returns the reply JSON.
    pub fn negotiate(&mut self, write_multiple: bool) -> serde_json::Value {
        let caps = if write_multiple {
            r#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"write_multiple":true}}"#
        } else {
            r#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576}}"#
        };
        let payload = Payload::new()
            .u16(0)
            .u16(0)
            .bytes(caps.as_bytes())
            .bytes(&[0])
            .0;
        let reply = self.request(VERSION, &payload);
        assert!(!reply.is_error(), "VERSION failed: {}", reply.error);
        let json = &reply.payload[4..];
        assert_eq!(json.last(), Some(&0), "reply JSON is NUL-terminated");
        serde_json::from_slice(&json[..json.len() - 1]).unwrap()
    }

    /// True if the server closed the connection (reads end of stream).
    pub fn at_eof(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            // Closing with unread bytes in its buffer makes the server's
            // kernel reset the connection: closed too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
            Err(e) => panic!("waiting for the server to close: {e}"),
        }
    }

    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> RawReply {
        let p = Payload::new().u64(offset).u32(region).u32(count).0;
        self.request(REGION_READ, &p)
    }

    pub fn read_u32(&mut self, region: u32, offset: u64) -> u32 {
        let r = self.region_read(region, offset, 4);
        assert!(!r.is_error(), "read failed: {}", r.error);
        r.u32_at(16)
    }

    pub fn write_u32(&mut self, region: u32, offset: u64, v: u32) {
        let p = Payload::new().u64(offset).u32(region).u32(4).u32(v).0;
        let r = self.request(REGION_WRITE, &p);
        assert!(!r.is_error(), "write failed: {}", r.error);
    }

    pub fn device_info(&mut self) -> RawReply {
        self.request(
            DEVICE_GET_INFO,
            &Payload::new().u32(16).u32(0).u32(0).u32(0).0,
        )
    }
}

/// DMA_MAP payload.
pub fn dma_map_payload(flags: u32, offset: u64, addr: u64, size: u64) -> Vec<u8> {
    Payload::new()
        .u32(32)
        .u32(flags)
        .u64(offset)
        .u64(addr)
        .u64(size)
        .0
}

/// DMA_UNMAP payload.
pub fn dma_unmap_payload(flags: u32, addr: u64, size: u64) -> Vec<u8> {
    Payload::new().u32(24).u32(flags).u64(addr).u64(size).0
}

/// SET_IRQS payload.
pub fn set_irqs_payload(flags: u32, index: u32, start: u32, count: u32) -> Vec<u8> {
    Payload::new()
        .u32(20)
        .u32(flags)
        .u32(index)
        .u32(start)
        .u32(count)
        .0
}

/// REGION_INFO payload.
pub fn region_info_payload(argsz: u32, index: u32) -> Vec<u8> {
    Payload::new()
        .u32(argsz)
        .u32(0)
        .u32(index)
        .u32(0)
        .u64(0)
        .u64(0)
        .0
}

#[test]
fn test_model_registers_behave() {
    let mut m = TestModel::new(Arc::new(EventLog::default()));
    let mut buf = [0u8; 4];
    m.region_write(0, reg::SCRATCH, &7u32.to_le_bytes())
        .unwrap();
    m.region_read(0, reg::SCRATCH, &mut buf).unwrap();

    assert_eq!(u32::from_le_bytes(buf), 7);
}
