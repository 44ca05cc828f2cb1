//! A vfio-user client speaking the protocol as QEMU's `vfio-user-pci` does: replies are
//! checked, posted (NO_REPLY) writes are supported, file descriptors travel both ways, and
//! the socket has timeouts so a silent server fails the test.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use super::TIMEOUT;

/// vfio-user command numbers.
pub mod command {
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
}

const FLAG_TYPE_MASK: u32 = 0xf;
const FLAG_REPLY: u32 = 1;
const FLAG_NO_REPLY: u32 = 1 << 4;
const FLAG_ERROR: u32 = 1 << 5;
const HEADER_SIZE: usize = 16;

/// DMA_MAP flags.
pub const DMA_READ: u32 = 1;
pub const DMA_WRITE: u32 = 2;

/// vfio region indexes and flags used here.
pub const REGION_CONFIG: u32 = 7;
pub const REGION_FLAG_READ: u32 = 1;
pub const REGION_FLAG_WRITE: u32 = 2;
pub const REGION_FLAG_MMAP: u32 = 4;
pub const REGION_FLAG_CAPS: u32 = 8;
const CAP_SPARSE_MMAP: u16 = 1;

/// vfio IRQ indexes and SET_IRQS flags.
pub const IRQ_MSIX: u32 = 2;
const IRQ_DATA_NONE: u32 = 1;
const IRQ_DATA_EVENTFD: u32 = 1 << 2;
const IRQ_ACTION_TRIGGER: u32 = 1 << 5;

/// DEVICE_GET_INFO flags.
pub const DEVICE_FLAGS_RESET: u32 = 1;
pub const DEVICE_FLAGS_PCI: u32 = 2;

/// A successful reply.
#[derive(Debug)]
pub struct Reply {
    pub payload: Vec<u8>,
    pub fds: Vec<File>,
}

/// DEVICE_GET_INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceInfo {
    pub flags: u32,
    pub num_regions: u32,
    pub num_irqs: u32,
}

/// DEVICE_GET_REGION_INFO, with the sparse-mmap areas and the fd to map them.
#[derive(Debug)]
pub struct RegionInfo {
    pub flags: u32,
    pub size: u64,
    pub offset: u64,
    pub areas: Vec<(u64, u64)>,
    pub fd: Option<File>,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Little-endian payload builder.
#[derive(Default)]
struct Payload(Vec<u8>);

impl Payload {
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

/// One connection to a device's vfio-user socket. Dropping it disconnects (as QEMU does
/// when it exits).
pub struct VfioClient {
    stream: UnixStream,
    next_id: u16,
}

impl VfioClient {
    pub fn connect(path: &Path) -> Self {
        let stream = UnixStream::connect(path).expect("connect to the device socket");
        stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        stream.set_write_timeout(Some(TIMEOUT)).expect("timeout");
        VfioClient { stream, next_id: 1 }
    }

    fn send(&mut self, command: u16, flags: u32, payload: &[u8], fds: &[RawFd]) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let size = u32::try_from(HEADER_SIZE + payload.len()).expect("message size");
        let mut bytes = Payload::default()
            .u16(id)
            .u16(command)
            .u32(size)
            .u32(flags)
            .u32(0)
            .bytes(payload)
            .0;
        if fds.is_empty() {
            self.stream.write_all(&bytes).expect("send to the device");
        } else {
            let n = self
                .stream
                .send_with_fds(&[&bytes[..]], fds)
                .expect("send with fds");
            bytes.drain(..n);
            self.stream.write_all(&bytes).expect("send to the device");
        }
        id
    }

    /// Receives one reply: (id, command, flags, error, payload, fds).
    fn recv(&mut self) -> (u16, u16, u32, u32, Vec<u8>, Vec<File>) {
        let mut hdr = [0u8; HEADER_SIZE];
        let (n, file) = self
            .stream
            .recv_with_fd(&mut hdr)
            .expect("receive a reply from the device");
        assert!(n > 0, "the device closed the connection");
        self.stream
            .read_exact(&mut hdr[n..])
            .expect("receive a reply header");
        let size = u32_at(&hdr, 4) as usize;
        assert!(size >= HEADER_SIZE, "reply size {size}");
        let mut payload = vec![0u8; size - HEADER_SIZE];
        self.stream
            .read_exact(&mut payload)
            .expect("receive a reply payload");
        let id = u16::from_le_bytes([hdr[0], hdr[1]]);
        let command = u16::from_le_bytes([hdr[2], hdr[3]]);
        (
            id,
            command,
            u32_at(&hdr, 8),
            u32_at(&hdr, 12),
            payload,
            file.into_iter().collect(),
        )
    }

    /// Sends a command and waits for its reply: the payload, or the errno of an error reply.
    pub fn request(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> Result<Reply, i32> {
        let id = self.send(command, 0, payload, fds);
        let (rid, rcommand, flags, error, payload, fds) = self.recv();
        assert_eq!((rid, rcommand), (id, command), "reply to another message");
        assert_eq!(flags & FLAG_TYPE_MASK, FLAG_REPLY, "not a reply");
        if flags & FLAG_ERROR != 0 {
            return Err(i32::try_from(error).unwrap_or(i32::MAX));
        }
        Ok(Reply { payload, fds })
    }

    /// Sends a command with NO_REPLY (as QEMU posts MMIO writes).
    pub fn post(&mut self, command: u16, payload: &[u8]) {
        self.send(command, FLAG_NO_REPLY, payload, &[]);
    }

    /// VERSION 0.0 with QEMU's capabilities.
    pub fn version(&mut self) {
        let caps = br#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}"#;
        let p = Payload::default().u16(0).u16(0).bytes(caps).bytes(&[0]).0;
        let reply = self.request(command::VERSION, &p, &[]).expect("VERSION");
        assert_eq!(&reply.payload[..4], &[0, 0, 0, 0], "server speaks 0.0");
    }

    /// DMA_MAP of `[addr, addr + size)` to `fd` at `offset` (no fd: a range the device
    /// cannot reach, like QEMU's ROM maps).
    pub fn dma_map(
        &mut self,
        addr: u64,
        size: u64,
        offset: u64,
        flags: u32,
        fd: Option<RawFd>,
    ) -> Result<(), i32> {
        let p = Payload::default()
            .u32(32)
            .u32(flags)
            .u64(offset)
            .u64(addr)
            .u64(size)
            .0;
        let fds: Vec<RawFd> = fd.into_iter().collect();
        self.request(command::DMA_MAP, &p, &fds).map(|_| ())
    }

    pub fn dma_unmap(&mut self, addr: u64, size: u64) -> Result<(), i32> {
        let p = Payload::default().u32(24).u32(0).u64(addr).u64(size).0;
        self.request(command::DMA_UNMAP, &p, &[]).map(|_| ())
    }

    pub fn device_info(&mut self) -> DeviceInfo {
        let p = Payload::default().u32(16).u32(0).u32(0).u32(0).0;
        let r = self
            .request(command::DEVICE_GET_INFO, &p, &[])
            .expect("DEVICE_GET_INFO");
        DeviceInfo {
            flags: u32_at(&r.payload, 4),
            num_regions: u32_at(&r.payload, 8),
            num_irqs: u32_at(&r.payload, 12),
        }
    }

    pub fn region_info(&mut self, index: u32) -> RegionInfo {
        let argsz = 256;
        let p = Payload::default()
            .u32(argsz)
            .u32(0)
            .u32(index)
            .u32(0)
            .u64(0)
            .u64(0)
            .0;
        let mut r = self
            .request(command::DEVICE_GET_REGION_INFO, &p, &[])
            .expect("DEVICE_GET_REGION_INFO");
        let b = &r.payload;
        let flags = u32_at(b, 4);
        let cap_offset = u32_at(b, 12) as usize;
        let mut areas = Vec::new();
        if flags & REGION_FLAG_CAPS != 0 && cap_offset != 0 {
            let cap = &b[cap_offset..];
            assert_eq!(
                u16::from_le_bytes([cap[0], cap[1]]),
                CAP_SPARSE_MMAP,
                "sparse mmap capability"
            );
            let nr = u32_at(cap, 8) as usize;
            areas = (0..nr)
                .map(|i| (u64_at(cap, 16 + 16 * i), u64_at(cap, 24 + 16 * i)))
                .collect();
        }
        RegionInfo {
            flags,
            size: u64_at(b, 16),
            offset: u64_at(b, 24),
            areas,
            fd: r.fds.pop(),
        }
    }

    pub fn region_read(&mut self, region: u32, offset: u64, len: u32) -> Result<Vec<u8>, i32> {
        let p = Payload::default().u64(offset).u32(region).u32(len).0;
        let r = self.request(command::REGION_READ, &p, &[])?;
        Ok(r.payload[16..].to_vec())
    }

    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        let p = Payload::default()
            .u64(offset)
            .u32(region)
            .u32(u32::try_from(data.len()).expect("len"))
            .bytes(data)
            .0;
        self.request(command::REGION_WRITE, &p, &[]).map(|_| ())
    }

    /// A posted region write (NO_REPLY): QEMU's MMIO writes to trapped BARs.
    pub fn region_write_posted(&mut self, region: u32, offset: u64, data: &[u8]) {
        let p = Payload::default()
            .u64(offset)
            .u32(region)
            .u32(u32::try_from(data.len()).expect("len"))
            .bytes(data)
            .0;
        self.post(command::REGION_WRITE, &p);
    }

    /// SET_IRQS TRIGGER|EVENTFD for vectors `start..start + fds.len()` of `index`.
    pub fn set_irqs(&mut self, index: u32, start: u32, fds: &[RawFd]) -> Result<(), i32> {
        let p = Payload::default()
            .u32(20)
            .u32(IRQ_DATA_EVENTFD | IRQ_ACTION_TRIGGER)
            .u32(index)
            .u32(start)
            .u32(u32::try_from(fds.len()).expect("count"))
            .0;
        self.request(command::DEVICE_SET_IRQS, &p, fds).map(|_| ())
    }

    /// SET_IRQS TRIGGER|NONE with count 0: disables every vector of `index`.
    pub fn disable_irqs(&mut self, index: u32) -> Result<(), i32> {
        let p = Payload::default()
            .u32(20)
            .u32(IRQ_DATA_NONE | IRQ_ACTION_TRIGGER)
            .u32(index)
            .u32(0)
            .u32(0)
            .0;
        self.request(command::DEVICE_SET_IRQS, &p, &[]).map(|_| ())
    }

    pub fn device_reset(&mut self) -> Result<(), i32> {
        self.request(command::DEVICE_RESET, &[], &[]).map(|_| ())
    }
}
