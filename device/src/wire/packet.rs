//! A whole RoCEv2 frame: Ethernet, IP, UDP 4791, BTH, the extended headers its opcode
//! carries (`ext::Layout`), the payload padded to a multiple of four bytes (§9.2, PadCnt)
//! and the ICRC (Annex A17.3.3).

use super::bth::{Bth, BTH_LEN};
use super::eth::{EthHeader, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN, MIN_FRAME};
use super::ext::{self, Aeth, AtomicEth, Deth, Layout, Reth};
use super::icrc::{icrc, ICRC_LEN};
use super::ip::Network;
use super::udp::{UdpHeader, ROCE_V2_PORT, UDP_LEN};
use super::WireError;
use crate::addr::Mac;

/// One packet, every header decoded. The optional headers present must be exactly those
/// of the opcode (`encode` refuses others; `decode` yields exactly those). The payload is
/// owned (`Packet`, what is built and kept) or borrowed from the frame it was parsed from
/// (`Packet<&[u8]>`, what the receive path works on: a frame is parsed once and its
/// payload never copied before placement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<P = Vec<u8>> {
    pub src_mac: Mac,
    pub dst_mac: Mac,
    pub net: Network,
    pub udp_src_port: u16,
    pub bth: Bth,
    pub deth: Option<Deth>,
    /// XRCETH: the XRC SRQ the request is for.
    pub xrc_srqn: Option<u32>,
    pub reth: Option<Reth>,
    pub atomic_eth: Option<AtomicEth>,
    pub aeth: Option<Aeth>,
    /// AtomicAckETH: the original value of the target word.
    pub atomic_ack: Option<u64>,
    /// ImmDt, in network order as the consumer gave it.
    pub imm: Option<[u8; 4]>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
    pub payload: P,
}

impl Packet {
    /// A packet with no extended header and no payload (callers add what the opcode needs).
    pub fn new(src_mac: Mac, dst_mac: Mac, net: Network, udp_src_port: u16, bth: Bth) -> Packet {
        Packet {
            src_mac,
            dst_mac,
            net,
            udp_src_port,
            bth,
            deth: None,
            xrc_srqn: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
            payload: Vec::new(),
        }
    }

    /// The packet with its payload borrowed, as the receive path takes packets.
    pub fn view(&self) -> Packet<&[u8]> {
        self.with_payload(&self.payload[..])
    }

    /// The packet a frame holds, checked throughout (`parse`), its payload copied out.
    pub fn decode(frame: &[u8]) -> Result<Packet, WireError> {
        Packet::parse(frame).map(|p| p.owned())
    }
}

impl<P> Packet<P> {
    /// The same headers with `payload`.
    fn with_payload<Q>(&self, payload: Q) -> Packet<Q> {
        Packet {
            src_mac: self.src_mac,
            dst_mac: self.dst_mac,
            net: self.net,
            udp_src_port: self.udp_src_port,
            bth: self.bth,
            deth: self.deth,
            xrc_srqn: self.xrc_srqn,
            reth: self.reth,
            atomic_eth: self.atomic_eth,
            aeth: self.aeth,
            atomic_ack: self.atomic_ack,
            imm: self.imm,
            ieth: self.ieth,
            payload,
        }
    }
}

impl<P: AsRef<[u8]>> Packet<P> {
    /// The frame, from the destination MAC to the ICRC.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// `encode` into `out` (cleared first), reusing its allocation.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        let payload = self.payload.as_ref();
        self.encode_with(out, payload.len(), |room| {
            room.copy_from_slice(payload);
            Ok(())
        })
    }

    /// The frame into `out` (cleared first) with a payload of `len` bytes that `fill`
    /// writes into its place (`self.payload` is not used): a payload read straight from
    /// where it lives into the frame. `fill`'s error is returned, and `out` is then
    /// unusable.
    pub fn encode_with(
        &self,
        out: &mut Vec<u8>,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        out.clear();
        let layout = Layout::of(self.bth.opcode);
        self.check_headers(&layout, len)?;
        let pad = (4 - len % 4) % 4;
        let transport = BTH_LEN + self.ext_len() + len + pad + ICRC_LEN;
        let udp_len = UDP_LEN + transport;
        let udp_len16 = u16::try_from(udp_len).map_err(|_| WireError::TooLong(len))?;
        out.reserve(ETH_LEN + self.net.header_len() + udp_len);
        let v6 = matches!(self.net, Network::V6 { .. });
        EthHeader {
            dst: self.dst_mac,
            src: self.src_mac,
            ethertype: if v6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 },
        }
        .encode(out);
        self.net.encode(udp_len, out)?;
        UdpHeader {
            src_port: self.udp_src_port,
            dst_port: ROCE_V2_PORT,
            length: udp_len16,
            checksum: 0,
        }
        .encode(out);
        self.bth.encode(pad, out)?;
        if let Some(d) = &self.deth {
            ext::encode_deth(d, out);
        }
        if let Some(srqn) = self.xrc_srqn {
            ext::encode_xrceth(srqn, out);
        }
        if let Some(r) = &self.reth {
            ext::encode_reth(r, out);
        }
        if let Some(a) = &self.atomic_eth {
            ext::encode_atomic_eth(a, out);
        }
        if let Some(a) = &self.aeth {
            ext::encode_aeth(a, out);
        }
        if let Some(v) = self.atomic_ack {
            out.extend_from_slice(&v.to_be_bytes());
        }
        if let Some(imm) = self.imm {
            out.extend_from_slice(&imm);
        }
        if let Some(rkey) = self.ieth {
            out.extend_from_slice(&rkey.to_be_bytes());
        }
        let at = out.len();
        out.resize(at + len + pad, 0);
        fill(&mut out[at..at + len])?;
        let crc = icrc(&out[ETH_LEN..], v6).ok_or(WireError::TooLong(0))?;
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Bytes of the extended headers present.
    fn ext_len(&self) -> usize {
        let n = |present: bool, len: usize| if present { len } else { 0 };
        n(self.deth.is_some(), ext::DETH_LEN)
            + n(self.xrc_srqn.is_some(), ext::XRCETH_LEN)
            + n(self.reth.is_some(), ext::RETH_LEN)
            + n(self.atomic_eth.is_some(), ext::ATOMIC_ETH_LEN)
            + n(self.aeth.is_some(), ext::AETH_LEN)
            + n(self.atomic_ack.is_some(), ext::ATOMIC_ACK_ETH_LEN)
            + n(self.imm.is_some(), ext::IMM_LEN)
            + n(self.ieth.is_some(), ext::IETH_LEN)
    }

    /// The headers present are exactly the opcode's, and a payload (of `len` bytes) only
    /// where it has one.
    fn check_headers(&self, layout: &Layout, len: usize) -> Result<(), WireError> {
        let opcode = self.bth.opcode.name();
        let checks = [
            ("DETH", layout.deth, self.deth.is_some()),
            ("XRCETH", layout.xrceth, self.xrc_srqn.is_some()),
            ("RETH", layout.reth, self.reth.is_some()),
            ("AtomicETH", layout.atomic_eth, self.atomic_eth.is_some()),
            ("AETH", layout.aeth, self.aeth.is_some()),
            ("AtomicAckETH", layout.atomic_ack, self.atomic_ack.is_some()),
            ("ImmDt", layout.imm, self.imm.is_some()),
            ("IETH", layout.ieth, self.ieth.is_some()),
        ];
        for (header, wanted, present) in checks {
            match (wanted, present) {
                (true, false) => return Err(WireError::MissingHeader { opcode, header }),
                (false, true) => return Err(WireError::ExtraHeader { opcode, header }),
                _ => {}
            }
        }
        if !layout.payload && len != 0 {
            return Err(WireError::UnexpectedPayload { opcode, len });
        }
        for (what, v) in [
            ("DETH source QPN", self.deth.map(|d| d.src_qpn)),
            ("XRC SRQ number", self.xrc_srqn),
            ("AETH MSN", self.aeth.map(|a| a.msn)),
        ] {
            if let Some(v) = v.filter(|v| v & !0xFF_FFFF != 0) {
                return Err(WireError::Range {
                    what,
                    value: u64::from(v),
                });
            }
        }
        Ok(())
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The packet a frame holds, checked throughout: lengths of every layer, the IPv4
    /// checksum, UDP port 4791, a known opcode with exactly its headers, the pad, the ICRC.
    /// The payload is borrowed from `frame`.
    pub fn parse(frame: &'a [u8]) -> Result<Packet<&'a [u8]>, WireError> {
        let eth = EthHeader::decode(frame)?;
        let v6 = match eth.ethertype {
            ETHERTYPE_IPV4 => false,
            ETHERTYPE_IPV6 => true,
            other => return Err(WireError::EtherType(other)),
        };
        let (net, ip_payload) = Network::decode(frame, ETH_LEN, v6)?;
        let udp_at = ETH_LEN + net.header_len();
        let after_ip = frame.len() - udp_at.min(frame.len());
        if ip_payload > after_ip {
            return Err(WireError::Length {
                what: "IP payload",
                claimed: ip_payload,
                actual: after_ip,
            });
        }
        let end = udp_at + ip_payload;
        if end < frame.len() && frame.len() > MIN_FRAME {
            return Err(WireError::Trailing(frame.len() - end));
        }
        let ip_packet = &frame[ETH_LEN..end];
        let udp = UdpHeader::decode(frame, udp_at)?;
        if usize::from(udp.length) != ip_payload {
            return Err(WireError::Length {
                what: "UDP",
                claimed: usize::from(udp.length),
                actual: ip_payload,
            });
        }
        if udp.dst_port != ROCE_V2_PORT {
            return Err(WireError::UdpPort(udp.dst_port));
        }
        let bth_at = udp_at + UDP_LEN;
        // The transport part ends before the ICRC.
        let icrc_at = end
            .checked_sub(ICRC_LEN)
            .filter(|&at| at >= bth_at + BTH_LEN)
            .ok_or(WireError::Truncated {
                what: "BTH and ICRC",
                need: BTH_LEN + ICRC_LEN,
                have: end.saturating_sub(bth_at),
            })?;
        let body = &frame[..icrc_at];
        let (bth, pad) = Bth::decode(body, bth_at)?;
        let layout = Layout::of(bth.opcode);
        let mut at = bth_at + BTH_LEN;
        let mut next = |present: bool, len: usize| {
            let here = at;
            if present {
                at += len;
            }
            present.then_some(here)
        };
        let deth = next(layout.deth, ext::DETH_LEN);
        let xrc = next(layout.xrceth, ext::XRCETH_LEN);
        let reth = next(layout.reth, ext::RETH_LEN);
        let atomic_eth = next(layout.atomic_eth, ext::ATOMIC_ETH_LEN);
        let aeth = next(layout.aeth, ext::AETH_LEN);
        let atomic_ack = next(layout.atomic_ack, ext::ATOMIC_ACK_ETH_LEN);
        let imm = next(layout.imm, ext::IMM_LEN);
        let ieth = next(layout.ieth, ext::IETH_LEN);
        let mut packet = Packet {
            src_mac: eth.src,
            dst_mac: eth.dst,
            net,
            udp_src_port: udp.src_port,
            bth,
            deth: deth.map(|at| ext::decode_deth(body, at)).transpose()?,
            xrc_srqn: xrc.map(|at| ext::decode_xrceth(body, at)).transpose()?,
            reth: reth.map(|at| ext::decode_reth(body, at)).transpose()?,
            atomic_eth: atomic_eth
                .map(|at| ext::decode_atomic_eth(body, at))
                .transpose()?,
            aeth: aeth.map(|at| ext::decode_aeth(body, at)).transpose()?,
            atomic_ack: atomic_ack
                .map(|at| ext::decode_u64(body, at, "AtomicAckETH"))
                .transpose()?,
            imm: imm
                .map(|at| ext::decode_u32(body, at, "ImmDt").map(u32::to_be_bytes))
                .transpose()?,
            ieth: ieth
                .map(|at| ext::decode_u32(body, at, "IETH"))
                .transpose()?,
            payload: &[][..],
        };
        let rest = body.get(at..).unwrap_or_default();
        let len = rest.len().checked_sub(pad).ok_or(WireError::Pad {
            pad,
            payload: rest.len(),
        })?;
        if !layout.payload && !rest.is_empty() {
            return Err(WireError::UnexpectedPayload {
                opcode: bth.opcode.name(),
                len: rest.len(),
            });
        }
        let found = u32::from_le_bytes([
            frame[icrc_at],
            frame[icrc_at + 1],
            frame[icrc_at + 2],
            frame[icrc_at + 3],
        ]);
        let computed = icrc(&ip_packet[..icrc_at - ETH_LEN], v6).unwrap_or(!found);
        if found != computed {
            return Err(WireError::Icrc { found, computed });
        }
        packet.payload = &rest[..len];
        Ok(packet)
    }

    /// The packet with its payload copied out (to keep it beyond the frame).
    pub fn owned(&self) -> Packet {
        self.with_payload(self.payload.to_vec())
    }
}
