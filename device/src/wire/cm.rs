//! The communication manager's messages (IBTA Vol 1 §12.6, the message contents tables
//! 106-120): the data of a class-0x07 MAD, which rdma_cm exchanges to connect (REQ, REP,
//! RTU; MRA while busy; REJ), disconnect (DREQ, DREP) and resolve a UD service (SIDR_REQ,
//! SIDR_REP). LAP and APR (alternate paths) are refused.
//!
//! Each field is given as (byte, bit, width): `width` bits starting `bit` bits below the
//! most significant bit of byte `byte` of the MAD's data, big-endian, as the tables place
//! them. Decoding is strict: encoding the decoded message must give the same 232 bytes,
//! so a bit set where no field lies (reserved) is an error naming its byte.

use super::mad::{Mad, MadError, CM_CLASS_VERSION, MAD_DATA_LEN, MGMT_CLASS_CM};

type Data = [u8; MAD_DATA_LEN];

/// A value held in `width` bits of the data.
trait Field: Copy {
    fn from_bits(v: u64) -> Self;
    fn to_bits(self) -> u64;
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn from_bits(v: u64) -> Self {
                // `get` never reads more bits than the field's type holds.
                v as $t
            }
            fn to_bits(self) -> u64 {
                u64::from(self)
            }
        }
    )*};
}
int_field!(u8, u16, u32, u64);

impl Field for bool {
    fn from_bits(v: u64) -> Self {
        v != 0
    }
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
}

/// The bit `i` places below the top of byte `at` (both in range by the tables below).
fn bit(d: &Data, at: usize, i: usize) -> u64 {
    u64::from(d[at + i / 8] >> (7 - i % 8) & 1)
}

fn get(d: &Data, at: usize, off: usize, width: usize) -> u64 {
    (off..off + width).fold(0, |v, i| v << 1 | bit(d, at, i))
}

fn put(
    d: &mut Data,
    (at, off, width): (usize, usize, usize),
    v: u64,
    msg: &'static str,
    field: &'static str,
) -> Result<(), MadError> {
    if width < 64 && v >> width != 0 {
        return Err(MadError::Range {
            msg,
            field,
            value: v,
            bits: width as u32,
        });
    }
    for i in 0..width {
        let b = (v >> (width - 1 - i) & 1) as u8;
        let (byte, shift) = (at + (off + i) / 8, 7 - (off + i) % 8);
        d[byte] = d[byte] & !(1 << shift) | b << shift;
    }
    Ok(())
}

fn array<const N: usize>(d: &Data, at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&d[at..at + N]);
    a
}

/// A message: its fields (type, (byte, bit, width)) and byte arrays (length, byte).
macro_rules! cm_message {
    ($(#[$doc:meta])* $name:ident, $label:literal, $attr:literal,
     { $($(#[$fdoc:meta])* $field:ident: $ty:ty = $loc:expr),* $(,)? },
     { $($arr:ident: [$n:literal] = $aat:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
            $(pub $arr: [u8; $n],)*
        }

        impl $name {
            pub const ATTRIBUTE_ID: u16 = $attr;

            fn read(d: &Data) -> Self {
                $name {
                    $($field: {
                        let (at, off, width) = $loc;
                        <$ty as Field>::from_bits(get(d, at, off, width))
                    },)*
                    $($arr: array::<$n>(d, $aat),)*
                }
            }

            fn write(&self, d: &mut Data) -> Result<(), MadError> {
                $(put(d, $loc, self.$field.to_bits(), $label, stringify!($field))?;)*
                $(d[$aat..$aat + $n].copy_from_slice(&self.$arr);)*
                Ok(())
            }
        }
    };
}

cm_message!(
    /// REQ (table 106): a connection request, with the path the requester chose.
    Req, "REQ", 0x0010,
    {
        local_comm_id: u32 = (0, 0, 32),
        vendor_id: u32 = (5, 0, 24),
        service_id: u64 = (8, 0, 64),
        local_ca_guid: u64 = (16, 0, 64),
        local_qkey: u32 = (28, 0, 32),
        local_qpn: u32 = (32, 0, 24),
        responder_resources: u8 = (35, 0, 8),
        local_eecn: u32 = (36, 0, 24),
        initiator_depth: u8 = (39, 0, 8),
        remote_eecn: u32 = (40, 0, 24),
        remote_cm_response_timeout: u8 = (43, 0, 5),
        /// 0 RC, 1 UC, 3 XRC (with `extended_transport_type`).
        transport_service_type: u8 = (43, 5, 2),
        end_to_end_flow_control: bool = (43, 7, 1),
        starting_psn: u32 = (44, 0, 24),
        local_cm_response_timeout: u8 = (47, 0, 5),
        retry_count: u8 = (47, 5, 3),
        pkey: u16 = (48, 0, 16),
        /// The IBTA MTU code: 1 for 256 bytes ... 5 for 4096.
        path_mtu: u8 = (50, 0, 4),
        rdc_exists: bool = (50, 4, 1),
        rnr_retry_count: u8 = (50, 5, 3),
        max_cm_retries: u8 = (51, 0, 4),
        srq: bool = (51, 4, 1),
        extended_transport_type: u8 = (51, 5, 3),
        primary_local_lid: u16 = (52, 0, 16),
        primary_remote_lid: u16 = (54, 0, 16),
        primary_flow_label: u32 = (88, 0, 20),
        primary_packet_rate: u8 = (91, 2, 6),
        primary_traffic_class: u8 = (92, 0, 8),
        primary_hop_limit: u8 = (93, 0, 8),
        primary_sl: u8 = (94, 0, 4),
        primary_subnet_local: bool = (94, 4, 1),
        primary_local_ack_timeout: u8 = (95, 0, 5),
        alternate_local_lid: u16 = (96, 0, 16),
        alternate_remote_lid: u16 = (98, 0, 16),
        alternate_flow_label: u32 = (132, 0, 20),
        alternate_packet_rate: u8 = (135, 2, 6),
        alternate_traffic_class: u8 = (136, 0, 8),
        alternate_hop_limit: u8 = (137, 0, 8),
        alternate_sl: u8 = (138, 0, 4),
        alternate_subnet_local: bool = (138, 4, 1),
        alternate_local_ack_timeout: u8 = (139, 0, 5),
        sap_supported: bool = (139, 5, 1),
    },
    {
        primary_local_gid: [16] = 56,
        primary_remote_gid: [16] = 72,
        alternate_local_gid: [16] = 100,
        alternate_remote_gid: [16] = 116,
        private_data: [92] = 140,
    }
);

cm_message!(
    /// MRA (table 107): the receiver needs more time for the message it names.
    Mra, "MRA", 0x0011,
    {
        local_comm_id: u32 = (0, 0, 32),
        remote_comm_id: u32 = (4, 0, 32),
        /// 0 REQ, 1 REP, 2 LAP.
        message_mraed: u8 = (8, 0, 2),
        service_timeout: u8 = (9, 0, 5),
    },
    { private_data: [222] = 10 }
);

cm_message!(
    /// REJ (table 108): a REQ or REP refused, with the reason (table 109).
    Rej, "REJ", 0x0012,
    {
        local_comm_id: u32 = (0, 0, 32),
        remote_comm_id: u32 = (4, 0, 32),
        /// 0 REQ, 1 REP, 2 none (a REJ outside a handshake).
        message_rejected: u8 = (8, 0, 2),
        rejected_info_length: u8 = (9, 0, 7),
        reason: u16 = (10, 0, 16),
    },
    {
        additional_rejection_info: [72] = 12,
        private_data: [148] = 84,
    }
);

cm_message!(
    /// REP (table 110): the reply to a REQ, with the responder's QP and PSN.
    Rep, "REP", 0x0013,
    {
        local_comm_id: u32 = (0, 0, 32),
        remote_comm_id: u32 = (4, 0, 32),
        local_qkey: u32 = (8, 0, 32),
        local_qpn: u32 = (12, 0, 24),
        vendor_id_high: u8 = (15, 0, 8),
        local_eecn: u32 = (16, 0, 24),
        vendor_id_mid: u8 = (19, 0, 8),
        starting_psn: u32 = (20, 0, 24),
        vendor_id_low: u8 = (23, 0, 8),
        responder_resources: u8 = (24, 0, 8),
        initiator_depth: u8 = (25, 0, 8),
        target_ack_delay: u8 = (26, 0, 5),
        failover_accepted: u8 = (26, 5, 2),
        end_to_end_flow_control: bool = (26, 7, 1),
        rnr_retry_count: u8 = (27, 0, 3),
        srq: bool = (27, 3, 1),
        local_ca_guid: u64 = (28, 0, 64),
    },
    { private_data: [196] = 36 }
);

cm_message!(
    /// RTU (table 111): ready to use, the last of the three-way handshake.
    Rtu, "RTU", 0x0014,
    { local_comm_id: u32 = (0, 0, 32), remote_comm_id: u32 = (4, 0, 32) },
    { private_data: [224] = 8 }
);

cm_message!(
    /// DREQ (table 112): a disconnection request.
    Dreq, "DREQ", 0x0015,
    {
        local_comm_id: u32 = (0, 0, 32),
        remote_comm_id: u32 = (4, 0, 32),
        remote_qpn_eecn: u32 = (8, 0, 24),
    },
    { private_data: [220] = 12 }
);

cm_message!(
    /// DREP (table 113): the reply to a DREQ.
    Drep, "DREP", 0x0016,
    { local_comm_id: u32 = (0, 0, 32), remote_comm_id: u32 = (4, 0, 32) },
    { private_data: [224] = 8 }
);

cm_message!(
    /// SIDR_REQ (table 119): which UD QP serves this service ID?
    SidrReq, "SIDR_REQ", 0x0017,
    {
        request_id: u32 = (0, 0, 32),
        pkey: u16 = (4, 0, 16),
        service_id: u64 = (8, 0, 64),
    },
    { private_data: [216] = 16 }
);

cm_message!(
    /// SIDR_REP (table 120): the UD QP and Q_Key of the service (status 0), or why not.
    SidrRep, "SIDR_REP", 0x0018,
    {
        request_id: u32 = (0, 0, 32),
        status: u8 = (4, 0, 8),
        additional_information_length: u8 = (5, 0, 8),
        vendor_id_high: u16 = (6, 0, 16),
        qpn: u32 = (8, 0, 24),
        vendor_id_low: u8 = (11, 0, 8),
        service_id: u64 = (12, 0, 64),
        qkey: u32 = (20, 0, 32),
    },
    {
        additional_information: [72] = 24,
        private_data: [136] = 96,
    }
);

/// One CM message, by its MAD's attribute ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    Req(Box<Req>),
    Mra(Box<Mra>),
    Rej(Box<Rej>),
    Rep(Box<Rep>),
    Rtu(Box<Rtu>),
    Dreq(Box<Dreq>),
    Drep(Box<Drep>),
    SidrReq(Box<SidrReq>),
    SidrRep(Box<SidrRep>),
}

impl CmMessage {
    /// The CM message a MAD carries: class 0x07, class version 2, a known attribute, and
    /// no bit set outside the message's fields.
    pub fn decode(mad: &Mad) -> Result<CmMessage, MadError> {
        let h = &mad.header;
        if h.mgmt_class != MGMT_CLASS_CM {
            return Err(MadError::Class {
                found: h.mgmt_class,
                expected: MGMT_CLASS_CM,
            });
        }
        if h.class_version != CM_CLASS_VERSION {
            return Err(MadError::ClassVersion {
                found: h.class_version,
                expected: CM_CLASS_VERSION,
            });
        }
        let d = &mad.data;
        let msg = match h.attribute_id {
            Req::ATTRIBUTE_ID => CmMessage::Req(Box::new(Req::read(d))),
            Mra::ATTRIBUTE_ID => CmMessage::Mra(Box::new(Mra::read(d))),
            Rej::ATTRIBUTE_ID => CmMessage::Rej(Box::new(Rej::read(d))),
            Rep::ATTRIBUTE_ID => CmMessage::Rep(Box::new(Rep::read(d))),
            Rtu::ATTRIBUTE_ID => CmMessage::Rtu(Box::new(Rtu::read(d))),
            Dreq::ATTRIBUTE_ID => CmMessage::Dreq(Box::new(Dreq::read(d))),
            Drep::ATTRIBUTE_ID => CmMessage::Drep(Box::new(Drep::read(d))),
            SidrReq::ATTRIBUTE_ID => CmMessage::SidrReq(Box::new(SidrReq::read(d))),
            SidrRep::ATTRIBUTE_ID => CmMessage::SidrRep(Box::new(SidrRep::read(d))),
            other => return Err(MadError::Attribute(other)),
        };
        let again = msg.encode_data()?;
        if let Some(offset) = again.iter().zip(d).position(|(a, b)| a != b) {
            return Err(MadError::Reserved {
                msg: msg.name(),
                offset,
            });
        }
        Ok(msg)
    }

    /// The 232 bytes of MAD data (reserved bits 0); an error if a field's value does not
    /// fit its bits.
    pub fn encode_data(&self) -> Result<[u8; MAD_DATA_LEN], MadError> {
        let mut d = [0u8; MAD_DATA_LEN];
        match self {
            CmMessage::Req(m) => m.write(&mut d),
            CmMessage::Mra(m) => m.write(&mut d),
            CmMessage::Rej(m) => m.write(&mut d),
            CmMessage::Rep(m) => m.write(&mut d),
            CmMessage::Rtu(m) => m.write(&mut d),
            CmMessage::Dreq(m) => m.write(&mut d),
            CmMessage::Drep(m) => m.write(&mut d),
            CmMessage::SidrReq(m) => m.write(&mut d),
            CmMessage::SidrRep(m) => m.write(&mut d),
        }?;
        Ok(d)
    }

    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => Req::ATTRIBUTE_ID,
            CmMessage::Mra(_) => Mra::ATTRIBUTE_ID,
            CmMessage::Rej(_) => Rej::ATTRIBUTE_ID,
            CmMessage::Rep(_) => Rep::ATTRIBUTE_ID,
            CmMessage::Rtu(_) => Rtu::ATTRIBUTE_ID,
            CmMessage::Dreq(_) => Dreq::ATTRIBUTE_ID,
            CmMessage::Drep(_) => Drep::ATTRIBUTE_ID,
            CmMessage::SidrReq(_) => SidrReq::ATTRIBUTE_ID,
            CmMessage::SidrRep(_) => SidrRep::ATTRIBUTE_ID,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            CmMessage::Req(_) => "REQ",
            CmMessage::Mra(_) => "MRA",
            CmMessage::Rej(_) => "REJ",
            CmMessage::Rep(_) => "REP",
            CmMessage::Rtu(_) => "RTU",
            CmMessage::Dreq(_) => "DREQ",
            CmMessage::Drep(_) => "DREP",
            CmMessage::SidrReq(_) => "SIDR_REQ",
            CmMessage::SidrRep(_) => "SIDR_REP",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::mad::MadHeader;

    fn mad(attribute_id: u16, data: Data) -> Mad {
        Mad {
            header: MadHeader {
                base_version: 1,
                mgmt_class: MGMT_CLASS_CM,
                class_version: CM_CLASS_VERSION,
                response: false,
                method: 3,
                status: 0,
                class_specific: 0,
                transaction_id: 7,
                attribute_id,
                attribute_modifier: 0,
            },
            data,
        }
    }

    #[test]
    fn fields_sit_where_the_ibta_tables_put_them() {
        let mut d = [0u8; MAD_DATA_LEN];
        d[32..36].copy_from_slice(&[0x00, 0x12, 0x34, 0x04]); // QPN 0x1234, resources 4
        d[43] = 0b1010_1001; // timeout 21, transport 0 (RC), end-to-end flow control
        d[50] = 0x37; // MTU code 3 (1024), RNR retry 7
        d[88..92].copy_from_slice(&[0xAB, 0xCD, 0xE0, 0x03]); // flow label 0xabcde, rate 3

        let CmMessage::Req(req) = CmMessage::decode(&mad(0x10, d)).unwrap() else {
            panic!("not a REQ")
        };

        assert_eq!((req.local_qpn, req.responder_resources), (0x1234, 4));
        assert_eq!(
            (
                req.remote_cm_response_timeout,
                req.transport_service_type,
                req.end_to_end_flow_control
            ),
            (21, 0, true)
        );
        assert_eq!(
            (req.path_mtu, req.rdc_exists, req.rnr_retry_count),
            (3, false, 7)
        );
        assert_eq!(
            (req.primary_flow_label, req.primary_packet_rate),
            (0xABCDE, 3)
        );
    }

    #[test]
    fn a_bit_outside_every_field_is_refused_with_its_byte() {
        let mut d = [0u8; MAD_DATA_LEN];
        d[4] = 1; // REQ byte 4: reserved (the vendor ID starts at byte 5)
        assert_eq!(
            CmMessage::decode(&mad(0x10, d)),
            Err(MadError::Reserved {
                msg: "REQ",
                offset: 4
            })
        );
        let mut d = [0u8; MAD_DATA_LEN];
        d[90] = 0x08; // between the flow label and the packet rate
        assert!(matches!(
            CmMessage::decode(&mad(0x10, d)),
            Err(MadError::Reserved { offset: 90, .. })
        ));
    }

    #[test]
    fn arbitrary_data_decodes_to_a_message_that_encodes_back_or_to_an_error() {
        // A deterministic walk: sparse random bits (so that some pass the reserved check)
        // under every attribute ID, known or not.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut decoded = 0;
        for attr in 0x0010..=0x001B {
            for _ in 0..300 {
                let mut d = [0u8; MAD_DATA_LEN];
                for _ in 0..next() % 6 {
                    let i = (next() % MAD_DATA_LEN as u64) as usize;
                    d[i] = next() as u8;
                }
                if let Ok(msg) = CmMessage::decode(&mad(attr, d)) {
                    assert_eq!(msg.encode_data(), Ok(d), "{}", msg.name());
                    assert_eq!(msg.attribute_id(), attr);
                    decoded += 1;
                }
            }
        }
        assert!(decoded > 100, "{decoded}");
    }

    #[test]
    fn unknown_attributes_classes_and_oversized_fields_are_errors() {
        let d = [0u8; MAD_DATA_LEN];
        assert_eq!(
            CmMessage::decode(&mad(0x19, d)),
            Err(MadError::Attribute(0x19))
        );
        let mut m = mad(0x14, d);
        m.header.mgmt_class = 0x01;
        assert!(matches!(
            CmMessage::decode(&m),
            Err(MadError::Class { found: 1, .. })
        ));
        let CmMessage::Dreq(mut dreq) = CmMessage::decode(&mad(0x15, d)).unwrap() else {
            panic!("not a DREQ")
        };
        dreq.remote_qpn_eecn = 1 << 24;
        assert!(matches!(
            CmMessage::Dreq(dreq).encode_data(),
            Err(MadError::Range {
                field: "remote_qpn_eecn",
                bits: 24,
                ..
            })
        ));
    }
}
