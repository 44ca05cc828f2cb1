//! Why bytes are not a RoCEv2 packet, or a packet cannot be encoded.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{what} truncated: needs {need} bytes, {have} left")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("EtherType {0:#06x} is neither IPv4 (0x0800) nor IPv6 (0x86dd)")]
    EtherType(u16),
    #[error("IP version {found} in an {expected} frame")]
    IpVersion { found: u8, expected: &'static str },
    #[error("IPv4 header length {0} words: only 5 (no options) is RoCEv2")]
    Ipv4HeaderLength(u8),
    #[error("IPv4 header checksum {found:#06x}, computed {computed:#06x}")]
    Ipv4Checksum { found: u16, computed: u16 },
    #[error("IPv4 fragment (flags/offset {0:#06x}): RoCEv2 packets are never fragmented")]
    Fragment(u16),
    #[error("IP protocol (next header) {0} is not UDP (17)")]
    NotUdp(u8),
    #[error("{what} length {claimed} does not match the {actual} bytes that follow")]
    Length {
        what: &'static str,
        claimed: usize,
        actual: usize,
    },
    #[error("{0} bytes after the IP packet in a frame longer than the Ethernet minimum")]
    Trailing(usize),
    #[error("UDP destination port {0} is not RoCEv2's 4791")]
    UdpPort(u16),
    #[error("BTH opcode {0:#04x} is not a supported RC, UC, UD or XRC opcode")]
    Opcode(u8),
    #[error("BTH transport header version {0}: only 0 exists")]
    TransportVersion(u8),
    #[error("BTH pad count {pad} with only {payload} bytes of payload")]
    Pad { pad: usize, payload: usize },
    #[error("{opcode} carries no payload, but {len} bytes follow its headers")]
    UnexpectedPayload { opcode: &'static str, len: usize },
    #[error("{opcode} needs header {header}")]
    MissingHeader {
        opcode: &'static str,
        header: &'static str,
    },
    #[error("{opcode} has no header {header}")]
    ExtraHeader {
        opcode: &'static str,
        header: &'static str,
    },
    #[error("ICRC {found:#010x}, computed {computed:#010x}")]
    Icrc { found: u32, computed: u32 },
    #[error("{what} {value:#x} does not fit its field")]
    Range { what: &'static str, value: u64 },
    #[error("a {0}-byte payload does not fit in one IP packet")]
    TooLong(usize),
    #[error("the payload could not be read from where it lives")]
    PayloadUnreadable,
}
