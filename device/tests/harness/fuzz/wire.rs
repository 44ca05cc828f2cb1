//! The `wire` target: arbitrary bytes as a received RoCEv2 frame. The decoder must give a
//! packet or an error, never panic; a packet it gives must encode and decode back to
//! itself (what the decoder accepts, the encoder can produce).

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
}

pub fn discard() {}
