//! vfio-user clients over a real socket, in two layers on one framing (`send_message`,
//! `recv_message`: fallible, for callers that expect the server to close on them):
//! - `RawClient`: messages as bytes. It sends any header, payload and fds (malformed
//!   messages included), receives replies as `RawReply`, and builds payloads with `Payload`
//!   and the `*_payload` functions. The raw-message protocol tests use it.
//! - `VfioClient`: typed requests as QEMU's `vfio-user-pci` makes them (VERSION, DMA_MAP,
//!   REGION_*, SET_IRQS, DEVICE_RESET...), with error replies as `Err(errno)` and posted
//!   (NO_REPLY) writes. The fake driver uses it.
//!
//! Both check every reply's id, command and type, and the socket has timeouts, so a silent
//! server fails the test instead of hanging it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;
use vrnic::vfio_user::MAX_MESSAGE_SIZE;

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
    pub const REGION_WRITE_MULTI: u16 = 15;
    pub const DEVICE_FEATURE: u16 = 16;
}

/// Message header flags.
pub const FLAG_TYPE_MASK: u32 = 0xf;
pub const FLAG_REPLY: u32 = 1;
pub const FLAG_NO_REPLY: u32 = 1 << 4;
pub const FLAG_ERROR: u32 = 1 << 5;
pub const HEADER_SIZE: usize = 16;

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
pub const IRQ_DATA_NONE: u32 = 1;
pub const IRQ_DATA_EVENTFD: u32 = 1 << 2;
pub const IRQ_ACTION_TRIGGER: u32 = 1 << 5;

/// DEVICE_GET_INFO flags.
pub const DEVICE_FLAGS_RESET: u32 = 1;
pub const DEVICE_FLAGS_PCI: u32 = 2;

/// The capabilities QEMU's `vfio-user-pci` offers in VERSION.
pub const QEMU_CAPS: &str = r#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}"#;

/// The message id of a client's first message. Tests that hand-make messages give them
/// small ids, which never collide with the ones a client numbers itself.
const FIRST_ID: u16 = 0x100;

pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

// ------------------------------------------------------------------ payloads

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

/// VERSION 0.0 payload offering the capabilities `caps` (JSON).
pub fn version_payload(caps: &str) -> Vec<u8> {
    Payload::new()
        .u16(0)
        .u16(0)
        .bytes(caps.as_bytes())
        .bytes(&[0])
        .0
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

/// DEVICE_GET_INFO payload.
pub fn device_info_payload() -> Vec<u8> {
    Payload::new().u32(16).u32(0).u32(0).u32(0).0
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

/// REGION_READ payload.
pub fn region_read_payload(region: u32, offset: u64, count: u32) -> Vec<u8> {
    Payload::new().u64(offset).u32(region).u32(count).0
}

/// REGION_WRITE payload.
pub fn region_write_payload(region: u32, offset: u64, data: &[u8]) -> Vec<u8> {
    Payload::new()
        .u64(offset)
        .u32(region)
        .u32(u32::try_from(data.len()).expect("len"))
        .bytes(data)
        .0
}

// ------------------------------------------------------------------- framing

/// Sends the bytes of one message, with `fds` as ancillary data on its first bytes.
pub fn send_message(stream: &mut UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let sent = if fds.is_empty() {
        0
    } else {
        stream.send_with_fds(&[bytes], fds)?
    };
    stream.write_all(&bytes[sent..])
}

/// Receives one message with any fd; `None` if the peer closed the stream before it. A
/// header whose size is below the header or above what a server accepts is `InvalidData`.
pub fn recv_message(stream: &mut UnixStream) -> io::Result<Option<RawReply>> {
    let mut hdr = [0u8; HEADER_SIZE];
    // A signal (libFuzzer's timeout alarm, say) may interrupt the wait: try again.
    let (n, file) = loop {
        match stream.recv_with_fd(&mut hdr) {
            Err(e) if e.errno() == libc::EINTR => continue,
            other => break other?,
        }
    };
    if n == 0 {
        return Ok(None);
    }
    stream.read_exact(&mut hdr[n..])?;
    let size = u32_at(&hdr, 4);
    let payload_len = (size as usize)
        .checked_sub(HEADER_SIZE)
        .filter(|&len| len <= MAX_MESSAGE_SIZE as usize)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("size {size}")))?;
    let mut payload = vec![0u8; payload_len];
    stream.read_exact(&mut payload)?;
    Ok(Some(RawReply {
        id: u16::from_le_bytes([hdr[0], hdr[1]]),
        command: u16::from_le_bytes([hdr[2], hdr[3]]),
        size,
        flags: u32_at(&hdr, 8),
        error: u32_at(&hdr, 12),
        payload,
        fds: file.into_iter().collect(),
    }))
}

// ---------------------------------------------------------------- raw client

/// A message as received.
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
        u32_at(&self.payload, off)
    }

    pub fn u64_at(&self, off: usize) -> u64 {
        u64_at(&self.payload, off)
    }
}

/// A client speaking raw vfio-user messages.
pub struct RawClient {
    pub stream: UnixStream,
    next_id: u16,
}

impl RawClient {
    pub fn connect(path: &Path) -> Self {
        let stream = UnixStream::connect(path).expect("connect to the device socket");
        stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        stream.set_write_timeout(Some(TIMEOUT)).expect("timeout");
        Self {
            stream,
            next_id: FIRST_ID,
        }
    }

    /// Sends a command; returns its message id.
    pub fn send(&mut self, command: u16, flags: u32, payload: &[u8], fds: &[RawFd]) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let size = u32::try_from(HEADER_SIZE + payload.len()).expect("message size");
        let mut bytes = header(id, command, size, flags);
        bytes.extend_from_slice(payload);
        send_message(&mut self.stream, &bytes, fds).expect("send to the device");
        id
    }

    /// Sends bytes as they are.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send to the device");
    }

    /// Receives one message (reply), with any fds.
    pub fn recv(&mut self) -> RawReply {
        recv_message(&mut self.stream)
            .expect("receive a reply from the device")
            .expect("the device closed the connection")
    }

    /// Sends a command and receives its reply, checking the id and REPLY flag.
    pub fn request_with_fds(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> RawReply {
        let id = self.send(command, 0, payload, fds);
        let reply = self.recv();
        assert_eq!(reply.id, id, "reply to the wrong message");
        assert_eq!(reply.command, command);
        assert_eq!(reply.flags & FLAG_TYPE_MASK, FLAG_REPLY, "not a reply");
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

    /// VERSION 0.0 offering `caps`: the reply, which must not be an error.
    pub fn version(&mut self, caps: &str) -> RawReply {
        let reply = self.request(command::VERSION, &version_payload(caps));
        assert!(!reply.is_error(), "VERSION failed: {}", reply.error);
        reply
    }

    /// VERSION 0.0, optionally offering write_multiple; returns the reply JSON.
    pub fn negotiate(&mut self, write_multiple: bool) -> serde_json::Value {
        let caps = if write_multiple {
            r#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"write_multiple":true}}"#
        } else {
            r#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576}}"#
        };
        let reply = self.version(caps);
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
        self.request(
            command::REGION_READ,
            &region_read_payload(region, offset, count),
        )
    }

    pub fn read_u32(&mut self, region: u32, offset: u64) -> u32 {
        let r = self.region_read(region, offset, 4);
        assert!(!r.is_error(), "read failed: {}", r.error);
        r.u32_at(16)
    }

    pub fn write_u32(&mut self, region: u32, offset: u64, v: u32) {
        let p = region_write_payload(region, offset, &v.to_le_bytes());
        let r = self.request(command::REGION_WRITE, &p);
        assert!(!r.is_error(), "write failed: {}", r.error);
    }

    pub fn device_info(&mut self) -> RawReply {
        self.request(command::DEVICE_GET_INFO, &device_info_payload())
    }
}

// -------------------------------------------------------------- typed client

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

/// One connection to a device's vfio-user socket, speaking as QEMU does, on a `RawClient`.
/// Dropping it disconnects (as QEMU does when it exits).
pub struct VfioClient {
    raw: RawClient,
}

impl VfioClient {
    pub fn connect(path: &Path) -> Self {
        VfioClient {
            raw: RawClient::connect(path),
        }
    }

    /// The raw layer underneath, for a message QEMU would not send.
    pub fn raw(&mut self) -> &mut RawClient {
        &mut self.raw
    }

    /// Sends a command and waits for its reply: the reply, or the errno of an error reply.
    pub fn request(
        &mut self,
        command: u16,
        payload: &[u8],
        fds: &[RawFd],
    ) -> Result<RawReply, i32> {
        let reply = self.raw.request_with_fds(command, payload, fds);
        if reply.is_error() {
            return Err(i32::try_from(reply.error).unwrap_or(i32::MAX));
        }
        Ok(reply)
    }

    /// Sends a command with NO_REPLY (as QEMU posts MMIO writes).
    pub fn post(&mut self, command: u16, payload: &[u8]) {
        self.raw.send(command, FLAG_NO_REPLY, payload, &[]);
    }

    /// VERSION 0.0 with QEMU's capabilities.
    pub fn version(&mut self) {
        let reply = self.raw.version(QEMU_CAPS);
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
        let p = dma_map_payload(flags, offset, addr, size);
        let fds: Vec<RawFd> = fd.into_iter().collect();
        self.request(command::DMA_MAP, &p, &fds).map(|_| ())
    }

    pub fn dma_unmap(&mut self, addr: u64, size: u64) -> Result<(), i32> {
        let p = dma_unmap_payload(0, addr, size);
        self.request(command::DMA_UNMAP, &p, &[]).map(|_| ())
    }

    pub fn device_info(&mut self) -> DeviceInfo {
        let r = self
            .request(command::DEVICE_GET_INFO, &device_info_payload(), &[])
            .expect("DEVICE_GET_INFO");
        DeviceInfo {
            flags: r.u32_at(4),
            num_regions: r.u32_at(8),
            num_irqs: r.u32_at(12),
        }
    }

    pub fn region_info(&mut self, index: u32) -> RegionInfo {
        let mut r = self
            .request(
                command::DEVICE_GET_REGION_INFO,
                &region_info_payload(256, index),
                &[],
            )
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
        let p = region_read_payload(region, offset, len);
        let r = self.request(command::REGION_READ, &p, &[])?;
        Ok(r.payload[16..].to_vec())
    }

    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        let p = region_write_payload(region, offset, data);
        self.request(command::REGION_WRITE, &p, &[]).map(|_| ())
    }

    /// A posted region write (NO_REPLY): QEMU's MMIO writes to trapped BARs.
    pub fn region_write_posted(&mut self, region: u32, offset: u64, data: &[u8]) {
        self.post(
            command::REGION_WRITE,
            &region_write_payload(region, offset, data),
        );
    }

    /// SET_IRQS TRIGGER|EVENTFD for vectors `start..start + fds.len()` of `index`.
    pub fn set_irqs(&mut self, index: u32, start: u32, fds: &[RawFd]) -> Result<(), i32> {
        let count = u32::try_from(fds.len()).expect("count");
        let p = set_irqs_payload(IRQ_DATA_EVENTFD | IRQ_ACTION_TRIGGER, index, start, count);
        self.request(command::DEVICE_SET_IRQS, &p, fds).map(|_| ())
    }

    /// SET_IRQS TRIGGER|NONE with count 0: disables every vector of `index`.
    pub fn disable_irqs(&mut self, index: u32) -> Result<(), i32> {
        let p = set_irqs_payload(IRQ_DATA_NONE | IRQ_ACTION_TRIGGER, index, 0, 0);
        self.request(command::DEVICE_SET_IRQS, &p, &[]).map(|_| ())
    }

    pub fn device_reset(&mut self) -> Result<(), i32> {
        self.request(command::DEVICE_RESET, &[], &[]).map(|_| ())
    }
}
