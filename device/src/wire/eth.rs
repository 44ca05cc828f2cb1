//! The Ethernet II header of a RoCEv2 frame (IEEE 802.3; no VLAN tag, no FCS: pcap's
//! LINKTYPE_ETHERNET frames end with the packet).

use super::{take, WireError};
use crate::addr::Mac;

pub const ETH_LEN: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Shortest frame without FCS: shorter ones are padded, so bytes may follow the IP packet.
pub const MIN_FRAME: usize = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthHeader {
    pub dst: Mac,
    pub src: Mac,
    pub ethertype: u16,
}

impl EthHeader {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dst.0);
        out.extend_from_slice(&self.src.0);
        out.extend_from_slice(&self.ethertype.to_be_bytes());
    }

    pub fn decode(frame: &[u8]) -> Result<EthHeader, WireError> {
        let b: [u8; ETH_LEN] = take(frame, 0, "Ethernet header")?;
        let mac = |i: usize| Mac([b[i], b[i + 1], b[i + 2], b[i + 3], b[i + 4], b[i + 5]]);
        Ok(EthHeader {
            dst: mac(0),
            src: mac(6),
            ethertype: u16::from_be_bytes([b[12], b[13]]),
        })
    }
}
