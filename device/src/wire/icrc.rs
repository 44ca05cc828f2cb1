//! The invariant CRC (IBTA Vol 1 §7.8.1) of a RoCEv2 packet (Annex A17.3.3): the CRC-32 of
//! Ethernet (polynomial 0x04C11DB7, reflected, initial value and final XOR all ones) over
//! eight bytes of ones standing for the LRH RoCEv2 lacks, then the IP, UDP and transport
//! headers and the payload, with the fields a router may change masked to ones: IPv4
//! type of service, TTL and header checksum; IPv6 traffic class, flow label and hop
//! limit; the UDP checksum; and the BTH's reserved byte (with FECN and BECN). It is sent
//! least significant byte first, as the Ethernet FCS is. The CRC itself is the crc32fast
//! crate's (SIMD where the CPU has it).

use super::bth::BTH_LEN;
use super::ip::{IPV4_LEN, IPV6_LEN};
use super::udp::UDP_LEN;

pub const ICRC_LEN: usize = 4;

/// The ICRC of `packet`: the IP packet (from the IP header to the end of the payload and
/// pad, without the ICRC itself); `v6` says which IP header starts it. None if it is too
/// short to hold the headers the ICRC masks.
pub fn icrc(packet: &[u8], v6: bool) -> Option<u32> {
    let ip_len = if v6 { IPV6_LEN } else { IPV4_LEN };
    let fixed = ip_len + UDP_LEN + BTH_LEN;
    let mut masked = [0u8; IPV6_LEN + UDP_LEN + BTH_LEN];
    let masked = &mut masked[..fixed];
    masked.copy_from_slice(packet.get(..fixed)?);
    if v6 {
        // Version stays; traffic class and flow label (the low 28 bits of word 0), hop limit.
        masked[0] |= 0x0F;
        masked[1..4].fill(0xFF);
        masked[7] = 0xFF;
    } else {
        masked[1] = 0xFF;
        masked[8] = 0xFF;
        masked[10..12].fill(0xFF);
    }
    masked[ip_len + 6..ip_len + 8].fill(0xFF);
    masked[ip_len + UDP_LEN + 4] = 0xFF;
    // crc32fast is Ethernet's CRC-32 (initial value and final XOR included), computed
    // with the CPU's carry-less multiply where it has one: the ICRC is on every packet.
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[0xFF; 8]);
    crc.update(masked);
    crc.update(&packet[fixed..]);
    Some(crc.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crc_is_ethernets_crc32() {
        // The CRC-32 check value of "123456789" (the catalogue value of CRC-32/ISO-HDLC),
        // and zlib.crc32(bytes((i * 7 + 3) % 256 for i in range(1000))) fed in pieces.
        let mut crc = crc32fast::Hasher::new();
        crc.update(b"123456789");
        assert_eq!(crc.finalize(), 0xCBF4_3926);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut pieces = crc32fast::Hasher::new();
        for chunk in data.chunks(7) {
            pieces.update(chunk);
        }
        assert_eq!(pieces.finalize(), 0x17BC_2A46);
    }

    #[test]
    fn routers_may_change_the_masked_fields_without_changing_the_icrc() {
        // IPv4 + UDP + BTH + 4 bytes of payload.
        let mut p = vec![0u8; IPV4_LEN + UDP_LEN + BTH_LEN + 4];
        p[0] = 0x45;
        p[IPV4_LEN + UDP_LEN] = 0x04;
        let before = icrc(&p, false);
        for i in [
            1,
            8,
            10,
            11,
            IPV4_LEN + 6,
            IPV4_LEN + 7,
            IPV4_LEN + UDP_LEN + 4,
        ] {
            p[i] ^= 0x5A;
        }
        assert_eq!(icrc(&p, false), before);
        p[IPV4_LEN + UDP_LEN + 11] ^= 1;
        assert_ne!(icrc(&p, false), before);
        assert_eq!(icrc(&p[..10], false), None);
    }
}
