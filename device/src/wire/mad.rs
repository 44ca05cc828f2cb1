//! Management datagrams (IBTA Vol 1 §13.4): the 256-byte payload of a UD SEND to QP1 (the
//! GSI QP, Q_Key 0x80010000). The common MAD header (§13.4.2) is followed by the class's
//! 232 bytes of data; `cm` reads the communication manager's (class 0x07).

pub const MAD_LEN: usize = 256;
pub const MAD_HEADER_LEN: usize = 24;
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The Q_Key of every datagram to or from QP1 (§13.1, "well-known Q_Key").
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The QP that receives general service MADs.
pub const GSI_QPN: u32 = 1;
/// Management class of the communication manager (§13.4.4, the class table).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM's class version (§12.11: version 2).
pub const CM_CLASS_VERSION: u8 = 2;

/// Why bytes are not a MAD, or one cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MadError {
    #[error("a MAD is {MAD_LEN} bytes, not {0}")]
    Length(usize),
    #[error("MAD base version {0}: only 1 exists")]
    BaseVersion(u8),
    #[error("management class {found:#04x}, not {expected:#04x}")]
    Class { found: u8, expected: u8 },
    #[error("class version {found}, not {expected}")]
    ClassVersion { found: u8, expected: u8 },
    #[error("the MAD header's reserved field is {0:#06x}, not 0")]
    HeaderReserved(u16),
    #[error(
        "CM attribute {0:#06x} is not a CM message this codec knows (REQ..SIDR_REP but LAP/APR)"
    )]
    Attribute(u16),
    #[error(
        "CM {msg}: byte {offset} of its data has bits set that are reserved or that no field holds"
    )]
    Reserved { msg: &'static str, offset: usize },
    #[error("CM {msg}: {field} {value:#x} does not fit its {bits} bits")]
    Range {
        msg: &'static str,
        field: &'static str,
        value: u64,
        bits: u32,
    },
}

/// The common MAD header (§13.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadHeader {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// R: a response (the top bit of the method byte).
    pub response: bool,
    /// 7 bits: Get, Set, Send (0x03 for CM messages), ...
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub transaction_id: u64,
    pub attribute_id: u16,
    pub attribute_modifier: u32,
}

/// A MAD: its header and its class's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mad {
    pub header: MadHeader,
    pub data: [u8; MAD_DATA_LEN],
}

impl Mad {
    /// The MAD in `bytes` (a whole UD payload). Base version 1 and the header's reserved
    /// field 0 are checked; the class is the caller's to check.
    pub fn decode(bytes: &[u8]) -> Result<Mad, MadError> {
        let b: &[u8; MAD_LEN] = bytes
            .try_into()
            .map_err(|_| MadError::Length(bytes.len()))?;
        if b[0] != 1 {
            return Err(MadError::BaseVersion(b[0]));
        }
        let reserved = u16::from_be_bytes([b[18], b[19]]);
        if reserved != 0 {
            return Err(MadError::HeaderReserved(reserved));
        }
        let mut data = [0u8; MAD_DATA_LEN];
        data.copy_from_slice(&b[MAD_HEADER_LEN..]);
        Ok(Mad {
            header: MadHeader {
                base_version: b[0],
                mgmt_class: b[1],
                class_version: b[2],
                response: b[3] & 0x80 != 0,
                method: b[3] & 0x7F,
                status: u16::from_be_bytes([b[4], b[5]]),
                class_specific: u16::from_be_bytes([b[6], b[7]]),
                transaction_id: u64::from_be_bytes([
                    b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
                ]),
                attribute_id: u16::from_be_bytes([b[16], b[17]]),
                attribute_modifier: u32::from_be_bytes([b[20], b[21], b[22], b[23]]),
            },
            data,
        })
    }

    pub fn encode(&self) -> [u8; MAD_LEN] {
        let h = &self.header;
        let mut b = [0u8; MAD_LEN];
        b[0] = h.base_version;
        b[1] = h.mgmt_class;
        b[2] = h.class_version;
        b[3] = u8::from(h.response) << 7 | h.method & 0x7F;
        b[4..6].copy_from_slice(&h.status.to_be_bytes());
        b[6..8].copy_from_slice(&h.class_specific.to_be_bytes());
        b[8..16].copy_from_slice(&h.transaction_id.to_be_bytes());
        b[16..18].copy_from_slice(&h.attribute_id.to_be_bytes());
        b[20..24].copy_from_slice(&h.attribute_modifier.to_be_bytes());
        b[MAD_HEADER_LEN..].copy_from_slice(&self.data);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mad_header_round_trips_and_bad_ones_are_refused() {
        let mut b = [0u8; MAD_LEN];
        b[..24].copy_from_slice(&[
            1, 7, 2, 3, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x10, 0, 0, 0, 0, 0, 9,
        ]);
        b[24] = 0xAB;

        let mad = Mad::decode(&b).unwrap();

        assert_eq!(
            (
                mad.header.mgmt_class,
                mad.header.method,
                mad.header.response
            ),
            (MGMT_CLASS_CM, 3, false)
        );
        assert_eq!(mad.header.transaction_id, 0x0102_0304_0506_0708);
        assert_eq!(
            (mad.header.attribute_id, mad.header.attribute_modifier),
            (0x10, 9)
        );
        assert_eq!(mad.encode(), b);
        assert_eq!(Mad::decode(&b[..255]), Err(MadError::Length(255)));
        let mut v = b;
        v[0] = 2;
        assert_eq!(Mad::decode(&v), Err(MadError::BaseVersion(2)));
        let mut r = b;
        r[19] = 1;
        assert_eq!(Mad::decode(&r), Err(MadError::HeaderReserved(1)));
    }
}
