//! A device's link mode (SPEC "Link modes"), fixed when it is started: IB (a LID) or RoCE v2
//! (a MAC), and the identity each gives the device (node GUID, PORT_INFO).

use crate::addr::Mac;
use vrnic_hw::{bar0, Mtu};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// InfiniBand link layer with a fixed LID (1..65535) and, optionally, a configured node
    /// GUID (network order bytes as a big-endian number).
    Ib { lid: u16, guid: Option<u64> },
    /// Ethernet link layer, RoCE v2, with the device's own MAC.
    Eth { mac: Mac },
}

impl LinkMode {
    pub fn is_eth(&self) -> bool {
        matches!(self, LinkMode::Eth { .. })
    }

    /// The port LID: the configured one in IB mode, 0 in RoCE mode.
    pub fn lid(&self) -> u16 {
        match self {
            LinkMode::Ib { lid, .. } => *lid,
            LinkMode::Eth { .. } => 0,
        }
    }

    pub fn mac(&self) -> Option<Mac> {
        match self {
            LinkMode::Eth { mac } => Some(*mac),
            LinkMode::Ib { .. } => None,
        }
    }

    /// The node GUID as a number whose big-endian bytes are the GUID: the MAC's EUI-64 in
    /// RoCE mode; in IB mode the configured GUID or the locally administered
    /// 02:00:00:00:00:00:LID (never another vendor's OUI).
    pub fn node_guid(&self) -> u64 {
        match self {
            LinkMode::Eth { mac } => u64::from_be_bytes(mac.eui64()),
            LinkMode::Ib { guid: Some(g), .. } => *g,
            LinkMode::Ib { lid, guid: None } => 0x0200_0000_0000_0000 | u64::from(*lid),
        }
    }

    /// The PORT_INFO register.
    pub fn port_info(&self) -> u32 {
        let eth = if self.is_eth() {
            bar0::PORT_INFO_LINK_ETH_MASK
        } else {
            0
        };
        u32::from(self.lid())
            | (u32::from(u8::from(Mtu::Size4096)) << bar0::PORT_INFO_MTU_SHIFT)
            | eth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_guids_come_from_the_device_identity() {
        let eth = LinkMode::Eth {
            mac: Mac([0x02, 0, 0, 0, 0, 0x07]),
        };
        assert_eq!(eth.node_guid(), 0x0000_00ff_fe00_0007);
        let ib = LinkMode::Ib {
            lid: 0x1234,
            guid: None,
        };
        assert_eq!(ib.node_guid().to_be_bytes(), [2, 0, 0, 0, 0, 0, 0x12, 0x34]);
        let set = LinkMode::Ib {
            lid: 1,
            guid: Some(0x1122_3344_5566_7788),
        };
        assert_eq!(set.node_guid(), 0x1122_3344_5566_7788);
    }

    #[test]
    fn port_info_shows_the_link_mode_and_the_lid_of_ib_mode_only() {
        let eth = LinkMode::Eth {
            mac: Mac([2, 0, 0, 0, 0, 1]),
        };
        let ib = LinkMode::Ib { lid: 9, guid: None };
        assert_eq!(eth.port_info() & bar0::PORT_INFO_LID_MASK, 0);
        assert_ne!(eth.port_info() & bar0::PORT_INFO_LINK_ETH_MASK, 0);
        assert_eq!(ib.port_info() & bar0::PORT_INFO_LID_MASK, 9);
        assert_eq!(ib.port_info() & bar0::PORT_INFO_LINK_ETH_MASK, 0);
    }
}
