//! One vhost-user connection of a guest port: what rust-vmm's vhost-user-backend asks of a
//! device (features, config space, memory updates) and its worker thread's events: the
//! guest's transmit kicks, its receive kicks (new buffers), and the port's wake-up (frames
//! waiting for the guest).
//!
//! Locks: a vring's lock (taken by the worker, and by the vhost-user handler thread on
//! control messages) comes before `worker`; `VhostNetPort::rx` is taken alone, briefly.
//! The worker never blocks on another port: the switch's `transmit` only queues.

use super::queues::{self, RxBuffer, HDR_LEN, LEGACY_HDR_LEN};
use super::VhostNetPort;
use crate::ratelimit::client_warn;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_net::{
    VIRTIO_NET_F_MAC, VIRTIO_NET_F_MRG_RXBUF, VIRTIO_NET_F_STATUS, VIRTIO_NET_S_LINK_UP,
};
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use virtio_queue::QueueT;
use vm_memory::{
    GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

pub const RX_QUEUE: u16 = 0;
pub const TX_QUEUE: u16 = 1;
const NUM_QUEUES: usize = 2;
/// The port's wake-up eventfd (vhost-user-backend reserves 0..=NUM_QUEUES).
pub const WAKE_EVENT: u16 = NUM_QUEUES as u16 + 1;
pub const QUEUE_SIZE: usize = 1024;
/// Transmit chains handled per event before the receive side gets a turn.
const TX_BUDGET: usize = 256;

/// What this device offers (virtio 1.x, virtio-net): no checksum or segmentation offload,
/// so every frame the guest sends is complete as it is.
///
/// Not VHOST_USER_F_PROTOCOL_FEATURES: QEMU's virtio-net sends SET_VRING_ENABLE at realize,
/// before SET_FEATURES (hw/net/virtio-net.c peer_attach), and rust-vmm's vhost 0.18
/// refuses that message until the feature is acked, ending the connection. Without it the
/// rings start enabled (vhost-user spec, "Ring states") and one queue pair is implied,
/// which is all this device has; REPLY_ACK and CONFIG are not needed by QEMU's net.
pub fn features() -> u64 {
    (1 << VIRTIO_F_VERSION_1)
        | (1 << VIRTIO_NET_F_MAC)
        | (1 << VIRTIO_NET_F_STATUS)
        | (1 << VIRTIO_NET_F_MRG_RXBUF)
        | (1 << VIRTIO_RING_F_EVENT_IDX)
        | (1 << VIRTIO_RING_F_INDIRECT_DESC)
}

/// What a frontend would get if PROTOCOL_FEATURES were offered (it is not, see `features`).
pub fn protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::CONFIG
        | VhostUserProtocolFeatures::REPLY_ACK
}

/// What only the worker thread touches (behind a lock nobody else contends).
#[derive(Default)]
struct Worker {
    /// The frame being read from a transmit chain.
    tx: Vec<u8>,
    /// Receive buffers taken from the queue but not yet filled (a frame that needs more
    /// buffers than the guest has posted waits for the next ones).
    held: Vec<RxBuffer>,
    /// The transmit budget ran out with chains left.
    tx_more: bool,
}

pub struct Connection {
    port: Arc<VhostNetPort>,
    pub(super) mem: GuestMemoryAtomic<GuestMemoryMmap>,
    pub(super) wake: Arc<EventFd>,
    /// False while the guest's memory failed its checks: nothing touches it.
    mem_ok: AtomicBool,
    hdr_len: AtomicUsize,
    mergeable: AtomicBool,
    worker: Mutex<Worker>,
}

impl Connection {
    pub fn new(port: Arc<VhostNetPort>) -> io::Result<Arc<Connection>> {
        Ok(Arc::new(Connection {
            port,
            mem: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            wake: Arc::new(EventFd::new(EFD_NONBLOCK)?),
            mem_ok: AtomicBool::new(true),
            hdr_len: AtomicUsize::new(HDR_LEN),
            mergeable: AtomicBool::new(false),
            worker: Mutex::default(),
        }))
    }

    fn worker(&self) -> std::sync::MutexGuard<'_, Worker> {
        self.worker.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn warn(&self, what: std::fmt::Arguments) {
        let mut limiter = self.port.limiter.lock().unwrap_or_else(|e| e.into_inner());
        client_warn!(limiter, self.port.name.as_str(), "{what}");
    }

    /// The guest's transmit queue: each chain's frame to the switch, the chain returned.
    fn transmit(&self, vring: &VringRwLock) {
        let mem = self.mem.memory();
        let mut state = vring.get_mut();
        if !self.mem_ok.load(Relaxed) || !state.get_queue().ready() {
            return;
        }
        let mut w = self.worker();
        let hdr_len = self.hdr_len.load(Relaxed);
        let c = &self.port.counters;
        let mut done = 0usize;
        w.tx_more = false;
        'ring: loop {
            let _ = state.disable_notification();
            while let Some(chain) = state.get_queue_mut().pop_descriptor_chain(&*mem) {
                let head = chain.head_index();
                let tx = &mut w.tx;
                match queues::read_tx(&*mem, chain, hdr_len, tx) {
                    Ok(()) => {
                        c.tx_frames.fetch_add(1, Relaxed);
                        c.tx_bytes.fetch_add(tx.len() as u64, Relaxed);
                        self.port.ingress.receive(self.port.id, tx);
                    }
                    Err(e) => {
                        c.tx_errors.fetch_add(1, Relaxed);
                        self.warn(format_args!("transmit chain {head} dropped: {e}"));
                    }
                }
                if let Err(e) = state.add_used(head, 0) {
                    self.warn(format_args!("transmit used ring: {e}"));
                    break 'ring;
                }
                done += 1;
                if done >= TX_BUDGET {
                    w.tx_more = true;
                    let _ = self.wake.write(1);
                    break 'ring;
                }
            }
            match state.enable_notification() {
                Ok(true) => continue,
                _ => break,
            }
        }
        if done > 0 && state.needs_notification().unwrap_or(true) {
            let _ = state.signal_used_queue();
        }
    }

    /// Frames waiting for the guest into its receive buffers, while it has posted enough.
    fn receive(&self, vring: &VringRwLock) {
        let mem = self.mem.memory();
        let mut state = vring.get_mut();
        let c = &self.port.counters;
        if !self.mem_ok.load(Relaxed) || !state.get_queue().ready() || !state.is_enabled() {
            let n = self.port.drop_waiting();
            c.rx_not_ready.fetch_add(n, Relaxed);
            return;
        }
        let mut w = self.worker();
        let hdr_len = self.hdr_len.load(Relaxed);
        let mergeable = self.mergeable.load(Relaxed);
        let mut used = false;
        let mut retries = 0;
        while let Some(frame) = self.port.next_waiting() {
            let need = hdr_len + frame.len();
            let room = |held: &[RxBuffer]| match mergeable {
                true => held.iter().map(RxBuffer::room).sum::<usize>(),
                false => held.first().map_or(0, RxBuffer::room),
            };
            while room(&w.held) < need && (mergeable || w.held.is_empty()) {
                match queues::take_rx(state.get_queue_mut(), &*mem) {
                    None => break,
                    Some(Ok(b)) => w.held.push(b),
                    Some(Err((head, e))) => {
                        c.rx_errors.fetch_add(1, Relaxed);
                        self.warn(format_args!("receive chain {head} returned unused: {e}"));
                        let _ = state.add_used(head, 0);
                        used = true;
                    }
                }
            }
            if room(&w.held) >= need {
                let mut k = 0;
                let mut sum = 0;
                while sum < need {
                    sum += w.held[k].room();
                    k += 1;
                }
                match queues::put_rx(state.get_queue_mut(), &*mem, &w.held[..k], hdr_len, &frame) {
                    Ok(_) => {
                        c.rx_frames.fetch_add(1, Relaxed);
                        c.rx_bytes.fetch_add(frame.len() as u64, Relaxed);
                    }
                    Err(e) => {
                        c.rx_errors.fetch_add(1, Relaxed);
                        self.warn(format_args!("receive used ring: {e}"));
                    }
                }
                w.held.drain(..k);
                used = true;
                retries = 0;
            } else if !mergeable && !w.held.is_empty() {
                c.rx_oversize.fetch_add(1, Relaxed);
                self.warn(format_args!(
                    "a {}-byte frame does not fit the guest's {}-byte receive buffer (no MRG_RXBUF)",
                    frame.len(),
                    room(&w.held)
                ));
            } else {
                // Out of buffers: the frame waits; the guest kicks when it posts more.
                self.port.put_back(frame);
                match state.enable_notification() {
                    Ok(true) if retries < 2 => retries += 1,
                    _ => break,
                }
            }
        }
        if used && state.needs_notification().unwrap_or(true) {
            let _ = state.signal_used_queue();
        }
    }
}

impl VhostUserBackend for Connection {
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        NUM_QUEUES
    }

    fn max_queue_size(&self) -> usize {
        QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        features()
    }

    fn acked_features(&self, features: u64) {
        let v1 = features & (1 << VIRTIO_F_VERSION_1) != 0;
        let mrg = features & (1 << VIRTIO_NET_F_MRG_RXBUF) != 0;
        self.mergeable.store(mrg, Relaxed);
        let hdr = if v1 || mrg { HDR_LEN } else { LEGACY_HDR_LEN };
        self.hdr_len.store(hdr, Relaxed);
        log::info!(
            "{}: guest acked features {features:#x} (MRG_RXBUF {mrg}, VERSION_1 {v1})",
            self.port.name
        );
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        protocol_features()
    }

    fn reset_device(&self) {
        self.worker().held.clear();
    }

    fn set_event_idx(&self, _enabled: bool) {}

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        // struct virtio_net_config: mac, status, max_virtqueue_pairs.
        let mut config = self.port.mac.0.to_vec();
        config.extend_from_slice(&(VIRTIO_NET_S_LINK_UP as u16).to_le_bytes());
        config.extend_from_slice(&1u16.to_le_bytes());
        let start = (offset as usize).min(config.len());
        let end = start.saturating_add(size as usize).min(config.len());
        config[start..end].to_vec()
    }

    fn update_memory(&self, mem: GuestMemoryAtomic<GuestMemoryMmap>) -> io::Result<()> {
        let result = check_memory(&mem.memory());
        self.mem_ok.store(result.is_ok(), Relaxed);
        self.worker().held.clear();
        result.map_err(|e| {
            self.warn(format_args!("guest memory refused: {e}"));
            io::Error::new(io::ErrorKind::PermissionDenied, e)
        })
    }

    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        if queue_index == u32::from(RX_QUEUE) {
            self.worker().held.clear();
        }
        Ok(())
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK).ok()
    }

    fn handle_event(
        &self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock],
        _thread_id: usize,
    ) -> io::Result<()> {
        let (Some(rx), Some(tx)) = (vrings.get(RX_QUEUE as usize), vrings.get(TX_QUEUE as usize))
        else {
            return Ok(());
        };
        match device_event {
            RX_QUEUE => self.receive(rx),
            TX_QUEUE => self.transmit(tx),
            WAKE_EVENT => {
                let _ = self.wake.read();
                self.receive(rx);
                if self.worker().tx_more {
                    self.transmit(tx);
                }
            }
            _ => {}
        }
        // Never an error: it would end the worker thread, and the port with it.
        Ok(())
    }
}

/// Guest RAM the backend maps must not shrink under it (a truncated file would kill the
/// process with SIGBUS): each region's fd sealed against shrinking (QEMU's memfd is), and
/// as long as the region.
fn check_memory(mem: &GuestMemoryMmap) -> Result<(), String> {
    for region in mem.iter() {
        let Some(fo) = region.file_offset() else {
            continue;
        };
        let at = region.start_addr().0;
        let len = region.len();
        crate::guest_memory::seal::forbid_shrinking(fo.file(), at, len)
            .map_err(|e| format!("region {at:#x}+{len:#x}: its fd {e}; use QEMU's memory-backend-memfd (seal=on, the default)"))?;
        let size = fo.file().metadata().map_err(|e| e.to_string())?.len();
        if fo.start().checked_add(len).is_none_or(|end| end > size) {
            return Err(format!(
                "region {at:#x}+{len:#x} at file offset {:#x} is beyond its file's {size:#x} bytes",
                fo.start()
            ));
        }
    }
    Ok(())
}
