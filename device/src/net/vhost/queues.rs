//! The two virtqueues of a virtio-net device, as plain functions over a `Queue` and the
//! guest's memory (so tests drive them with virtio-queue's mock driver): reading a frame
//! out of a transmit chain, and writing one into receive buffers.
//!
//! Everything in a chain is the guest's to get wrong: a descriptor of the wrong direction,
//! an address outside its memory, a chain longer than any frame. Such a chain becomes an
//! error here (the caller counts it, logs it rate-limited and returns the chain unused),
//! never a panic; the descriptor walk itself (loops, indirect tables) is virtio-queue's,
//! which stops a chain at its queue size.

use std::ops::Deref;
use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory, Permissions};

/// The largest Ethernet frame a port carries (a 9000-byte jumbo payload, its header and a
/// VLAN tag); no FCS.
pub const MAX_FRAME: usize = 9018;
/// A frame is at least its Ethernet header.
pub const MIN_FRAME: usize = 14;
/// `struct virtio_net_hdr_v1` (VERSION_1 or MRG_RXBUF: with `num_buffers`).
pub const HDR_LEN: usize = 12;
/// The legacy header without `num_buffers`.
pub const LEGACY_HDR_LEN: usize = 10;
/// `num_buffers` within the header.
const NUM_BUFFERS_AT: u64 = 10;
/// VIRTIO_NET_HDR_GSO_NONE: we offer no segmentation offload.
const GSO_NONE: u8 = 0;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    #[error("transmit chain has a device-writable descriptor")]
    WriteOnlyInTx,
    #[error("receive chain has a device-readable descriptor")]
    ReadOnlyInRx,
    #[error("descriptor {addr:#x}+{len:#x} is outside guest memory")]
    OutsideMemory { addr: u64, len: u32 },
    #[error(
        "transmit chain of {0} bytes or more: larger than a header and a {MAX_FRAME}-byte frame"
    )]
    Oversize(usize),
    #[error("transmit chain of {0} bytes: shorter than a header and an Ethernet header")]
    Short(usize),
    #[error("transmit header asks for segmentation offload (gso_type {0}), which was not offered")]
    Gso(u8),
    #[error("receive chain with no room")]
    Empty,
}

/// Reads the frame of one transmit chain into `buf` (header stripped; `buf` is reused).
pub fn read_tx<M>(
    mem: &M::Target,
    chain: DescriptorChain<M>,
    hdr_len: usize,
    buf: &mut Vec<u8>,
) -> Result<(), ChainError>
where
    M: Deref,
    M::Target: GuestMemory,
{
    buf.clear();
    let limit = hdr_len + MAX_FRAME;
    for desc in chain {
        if desc.is_write_only() {
            return Err(ChainError::WriteOnlyInTx);
        }
        let len = desc.len() as usize;
        let start = buf.len();
        if start + len > limit {
            return Err(ChainError::Oversize(start + len));
        }
        buf.resize(start + len, 0);
        mem.read_slice(&mut buf[start..], desc.addr())
            .map_err(|_| ChainError::OutsideMemory {
                addr: desc.addr().0,
                len: desc.len(),
            })?;
    }
    if buf.len() < hdr_len + MIN_FRAME {
        return Err(ChainError::Short(buf.len()));
    }
    // flags (NEEDS_CSUM) need CSUM, which is not offered either; only GSO changes the frame.
    if buf[1] != GSO_NONE {
        return Err(ChainError::Gso(buf[1]));
    }
    buf.drain(..hdr_len);
    Ok(())
}

/// A receive chain taken from the queue and checked: its head and writable pieces.
#[derive(Debug)]
pub struct RxBuffer {
    head: u16,
    pieces: Vec<(GuestAddress, u32)>,
    room: usize,
}

/// Takes the next receive chain: Ok(None) when the guest has posted no more, Err with
/// its head when it is malformed (the caller returns it unused).
pub fn take_rx<M>(queue: &mut Queue, mem: M) -> Option<Result<RxBuffer, (u16, ChainError)>>
where
    M: Clone + Deref,
    M::Target: GuestMemory,
{
    let chain = queue.pop_descriptor_chain(mem.clone())?;
    let head = chain.head_index();
    let mut pieces = Vec::new();
    let mut room = 0usize;
    for desc in chain {
        if !desc.is_write_only() {
            return Some(Err((head, ChainError::ReadOnlyInRx)));
        }
        if !mem.check_range(desc.addr(), desc.len() as usize, Permissions::Write) {
            let (addr, len) = (desc.addr().0, desc.len());
            return Some(Err((head, ChainError::OutsideMemory { addr, len })));
        }
        if desc.len() > 0 {
            pieces.push((desc.addr(), desc.len()));
            room = room.saturating_add(desc.len() as usize);
        }
    }
    if room < HDR_LEN {
        return Some(Err((head, ChainError::Empty)));
    }
    Some(Ok(RxBuffer { head, pieces, room }))
}

impl RxBuffer {
    pub fn room(&self) -> usize {
        self.room
    }

    pub fn head(&self) -> u16 {
        self.head
    }

    /// Writes `data` at `offset` into the buffer's pieces; the bytes written.
    fn write_at<M: GuestMemory>(&self, mem: &M, mut offset: usize, mut data: &[u8]) -> usize {
        let mut written = 0;
        for &(addr, len) in &self.pieces {
            let len = len as usize;
            if offset >= len {
                offset -= len;
                continue;
            }
            let n = data.len().min(len - offset);
            // Checked by take_rx under the same memory guard; a failure writes nothing more.
            if mem
                .write_slice(&data[..n], addr.unchecked_add(offset as u64))
                .is_err()
            {
                break;
            }
            written += n;
            data = &data[n..];
            offset = 0;
            if data.is_empty() {
                break;
            }
        }
        written
    }
}

/// Writes `frame` (with a virtio-net header of `hdr_len` bytes) across `buffers`, the
/// first holding the header, and puts them on the used ring; the caller checked that
/// their room covers it. Returns how many buffers it used (the header's `num_buffers`).
pub fn put_rx<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    buffers: &[RxBuffer],
    hdr_len: usize,
    frame: &[u8],
) -> Result<u16, virtio_queue::Error> {
    let mut hdr = [0u8; HDR_LEN];
    let mut rest = frame;
    let mut used = 0u16;
    for (i, b) in buffers.iter().enumerate() {
        let mut len = 0;
        if i == 0 {
            len += b.write_at(mem, 0, &hdr[..hdr_len]);
        }
        let n = rest.len().min(b.room - len);
        len += b.write_at(mem, len, &rest[..n]);
        rest = &rest[n..];
        used += 1;
        queue.add_used(mem, b.head, len as u32)?;
        if rest.is_empty() {
            break;
        }
    }
    if hdr_len == HDR_LEN {
        hdr[..2].copy_from_slice(&used.to_le_bytes());
        if let Some(b) = buffers.first() {
            b.write_at(mem, NUM_BUFFERS_AT as usize, &hdr[..2]);
        }
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
    use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
    use virtio_queue::mock::MockSplitQueue;
    use virtio_queue::QueueOwnedT;
    use vm_memory::GuestMemoryMmap;

    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x100_0000)]).unwrap()
    }

    fn desc(addr: u64, len: u32, flags: u32) -> RawDescriptor {
        RawDescriptor::from(SplitDescriptor::new(addr, len, flags as u16, 0))
    }

    fn frame(len: usize) -> Vec<u8> {
        (0..len).map(|i| i as u8).collect()
    }

    /// The guest's transmit chain: a header, then the frame in two pieces.
    fn tx_chain(mem: &GuestMemoryMmap, f: &[u8]) -> Vec<RawDescriptor> {
        mem.write_slice(&[0u8; HDR_LEN], GuestAddress(0x10_0000))
            .unwrap();
        let half = f.len() / 2;
        mem.write_slice(&f[..half], GuestAddress(0x20_0000))
            .unwrap();
        mem.write_slice(&f[half..], GuestAddress(0x30_0000))
            .unwrap();
        vec![
            desc(0x10_0000, HDR_LEN as u32, VRING_DESC_F_NEXT),
            desc(0x20_0000, half as u32, VRING_DESC_F_NEXT),
            desc(0x30_0000, (f.len() - half) as u32, 0),
        ]
    }

    fn read(mem: &GuestMemoryMmap, descs: &[RawDescriptor]) -> (Result<(), ChainError>, Vec<u8>) {
        let vq = MockSplitQueue::new(mem, 16);
        let chain = vq.build_desc_chain(descs).unwrap();
        let mut buf = Vec::new();
        (read_tx(mem, chain, HDR_LEN, &mut buf), buf)
    }

    #[test]
    fn a_transmit_chain_gives_its_frame_without_the_header() {
        let mem = memory();
        let f = frame(1514);
        let (r, buf) = read(&mem, &tx_chain(&mem, &f));
        assert_eq!(r, Ok(()));
        assert_eq!(buf, f);
    }

    #[test]
    fn hostile_transmit_chains_are_errors() {
        let mem = memory();
        let f = frame(100);
        let mut writable = tx_chain(&mem, &f);
        writable[1] = desc(0x20_0000, 50, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE);
        assert_eq!(read(&mem, &writable).0, Err(ChainError::WriteOnlyInTx));
        let mut outside = tx_chain(&mem, &f);
        outside[2] = desc(0x2000_0000, 50, 0);
        assert_eq!(
            read(&mem, &outside).0,
            Err(ChainError::OutsideMemory {
                addr: 0x2000_0000,
                len: 50
            })
        );
        let mut huge = tx_chain(&mem, &f);
        huge[2] = desc(0x30_0000, 0x10_0000, 0);
        assert!(matches!(read(&mem, &huge).0, Err(ChainError::Oversize(_))));
        let short = tx_chain(&mem, &frame(13));
        assert_eq!(read(&mem, &short).0, Err(ChainError::Short(HDR_LEN + 13)));
        let gso = tx_chain(&mem, &f);
        mem.write_obj(3u8, GuestAddress(0x10_0001)).unwrap(); // GSO_TCPV6
        assert_eq!(read(&mem, &gso).0, Err(ChainError::Gso(3)));
    }

    /// `n` receive chains of one writable `size`-byte buffer each, at 0x40_0000 + i MiB.
    fn rx_queue<'a>(
        mem: &'a GuestMemoryMmap,
        sizes: &[u32],
    ) -> (MockSplitQueue<'a, GuestMemoryMmap>, Queue) {
        let vq = MockSplitQueue::new(mem, 16);
        let descs: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| desc(0x40_0000 + ((i as u64) << 20), s, VRING_DESC_F_WRITE))
            .collect();
        vq.add_desc_chains(&descs, 0).unwrap();
        let q: Queue = vq.create_queue().unwrap();
        (vq, q)
    }

    fn used(vq: &MockSplitQueue<GuestMemoryMmap>, i: u16) -> (u32, u32) {
        let e = vq.used().ring().ref_at(i as usize).unwrap().load();
        (e.id(), e.len())
    }

    #[test]
    fn a_frame_spreads_over_mergeable_buffers_with_num_buffers_in_the_header() {
        let mem = memory();
        let (vq, mut q) = rx_queue(&mem, &[1000, 1000, 1000]);
        let f = frame(1514);
        let a = take_rx(&mut q, &mem).unwrap().unwrap();
        let b = take_rx(&mut q, &mem).unwrap().unwrap();
        assert!(a.room() + b.room() >= HDR_LEN + f.len());
        assert_eq!(put_rx(&mut q, &mem, &[a, b], HDR_LEN, &f), Ok(2));
        assert_eq!(used(&vq, 0), (0, 1000));
        assert_eq!(used(&vq, 1), (1, (HDR_LEN + f.len() - 1000) as u32));
        let mut got = vec![0u8; 1000];
        mem.read_slice(&mut got, GuestAddress(0x40_0000)).unwrap();
        assert_eq!(&got[10..12], &2u16.to_le_bytes());
        assert_eq!(&got[HDR_LEN..], &f[..1000 - HDR_LEN]);
        let mut tail = vec![0u8; f.len() - (1000 - HDR_LEN)];
        mem.read_slice(&mut tail, GuestAddress(0x50_0000)).unwrap();
        assert_eq!(tail, &f[1000 - HDR_LEN..]);
        // the third chain is still there, and then the queue is empty
        assert!(take_rx(&mut q, &mem).unwrap().is_ok());
        assert!(take_rx(&mut q, &mem).is_none());
    }

    #[test]
    fn hostile_receive_chains_are_errors_naming_their_head() {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(
            &[
                desc(0x40_0000, 100, 0),
                desc(0x7fff_0000, 100, VRING_DESC_F_WRITE),
                desc(0x40_0000, 4, VRING_DESC_F_WRITE),
            ],
            0,
        )
        .unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        assert_eq!(
            take_rx(&mut q, &mem).unwrap().unwrap_err(),
            (0, ChainError::ReadOnlyInRx)
        );
        assert!(matches!(
            take_rx(&mut q, &mem).unwrap().unwrap_err(),
            (1, ChainError::OutsideMemory { .. })
        ));
        assert_eq!(
            take_rx(&mut q, &mem).unwrap().unwrap_err(),
            (2, ChainError::Empty)
        );
        assert!(q.iter(&mem).unwrap().next().is_none());
    }
}
