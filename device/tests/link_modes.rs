//! The two link modes as the driver sees them (SPEC "Link modes"): PORT_INFO, QUERY_PORT and
//! the node GUID of IB-mode and RoCE-mode devices of one fabric.

mod harness;

use harness::devices::{ib, mac_of, roce};
use harness::*;
use vrnic::rnic::link::LinkMode;
use vrnic_hw::*;

/// The node GUID's bytes, in the order the device wrote them (network order).
fn guid_bytes(d: &mut FakeDriver) -> [u8; 8] {
    d.query_device().node_guid.to_native().to_le_bytes()
}

#[test]
fn a_roce_device_reports_an_ethernet_port_with_its_mac_and_no_lid() {
    let devices = TestDevices::start_links(vec![ib(0), roce(1)]);
    let mut d = devices.driver(1);

    let p = d.query_port();
    let port_info = d.read_reg(bar0::PORT_INFO);

    assert_eq!(p.link_layer, u8::from(LinkLayer::Ethernet));
    assert_eq!(p.mac, mac_of(1).0);
    assert_eq!(p.lid.to_native(), 0);
    assert_eq!(u32::from(p.gid_tbl_len.to_native()), GID_TABLE_LEN);
    assert_eq!(p.gid, [0; 16], "the table is the driver's to fill");
    assert_eq!(p.state, u8::from(PortState::Active));
    assert_eq!(port_info & bar0::PORT_INFO_LID_MASK, 0);
    assert_ne!(port_info & bar0::PORT_INFO_LINK_ETH_MASK, 0);
    assert_eq!(
        (port_info & bar0::PORT_INFO_MTU_MASK) >> bar0::PORT_INFO_MTU_SHIFT,
        u32::from(u8::from(Mtu::Size4096))
    );
}

#[test]
fn an_ib_device_next_to_a_roce_one_keeps_its_infiniband_port() {
    let devices = TestDevices::start_links(vec![roce(0), ib(1)]);
    let mut d = devices.driver(1);

    let p = d.query_port();
    let port_info = d.read_reg(bar0::PORT_INFO);

    assert_eq!(p.link_layer, u8::from(LinkLayer::Infiniband));
    assert_eq!(p.lid.to_native(), devices.lid(1));
    assert_eq!(p.mac, [0; 6]);
    assert_eq!(p.gid_tbl_len.to_native(), 1);
    assert_eq!(port_info & bar0::PORT_INFO_LINK_ETH_MASK, 0);
    assert_eq!(
        port_info & bar0::PORT_INFO_LID_MASK,
        u32::from(devices.lid(1))
    );
}

#[test]
fn the_roce_node_guid_is_the_eui64_of_the_mac() {
    let devices = TestDevices::start_links(vec![roce(4)]);
    let mut d = devices.driver(0);
    let m = mac_of(4).0;

    let guid = guid_bytes(&mut d);

    assert_eq!(guid, [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
}

#[test]
fn the_ib_node_guid_is_configured_or_locally_administered_from_the_lid() {
    let devices = TestDevices::start_links(vec![
        LinkMode::Ib {
            lid: 0x0102,
            guid: None,
        },
        LinkMode::Ib {
            lid: 9,
            guid: Some(0x1122_3344_5566_7788),
        },
    ]);
    let mut derived = devices.driver(0);
    let mut configured = devices.driver(1);

    let a = guid_bytes(&mut derived);
    let b = guid_bytes(&mut configured);
    let gid = configured.query_port().gid;

    assert_eq!(a, [0x02, 0, 0, 0, 0, 0, 0x01, 0x02]);
    assert_eq!(b, [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    assert_eq!(&gid[8..], &b, "GID 0 ends with the configured GUID");
}
