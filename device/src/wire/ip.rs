//! The network header of RoCEv2 (IBTA Annex A17.2): IPv4 (RFC 791) when both GIDs are
//! IPv4-mapped, else IPv6 (RFC 8200). Its protocol / next header is UDP.

use super::{take, WireError};

pub const IPV4_LEN: usize = 20;
pub const IPV6_LEN: usize = 40;
pub const PROTO_UDP: u8 = 17;
/// IPv4 flags: don't fragment.
const DF: u16 = 0x4000;

/// The IP header of one packet (lengths and checksum follow from the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
        /// DSCP and ECN (the GRH's traffic class).
        tos: u8,
        ttl: u8,
        /// Identification: 0 from vrnic (DF is set, so nothing is ever reassembled: RFC
        /// 6864); Linux numbers its datagrams, and a decoded header keeps the number.
        ident: u16,
        /// DF (don't fragment): vrnic and Linux's rxe set it.
        dont_fragment: bool,
    },
    V6 {
        src: [u8; 16],
        dst: [u8; 16],
        traffic_class: u8,
        /// 20 bits.
        flow_label: u32,
        hop_limit: u8,
    },
}

impl Network {
    pub fn header_len(&self) -> usize {
        match self {
            Network::V4 { .. } => IPV4_LEN,
            Network::V6 { .. } => IPV6_LEN,
        }
    }

    /// The header for `payload` bytes of UDP datagram.
    pub fn encode(&self, payload: usize, out: &mut Vec<u8>) -> Result<(), WireError> {
        match *self {
            Network::V4 {
                src,
                dst,
                tos,
                ttl,
                ident,
                dont_fragment,
            } => {
                let total =
                    u16::try_from(IPV4_LEN + payload).map_err(|_| WireError::TooLong(payload))?;
                let start = out.len();
                out.extend_from_slice(&[0x45, tos]);
                out.extend_from_slice(&total.to_be_bytes());
                out.extend_from_slice(&ident.to_be_bytes());
                let flags = if dont_fragment { DF } else { 0 };
                out.extend_from_slice(&flags.to_be_bytes());
                out.extend_from_slice(&[ttl, PROTO_UDP, 0, 0]);
                out.extend_from_slice(&src);
                out.extend_from_slice(&dst);
                let sum = checksum(&out[start..]);
                out[start + 10..start + 12].copy_from_slice(&sum.to_be_bytes());
            }
            Network::V6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
            } => {
                if flow_label > 0xF_FFFF {
                    return Err(WireError::Range {
                        what: "IPv6 flow label",
                        value: u64::from(flow_label),
                    });
                }
                let len = u16::try_from(payload).map_err(|_| WireError::TooLong(payload))?;
                let word = 6 << 28 | u32::from(traffic_class) << 20 | flow_label;
                out.extend_from_slice(&word.to_be_bytes());
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&[PROTO_UDP, hop_limit]);
                out.extend_from_slice(&src);
                out.extend_from_slice(&dst);
            }
        }
        Ok(())
    }

    /// The header at `at` of `frame` and the length of the payload it claims (checked
    /// against what follows it by the caller). `v6`: the EtherType said IPv6.
    pub fn decode(frame: &[u8], at: usize, v6: bool) -> Result<(Network, usize), WireError> {
        if v6 {
            let b: [u8; IPV6_LEN] = take(frame, at, "IPv6 header")?;
            let word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let version = (word >> 28) as u8;
            if version != 6 {
                return Err(WireError::IpVersion {
                    found: version,
                    expected: "IPv6",
                });
            }
            if b[6] != PROTO_UDP {
                return Err(WireError::NotUdp(b[6]));
            }
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&b[8..24]);
            dst.copy_from_slice(&b[24..40]);
            let net = Network::V6 {
                src,
                dst,
                traffic_class: (word >> 20) as u8,
                flow_label: word & 0xF_FFFF,
                hop_limit: b[7],
            };
            Ok((net, usize::from(u16::from_be_bytes([b[4], b[5]]))))
        } else {
            let b: [u8; IPV4_LEN] = take(frame, at, "IPv4 header")?;
            let version = b[0] >> 4;
            if version != 4 {
                return Err(WireError::IpVersion {
                    found: version,
                    expected: "IPv4",
                });
            }
            if b[0] & 0xF != 5 {
                return Err(WireError::Ipv4HeaderLength(b[0] & 0xF));
            }
            let frag = u16::from_be_bytes([b[6], b[7]]);
            if frag & !DF != 0 {
                return Err(WireError::Fragment(frag));
            }
            if b[9] != PROTO_UDP {
                return Err(WireError::NotUdp(b[9]));
            }
            let found = u16::from_be_bytes([b[10], b[11]]);
            let mut zeroed = b;
            zeroed[10] = 0;
            zeroed[11] = 0;
            let computed = checksum(&zeroed);
            if found != computed {
                return Err(WireError::Ipv4Checksum { found, computed });
            }
            let total = usize::from(u16::from_be_bytes([b[2], b[3]]));
            let payload = total.checked_sub(IPV4_LEN).ok_or(WireError::Length {
                what: "IPv4 total",
                claimed: total,
                actual: frame.len() - at,
            })?;
            let net = Network::V4 {
                src: [b[12], b[13], b[14], b[15]],
                dst: [b[16], b[17], b[18], b[19]],
                tos: b[1],
                ttl: b[8],
                ident: u16::from_be_bytes([b[4], b[5]]),
                dont_fragment: frag & DF != 0,
            };
            Ok((net, payload))
        }
    }
}

/// The IPv4 header checksum (RFC 791, RFC 1071): the one's complement of the one's
/// complement sum of the header's 16-bit words, its checksum field taken as 0.
pub fn checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ipv4_checksum_matches_rfc_1071s_worked_example() {
        // The classic header from RFC 1071 discussions (Wikipedia's IPv4 checksum example).
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
    }

    #[test]
    fn a_header_with_a_wrong_checksum_options_or_fragments_is_refused() {
        let net = Network::V4 {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            tos: 0,
            ttl: 64,
            ident: 0,
            dont_fragment: true,
        };
        let mut good = Vec::new();
        net.encode(8, &mut good).unwrap();
        assert_eq!(Network::decode(&good, 0, false), Ok((net, 8)));
        let mut bad = good.clone();
        bad[8] = 63;
        assert!(matches!(
            Network::decode(&bad, 0, false),
            Err(WireError::Ipv4Checksum { .. })
        ));
        let mut opts = good.clone();
        opts[0] = 0x46;
        assert_eq!(
            Network::decode(&opts, 0, false),
            Err(WireError::Ipv4HeaderLength(6))
        );
        let mut frag = good;
        frag[6] = 0x20;
        assert!(matches!(
            Network::decode(&frag, 0, false),
            Err(WireError::Fragment(0x2000))
        ));
    }
}
