//! UD and GSI datagrams on the wire (IBTA Vol 1 §9.8.4, unreliable datagram; Annex A17
//! for RoCEv2): a datagram to a GID no device of this process holds leaves as one UD
//! SEND Only (with immediate) packet with its DETH; a UD packet that comes in is
//! delivered by the in-process datagram steps (`datapath::datagram::deliver`: Q_Key
//! check, one receive WQE, the GRH area from the packet's IP header), with the payload
//! taken from the frame. QP1 is the GSI QP: CM MADs reach the guest's ib_cm this way.
//!
//! Delivery stays unreliable, as on any wire: a datagram that finds no taker is dropped
//! and counted (`DatagramsDropped`), and nothing is sent back.

use super::frames::Path;
use super::WireDevice;
use crate::addr::{Address, Gid, Mac};
use crate::datapath::datagram::{self, Datagram, Payload, Send};
use crate::datapath::grh::Grh;
use crate::datapath::responder::Response;
use crate::rnic::Rnic;
use crate::wire::bth::{Op, DEFAULT_PKEY, PSN_MASK, QPN_MASK};
use crate::wire::{Bth, Deth, Network, Opcode, Packet, Transport};

/// Sends datagram `s` (PSN `psn`) out of `wire`. The sender's answer: Done (it left, or
/// it was dropped as undeliverable), or LocalFault (its own memory could not be read).
pub fn send(wire: &WireDevice, rnic: &Rnic, s: &Send, psn: u32) -> Response {
    let dg = s.dg;
    let (Some(grh), Some(src_mac)) = (dg.grh, rnic.link().mac()) else {
        datagram::dropped(rnic, "no GRH or no MAC for the wire", dg.dest_qpn);
        return Response::Done;
    };
    if dg.dmac == Mac::default() {
        datagram::dropped(rnic, "no destination MAC for the wire", dg.dest_qpn);
        return Response::Done;
    }
    let Some(payload) = s.payload.to_vec(s.len) else {
        return Response::LocalFault;
    };
    let path = Path::new(
        src_mac,
        dg.dmac,
        grh.sgid,
        grh.dgid,
        dg.src_qpn,
        dg.dest_qpn,
        (grh.traffic_class, grh.flow_label, grh.hop_limit),
    );
    let op = match s.imm {
        Some(_) => Op::SendOnlyImm,
        None => Op::SendOnly,
    };
    let Ok(opcode) = Opcode::new(Transport::Ud, op) else {
        return Response::Done;
    };
    let bth = Bth {
        opcode,
        solicited: s.solicited,
        migreq: true,
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn: dg.dest_qpn & QPN_MASK,
        ack_req: false,
        psn: psn & PSN_MASK,
    };
    let mut p = Packet::new(path.src_mac, path.dst_mac, path.net, path.udp_src_port, bth);
    p.deth = Some(Deth {
        qkey: dg.qkey,
        src_qpn: dg.src_qpn & QPN_MASK,
    });
    p.imm = s.imm;
    p.payload = payload;
    match p.encode() {
        Ok(frame) => super::send_all(wire, rnic, vec![frame]),
        Err(e) => datagram::dropped(rnic, &format!("not encodable: {e}"), dg.dest_qpn),
    }
    Response::Done
}

/// Whether a received packet is a datagram (UD transport) for `receive`.
pub fn is_datagram(p: &Packet<&[u8]>) -> bool {
    p.bth.opcode.transport == Transport::Ud
}

/// Delivers the UD packet `p` (decoded, its ICRC checked) at `rnic`. Takes the device
/// lock itself: called with no lock held.
pub fn receive(rnic: &Rnic, p: &Packet<&[u8]>) {
    let Some(dg) = received(p) else {
        datagram::dropped(rnic, "malformed UD packet", p.bth.dest_qpn);
        return;
    };
    let send = Send {
        dg: &dg,
        len: p.payload.len() as u64,
        imm: p.imm,
        solicited: p.bth.solicited,
        payload: Payload::Bytes(p.payload),
    };
    datagram::deliver(rnic, &send);
}

/// The datagram `p` carries as its receiver sees it, or None for one no UD QP may take:
/// not a SEND Only, no DETH, a P_Key other than the default (full or limited), or a
/// payload over the datagram limit.
fn received(p: &Packet<&[u8]>) -> Option<Datagram> {
    let op = p.bth.opcode.op;
    let deth = p.deth?;
    if !matches!(op, Op::SendOnly | Op::SendOnlyImm)
        || p.bth.pkey & 0x7FFF != DEFAULT_PKEY & 0x7FFF
        || p.payload.len() > vrnic_hw::UD_MAX_PAYLOAD as usize
    {
        return None;
    }
    let (sgid, dgid, traffic_class, flow_label, hop_limit) = match p.net {
        Network::V4 {
            src, dst, tos, ttl, ..
        } => (Gid::from_ipv4(src), Gid::from_ipv4(dst), tos, 0, ttl),
        Network::V6 {
            src,
            dst,
            traffic_class,
            flow_label,
            hop_limit,
        } => (Gid(src), Gid(dst), traffic_class, flow_label, hop_limit),
    };
    Some(Datagram {
        dest: Address::Gid(dgid),
        dest_qpn: p.bth.dest_qpn,
        src_qpn: deth.src_qpn,
        qkey: deth.qkey,
        sl: 0,
        slid: 0,
        grh: Some(Grh {
            sgid,
            dgid,
            traffic_class,
            flow_label,
            hop_limit,
            roce: true,
        }),
        dmac: p.dst_mac,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(op: Op, pkey: u16) -> Packet {
        let bth = Bth {
            opcode: Opcode::new(Transport::Ud, op).unwrap(),
            solicited: true,
            migreq: false,
            pkey,
            fecn: false,
            becn: false,
            dest_qpn: 1,
            ack_req: false,
            psn: 7,
        };
        let net = Network::V4 {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            tos: 0,
            ttl: 64,
            ident: 9,
            dont_fragment: true,
        };
        let mut p = Packet::new(
            Mac([2, 0, 0, 0, 0, 1]),
            Mac([2, 0, 0, 0, 0, 2]),
            net,
            0xC001,
            bth,
        );
        p.deth = Some(Deth {
            qkey: vrnic_hw::GSI_QKEY,
            src_qpn: 1,
        });
        p.payload = vec![1; 256];
        p
    }

    #[test]
    fn a_gsi_mad_from_the_wire_names_its_sender_by_deth_and_ipv4_mapped_gids() {
        let dg = received(&packet(Op::SendOnly, DEFAULT_PKEY).view()).unwrap();
        assert_eq!(
            (dg.dest_qpn, dg.src_qpn, dg.qkey),
            (1, 1, vrnic_hw::GSI_QKEY)
        );
        let grh = dg.grh.unwrap();
        assert_eq!(grh.sgid, Gid::from_ipv4([10, 0, 0, 1]));
        assert_eq!(grh.dgid, Gid::from_ipv4([10, 0, 0, 2]));
        assert_eq!(grh.network_type(), vrnic_hw::NetworkType::Ipv4);
        // the limited membership form of the default P_Key is a member too
        assert!(received(&packet(Op::SendOnly, 0x7FFF).view()).is_some());
    }

    #[test]
    fn a_ud_packet_with_another_pkey_no_deth_or_over_the_limit_is_refused() {
        assert!(received(&packet(Op::SendOnly, 0x8001).view()).is_none());
        let mut p = packet(Op::SendOnlyImm, DEFAULT_PKEY);
        p.deth = None;
        assert!(received(&p.view()).is_none());
        let mut big = packet(Op::SendOnly, DEFAULT_PKEY);
        big.payload = vec![0; vrnic_hw::UD_MAX_PAYLOAD as usize + 1];
        assert!(received(&big.view()).is_none());
    }
}
