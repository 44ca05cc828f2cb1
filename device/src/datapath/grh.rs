//! The 40 bytes in front of every received datagram (SPEC "Datagrams (UD and GSI)"): what a
//! RoCE v2 wire would carry (an IPv4 header at offset 20, or an IPv6 header), or an IB GRH.
//! ib_core parses them (ib_init_ah_from_wc), so the IPv4 checksum must be valid.

use crate::addr::Gid;
use vrnic_hw::NetworkType;

pub const GRH_LEN: usize = vrnic_hw::GRH_SIZE as usize;
/// Transport headers a datagram carries on a wire after the network header: BTH and DETH,
/// ImmDt when it has immediate data, and the ICRC at its end.
const BTH: u32 = 12;
const DETH: u32 = 8;
const IMM_DT: u32 = 4;
const ICRC: u32 = 4;
const UDP: u32 = 8;
const IPV4_HEADER: u32 = 20;
const IP_PROTO_UDP: u8 = 17;
/// IB GRH next header: the BTH (IBTA 8.3.1).
const IB_NEXT_HEADER: u8 = 0x1B;

/// The network header of one datagram, as the sender's address vector describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    pub sgid: Gid,
    pub dgid: Gid,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
    /// RoCE v2 (UDP/IP) or IB.
    pub roce: bool,
}

impl Grh {
    /// IPv4 when both GIDs are IPv4-mapped (RoCE v2 only), else IPv6 (or IB).
    pub fn network_type(&self) -> NetworkType {
        match (self.roce, self.sgid.ipv4(), self.dgid.ipv4()) {
            (false, ..) => NetworkType::Ib,
            (true, Some(_), Some(_)) => NetworkType::Ipv4,
            (true, ..) => NetworkType::Ipv6,
        }
    }

    /// The 40 bytes for a datagram of `payload` bytes (with immediate data or not).
    pub fn bytes(&self, payload: u32, imm: bool) -> [u8; GRH_LEN] {
        let transport = BTH + DETH + if imm { IMM_DT } else { 0 } + payload + ICRC;
        let mut out = [0u8; GRH_LEN];
        match self.network_type() {
            NetworkType::Ipv4 => self.ipv4(&mut out[20..], transport + UDP),
            NetworkType::Ib => self.ipv6(&mut out, transport, IB_NEXT_HEADER),
            _ => self.ipv6(&mut out, transport + UDP, IP_PROTO_UDP),
        }
        out
    }

    fn ipv6(&self, out: &mut [u8], payload_len: u32, next_header: u8) {
        let word = 6 << 28 | u32::from(self.traffic_class) << 20 | (self.flow_label & 0xF_FFFF);
        out[0..4].copy_from_slice(&word.to_be_bytes());
        out[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
        out[6] = next_header;
        out[7] = self.hop_limit;
        out[8..24].copy_from_slice(&self.sgid.0);
        out[24..40].copy_from_slice(&self.dgid.0);
    }

    fn ipv4(&self, out: &mut [u8], udp_len: u32) {
        let total = (IPV4_HEADER + udp_len) as u16;
        out[0] = 0x45;
        out[1] = self.traffic_class;
        out[2..4].copy_from_slice(&total.to_be_bytes());
        // Identification 0, flags DF, fragment offset 0.
        out[6] = 0x40;
        out[8] = self.hop_limit;
        out[9] = IP_PROTO_UDP;
        out[12..16].copy_from_slice(&self.sgid.0[12..]);
        out[16..20].copy_from_slice(&self.dgid.0[12..]);
        let sum = checksum(&out[..20]);
        out[10..12].copy_from_slice(&sum.to_be_bytes());
    }
}

/// The IPv4 header checksum (RFC 791): the one's complement of the one's complement sum of
/// the header's 16-bit words.
fn checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(ip: [u8; 4]) -> Gid {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        Gid(g)
    }

    #[test]
    fn the_ipv4_header_sits_at_offset_20_with_a_valid_checksum() {
        let grh = Grh {
            sgid: v4([192, 168, 0, 1]),
            dgid: v4([192, 168, 0, 199]),
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            roce: true,
        };

        let b = grh.bytes(100, false);

        assert_eq!(grh.network_type(), NetworkType::Ipv4);
        assert_eq!(&b[..20], &[0; 20]);
        // 20 + 8 + 12 + 8 + 100 + 4 = 152 bytes of IP packet.
        assert_eq!(
            &b[20..32],
            &[0x45, 0, 0, 152, 0, 0, 0x40, 0, 64, 17, b[30], b[31]]
        );
        assert_eq!(checksum(&b[20..40]), 0, "a valid header sums to 0xffff");
        assert_eq!(&b[32..40], &[192, 168, 0, 1, 192, 168, 0, 199]);
    }

    #[test]
    fn a_known_ipv4_header_gets_its_known_checksum() {
        // The classic example header (Wikipedia, "IPv4 header checksum").
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00,
            0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(checksum(&h), 0);
    }
}
