//! The packets a RoCEv2 wire would carry for each transfer the data path executes, handed
//! to the taps (`wire::tap`) of the devices at both ends: the request segmented at the
//! QP's path MTU with the QP's PSNs, and what the target answered (IBTA Vol 1 §9.7, the
//! reliable service; §9.8, the unreliable ones).
//!
//! - Requests: SEND/WRITE First, Middle, Last or Only by the packet's place in the message
//!   (§9.2.1); RETH on the first WRITE packet (the whole message's address and length) and
//!   on each READ request; ImmDt on the last packet with immediate data, IETH on the last
//!   of a SEND_WITH_INV (§9.3); AckReq on the last packet of each chunk. The data path
//!   moves a long message in chunks (`CHUNK`) and a long READ as one READ request per
//!   chunk, so the wire shows it as those requests.
//! - RC and XRC answers: one ACK per chunk, for its last PSN (the responder coalesces the
//!   chunk's packets, §9.7.5), with the MSN counting completed messages; READ responses
//!   (First/Middle/Last or Only, AETH on all but Middle, §9.7.5) and ATOMIC
//!   Acknowledge with the original value; an RNR NAK with the target's timer; a NAK
//!   (invalid request, remote access, remote operational error) for a refusal. A request
//!   the target drops (no such QP, not connected, out of sequence) gets nothing back, as
//!   the data path's requester times out. UC gets no answers.
//! - UD and GSI: one SEND Only (with immediate) with DETH per datagram.
//!
//! Addresses: RoCE-mode devices use their MACs and the QP's GIDs (IPv4 if both are
//! IPv4-mapped, else IPv6); IB-mode devices, which have no Ethernet, the same framing with
//! the MAC 02:00:00:00:LL:LL and the IPv6 link-local address of its EUI-64, both derived
//! from the LID. TTL/hop limit 64, traffic class and flow label 0, P_Key 0xFFFF, the UDP
//! source port from the two QPNs. An MSN starts at 0 when the capture first sees the QP.
//!
//! Off (no tap of the process on), each hook is one relaxed load.

use super::datagram::Send;
use super::responder::{Request, Response};
use crate::addr::{Address, Gid, Mac};
use crate::rnic::Rnic;
use crate::wire::bth::{Op, DEFAULT_PKEY};
use crate::wire::ext::{self, AethKind, CREDITS_INVALID};
use crate::wire::{tap, udp, Aeth, AtomicEth, Bth, Deth, Network, Opcode, Packet, Reth, Transport};
use std::sync::Arc;
use vrnic_hw::{QpType, WcStatus, WrOpcode};

const HOP_LIMIT: u8 = 64;

/// A transfer between two devices and the target's answer.
#[inline]
pub fn exchange(
    rnic: &Rnic,
    target: &Rnic,
    req: &Request,
    dest: &Address,
    mtu: u32,
    response: Response,
) {
    if tap::any_on() {
        record_exchange(rnic, target, req, dest, mtu, response);
    }
}

/// A datagram delivered (or dropped) at `target`.
#[inline]
pub fn datagram(rnic: &Rnic, target: &Rnic, send: &Send, psn: u32, response: Response) {
    if tap::any_on() {
        record_datagram(rnic, target, send, psn, response);
    }
}

/// Hands `packets` to the taps that are on (once for a loopback), shared between them.
fn record(rnic: &Rnic, target: &Rnic, packets: Vec<Packet>) {
    let packets = Arc::new(packets);
    if rnic.tap.is_on() {
        rnic.tap.record(&packets);
    }
    if !std::ptr::eq(rnic, target) && target.tap.is_on() {
        target.tap.record(&packets);
    }
}

/// One end of a flow.
#[derive(Clone, Copy)]
struct End {
    mac: Mac,
    gid: Gid,
}

/// An IB-mode port's stand-in Ethernet identity: 02:00:00:00:LL:LL and fe80::EUI-64.
fn lid_end(lid: u16) -> End {
    let [hi, lo] = lid.to_be_bytes();
    let mac = Mac([0x02, 0, 0, 0, hi, lo]);
    let mut gid = [0u8; 16];
    gid[..2].copy_from_slice(&[0xfe, 0x80]);
    gid[8..].copy_from_slice(&mac.eui64());
    End { mac, gid: Gid(gid) }
}

fn network(src: &End, dst: &End) -> Network {
    match (src.gid.ipv4(), dst.gid.ipv4()) {
        (Some(src), Some(dst)) => Network::V4 {
            src,
            dst,
            tos: 0,
            ttl: HOP_LIMIT,
            ident: 0,
            dont_fragment: true,
        },
        _ => Network::V6 {
            src: src.gid.0,
            dst: dst.gid.0,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: HOP_LIMIT,
        },
    }
}

/// The requester's and the target's ends: RoCE by MAC and GID, IB by LID.
fn ends(rnic: &Rnic, target: &Rnic, src_gid: Option<Gid>, dest: &Address) -> (End, End) {
    match *dest {
        Address::Gid(dgid) => (
            End {
                mac: rnic.link().mac().unwrap_or_default(),
                gid: src_gid.unwrap_or_default(),
            },
            End {
                mac: target.link().mac().unwrap_or_default(),
                gid: dgid,
            },
        ),
        Address::Lid(dlid) => (lid_end(rnic.lid()), lid_end(dlid)),
    }
}

/// The packets of one flow between a requester QP and a responder QP.
struct Flow {
    requester: End,
    responder: End,
    transport: Transport,
    requester_qpn: u32,
    responder_qpn: u32,
    port: u16,
}

impl Flow {
    /// A packet of `op` with no extended header; `back`: from the responder.
    fn packet(&self, back: bool, op: Op, psn: u32) -> Option<Packet> {
        let (src, dst, qpn) = match back {
            false => (&self.requester, &self.responder, self.responder_qpn),
            true => (&self.responder, &self.requester, self.requester_qpn),
        };
        let bth = Bth {
            opcode: Opcode::new(self.transport, op).ok()?,
            solicited: false,
            migreq: true,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qpn: qpn & 0xFF_FFFF,
            ack_req: false,
            psn: psn & 0xFF_FFFF,
        };
        Some(Packet::new(
            src.mac,
            dst.mac,
            network(src, dst),
            self.port,
            bth,
        ))
    }
}

/// Reads the requester's pieces (the source of a WRITE or SEND, the destination a READ
/// or atomic filled) in order, a packet's payload at a time, straight into the payload;
/// zeros where they cannot be read.
struct Payload<'a> {
    req: &'a Request<'a>,
    piece: usize,
    /// Bytes of `piece` already taken.
    taken: u64,
}

impl<'a> Payload<'a> {
    fn new(req: &'a Request<'a>) -> Self {
        Payload {
            req,
            piece: 0,
            taken: 0,
        }
    }

    fn next(&mut self, len: u64) -> Vec<u8> {
        let mut out = vec![0u8; usize::try_from(len).unwrap_or(0)];
        let mut at = 0usize;
        while at < out.len() {
            let Some(&(addr, n)) = self.req.pieces.get(self.piece) else {
                break;
            };
            let left = n.saturating_sub(self.taken);
            let step = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(out.len() - at);
            let _ = self
                .req
                .mem
                .read(addr.wrapping_add(self.taken), &mut out[at..at + step]);
            at += step;
            self.taken += step as u64;
            if self.taken >= n {
                self.piece += 1;
                self.taken = 0;
            }
        }
        out
    }
}

/// The operation of a request packet of `opcode`, by whether it starts and ends the message.
fn segment_op(opcode: WrOpcode, first: bool, last: bool) -> Option<Op> {
    use Op::*;
    let imm = matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
    Some(match (opcode, first, last) {
        (WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv, true, false) => SendFirst,
        (WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv, false, false) => {
            SendMiddle
        }
        (WrOpcode::Send, true, true) => SendOnly,
        (WrOpcode::Send, false, true) => SendLast,
        (WrOpcode::SendWithImm, true, true) => SendOnlyImm,
        (WrOpcode::SendWithImm, false, true) => SendLastImm,
        (WrOpcode::SendWithInv, true, true) => SendOnlyInv,
        (WrOpcode::SendWithInv, false, true) => SendLastInv,
        (WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm, true, false) => WriteFirst,
        (WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm, false, false) => WriteMiddle,
        (_, true, true) if imm => WriteOnlyImm,
        (_, false, true) if imm => WriteLastImm,
        (WrOpcode::RdmaWrite, true, true) => WriteOnly,
        (WrOpcode::RdmaWrite, false, true) => WriteLast,
        _ => return None,
    })
}

fn record_exchange(
    rnic: &Rnic,
    target: &Rnic,
    req: &Request,
    dest: &Address,
    mtu: u32,
    response: Response,
) {
    if !rnic.tap.is_on() && !target.tap.is_on() {
        return;
    }
    // The requester's own memory failed: nothing left it.
    if response.answer().is_none() {
        return;
    }
    let transport = match req.transport {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::XrcTgt => Transport::Xrc,
        _ => return,
    };
    let (requester, responder) = ends(rnic, target, req.src_gid, dest);
    let flow = Flow {
        requester,
        responder,
        transport,
        requester_qpn: req.src_qpn,
        responder_qpn: req.dest_qpn,
        port: udp::flow_port(req.src_qpn, req.dest_qpn),
    };
    let mut packets = requests(&flow, req, mtu).unwrap_or_default();
    if transport != Transport::Uc {
        packets.extend(answers(&flow, target, req, mtu, response).unwrap_or_default());
    }
    record(rnic, target, packets);
}

/// The request packets of the chunk.
fn requests(flow: &Flow, req: &Request, mtu: u32) -> Option<Vec<Packet>> {
    let mtu = u64::from(mtu.max(256));
    let mut out = Vec::new();
    let xrc = flow.transport == Transport::Xrc;
    match req.opcode {
        WrOpcode::RdmaRead => {
            let mut p = flow.packet(false, Op::ReadRequest, req.psn)?;
            p.reth = Some(Reth {
                va: req.remote_addr.wrapping_add(req.offset),
                rkey: req.rkey,
                dma_len: req.chunk as u32,
            });
            p.bth.ack_req = true;
            p.xrc_srqn = req.remote_srqn.filter(|_| xrc);
            out.push(p);
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            let seg = req.atomic?;
            let cas = req.opcode == WrOpcode::AtomicCmpAndSwp;
            let op = if cas { Op::CompareSwap } else { Op::FetchAdd };
            let mut p = flow.packet(false, op, req.psn)?;
            p.atomic_eth = Some(AtomicEth {
                va: req.remote_addr,
                rkey: req.rkey,
                swap_add: if cas {
                    seg.swap.to_native()
                } else {
                    seg.compare_add.to_native()
                },
                compare: if cas { seg.compare_add.to_native() } else { 0 },
            });
            p.bth.ack_req = true;
            p.xrc_srqn = req.remote_srqn.filter(|_| xrc);
            out.push(p);
        }
        opcode => {
            let mut data = Payload::new(req);
            let end = req.offset + req.chunk;
            for i in 0..u64::from(req.packets) {
                let start = req.offset + i * mtu;
                let len = mtu.min(end.saturating_sub(start));
                let (first, last) = (start == 0, start + len == req.len);
                let op = segment_op(opcode, first, last)?;
                let psn = req.psn.wrapping_add(i as u32);
                let mut p = flow.packet(false, op, psn)?;
                let layout = ext::Layout::of(p.bth.opcode);
                if layout.reth {
                    p.reth = Some(Reth {
                        va: req.remote_addr,
                        rkey: req.rkey,
                        dma_len: u32::try_from(req.len).unwrap_or(u32::MAX),
                    });
                }
                p.imm = req.imm.filter(|_| layout.imm);
                p.ieth = layout.ieth.then_some(req.rkey);
                p.xrc_srqn = req.remote_srqn.filter(|_| xrc);
                p.bth.solicited = last && req.solicited;
                p.bth.ack_req = i + 1 == u64::from(req.packets) && flow.transport != Transport::Uc;
                p.payload = data.next(len);
                out.push(p);
            }
        }
    }
    Some(out)
}

/// What the responder sends back (RC and XRC).
fn answers(
    flow: &Flow,
    target: &Rnic,
    req: &Request,
    mtu: u32,
    response: Response,
) -> Option<Vec<Packet>> {
    let reading = req.opcode == WrOpcode::RdmaRead;
    let atomic = matches!(
        req.opcode,
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
    );
    let completes = match response {
        Response::Done => reading || atomic || req.offset + req.chunk == req.len,
        _ => false,
    };
    let msn = target.tap.msn(req.dest_qpn, completes);
    let ack = Aeth::new(
        AethKind::Ack {
            credits: CREDITS_INVALID,
        },
        msn,
    );
    let nak = |kind: AethKind| -> Option<Vec<Packet>> {
        let mut p = flow.packet(true, Op::Acknowledge, req.psn)?;
        p.aeth = Some(Aeth::new(kind, msn));
        Some(vec![p])
    };
    match response {
        Response::Done => {}
        Response::Rnr(timer) => return nak(AethKind::RnrNak { timer }),
        Response::Remote(status, _) => {
            let code = match status {
                WcStatus::RemAccessErr => ext::NAK_REMOTE_ACCESS,
                WcStatus::RemOpErr => ext::NAK_REMOTE_OPERATIONAL,
                _ => ext::NAK_INVALID_REQUEST,
            };
            return nak(AethKind::Nak { code });
        }
        Response::Unreachable | Response::LocalFault => return Some(Vec::new()),
    }
    if atomic {
        let mut p = flow.packet(true, Op::AtomicAcknowledge, req.psn)?;
        p.aeth = Some(ack);
        let old = Payload::new(req).next(8);
        p.atomic_ack = Some(u64::from_le_bytes(old.try_into().ok()?));
        return Some(vec![p]);
    }
    if !reading {
        let last = req.psn.wrapping_add(req.packets.saturating_sub(1));
        let mut p = flow.packet(true, Op::Acknowledge, last)?;
        p.aeth = Some(ack);
        return Some(vec![p]);
    }
    let mtu = u64::from(mtu.max(256));
    let mut data = Payload::new(req);
    let n = u64::from(req.packets);
    let mut out = Vec::new();
    for i in 0..n {
        let op = match (i == 0, i + 1 == n) {
            (true, true) => Op::ReadResponseOnly,
            (true, false) => Op::ReadResponseFirst,
            (false, true) => Op::ReadResponseLast,
            (false, false) => Op::ReadResponseMiddle,
        };
        let mut p = flow.packet(true, op, req.psn.wrapping_add(i as u32))?;
        p.aeth = ext::Layout::of(p.bth.opcode).aeth.then_some(ack);
        p.payload = data.next(mtu.min(req.chunk.saturating_sub(i * mtu)));
        out.push(p);
    }
    Some(out)
}

fn record_datagram(rnic: &Rnic, target: &Rnic, send: &Send, psn: u32, response: Response) {
    if (!rnic.tap.is_on() && !target.tap.is_on()) || response.answer().is_none() {
        return;
    }
    let dg = send.dg;
    let (src, dst) = match dg.grh {
        Some(grh) if grh.roce => (
            End {
                mac: rnic.link().mac().unwrap_or_default(),
                gid: grh.sgid,
            },
            End {
                mac: target.link().mac().unwrap_or_default(),
                gid: grh.dgid,
            },
        ),
        _ => (lid_end(dg.slid), lid_end(target.lid())),
    };
    let flow = Flow {
        requester: src,
        responder: dst,
        transport: Transport::Ud,
        requester_qpn: dg.src_qpn,
        responder_qpn: dg.dest_qpn,
        port: udp::flow_port(dg.src_qpn, dg.dest_qpn),
    };
    let op = match send.imm {
        Some(_) => Op::SendOnlyImm,
        None => Op::SendOnly,
    };
    let Some(mut p) = flow.packet(false, op, psn) else {
        return;
    };
    p.deth = Some(Deth {
        qkey: dg.qkey,
        src_qpn: dg.src_qpn & 0xFF_FFFF,
    });
    p.imm = send.imm;
    p.bth.solicited = send.solicited;
    // Bytes the sender's memory does not give are shown as zeros.
    let len = usize::try_from(send.len).unwrap_or(0);
    p.payload = send
        .payload
        .to_vec(send.len)
        .unwrap_or_else(|| vec![0; len]);
    record(rnic, target, vec![p]);
}
