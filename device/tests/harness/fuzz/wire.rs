//! The `wire` target: arbitrary bytes as a received RoCEv2 frame. The decoder must give a
//! packet or an error, never panic; a packet it gives must encode and decode back to
//! itself (what the decoder accepts, the encoder can produce); a MAD to QP1 in it decodes
//! to a MAD and a CM message that encode back to its bytes, or to an error.

use vrnic::wire::cm::CmMessage;
use vrnic::wire::mad::{Mad, GSI_QPN};
use vrnic::wire::Packet;

pub fn run_one(data: &[u8]) {
    let Ok(packet) = Packet::decode(data) else {
        return;
    };
    let frame = packet
        .encode()
        .unwrap_or_else(|e| panic!("a decoded packet does not encode: {e}: {packet:?}"));
    assert_eq!(
        Packet::decode(&frame).as_ref(),
        Ok(&packet),
        "re-encoded frame decodes differently"
    );
    if packet.bth.dest_qpn != GSI_QPN {
        return;
    }
    let Ok(mad) = Mad::decode(&packet.payload) else {
        return;
    };
    assert_eq!(mad.encode()[..], packet.payload[..], "MAD re-encoded");
    if let Ok(msg) = CmMessage::decode(&mad) {
        assert_eq!(
            msg.encode_data(),
            Ok(mad.data),
            "CM {} re-encoded",
            msg.name()
        );
    }
}

pub fn discard() {}
