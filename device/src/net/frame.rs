//! What the switch reads of an Ethernet frame: its two MACs, and whether it is RoCEv2
//! (UDP to port 4791), which a RoCE device's wire engine takes instead of the guest.

use crate::addr::Mac;

/// Destination MAC, source MAC, EtherType.
pub const HEADER_LEN: usize = 14;
/// The UDP port of RoCEv2 (IBTA annex A17).
pub const ROCE_V2_PORT: u16 = 4791;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_UDP: u8 = 17;

/// The destination and source MACs, or None for a frame too short to have them.
pub fn macs(frame: &[u8]) -> Option<(Mac, Mac)> {
    let dst = frame.get(0..6)?.try_into().ok()?;
    let src = frame.get(6..12)?.try_into().ok()?;
    (frame.len() >= HEADER_LEN).then_some((Mac(dst), Mac(src)))
}

/// True for a group address: broadcast and multicast (I/G bit).
pub fn is_group(mac: &Mac) -> bool {
    mac.0[0] & 1 != 0
}

fn be16(frame: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?))
}

/// True if the frame is UDP to port 4791 over IPv4 (not a later fragment) or IPv6 (UDP
/// as the first next header, as RoCEv2 sends it), with at most one VLAN tag.
pub fn is_roce_v2(frame: &[u8]) -> bool {
    roce_v2_dst_port(frame) == Some(ROCE_V2_PORT)
}

fn roce_v2_dst_port(frame: &[u8]) -> Option<u16> {
    let mut at = 12;
    let mut ethertype = be16(frame, at)?;
    if ethertype == ETHERTYPE_VLAN {
        at += 4;
        ethertype = be16(frame, at)?;
    }
    let ip = at + 2;
    let udp = match ethertype {
        ETHERTYPE_IPV4 => {
            let vihl = *frame.get(ip)?;
            let fragment = be16(frame, ip + 6)? & 0x1fff;
            if vihl >> 4 != 4 || *frame.get(ip + 9)? != IPPROTO_UDP || fragment != 0 {
                return None;
            }
            ip + usize::from(vihl & 0xf) * 4
        }
        ETHERTYPE_IPV6 => {
            if *frame.get(ip)? >> 4 != 6 || *frame.get(ip + 6)? != IPPROTO_UDP {
                return None;
            }
            ip + 40
        }
        _ => return None,
    };
    be16(frame, udp + 2)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet/IPv4/UDP frame from `src` to `dst` with UDP destination port `port`.
    pub(crate) fn udp4(dst: [u8; 6], src: [u8; 6], port: u16) -> Vec<u8> {
        let mut f = [dst, src].concat();
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = IPPROTO_UDP;
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0x12, 0x34]);
        f.extend_from_slice(&port.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    #[test]
    fn roce_v2_is_udp_4791_over_ipv4_or_ipv6_and_nothing_else() {
        let a = [2, 0, 0, 0, 0, 1];
        let b = [2, 0, 0, 0, 0, 2];
        assert!(is_roce_v2(&udp4(a, b, 4791)));
        assert!(!is_roce_v2(&udp4(a, b, 4790)));
        let mut fragment = udp4(a, b, 4791);
        fragment[14 + 7] = 1; // fragment offset 8: no UDP header here
        assert!(!is_roce_v2(&fragment));
        let mut v6 = [a, b].concat();
        v6.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        let mut ip = [0u8; 40];
        ip[0] = 0x60;
        ip[6] = IPPROTO_UDP;
        v6.extend_from_slice(&ip);
        v6.extend_from_slice(&[0, 1, 0x12, 0xb7, 0, 8, 0, 0]);
        assert!(is_roce_v2(&v6));
        let mut vlan = udp4(a, b, 4791);
        vlan.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        assert!(is_roce_v2(&vlan));
        let truncated = &udp4(a, b, 4791)[..30];
        assert!(!is_roce_v2(truncated));
        assert!(!is_roce_v2(&[0u8; 3]));
    }

    #[test]
    fn macs_need_a_whole_header() {
        assert_eq!(macs(&[0u8; 13]), None);
        let f = udp4([1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], 1);
        assert_eq!(
            macs(&f),
            Some((Mac([1, 2, 3, 4, 5, 6]), Mac([7, 8, 9, 10, 11, 12])))
        );
        assert!(is_group(&Mac([0xff; 6])) && is_group(&Mac([1, 0, 0x5e, 0, 0, 1])));
        assert!(!is_group(&Mac([0x52, 0x54, 0, 0, 0, 1])));
    }
}
