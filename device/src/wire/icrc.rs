//! The invariant CRC (IBTA Vol 1 §7.8.1) of a RoCEv2 packet (Annex A17.3.3): the CRC-32 of
//! Ethernet (polynomial 0x04C11DB7, reflected, initial value and final XOR all ones) over
//! eight bytes of ones standing for the LRH RoCEv2 lacks, then the IP, UDP and transport
//! headers and the payload, with the fields a router may change masked to ones: IPv4
//! type of service, TTL and header checksum; IPv6 traffic class, flow label and hop
//! limit; the UDP checksum; and the BTH's reserved byte (with FECN and BECN). It is sent
//! least significant byte first, as the Ethernet FCS is.

use super::bth::BTH_LEN;
use super::ip::{IPV4_LEN, IPV6_LEN};
use super::udp::UDP_LEN;

pub const ICRC_LEN: usize = 4;

/// The reflected CRC-32 tables for eight bytes at a time ("slicing-by-8"): TABLES[0] is
/// the byte-wise table, TABLES[k] advances a byte through k more zero bytes.
const TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

/// A running CRC-32 (before its final inversion).
struct Crc(u32);

impl Crc {
    fn update(&mut self, bytes: &[u8]) {
        let t = &TABLES;
        let mut crc = self.0;
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let lo = crc ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
            crc = t[7][(lo & 0xFF) as usize]
                ^ t[6][(lo >> 8 & 0xFF) as usize]
                ^ t[5][(lo >> 16 & 0xFF) as usize]
                ^ t[4][(lo >> 24) as usize]
                ^ t[3][(hi & 0xFF) as usize]
                ^ t[2][(hi >> 8 & 0xFF) as usize]
                ^ t[1][(hi >> 16 & 0xFF) as usize]
                ^ t[0][(hi >> 24) as usize];
        }
        for &b in words.remainder() {
            crc = t[0][((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
        }
        self.0 = crc;
    }
}

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
    let mut crc = Crc(!0);
    crc.update(&[0xFF; 8]);
    crc.update(masked);
    crc.update(&packet[fixed..]);
    Some(!crc.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crc_is_ethernets_crc32() {
        // The CRC-32 check value of "123456789" (the catalogue value of CRC-32/ISO-HDLC).
        let mut crc = Crc(!0);
        crc.update(b"123456789");
        assert_eq!(!crc.0, 0xCBF4_3926);
        // Eight bytes at a time agree with one at a time, whatever the split.
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut whole = Crc(!0);
        whole.update(&data);
        let mut bytes = Crc(!0);
        for b in &data {
            bytes.update(std::slice::from_ref(b));
        }
        assert_eq!(whole.0, bytes.0);
        // zlib.crc32(bytes((i * 7 + 3) % 256 for i in range(1000)))
        assert_eq!(!whole.0, 0x17BC_2A46);
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
