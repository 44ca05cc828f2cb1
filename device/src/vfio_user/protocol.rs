//! vfio-user wire format: the message header, command numbers, limits and
//! the fixed payloads this server reads and writes.
//!
//! Everything is little-endian (the protocol says host order; vrnic only runs
//! on little-endian hosts). Decoding never panics: a payload shorter than the
//! fixed part of its command yields [`Truncated`].

use vfio_bindings::bindings::vfio;

/// Size of the header every message starts with.
pub const HEADER_SIZE: usize = 16;
/// Largest `count` of a REGION_READ/REGION_WRITE (the spec default, 1 MiB).
pub const MAX_DATA_XFER_SIZE: u32 = 1 << 20;
/// Largest message accepted: a region write of `MAX_DATA_XFER_SIZE` bytes
/// plus headers, with room to spare for other commands.
pub const MAX_MESSAGE_SIZE: u32 = MAX_DATA_XFER_SIZE + 4096;
/// Most file descriptors accepted with one message.
pub const MAX_MSG_FDS: usize = 16;
/// Page sizes offered for DMA maps.
pub const DMA_PGSIZES: u64 = 4096;
/// Number of IRQ indexes exposed: INTx, MSI, MSI-X (QEMU wants exactly these).
pub const NUM_IRQ_INDEXES: u32 = 3;
/// Most entries in one REGION_WRITE_MULTI (QEMU's `VFIO_USER_MULTI_MAX`).
pub const MAX_WRITE_MULTI: u64 = 200;
/// Size of one REGION_WRITE_MULTI entry.
pub const WRITE_MULTI_ENTRY_SIZE: usize = 24;
/// Largest write one REGION_WRITE_MULTI entry can carry.
pub const WRITE_MULTI_DATA_SIZE: u32 = 8;

/// Header flags: the message type field (bits 0-3).
pub const FLAG_TYPE_MASK: u32 = 0xf;
/// Message type: command.
pub const FLAG_TYPE_COMMAND: u32 = 0;
/// Message type: reply.
pub const FLAG_TYPE_REPLY: u32 = 1;
/// The sender wants no reply.
pub const FLAG_NO_REPLY: u32 = 1 << 4;
/// The reply reports an error; `error` holds the errno.
pub const FLAG_ERROR: u32 = 1 << 5;

/// `DMA_MAP` flag bits.
pub const DMA_MAP_FLAG_READ: u32 = vfio::VFIO_DMA_MAP_FLAG_READ;
/// `DMA_MAP` flag bits.
pub const DMA_MAP_FLAG_WRITE: u32 = vfio::VFIO_DMA_MAP_FLAG_WRITE;
/// `DMA_UNMAP`: return a dirty bitmap (unsupported).
pub const DMA_UNMAP_FLAG_GET_DIRTY_BITMAP: u32 = vfio::VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP;
/// `DMA_UNMAP`: remove every map (address and size must be 0).
pub const DMA_UNMAP_FLAG_ALL: u32 = vfio::VFIO_DMA_UNMAP_FLAG_ALL;

/// vfio-user commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// 1: version and capability negotiation.
    Version,
    /// 2: add a DMA map.
    DmaMap,
    /// 3: remove a DMA map.
    DmaUnmap,
    /// 4: device flags, region and IRQ counts.
    DeviceGetInfo,
    /// 5: one region's size, flags and capabilities.
    DeviceGetRegionInfo,
    /// 6: ioeventfds for a region (unsupported).
    DeviceGetRegionIoFds,
    /// 7: one IRQ index's flags and count.
    DeviceGetIrqInfo,
    /// 8: configure interrupts.
    DeviceSetIrqs,
    /// 9: read a region.
    RegionRead,
    /// 10: write a region.
    RegionWrite,
    /// 11: server-to-client DMA read (never valid from the client).
    DmaRead,
    /// 12: server-to-client DMA write (never valid from the client).
    DmaWrite,
    /// 13: reset the device.
    DeviceReset,
    /// 15: several small region writes in one message.
    RegionWriteMulti,
}

impl Command {
    /// The command for a wire number, if this server knows it.
    pub fn from_wire(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Version,
            2 => Self::DmaMap,
            3 => Self::DmaUnmap,
            4 => Self::DeviceGetInfo,
            5 => Self::DeviceGetRegionInfo,
            6 => Self::DeviceGetRegionIoFds,
            7 => Self::DeviceGetIrqInfo,
            8 => Self::DeviceSetIrqs,
            9 => Self::RegionRead,
            10 => Self::RegionWrite,
            11 => Self::DmaRead,
            12 => Self::DmaWrite,
            13 => Self::DeviceReset,
            15 => Self::RegionWriteMulti,
            _ => return None,
        })
    }
}

/// The 16-byte header of every message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Chosen by the sender, echoed in the reply.
    pub msg_id: u16,
    /// Command number.
    pub command: u16,
    /// Size of the whole message, header included.
    pub message_size: u32,
    /// Type, NO_REPLY and ERROR bits.
    pub flags: u32,
    /// errno of an error reply.
    pub error: u32,
}

impl Header {
    /// Decodes a header.
    pub fn decode(b: &[u8; HEADER_SIZE]) -> Self {
        let [i0, i1, c0, c1, s0, s1, s2, s3, f0, f1, f2, f3, e0, e1, e2, e3] = *b;
        Self {
            msg_id: u16::from_le_bytes([i0, i1]),
            command: u16::from_le_bytes([c0, c1]),
            message_size: u32::from_le_bytes([s0, s1, s2, s3]),
            flags: u32::from_le_bytes([f0, f1, f2, f3]),
            error: u32::from_le_bytes([e0, e1, e2, e3]),
        }
    }

    /// Encodes the header.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.msg_id.to_le_bytes());
        out.extend_from_slice(&self.command.to_le_bytes());
        out.extend_from_slice(&self.message_size.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.error.to_le_bytes());
    }

    /// The type bits.
    pub fn msg_type(&self) -> u32 {
        self.flags & FLAG_TYPE_MASK
    }

    /// The sender asked for no reply.
    pub fn no_reply(&self) -> bool {
        self.flags & FLAG_NO_REPLY != 0
    }
}

/// A payload shorter than its command's fixed part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payload truncated")]
pub struct Truncated;

/// Bounds-checked little-endian reader over a payload.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { rest: buf }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        if n > self.rest.len() {
            return Err(Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        self.bytes(N)?.try_into().map_err(|_| Truncated)
    }

    /// The next u16.
    pub fn u16(&mut self) -> Result<u16, Truncated> {
        self.array().map(u16::from_le_bytes)
    }

    /// The next u32.
    pub fn u32(&mut self) -> Result<u32, Truncated> {
        self.array().map(u32::from_le_bytes)
    }

    /// The next u64.
    pub fn u64(&mut self) -> Result<u64, Truncated> {
        self.array().map(u64::from_le_bytes)
    }

    /// Everything not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

/// Little-endian payload builder.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty payload.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a u16.
    pub fn u16(mut self, v: u16) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a u32.
    pub fn u32(mut self, v: u32) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a u64.
    pub fn u64(mut self, v: u64) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends raw bytes.
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.buf.extend_from_slice(v);
        self
    }

    /// The payload.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// VERSION request/reply fixed part (the JSON follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
}

impl Version {
    /// Decodes the fixed part; returns it and the JSON bytes after it.
    pub fn decode(p: &[u8]) -> Result<(Self, &[u8]), Truncated> {
        let mut r = Reader::new(p);
        let v = Self {
            major: r.u16()?,
            minor: r.u16()?,
        };
        Ok((v, r.rest()))
    }
}

/// DMA_MAP request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaMap {
    /// Size of this structure.
    pub argsz: u32,
    /// READ/WRITE bits.
    pub flags: u32,
    /// Offset in the fd.
    pub offset: u64,
    /// Guest (IOVA) address.
    pub address: u64,
    /// Length.
    pub size: u64,
}

impl DmaMap {
    /// Decodes the request.
    pub fn decode(p: &[u8]) -> Result<Self, Truncated> {
        let mut r = Reader::new(p);
        Ok(Self {
            argsz: r.u32()?,
            flags: r.u32()?,
            offset: r.u64()?,
            address: r.u64()?,
            size: r.u64()?,
        })
    }
}

/// DMA_UNMAP request and reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaUnmap {
    /// Request: largest reply payload; reply: size of this structure.
    pub argsz: u32,
    /// Flags (bit 1: unmap all).
    pub flags: u32,
    /// Guest (IOVA) address.
    pub address: u64,
    /// Length.
    pub size: u64,
}

impl DmaUnmap {
    /// Size of the structure on the wire.
    pub const SIZE: u32 = 24;

    /// Decodes the request.
    pub fn decode(p: &[u8]) -> Result<Self, Truncated> {
        let mut r = Reader::new(p);
        Ok(Self {
            argsz: r.u32()?,
            flags: r.u32()?,
            address: r.u64()?,
            size: r.u64()?,
        })
    }

    /// Encodes the structure.
    pub fn encode(&self) -> Vec<u8> {
        Writer::new()
            .u32(self.argsz)
            .u32(self.flags)
            .u64(self.address)
            .u64(self.size)
            .finish()
    }
}

/// DEVICE_GET_INFO request and reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Request: largest reply payload; reply: 16.
    pub argsz: u32,
    /// `VFIO_DEVICE_FLAGS_*`.
    pub flags: u32,
    /// Number of regions.
    pub num_regions: u32,
    /// Number of IRQ indexes.
    pub num_irqs: u32,
}

impl DeviceInfo {
    /// Size of the structure on the wire.
    pub const SIZE: u32 = 16;

    /// Decodes the request (only `argsz` is required).
    pub fn decode_argsz(p: &[u8]) -> Result<u32, Truncated> {
        Reader::new(p).u32()
    }

    /// Encodes the structure.
    pub fn encode(&self) -> Vec<u8> {
        Writer::new()
            .u32(self.argsz)
            .u32(self.flags)
            .u32(self.num_regions)
            .u32(self.num_irqs)
            .finish()
    }
}

/// DEVICE_GET_REGION_INFO request and reply (`struct vfio_region_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegionInfoWire {
    /// Request: largest reply payload; reply: size of the full reply payload.
    pub argsz: u32,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
    /// Region index.
    pub index: u32,
    /// Offset of the first capability from the start of this structure.
    pub cap_offset: u32,
    /// Region size.
    pub size: u64,
    /// mmap offset in the fd sent with the reply.
    pub offset: u64,
}

impl RegionInfoWire {
    /// Size of the structure on the wire.
    pub const SIZE: u32 = 32;

    /// Decodes the request.
    pub fn decode(p: &[u8]) -> Result<Self, Truncated> {
        let mut r = Reader::new(p);
        Ok(Self {
            argsz: r.u32()?,
            flags: r.u32()?,
            index: r.u32()?,
            cap_offset: r.u32()?,
            size: r.u64()?,
            offset: r.u64()?,
        })
    }

    /// Encodes the structure.
    pub fn encode(&self) -> Vec<u8> {
        Writer::new()
            .u32(self.argsz)
            .u32(self.flags)
            .u32(self.index)
            .u32(self.cap_offset)
            .u64(self.size)
            .u64(self.offset)
            .finish()
    }
}

/// Encodes a sparse-mmap capability (`VFIO_REGION_INFO_CAP_SPARSE_MMAP`,
/// version 1, last in the list) listing `areas` as (offset, size).
pub fn encode_sparse_mmap_cap(areas: &[(u64, u64)]) -> Vec<u8> {
    let mut w = Writer::new()
        .u16(vfio::VFIO_REGION_INFO_CAP_SPARSE_MMAP as u16)
        .u16(1)
        .u32(0)
        .u32(u32::try_from(areas.len()).unwrap_or(u32::MAX))
        .u32(0);
    for &(offset, size) in areas {
        w = w.u64(offset).u64(size);
    }
    w.finish()
}

/// DEVICE_GET_IRQ_INFO request and reply (`struct vfio_irq_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqInfo {
    /// Request: largest reply payload; reply: 16.
    pub argsz: u32,
    /// `VFIO_IRQ_INFO_*`.
    pub flags: u32,
    /// IRQ index.
    pub index: u32,
    /// Number of vectors.
    pub count: u32,
}

impl IrqInfo {
    /// Size of the structure on the wire.
    pub const SIZE: u32 = 16;

    /// Decodes the request.
    pub fn decode(p: &[u8]) -> Result<Self, Truncated> {
        let mut r = Reader::new(p);
        Ok(Self {
            argsz: r.u32()?,
            flags: r.u32()?,
            index: r.u32()?,
            count: r.u32()?,
        })
    }

    /// Encodes the structure.
    pub fn encode(&self) -> Vec<u8> {
        Writer::new()
            .u32(self.argsz)
            .u32(self.flags)
            .u32(self.index)
            .u32(self.count)
            .finish()
    }
}

/// DEVICE_SET_IRQS request (`struct vfio_irq_set` without data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqSet {
    /// Size of the request payload.
    pub argsz: u32,
    /// DATA_* and ACTION_* bits.
    pub flags: u32,
    /// IRQ index.
    pub index: u32,
    /// First vector.
    pub start: u32,
    /// Number of vectors.
    pub count: u32,
}

impl IrqSet {
    /// Decodes the request.
    pub fn decode(p: &[u8]) -> Result<Self, Truncated> {
        let mut r = Reader::new(p);
        Ok(Self {
            argsz: r.u32()?,
            flags: r.u32()?,
            index: r.u32()?,
            start: r.u32()?,
            count: r.u32()?,
        })
    }
}

/// REGION_READ/REGION_WRITE fixed part (request and reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionAccess {
    /// Offset in the region.
    pub offset: u64,
    /// Region index.
    pub region: u32,
    /// Number of bytes.
    pub count: u32,
}

impl RegionAccess {
    /// Decodes the fixed part; returns it and the data after it.
    pub fn decode(p: &[u8]) -> Result<(Self, &[u8]), Truncated> {
        let mut r = Reader::new(p);
        let a = Self {
            offset: r.u64()?,
            region: r.u32()?,
            count: r.u32()?,
        };
        Ok((a, r.rest()))
    }

    /// Encodes the fixed part followed by `data`.
    pub fn encode(&self, data: &[u8]) -> Vec<u8> {
        Writer::new()
            .u64(self.offset)
            .u32(self.region)
            .u32(self.count)
            .bytes(data)
            .finish()
    }
}

/// One entry of REGION_WRITE_MULTI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteMultiEntry {
    /// Offset in the region.
    pub offset: u64,
    /// Region index.
    pub region: u32,
    /// Number of bytes (at most 8).
    pub count: u32,
    /// The data, `count` bytes used.
    pub data: [u8; 8],
}

/// Decodes a REGION_WRITE_MULTI payload: `wr_cnt` (u64) then that many
/// 24-byte entries. The caller bounds `wr_cnt`.
pub fn decode_write_multi(p: &[u8]) -> Result<(u64, Reader<'_>), Truncated> {
    let mut r = Reader::new(p);
    let count = r.u64()?;
    Ok((count, r))
}

impl WriteMultiEntry {
    /// Decodes the next entry.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, Truncated> {
        Ok(Self {
            offset: r.u64()?,
            region: r.u32()?,
            count: r.u32()?,
            data: r.bytes(8)?.try_into().map_err(|_| Truncated)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = Header {
            msg_id: 0x1234,
            command: 9,
            message_size: 0x20,
            flags: FLAG_TYPE_REPLY | FLAG_ERROR,
            error: 22,
        };
        let mut out = Vec::new();
        h.encode(&mut out);

        let bytes: [u8; HEADER_SIZE] = out.as_slice().try_into().unwrap();
        assert_eq!(Header::decode(&bytes), h);
        assert_eq!(&bytes[..4], &[0x34, 0x12, 9, 0]);
    }

    #[test]
    fn short_payloads_are_truncated_not_panics() {
        assert_eq!(DmaMap::decode(&[0; 31]), Err(Truncated));
        assert_eq!(RegionInfoWire::decode(&[]), Err(Truncated));
        assert_eq!(IrqSet::decode(&[1, 2, 3]), Err(Truncated));
        assert!(RegionAccess::decode(&[0; 15]).is_err());
        assert!(Version::decode(&[0; 3]).is_err());
    }

    #[test]
    fn sparse_mmap_cap_lays_out_header_then_areas() {
        let cap = encode_sparse_mmap_cap(&[(0x1000, 0x2000)]);

        assert_eq!(cap.len(), 8 + 8 + 16);
        assert_eq!(&cap[..4], &[1, 0, 1, 0]);
        assert_eq!(&cap[8..12], &1u32.to_le_bytes());
        assert_eq!(&cap[16..24], &0x1000u64.to_le_bytes());
        assert_eq!(&cap[24..32], &0x2000u64.to_le_bytes());
    }

    #[test]
    fn region_access_keeps_trailing_data() {
        let wire = RegionAccess {
            offset: 8,
            region: 2,
            count: 3,
        }
        .encode(&[7, 8, 9]);

        let (access, data) = RegionAccess::decode(&wire).unwrap();
        assert_eq!(access.offset, 8);
        assert_eq!(access.region, 2);
        assert_eq!(data, &[7, 8, 9]);
    }

    #[test]
    fn unsupported_command_numbers_are_unknown() {
        assert_eq!(Command::from_wire(15), Some(Command::RegionWriteMulti));
        assert_eq!(Command::from_wire(14), None);
        assert_eq!(Command::from_wire(16), None);
    }
}
