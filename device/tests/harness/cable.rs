//! A cable between two test hosts' switches (two services, each with its own fabric and
//! switch): each end is a port of one switch whose frames come out of the other switch's
//! port, dropped, duplicated or reordered by a seeded impairment. For the wire-path tests.

use super::devices::{gid_of, mac_of, roce, TestDevices};
use std::sync::{Arc, Mutex, OnceLock};
use vrnic::net::port::{Ingress, Port, PortId};
use vrnic::net::switch::Switch;
use vrnic::rnic::link::LinkMode;
use vrnic::wire::bth::{Bth, Op, Opcode, DEFAULT_PKEY};
use vrnic::wire::{Network, Packet, Transport};

/// Two test hosts: a RoCE device each (`roce(0)` and `roce(1)`), each in a service of its
/// own (fabric, pollers, switch), the devices' wire ports attached to their switches and
/// the switches joined by a cable. Dropping it stops both services.
pub struct WireHosts {
    pub hosts: [TestDevices; 2],
    pub switches: [Arc<Switch>; 2],
    pub cable: [Arc<LinkEnd>; 2],
}

impl WireHosts {
    /// The hosts as `TestDevices::start_links` starts devices, the cable impaired by
    /// `impair`.
    pub fn start(impair: Impairment) -> WireHosts {
        Self::start_with(impair, TestDevices::start_links)
    }

    /// The hosts with each service started by `start` (e.g. other pollers).
    pub fn start_with(
        impair: Impairment,
        start: impl Fn(Vec<LinkMode>) -> TestDevices,
    ) -> WireHosts {
        let hosts = [start(vec![roce(0)]), start(vec![roce(1)])];
        let switches = [Switch::new(), Switch::new()];
        for (h, s) in hosts.iter().zip(&switches) {
            h.fabric().attach_wire(s).expect("wire attached");
        }
        let cable = join(&switches[0], &switches[1], impair);
        WireHosts {
            hosts,
            switches,
            cable,
        }
    }
}

/// What the link between the hosts does to frames, per mille, from a seed.
#[derive(Clone, Copy, Default)]
pub struct Impairment {
    pub seed: u64,
    pub loss: u64,
    pub dup: u64,
    pub reorder: u64,
}

pub struct LinkState {
    rng: u64,
    held: Option<Vec<u8>>,
    pub lost: u64,
    /// Set by `cut` or `hold`: what the end does with every frame until `release`.
    stopped: Option<Stop>,
    /// Frames kept by `hold`, delivered at `release`.
    kept: Vec<Vec<u8>>,
}

/// A cable end that stops passing frames: losing them, or keeping them for later.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Cut,
    Hold,
}

/// One end of the cable: frames the switch gives it come out of the other end.
pub struct LinkEnd {
    name: String,
    peer: OnceLock<(Arc<Switch>, PortId)>,
    impair: Impairment,
    pub state: Mutex<LinkState>,
}

impl LinkEnd {
    /// From now on every frame into this end is lost, until `release`.
    pub fn cut(&self) {
        self.state.lock().unwrap().stopped = Some(Stop::Cut);
    }

    /// From now on every frame into this end is kept, until `release` delivers them.
    pub fn hold(&self) {
        self.state.lock().unwrap().stopped = Some(Stop::Hold);
    }

    /// Frames kept by `hold` so far.
    pub fn kept(&self) -> usize {
        self.state.lock().unwrap().kept.len()
    }

    /// The frames kept by `hold` so far, decoded (those that decode).
    pub fn kept_packets(&self) -> Vec<Packet> {
        let st = self.state.lock().unwrap();
        st.kept
            .iter()
            .filter_map(|f| Packet::decode(f).ok())
            .collect()
    }

    /// Passes frames again, after delivering those kept by `hold`.
    pub fn release(&self) {
        let kept = {
            let mut st = self.state.lock().unwrap();
            st.stopped = None;
            std::mem::take(&mut st.kept)
        };
        let (switch, port) = self.peer.get().expect("joined");
        for f in kept {
            switch.receive_owned(*port, f);
        }
    }

    fn roll(st: &mut LinkState, per_mille: u64) -> bool {
        // xorshift64*
        st.rng ^= st.rng >> 12;
        st.rng ^= st.rng << 25;
        st.rng ^= st.rng >> 27;
        st.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % 1000 < per_mille
    }
}

impl Port for LinkEnd {
    fn name(&self) -> &str {
        &self.name
    }

    fn transmit(&self, frame: &[u8]) {
        self.transmit_owned(frame.to_vec());
    }

    fn transmit_owned(&self, frame: Vec<u8>) {
        let out = {
            let mut st = self.state.lock().unwrap();
            let i = self.impair;
            let mut out = Vec::new();
            let stopped = st.stopped;
            match stopped {
                Some(Stop::Cut) => st.lost += 1,
                Some(Stop::Hold) => st.kept.push(frame),
                None if Self::roll(&mut st, i.loss) => st.lost += 1,
                // This frame overtakes nothing now: the next one goes first.
                None if Self::roll(&mut st, i.reorder) && st.held.is_none() => {
                    st.held = Some(frame)
                }
                None => {
                    if Self::roll(&mut st, i.dup) {
                        out.push(frame.clone());
                    }
                    out.push(frame);
                    out.extend(st.held.take());
                }
            }
            out
        };
        let (switch, port) = self.peer.get().expect("joined");
        for f in out {
            switch.receive_owned(*port, f);
        }
    }
}

/// Joins switches `a` and `b` with a cable impaired by `impair` in each direction.
pub fn join(a: &Arc<Switch>, b: &Arc<Switch>, impair: Impairment) -> [Arc<LinkEnd>; 2] {
    let end = |name: &str, seed: u64| LinkEnd {
        name: name.into(),
        peer: OnceLock::new(),
        impair: Impairment { seed, ..impair },
        state: Mutex::new(LinkState {
            rng: seed | 1,
            held: None,
            lost: 0,
            stopped: None,
            kept: Vec::new(),
        }),
    };
    let ea = a.attach(|_| Arc::new(end("cable-a", impair.seed)));
    let eb = b.attach(|_| Arc::new(end("cable-b", impair.seed ^ 0x9e37_79b9)));
    let ids = (a.stats().len() - 1, b.stats().len() - 1);
    ea.peer.set((b.clone(), ids.1)).ok();
    eb.peer.set((a.clone(), ids.0)).ok();
    [ea, eb]
}

/// An RC packet `op` with `psn` for QP `dest_qpn`, from test host `from`'s addresses (its
/// MAC and the IPv4 address of its GID) to host `to`'s, as a peer would put it on the
/// cable; callers add headers and payload and encode it.
pub fn rc_packet(from: usize, to: usize, op: Op, dest_qpn: u32, psn: u32) -> Packet {
    let ip = |i: usize| -> [u8; 4] { gid_of(i)[12..].try_into().unwrap() };
    let net = Network::V4 {
        src: ip(from),
        dst: ip(to),
        tos: 0,
        ttl: 64,
        ident: 0,
        dont_fragment: true,
    };
    let bth = Bth {
        opcode: Opcode::new(Transport::Rc, op).unwrap(),
        solicited: false,
        migreq: true,
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn,
        ack_req: false,
        psn,
    };
    Packet::new(mac_of(from), mac_of(to), net, 0xc001, bth)
}
