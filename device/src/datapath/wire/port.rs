//! A RoCE device's wire port on the switch: the RoCEv2 frames for the device's MAC come
//! in here (queued for the device's poller), and the device's packets leave through it.

use crate::addr::Mac;
use crate::net::port::{Ingress, Port, PortId};
use crate::net::switch::{Switch, SwitchError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Frames a port holds for its poller; beyond it frames are dropped, as by a full ring.
pub const RX_QUEUE: usize = 1024;

/// The port's figures.
#[derive(Debug, Default)]
pub struct WireCounters {
    /// Frames the switch gave the port, and those dropped because the queue was full.
    pub rx_frames: AtomicU64,
    pub rx_queue_full: AtomicU64,
    /// Frames dropped by the receive path: undecodable (bad ICRC included), and for no
    /// wire QP of this device.
    pub rx_bad: AtomicU64,
    pub rx_bad_icrc: AtomicU64,
    pub rx_unknown_qp: AtomicU64,
    /// Frames the device sent.
    pub tx_frames: AtomicU64,
    /// The most frames the device built in one hold of its lock (bounded by the data
    /// path's budget per pass, whatever the messages and READs ask for).
    pub tx_burst_max: AtomicU64,
}

/// `WireCounters` read (`vrnic ctl wire`), each exact, not read at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WirePortCounters {
    pub rx_frames: u64,
    pub rx_queue_full: u64,
    pub rx_bad: u64,
    pub rx_bad_icrc: u64,
    pub rx_unknown_qp: u64,
    pub tx_frames: u64,
    #[serde(default)]
    pub tx_burst_max: u64,
}

impl WireCounters {
    pub fn read(&self) -> WirePortCounters {
        WirePortCounters {
            rx_frames: self.rx_frames.load(Relaxed),
            rx_queue_full: self.rx_queue_full.load(Relaxed),
            rx_bad: self.rx_bad.load(Relaxed),
            rx_bad_icrc: self.rx_bad_icrc.load(Relaxed),
            rx_unknown_qp: self.rx_unknown_qp.load(Relaxed),
            tx_frames: self.tx_frames.load(Relaxed),
            tx_burst_max: self.tx_burst_max.load(Relaxed),
        }
    }
}

/// What wakes the device's poller when a frame arrives.
pub type Wake = Box<dyn Fn() + Send + Sync>;

pub struct WirePort {
    name: String,
    mac: Mac,
    id: PortId,
    egress: Arc<dyn Ingress>,
    queue: Mutex<VecDeque<Vec<u8>>>,
    wake: Wake,
    pub counters: WireCounters,
}

impl WirePort {
    /// A port `id` that sends into `egress`; `wake` is called when a frame is queued.
    pub fn new(name: &str, mac: Mac, id: PortId, egress: Arc<dyn Ingress>, wake: Wake) -> Self {
        WirePort {
            name: format!("{name}-wire"),
            mac,
            id,
            egress,
            queue: Mutex::default(),
            wake,
            counters: WireCounters::default(),
        }
    }

    /// Attaches a wire port for the device `name` with MAC `mac` to `switch`, and steers
    /// the RoCEv2 frames for `mac` to it.
    pub fn attach(
        switch: &Arc<Switch>,
        name: &str,
        mac: Mac,
        wake: Wake,
    ) -> Result<Arc<WirePort>, SwitchError> {
        let egress: Arc<dyn Ingress> = switch.clone();
        let port = switch.attach(|id| Arc::new(WirePort::new(name, mac, id, egress, wake)));
        switch.steer_roce(mac, port.id)?;
        super::set_on();
        Ok(port)
    }

    pub fn mac(&self) -> Mac {
        self.mac
    }

    pub fn id(&self) -> PortId {
        self.id
    }

    /// Sends frames, in order (call with no device lock held: the switch delivers them
    /// inline).
    pub fn send(&self, frames: Vec<Vec<u8>>) {
        self.counters
            .tx_frames
            .fetch_add(frames.len() as u64, Relaxed);
        self.egress.receive_batch(self.id, frames);
    }

    /// Up to `max` queued frames, oldest first.
    pub fn take(&self, max: usize) -> Vec<Vec<u8>> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// Whether frames wait.
    pub fn pending(&self) -> bool {
        !self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

impl Port for WirePort {
    fn name(&self) -> &str {
        &self.name
    }

    /// Only the RoCEv2 frames steered to the device's MAC: ARP, neighbour discovery and
    /// the like are its paired interface's, never the engine's.
    fn takes_floods(&self) -> bool {
        false
    }

    fn transmit(&self, frame: &[u8]) {
        self.transmit_owned(frame.to_vec());
    }

    fn transmit_owned(&self, frame: Vec<u8>) {
        self.transmit_batch(vec![frame]);
    }

    fn transmit_batch(&self, frames: Vec<Vec<u8>>) {
        let n = frames.len() as u64;
        self.counters.rx_frames.fetch_add(n, Relaxed);
        {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let room = RX_QUEUE.saturating_sub(q.len());
            let full = frames.len().saturating_sub(room) as u64;
            self.counters.rx_queue_full.fetch_add(full, Relaxed);
            q.extend(frames.into_iter().take(room));
        }
        (self.wake)();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::frame::tests::udp4;
    use std::sync::atomic::AtomicUsize;

    const A: Mac = Mac([2, 0, 0, 0, 0, 0xa]);
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    #[test]
    fn roce_frames_for_the_device_mac_queue_on_its_wire_port_and_wake_it() {
        let sw = Switch::new();
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        let port = WirePort::attach(
            &sw,
            "dev0",
            A,
            Box::new(move || {
                w.fetch_add(1, Relaxed);
            }),
        )
        .unwrap();
        assert!(super::super::on());
        sw.receive(7, &udp4(A.0, B, 4791)); // no port 7: ignored
        assert!(!port.pending());
        let other = WirePort::attach(&sw, "dev1", Mac(B), Box::new(|| {})).unwrap();
        other.send(vec![udp4(A.0, B, 4791)]);
        // Not RoCEv2: not steered; A is unknown to the switch, so it floods, but a wire
        // port takes no floods (nor broadcasts).
        other.send(vec![udp4(A.0, B, 4790)]);
        other.send(vec![udp4([0xff; 6], B, 4791)]);
        assert_eq!(woken.load(Relaxed), 1);
        let got = port.take(10);
        assert_eq!(got, [udp4(A.0, B, 4791)]);
        assert_eq!(other.counters.tx_frames.load(Relaxed), 3);
        assert_eq!(port.counters.rx_frames.load(Relaxed), 1);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let sw = Switch::new();
        let port = WirePort::attach(&sw, "dev0", A, Box::new(|| {})).unwrap();
        let peer = WirePort::attach(&sw, "dev1", Mac(B), Box::new(|| {})).unwrap();
        for _ in 0..RX_QUEUE + 3 {
            peer.send(vec![udp4(A.0, B, 4791)]);
        }
        assert_eq!(port.counters.rx_queue_full.load(Relaxed), 3);
        assert_eq!(port.take(usize::MAX).len(), RX_QUEUE);
        assert!(!port.pending());
    }
}
