//! One client's session: the message loop, replies, and the commands that
//! concern the whole device (VERSION, DEVICE_GET_INFO, DEVICE_RESET).

use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard, PoisonError};

use log::{debug, info, trace};
use serde_json::Value;
use vfio_bindings::bindings::vfio;

use super::connection::{ConnError, Connection, Message};
use super::model::{DeviceModel, RegionInfo};
use super::protocol::{
    Command, DeviceInfo, Header, Version, Writer, DMA_PGSIZES, FLAG_ERROR, FLAG_TYPE_COMMAND,
    FLAG_TYPE_REPLY, HEADER_SIZE, MAX_DATA_XFER_SIZE, MAX_MSG_FDS, NUM_IRQ_INDEXES,
};
use super::ratelimit::{client_warn, WarnLimiter};
use crate::guest_memory::{GuestRam, MAX_DMA_MAPS};

/// Most regions the server exposes, whatever the model says.
const MAX_REGIONS: u32 = 64;

/// An errno for an error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Errno(pub(crate) i32);

impl Errno {
    pub(crate) const EINVAL: Self = Self(libc::EINVAL);
    pub(crate) const ENOSYS: Self = Self(libc::ENOSYS);
    pub(crate) const ENOTSUP: Self = Self(libc::ENOTSUP);
    pub(crate) const EMSGSIZE: Self = Self(libc::EMSGSIZE);

    /// Wraps an errno from the model, refusing 0 and negative values.
    pub(crate) fn from_model(e: i32) -> Self {
        if e > 0 {
            Self(e)
        } else {
            Self(libc::EIO)
        }
    }
}

/// A successful reply's payload and the descriptor sent with it.
#[derive(Debug, Default)]
pub(crate) struct Reply {
    pub(crate) payload: Vec<u8>,
    pub(crate) fd: Option<RawFd>,
}

impl Reply {
    pub(crate) fn empty() -> Self {
        Self::default()
    }

    pub(crate) fn with(payload: Vec<u8>) -> Self {
        Self { payload, fd: None }
    }
}

/// What a command handler returns.
pub(crate) type Handled = Result<Reply, Errno>;

/// Capabilities the client announced in VERSION.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientCaps {
    /// Descriptors the client accepts per message.
    pub(crate) max_msg_fds: u64,
    /// The client offered REGION_WRITE_MULTI.
    pub(crate) write_multiple: bool,
}

impl Default for ClientCaps {
    fn default() -> Self {
        Self {
            max_msg_fds: 1,
            write_multiple: false,
        }
    }
}

/// State of one connected client.
pub(crate) struct Session<'s, 'p, 'a> {
    pub(crate) name: &'s str,
    conn: &'s Connection<'p, 'a>,
    model: &'s Mutex<dyn DeviceModel>,
    pub(crate) ram: GuestRam,
    /// Region shapes, asked once at connect; absent regions have size 0.
    pub(crate) regions: Vec<RegionInfo>,
    pub(crate) caps: ClientCaps,
    negotiated: bool,
    close_after_reply: bool,
    pub(crate) warn: WarnLimiter,
}

impl<'s, 'p, 'a> Session<'s, 'p, 'a> {
    /// Starts a session: gives the model the client's (empty) `GuestRam` and
    /// caches the region shapes.
    pub(crate) fn start(
        name: &'s str,
        conn: &'s Connection<'p, 'a>,
        model: &'s Mutex<dyn DeviceModel>,
    ) -> Self {
        let ram = GuestRam::new();
        let mut session = Self {
            name,
            conn,
            model,
            ram: ram.clone(),
            regions: Vec::new(),
            caps: ClientCaps::default(),
            negotiated: false,
            close_after_reply: false,
            warn: WarnLimiter::default(),
        };
        let regions = {
            let mut m = session.model();
            m.connected(ram);
            let n = m.num_regions().min(MAX_REGIONS);
            (0..n)
                .map(|i| checked_region(name, i, m.region_info(i)))
                .collect()
        };
        session.regions = regions;
        session
    }

    /// Ends the session: empties the DMA table and tells the model.
    pub(crate) fn finish(self) {
        let maps = self.ram.unmap_all();
        debug!("{}: client gone, dropped {maps} DMA maps", self.name);
        self.model().disconnected();
    }

    /// The model, locked. A model that panicked while locked is still used:
    /// its state is its own business, and the server must keep answering.
    pub(crate) fn model(&self) -> MutexGuard<'s, dyn DeviceModel + 'static> {
        self.model.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves messages until the client leaves, breaks the protocol beyond
    /// repair, or the server stops. Returns why it ended.
    pub(crate) fn run(&mut self) -> ConnError {
        loop {
            let msg = match self.conn.recv_message() {
                Ok(msg) => msg,
                Err(ConnError::Oversized { size, header }) => {
                    client_warn!(
                        self.warn,
                        self.name,
                        "message size {size} too large, dropping client"
                    );
                    // Best effort: the stream cannot be resynchronised.
                    let _ = self.send_error(&header, Errno::EMSGSIZE);
                    return ConnError::Oversized { size, header };
                }
                Err(e) => return e,
            };
            if let Err(e) = self.handle(msg) {
                return e;
            }
            if self.close_after_reply {
                return ConnError::Incompatible;
            }
        }
    }

    /// Handles one whole message (already consumed from the socket).
    fn handle(&mut self, msg: Message) -> Result<(), ConnError> {
        let header = msg.header;
        if header.msg_type() != FLAG_TYPE_COMMAND {
            client_warn!(
                self.warn,
                self.name,
                "ignoring message {} of type {} (command {}): not a command",
                header.msg_id,
                header.msg_type(),
                header.command
            );
            return Ok(());
        }
        let result = self.dispatch(msg);
        if header.no_reply() {
            if let Err(Errno(e)) = result {
                client_warn!(
                    self.warn,
                    self.name,
                    "command {} (id {}, no reply) failed: errno {e}",
                    header.command,
                    header.msg_id
                );
            }
            return Ok(());
        }
        match result {
            Ok(reply) => self.send_reply(&header, &reply),
            Err(errno) => {
                debug!(
                    "{}: command {} (id {}) failed: errno {}",
                    self.name, header.command, header.msg_id, errno.0
                );
                self.send_error(&header, errno)
            }
        }
    }

    fn dispatch(&mut self, msg: Message) -> Handled {
        let Message {
            header,
            payload,
            fds,
            fds_overflowed,
        } = msg;
        let Some(command) = Command::from_wire(header.command) else {
            client_warn!(self.warn, self.name, "unknown command {}", header.command);
            return Err(Errno::ENOSYS);
        };
        if fds_overflowed {
            client_warn!(
                self.warn,
                self.name,
                "{command:?} refused: not all of its fds could be received \
                 (more than {MAX_MSG_FDS}, or this process is at its fd limit)"
            );
            return Err(Errno::EINVAL);
        }
        if !self.negotiated && command != Command::Version {
            client_warn!(self.warn, self.name, "{command:?} before VERSION");
            return Err(Errno::EINVAL);
        }
        let takes_fds = matches!(command, Command::DmaMap | Command::DeviceSetIrqs);
        if !takes_fds && !fds.is_empty() {
            client_warn!(
                self.warn,
                self.name,
                "{command:?} came with {} unexpected fds",
                fds.len()
            );
            return Err(Errno::EINVAL);
        }
        let p = payload.as_slice();
        match command {
            Command::Version => self.version(p),
            Command::DmaMap => self.dma_map(p, fds),
            Command::DmaUnmap => self.dma_unmap(p),
            Command::DeviceGetInfo => self.device_info(p),
            Command::DeviceGetRegionInfo => self.region_info(p),
            Command::DeviceGetIrqInfo => self.irq_info(p),
            Command::DeviceSetIrqs => self.set_irqs(p, fds),
            Command::RegionRead if header.no_reply() => {
                client_warn!(self.warn, self.name, "REGION_READ with NO_REPLY ignored");
                Err(Errno::EINVAL)
            }
            Command::RegionRead => self.region_read(p),
            Command::RegionWrite => self.region_write(p),
            Command::RegionWriteMulti => self.region_write_multi(p),
            Command::DeviceReset => self.reset(),
            Command::DeviceGetRegionIoFds => Err(Errno::ENOTSUP),
            Command::DmaRead | Command::DmaWrite => {
                client_warn!(
                    self.warn,
                    self.name,
                    "{command:?} is a server-to-client command"
                );
                Err(Errno::EINVAL)
            }
        }
    }

    fn send_reply(&self, req: &Header, reply: &Reply) -> Result<(), ConnError> {
        let size = HEADER_SIZE.saturating_add(reply.payload.len());
        let header = Header {
            msg_id: req.msg_id,
            command: req.command,
            message_size: u32::try_from(size).unwrap_or(u32::MAX),
            flags: FLAG_TYPE_REPLY,
            error: 0,
        };
        let mut bytes = Vec::with_capacity(size);
        header.encode(&mut bytes);
        bytes.extend_from_slice(&reply.payload);
        trace!(
            "{}: -> id {} cmd {} size {size}",
            self.name,
            req.msg_id,
            req.command
        );
        let fds: &[RawFd] = match &reply.fd {
            Some(fd) => std::slice::from_ref(fd),
            None => &[],
        };
        self.conn.send(&bytes, fds)
    }

    fn send_error(&self, req: &Header, errno: Errno) -> Result<(), ConnError> {
        let header = Header {
            msg_id: req.msg_id,
            command: req.command,
            message_size: HEADER_SIZE as u32,
            flags: FLAG_TYPE_REPLY | FLAG_ERROR,
            error: u32::try_from(errno.0).unwrap_or(libc::EIO as u32),
        };
        let mut bytes = Vec::with_capacity(HEADER_SIZE);
        header.encode(&mut bytes);
        trace!(
            "{}: -> id {} cmd {} error {}",
            self.name,
            req.msg_id,
            req.command,
            errno.0
        );
        self.conn.send(&bytes, &[])
    }

    /// VERSION: the first message. Major must be 0; the reply is 0.0 with the
    /// server's capabilities.
    fn version(&mut self, p: &[u8]) -> Handled {
        if self.negotiated {
            client_warn!(self.warn, self.name, "second VERSION");
            return Err(Errno::EINVAL);
        }
        let (version, json) = Version::decode(p).map_err(|_| Errno::EINVAL)?;
        if version.major != 0 {
            client_warn!(
                self.warn,
                self.name,
                "unsupported major version {}",
                version.major
            );
            self.close_after_reply = true;
            return Err(Errno::ENOTSUP);
        }
        self.caps = parse_client_caps(json).map_err(|why| {
            client_warn!(self.warn, self.name, "bad VERSION capabilities: {why}");
            Errno::EINVAL
        })?;
        self.negotiated = true;
        info!(
            "{}: client speaks vfio-user {}.{} (max_msg_fds {}, write_multiple {})",
            self.name,
            version.major,
            version.minor,
            self.caps.max_msg_fds,
            self.caps.write_multiple
        );
        let mut caps = serde_json::json!({
            "max_msg_fds": MAX_MSG_FDS,
            "max_data_xfer_size": MAX_DATA_XFER_SIZE,
            "pgsizes": DMA_PGSIZES,
            "max_dma_maps": MAX_DMA_MAPS,
        });
        if self.caps.write_multiple {
            if let Some(obj) = caps.as_object_mut() {
                obj.insert("write_multiple".into(), Value::Bool(true));
            }
        }
        // QEMU receives the reply into the buffer of its request, so the
        // reply must stay shorter than QEMU's own VERSION (about 200 bytes).
        let json = serde_json::json!({ "capabilities": caps }).to_string();
        let payload = Writer::new()
            .u16(0)
            .u16(0)
            .bytes(json.as_bytes())
            .bytes(&[0])
            .finish();
        Ok(Reply::with(payload))
    }

    /// DEVICE_GET_INFO: a resettable PCI device with the model's regions and
    /// three IRQ indexes.
    fn device_info(&mut self, p: &[u8]) -> Handled {
        let argsz = DeviceInfo::decode_argsz(p).map_err(|_| Errno::EINVAL)?;
        if argsz < DeviceInfo::SIZE {
            return Err(Errno::EINVAL);
        }
        let info = DeviceInfo {
            argsz: DeviceInfo::SIZE,
            flags: vfio::VFIO_DEVICE_FLAGS_PCI | vfio::VFIO_DEVICE_FLAGS_RESET,
            num_regions: u32::try_from(self.regions.len()).unwrap_or(0),
            num_irqs: NUM_IRQ_INDEXES,
        };
        Ok(Reply::with(info.encode()))
    }

    /// DEVICE_RESET.
    fn reset(&mut self) -> Handled {
        debug!("{}: device reset", self.name);
        self.model().reset();
        Ok(Reply::empty())
    }
}

/// Parses the NUL-terminated JSON of a VERSION message (may be absent).
fn parse_client_caps(json: &[u8]) -> Result<ClientCaps, &'static str> {
    let mut caps = ClientCaps::default();
    let Some((&last, text)) = json.split_last() else {
        return Ok(caps);
    };
    if last != 0 {
        return Err("capabilities are not NUL-terminated");
    }
    let value: Value = serde_json::from_slice(text).map_err(|_| "capabilities are not JSON")?;
    let root = value
        .as_object()
        .ok_or("capabilities are not a JSON object")?;
    let Some(c) = root.get("capabilities") else {
        return Ok(caps);
    };
    let c = c.as_object().ok_or("\"capabilities\" is not an object")?;
    if let Some(v) = c.get("max_msg_fds") {
        caps.max_msg_fds = v.as_u64().ok_or("max_msg_fds is not a number")?;
    }
    if let Some(v) = c.get("write_multiple") {
        caps.write_multiple = v.as_bool().ok_or("write_multiple is not a boolean")?;
    }
    Ok(caps)
}

/// Sanitises a model's region description: absent becomes size 0, mmap
/// areas outside the region are dropped, an invalid fd disables mmap.
fn checked_region(name: &str, index: u32, info: Option<RegionInfo>) -> RegionInfo {
    let Some(mut info) = info else {
        return RegionInfo::default();
    };
    if let Some(mmap) = info.mmap.as_mut() {
        let size = info.size;
        mmap.areas.retain(|&(offset, len)| {
            let ok = len > 0 && offset.checked_add(len).is_some_and(|end| end <= size);
            if !ok {
                log::error!(
                    "{name}: region {index}: mmap area {offset:#x}+{len:#x} outside the region"
                );
            }
            ok
        });
    }
    if info
        .mmap
        .as_ref()
        .is_some_and(|m| m.fd < 0 || info.size == 0)
    {
        log::error!("{name}: region {index}: mmap without a valid fd or size, trapping instead");
        info.mmap = None;
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_capabilities_use_the_defaults() {
        let caps = parse_client_caps(&[]).unwrap();

        assert_eq!(caps.max_msg_fds, 1);
        assert!(!caps.write_multiple);
    }

    #[test]
    fn qemu_capabilities_are_understood() {
        let json = br#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"migration":{"pgsize":4096,"max_bitmap_size":1048576},"write_multiple":true}}"#;
        let mut with_nul = json.to_vec();
        with_nul.push(0);

        let caps = parse_client_caps(&with_nul).unwrap();

        assert_eq!(caps.max_msg_fds, 16);
        assert!(caps.write_multiple);
    }

    #[test]
    fn malformed_capabilities_are_refused() {
        assert!(parse_client_caps(b"{}").is_err());
        assert!(parse_client_caps(b"not json\0").is_err());
        assert!(parse_client_caps(b"[1]\0").is_err());
        assert!(parse_client_caps(b"{\"capabilities\":{\"max_msg_fds\":\"x\"}}\0").is_err());
    }
}
