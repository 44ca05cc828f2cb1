//! The addressing of a wire QP's packets (MACs, IP header from the GIDs and the GRH
//! attributes, the UDP source port of its flow) and what the receive path makes of a frame.

use crate::addr::{Gid, Mac};
use crate::transport::Outgoing;
use crate::wire::{Network, Packet, WireError};

/// A QP's hop limit when its attributes give none.
const HOP_LIMIT: u8 = 64;
/// RoCEv2 source ports are taken from 0xC000..=0xFFFF (IANA's dynamic range, as Linux's
/// `rdma_flow_label_to_udp_sport`), so that ECMP spreads flows.
const SPORT_MIN: u16 = 0xC000;

/// Where a wire QP's packets go, from its attributes (set at RTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    pub src_mac: Mac,
    pub dst_mac: Mac,
    pub net: Network,
    pub udp_src_port: u16,
}

/// Linux's `rdma_calc_flow_label`: a flow label from the two QPNs.
fn flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// Linux's `rdma_flow_label_to_udp_sport`.
fn udp_sport(flow_label: u32) -> u16 {
    let low = flow_label & 0x3FFF;
    let high = flow_label & 0xF_C000;
    ((low ^ (high >> 14)) as u16 & 0x3FFF) | SPORT_MIN
}

impl Path {
    /// The path of QP `qpn` connected to `dest_qpn`: IPv4 when both GIDs are
    /// IPv4-mapped, else IPv6 with the QP's traffic class, flow label and hop limit.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        src_mac: Mac,
        dst_mac: Mac,
        sgid: Gid,
        dgid: Gid,
        qpn: u32,
        dest_qpn: u32,
        grh: (u8, u32, u8),
    ) -> Path {
        let (traffic_class, flow, hop_limit) = grh;
        let hop_limit = match hop_limit {
            0 => HOP_LIMIT,
            h => h,
        };
        let flow = match flow & 0xF_FFFF {
            0 => flow_label(qpn, dest_qpn),
            f => f,
        };
        let net = match (sgid.ipv4(), dgid.ipv4()) {
            (Some(src), Some(dst)) => Network::V4 {
                src,
                dst,
                tos: traffic_class,
                ttl: hop_limit,
                // DF set, so nothing is ever reassembled and the number may stay 0 (RFC 6864).
                ident: 0,
                dont_fragment: true,
            },
            _ => Network::V6 {
                src: sgid.0,
                dst: dgid.0,
                traffic_class,
                flow_label: flow,
                hop_limit,
            },
        };
        Path {
            src_mac,
            dst_mac,
            net,
            udp_src_port: udp_sport(flow),
        }
    }

    /// The frame of `out` into `buf`, its payload (`out.payload`'s length) written in
    /// place by `fill` straight from where it lives (`Packet::encode_with`).
    pub fn frame_with(
        &self,
        out: &Outgoing,
        buf: &mut Vec<u8>,
        fill: impl FnOnce(&mut [u8]) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        let p = out.packet(
            self.src_mac,
            self.dst_mac,
            self.net,
            self.udp_src_port,
            Vec::new(),
        );
        p.encode_with(buf, out.payload.len() as usize, fill)
    }

    /// Whether `p` came from the far end of this path (its source and destination IPs).
    pub fn answers(&self, p: &Packet<&[u8]>) -> bool {
        match (self.net, p.net) {
            (Network::V4 { src, dst, .. }, Network::V4 { src: s, dst: d, .. }) => {
                s == dst && d == src
            }
            (Network::V6 { src, dst, .. }, Network::V6 { src: s, dst: d, .. }) => {
                s == dst && d == src
            }
            _ => false,
        }
    }
}

/// Why a received frame was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    #[error("bad ICRC: {0}")]
    Icrc(WireError),
    #[error("malformed: {0}")]
    Malformed(WireError),
    #[error("for QP {0}, which is no wire QP of this device")]
    UnknownQp(u32),
}

/// The packet a received frame holds (its payload borrowed from the frame), or why it is
/// dropped.
pub fn classify(frame: &[u8]) -> Result<Packet<&[u8]>, Dropped> {
    Packet::parse(frame).map_err(|e| match e {
        WireError::Icrc { .. } => Dropped::Icrc(e),
        e => Dropped::Malformed(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{MsgOp, Requester, RequesterConfig, WqeId};
    use crate::wire::bth::Op;
    use crate::wire::Transport;
    use std::time::Instant;

    fn v4(last: u8) -> Gid {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 0, 0, last]);
        Gid(g)
    }

    const A: Mac = Mac([2, 0, 0, 0, 0, 0xa]);
    const B: Mac = Mac([2, 0, 0, 0, 0, 0xb]);

    #[test]
    fn a_path_between_ipv4_gids_is_ipv4_and_its_port_is_in_the_dynamic_range() {
        let p = Path::new(A, B, v4(1), v4(2), 0x11, 0x22, (0, 0, 0));
        assert_eq!(
            p.net,
            Network::V4 {
                src: [10, 0, 0, 1],
                dst: [10, 0, 0, 2],
                tos: 0,
                ttl: 64,
                ident: 0,
                dont_fragment: true,
            }
        );
        assert!(p.udp_src_port >= SPORT_MIN);
        // the same flow the other way round hashes to the same port (rxe's symmetry)
        let back = Path::new(B, A, v4(2), v4(1), 0x22, 0x11, (0, 0, 0));
        assert_eq!(p.udp_src_port, back.udp_src_port);
        let six = Path::new(A, B, Gid([0xfe; 16]), v4(2), 1, 2, (3, 0x12345, 9));
        assert!(matches!(
            six.net,
            Network::V6 {
                traffic_class: 3,
                flow_label: 0x12345,
                hop_limit: 9,
                ..
            }
        ));
    }

    #[test]
    fn an_engine_packet_framed_on_a_path_decodes_back_and_a_flipped_bit_is_a_bad_icrc() {
        let path = Path::new(A, B, v4(1), v4(2), 0x11, 0x22, (0, 0, 0));
        let mut rq = Requester::new(RequesterConfig {
            dest_qpn: 0x22,
            ..Default::default()
        })
        .unwrap();
        rq.post(
            WqeId(0),
            crate::transport::requester::Message::new(MsgOp::Send, 5),
        )
        .unwrap();
        let mut actions = Vec::new();
        let out = rq.poll_transmit(Instant::now(), &mut actions).unwrap();
        let mut frame = Vec::new();
        path.frame_with(&out, &mut frame, |room| {
            room.copy_from_slice(b"hello");
            Ok(())
        })
        .unwrap();
        let p = classify(&frame).unwrap();
        assert_eq!(
            (p.bth.opcode.transport, p.bth.opcode.op),
            (Transport::Rc, Op::SendOnly)
        );
        assert_eq!((p.bth.dest_qpn, p.payload), (0x22, &b"hello"[..]));
        let back = Path::new(B, A, v4(2), v4(1), 0x22, 0x11, (0, 0, 0));
        assert!(back.answers(&p));
        assert!(!path.answers(&p));
        let mut bad = frame.clone();
        let n = bad.len();
        bad[n - 10] ^= 1; // in the payload: only the ICRC notices
        assert!(matches!(classify(&bad), Err(Dropped::Icrc(_))));
        assert!(matches!(classify(&frame[..20]), Err(Dropped::Malformed(_))));
    }
}
