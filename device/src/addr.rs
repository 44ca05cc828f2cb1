//! Network addresses of devices: MACs, GIDs, and the address a packet is sent to (a LID in
//! IB mode, a GID in RoCE mode). Plain values, below every other layer.

use std::fmt;

/// An Ethernet MAC address (network order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Mac(pub [u8; 6]);

/// Why a text is not a usable device MAC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MacError {
    #[error("`{0}` is not a MAC address (six hex bytes, e.g. 02:00:00:00:00:01)")]
    Syntax(String),
    #[error("{0} is a multicast address (bit 0 of the first byte is set)")]
    Multicast(Mac),
    #[error("{0} is the zero address")]
    Zero(Mac),
}

impl Mac {
    /// Parses `aa:bb:cc:dd:ee:ff` (or with `-`) and refuses what no NIC may use as its own
    /// address: multicast (broadcast included) and all-zero.
    pub fn parse_unicast(text: &str) -> Result<Mac, MacError> {
        let syntax = || MacError::Syntax(text.into());
        let parts: Vec<&str> = text.split([':', '-']).collect();
        if parts.len() != 6 {
            return Err(syntax());
        }
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(parts) {
            if part.len() != 2 {
                return Err(syntax());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| syntax())?;
        }
        let mac = Mac(mac);
        if mac.0[0] & 1 != 0 {
            return Err(MacError::Multicast(mac));
        }
        if mac.0 == [0; 6] {
            return Err(MacError::Zero(mac));
        }
        Ok(mac)
    }

    /// The modified EUI-64 of the MAC (RFC 4291 appendix A): the node GUID of a RoCE device.
    pub fn eui64(&self) -> [u8; 8] {
        let m = self.0;
        [m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// A GID (network order): an IPv6 address, or an IPv4-mapped one (::ffff:a.b.c.d).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The IPv4-mapped GID of an IPv4 address (::ffff:a.b.c.d).
    pub fn from_ipv4(ip: [u8; 4]) -> Gid {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        Gid(g)
    }

    /// The IPv4 address of an IPv4-mapped GID.
    pub fn ipv4(&self) -> Option<[u8; 4]> {
        let g = &self.0;
        (g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff).then(|| [g[12], g[13], g[14], g[15]])
    }
}

/// Where a packet is sent: the addressing of the sender's link mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Address {
    /// IB mode: a port LID.
    Lid(u16),
    /// RoCE mode: a destination GID.
    Gid(Gid),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unicast_macs_parse_and_others_are_refused_with_the_reason() {
        assert_eq!(
            Mac::parse_unicast("02:00:0a:0B:ff:01"),
            Ok(Mac([2, 0, 0x0a, 0x0b, 0xff, 1]))
        );
        assert!(matches!(
            Mac::parse_unicast("01:00:5e:00:00:01"),
            Err(MacError::Multicast(_))
        ));
        assert!(matches!(
            Mac::parse_unicast("ff:ff:ff:ff:ff:ff"),
            Err(MacError::Multicast(_))
        ));
        assert!(matches!(
            Mac::parse_unicast("00:00:00:00:00:00"),
            Err(MacError::Zero(_))
        ));
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:001",
            "02:00:00:00:00:zz",
            "",
        ] {
            assert!(matches!(Mac::parse_unicast(bad), Err(MacError::Syntax(_))));
        }
    }

    #[test]
    fn the_eui64_of_a_mac_flips_the_local_bit_and_inserts_fffe() {
        let mac = Mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        assert_eq!(
            mac.eui64(),
            [0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56]
        );
    }

    #[test]
    fn ipv4_mapped_gids_give_their_address() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(Gid(g).ipv4(), Some([10, 0, 0, 1]));
        g[0] = 0xfe;
        assert_eq!(Gid(g).ipv4(), None);
    }
}
