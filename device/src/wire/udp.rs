//! The UDP header of RoCEv2 (IBTA Annex A17.2.3): destination port 4791; the source port
//! carries flow entropy; the checksum may be 0 (the ICRC covers the packet).

use super::{take, WireError};

pub const UDP_LEN: usize = 8;
pub const ROCE_V2_PORT: u16 = 4791;

/// The source port for a flow between two QPs: in 0xC000..=0xFFFF, as Annex A17.2.3
/// suggests for entropy, and the same for every packet of the flow.
pub fn flow_port(qpn_a: u32, qpn_b: u32) -> u16 {
    0xC000 | ((qpn_a ^ qpn_b) & 0x3FFF) as u16
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub src_port: u16,
    pub dst_port: u16,
    /// Header and payload.
    pub length: u16,
    pub checksum: u16,
}

impl UdpHeader {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.src_port.to_be_bytes());
        out.extend_from_slice(&self.dst_port.to_be_bytes());
        out.extend_from_slice(&self.length.to_be_bytes());
        out.extend_from_slice(&self.checksum.to_be_bytes());
    }

    pub fn decode(bytes: &[u8], at: usize) -> Result<UdpHeader, WireError> {
        let b: [u8; UDP_LEN] = take(bytes, at, "UDP header")?;
        let w = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        Ok(UdpHeader {
            src_port: w(0),
            dst_port: w(2),
            length: w(4),
            checksum: w(6),
        })
    }
}
