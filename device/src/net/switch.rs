//! The L2 learning switch between the ports of one `vrnic serve` process: the guests'
//! virtio-net interfaces, the uplinks, and (later) the RoCE devices' wire engines.
//!
//! Unicast goes to the port that owns the destination MAC: a static entry (a guest port's
//! configured MAC) or one learned from source addresses (aged out after `AGE`); broadcast,
//! multicast and unknown unicast are flooded to every port but the source. Nothing here
//! blocks: a port's `transmit` drops what it has no room for.
//!
//! RoCEv2 steering (the hook for the wire engine of issue 11): a RoCE device and its
//! guest's interface share one MAC. `steer_roce(mac, port)` makes unicast frames to that
//! MAC that are UDP to port 4791 go to `port` (the engine) instead of the guest; all other
//! frames to the MAC still reach the guest. With no steering set, it costs one relaxed load.
//!
//! Locks: `ports` (read on every frame, written when a port attaches) is taken before
//! `table` and `roce`; `transmit` is called with `ports` read-held and must not attach.

use super::frame;
use super::port::{Ingress, Port, PortId};
use crate::addr::Mac;
use crate::ratelimit::{client_warn, WarnLimiter};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long a learned address stays without a frame from it.
pub const AGE: Duration = Duration::from_secs(300);
/// At most this many learned addresses (a guest spraying source MACs cannot grow the table
/// without bound); beyond it new addresses are not learned, so frames to them flood.
pub const MAX_LEARNED: usize = 4096;

/// Per-port figures, as the switch sees them.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames (and their bytes) the port handed to the switch.
    pub rx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    /// Frames (and bytes) the switch handed to the port.
    pub tx_frames: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// Frames from the port the switch dropped: shorter than an Ethernet header, or for an
    /// address on the port they came from.
    pub dropped: AtomicU64,
}

/// A copy of [`PortCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PortStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub dropped: u64,
}

impl PortCounters {
    pub fn snapshot(&self) -> PortStats {
        PortStats {
            rx_frames: self.rx_frames.load(Relaxed),
            rx_bytes: self.rx_bytes.load(Relaxed),
            tx_frames: self.tx_frames.load(Relaxed),
            tx_bytes: self.tx_bytes.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
        }
    }
}

struct Slot {
    port: Arc<dyn Port>,
    /// `Port::takes_floods`, asked once.
    floods: bool,
    counters: PortCounters,
}

struct Entry {
    port: PortId,
    fixed: bool,
    /// Seconds since the switch started, when a frame last came from this address.
    seen: AtomicU64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SwitchError {
    #[error("MAC {mac} is already the static address of port {port}")]
    MacTaken { mac: Mac, port: String },
    #[error("no port {0}")]
    NoPort(PortId),
}

/// The switch; ports attach with [`Switch::attach`] and send through it as an [`Ingress`].
pub struct Switch {
    ports: RwLock<Vec<Slot>>,
    table: RwLock<HashMap<Mac, Entry>>,
    roce: RwLock<HashMap<Mac, PortId>>,
    roce_on: AtomicBool,
    start: Instant,
    limiter: Mutex<WarnLimiter>,
}

impl Default for Switch {
    fn default() -> Self {
        Switch {
            ports: RwLock::default(),
            table: RwLock::default(),
            roce: RwLock::default(),
            roce_on: AtomicBool::new(false),
            start: Instant::now(),
            limiter: Mutex::default(),
        }
    }
}

impl Switch {
    pub fn new() -> Arc<Switch> {
        Arc::new(Switch::default())
    }

    /// Attaches the port `make` builds for its number (the port needs it to send).
    pub fn attach<P: Port + 'static>(&self, make: impl FnOnce(PortId) -> Arc<P>) -> Arc<P> {
        let mut ports = self.ports.write().unwrap_or_else(|e| e.into_inner());
        let id = ports.len();
        let port = make(id);
        ports.push(Slot {
            floods: port.takes_floods(),
            port: port.clone(),
            counters: PortCounters::default(),
        });
        port
    }

    /// How many ports are attached (the next one gets this number).
    pub fn port_count(&self) -> usize {
        self.ports.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Frames to `mac` go to `port`, whatever source addresses say.
    pub fn add_static(&self, mac: Mac, port: PortId) -> Result<(), SwitchError> {
        let ports = self.ports.read().unwrap_or_else(|e| e.into_inner());
        if port >= ports.len() {
            return Err(SwitchError::NoPort(port));
        }
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = table.get(&mac).filter(|e| e.fixed && e.port != port) {
            return Err(SwitchError::MacTaken {
                mac,
                port: ports[e.port].port.name().into(),
            });
        }
        table.insert(
            mac,
            Entry {
                port,
                fixed: true,
                seen: AtomicU64::new(0),
            },
        );
        Ok(())
    }

    /// RoCEv2 frames (UDP to 4791) to `mac` go to `port` instead of `mac`'s own port.
    pub fn steer_roce(&self, mac: Mac, port: PortId) -> Result<(), SwitchError> {
        if port >= self.ports.read().unwrap_or_else(|e| e.into_inner()).len() {
            return Err(SwitchError::NoPort(port));
        }
        self.roce
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(mac, port);
        self.roce_on.store(true, Relaxed);
        Ok(())
    }

    /// Each port's name and counters, in port order.
    pub fn stats(&self) -> Vec<(String, PortStats)> {
        let ports = self.ports.read().unwrap_or_else(|e| e.into_inner());
        ports
            .iter()
            .map(|s| (s.port.name().to_string(), s.counters.snapshot()))
            .collect()
    }

    /// The port a learned or static entry names for `mac`.
    pub fn lookup(&self, mac: &Mac) -> Option<PortId> {
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        let e = table.get(mac)?;
        (e.fixed || self.now().saturating_sub(e.seen.load(Relaxed)) < AGE.as_secs())
            .then_some(e.port)
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_secs()
    }

    fn learn(&self, src: Mac, from: PortId) {
        if frame::is_group(&src) {
            return;
        }
        let now = self.now();
        {
            let table = self.table.read().unwrap_or_else(|e| e.into_inner());
            match table.get(&src) {
                Some(e) if e.fixed => return,
                Some(e) if e.port == from => {
                    if e.seen.load(Relaxed) != now {
                        e.seen.store(now, Relaxed);
                    }
                    return;
                }
                _ => {}
            }
        }
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if table.len() >= MAX_LEARNED && !table.contains_key(&src) {
            let age = AGE.as_secs();
            table.retain(|_, e| e.fixed || now.saturating_sub(e.seen.load(Relaxed)) < age);
            if table.len() >= MAX_LEARNED {
                return;
            }
        }
        match table.get_mut(&src) {
            Some(e) if e.fixed => {}
            Some(e) => {
                e.port = from;
                *e.seen.get_mut() = now;
            }
            None => {
                table.insert(
                    src,
                    Entry {
                        port: from,
                        fixed: false,
                        seen: AtomicU64::new(now),
                    },
                );
            }
        }
    }

    fn steered(&self, dst: &Mac, frame: &[u8]) -> Option<PortId> {
        if !self.roce_on.load(Relaxed) {
            return None;
        }
        let port = *self
            .roce
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(dst)?;
        frame::is_roce_v2(frame).then_some(port)
    }
}

fn count_tx(slot: &Slot, frame: &[u8]) {
    slot.counters.tx_frames.fetch_add(1, Relaxed);
    slot.counters
        .tx_bytes
        .fetch_add(frame.len() as u64, Relaxed);
}

fn deliver(slot: &Slot, frame: &[u8]) {
    count_tx(slot, frame);
    slot.port.transmit(frame);
}

/// Where a received frame goes.
enum Forward {
    Drop,
    To(PortId),
    Flood,
}

impl Switch {
    /// Counts, checks and learns frame `frame` from port `from`, and says where it goes.
    fn forward(&self, ports: &[Slot], from: PortId, frame: &[u8]) -> Forward {
        let Some(source) = ports.get(from) else {
            return Forward::Drop;
        };
        source.counters.rx_frames.fetch_add(1, Relaxed);
        source
            .counters
            .rx_bytes
            .fetch_add(frame.len() as u64, Relaxed);
        let Some((dst, src)) = frame::macs(frame) else {
            source.counters.dropped.fetch_add(1, Relaxed);
            let mut limiter = self.limiter.lock().unwrap_or_else(|e| e.into_inner());
            client_warn!(
                limiter,
                source.port.name(),
                "dropped a {}-byte frame (shorter than an Ethernet header)",
                frame.len()
            );
            return Forward::Drop;
        };
        self.learn(src, from);
        let to = match frame::is_group(&dst) {
            true => None,
            false => self.steered(&dst, frame).or_else(|| self.lookup(&dst)),
        };
        match to {
            Some(to) if to == from => {
                source.counters.dropped.fetch_add(1, Relaxed);
                Forward::Drop
            }
            Some(to) => Forward::To(to),
            None => Forward::Flood,
        }
    }

    fn flood(ports: &[Slot], from: PortId, frame: &[u8]) {
        for (id, slot) in ports.iter().enumerate() {
            if id != from && slot.floods {
                deliver(slot, frame);
            }
        }
    }
}

impl Ingress for Switch {
    fn receive(&self, from: PortId, frame: &[u8]) {
        let ports = self.ports.read().unwrap_or_else(|e| e.into_inner());
        match self.forward(&ports, from, frame) {
            Forward::Drop => {}
            Forward::To(to) => {
                if let Some(slot) = ports.get(to) {
                    deliver(slot, frame);
                }
            }
            Forward::Flood => Self::flood(&ports, from, frame),
        }
    }

    fn receive_owned(&self, from: PortId, frame: Vec<u8>) {
        self.receive_batch(from, vec![frame]);
    }

    /// The frames in order, the consecutive ones to one port handed over together.
    fn receive_batch(&self, from: PortId, frames: Vec<Vec<u8>>) {
        let ports = self.ports.read().unwrap_or_else(|e| e.into_inner());
        let mut run: Option<(PortId, Vec<Vec<u8>>)> = None;
        let hand_over = |run: &mut Option<(PortId, Vec<Vec<u8>>)>| {
            if let Some((to, frames)) = run.take() {
                if let Some(slot) = ports.get(to) {
                    slot.port.transmit_batch(frames);
                }
            }
        };
        for frame in frames {
            match self.forward(&ports, from, &frame) {
                Forward::Drop => {}
                Forward::To(to) => {
                    if let Some(slot) = ports.get(to) {
                        count_tx(slot, &frame);
                    }
                    match &mut run {
                        Some((port, run)) if *port == to => run.push(frame),
                        _ => {
                            hand_over(&mut run);
                            run = Some((to, vec![frame]));
                        }
                    }
                }
                Forward::Flood => {
                    hand_over(&mut run);
                    Self::flood(&ports, from, &frame);
                }
            }
        }
        hand_over(&mut run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::frame::tests::udp4;

    /// A port that keeps what it is given.
    struct Sink {
        name: String,
        got: Mutex<Vec<Vec<u8>>>,
    }

    impl Port for Sink {
        fn name(&self) -> &str {
            &self.name
        }
        fn transmit(&self, frame: &[u8]) {
            self.got.lock().unwrap().push(frame.to_vec());
        }
    }

    fn sinks(switch: &Switch, n: usize) -> Vec<Arc<Sink>> {
        (0..n)
            .map(|i| {
                switch.attach(|id| {
                    assert_eq!(id, i);
                    Arc::new(Sink {
                        name: format!("p{i}"),
                        got: Mutex::default(),
                    })
                })
            })
            .collect()
    }

    fn taken(s: &Sink) -> usize {
        std::mem::take(&mut *s.got.lock().unwrap()).len()
    }

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];

    #[test]
    fn unknown_unicast_floods_then_the_learned_port_alone_gets_it() {
        let sw = Switch::new();
        let p = sinks(&sw, 3);
        sw.receive(0, &udp4(B, A, 1)); // B unknown: flooded; A learned on port 0
        assert_eq!((taken(&p[0]), taken(&p[1]), taken(&p[2])), (0, 1, 1));
        sw.receive(1, &udp4(A, B, 1)); // to A: port 0 only; B learned on port 1
        assert_eq!((taken(&p[0]), taken(&p[1]), taken(&p[2])), (1, 0, 0));
        sw.receive(0, &udp4(B, A, 1));
        assert_eq!((taken(&p[0]), taken(&p[1]), taken(&p[2])), (0, 1, 0));
    }

    #[test]
    fn a_batch_reaches_each_port_in_order_runs_together_and_floods_between() {
        let sw = Switch::new();
        let p = sinks(&sw, 3);
        sw.receive(1, &udp4(A, B, 1)); // B learned on port 1
        sw.receive(2, &udp4(A, C, 1)); // C learned on port 2
        for s in &p {
            taken(s);
        }
        let frames = vec![
            udp4(B, A, 1),
            udp4(B, A, 2),
            udp4([0xff; 6], A, 3),
            udp4(C, A, 4),
            udp4(B, A, 5),
            udp4(A, A, 6), // to its own port: dropped
        ];
        sw.receive_batch(0, frames.clone());
        let got = |i: usize| std::mem::take(&mut *p[i].got.lock().unwrap());
        assert!(got(0).is_empty());
        let f = |i: &[usize]| i.iter().map(|&i| frames[i].clone()).collect::<Vec<_>>();
        assert_eq!(got(1), f(&[0, 1, 2, 4]));
        assert_eq!(got(2), f(&[2, 3]));
        let stats = sw.stats();
        assert_eq!((stats[0].1.rx_frames, stats[0].1.dropped), (6, 1));
        assert_eq!(stats[1].1.tx_frames, 1 + 4);
    }

    #[test]
    fn broadcast_and_multicast_go_to_every_port_but_the_source() {
        let sw = Switch::new();
        let p = sinks(&sw, 3);
        sw.receive(1, &udp4([0xff; 6], A, 1));
        sw.receive(1, &udp4([1, 0, 0x5e, 0, 0, 1], A, 1));
        assert_eq!((taken(&p[0]), taken(&p[1]), taken(&p[2])), (2, 0, 2));
        // a group source address is never learned
        sw.receive(2, &udp4(B, [0xff; 6], 1));
        assert_eq!(sw.lookup(&Mac([0xff; 6])), None);
    }

    #[test]
    fn a_static_address_is_not_taken_over_by_a_spoofed_source() {
        let sw = Switch::new();
        let p = sinks(&sw, 3);
        sw.add_static(Mac(A), 0).unwrap();
        sw.receive(2, &udp4(B, A, 1)); // port 2 claims A
        assert_eq!(sw.lookup(&Mac(A)), Some(0));
        taken(&p[0]);
        taken(&p[1]);
        sw.receive(1, &udp4(A, C, 1));
        assert_eq!((taken(&p[0]), taken(&p[2])), (1, 0));
        assert_eq!(
            sw.add_static(Mac(A), 1),
            Err(SwitchError::MacTaken {
                mac: Mac(A),
                port: "p0".into()
            })
        );
        assert_eq!(sw.add_static(Mac(C), 7), Err(SwitchError::NoPort(7)));
    }

    #[test]
    fn a_moved_address_is_relearned_on_its_new_port() {
        let sw = Switch::new();
        let _p = sinks(&sw, 2);
        sw.receive(0, &udp4(B, A, 1));
        assert_eq!(sw.lookup(&Mac(A)), Some(0));
        sw.receive(1, &udp4(B, A, 1));
        assert_eq!(sw.lookup(&Mac(A)), Some(1));
    }

    #[test]
    fn runts_and_frames_for_their_own_port_are_dropped_and_counted() {
        let sw = Switch::new();
        let p = sinks(&sw, 2);
        sw.receive(0, &[0u8; 13]);
        sw.receive(0, &udp4(C, A, 1)); // flooded to p1; A learned on 0
        sw.receive(0, &udp4(A, C, 1)); // to A, which is on port 0 itself
        assert_eq!((taken(&p[0]), taken(&p[1])), (0, 1));
        let stats = sw.stats();
        assert_eq!(stats[0].0, "p0");
        assert_eq!(
            (
                stats[0].1.rx_frames,
                stats[0].1.dropped,
                stats[0].1.tx_frames
            ),
            (3, 2, 0)
        );
        assert_eq!((stats[1].1.tx_frames, stats[1].1.tx_bytes), (1, 42));
        // a frame from a port that does not exist is ignored
        sw.receive(9, &udp4(A, C, 1));
    }

    #[test]
    fn the_learned_table_is_bounded() {
        let sw = Switch::new();
        let _p = sinks(&sw, 2);
        for i in 0..MAX_LEARNED + 10 {
            let [_, _, x, y, z, w] = (i as u64).to_be_bytes()[2..].try_into().unwrap();
            sw.receive(0, &udp4([0xff; 6], [2, 0, x, y, z, w], 1));
        }
        assert_eq!(sw.table.read().unwrap().len(), MAX_LEARNED);
    }

    #[test]
    fn roce_v2_frames_to_a_steered_mac_go_to_the_engine_the_rest_to_the_guest() {
        let sw = Switch::new();
        let p = sinks(&sw, 3); // 0: guest with MAC A, 1: another guest, 2: A's RoCE engine
        sw.add_static(Mac(A), 0).unwrap();
        sw.steer_roce(Mac(A), 2).unwrap();
        sw.receive(1, &udp4(A, B, 4791));
        assert_eq!((taken(&p[0]), taken(&p[2])), (0, 1));
        sw.receive(1, &udp4(A, B, 4790));
        assert_eq!((taken(&p[0]), taken(&p[2])), (1, 0));
        sw.receive(1, &udp4([0xff; 6], B, 4791)); // broadcast is never steered
        assert_eq!((taken(&p[0]), taken(&p[2])), (1, 1));
        assert_eq!(sw.steer_roce(Mac(A), 3), Err(SwitchError::NoPort(3)));
    }
}
