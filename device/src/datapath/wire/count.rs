//! The SPEC port and QP counters of a wire QP (SPEC "Counters"): the packets actually
//! sent and received (retransmissions and duplicates included), the messages, ACKs and
//! NAKs they are, and what the engines did about loss (retransmissions, timeouts,
//! duplicates, out-of-sequence requests, implied NAKs). The in-process path counts a
//! transfer as the packets a wire would carry (`objects::counters`); here the wire is
//! real, so each frame is counted once, when it is built or when it reaches its QP.

use crate::rnic::{Rnic, RnicState};
use crate::transport::requester::RequesterStats;
use crate::transport::responder::{Execute, Outcome, ResponderStats};
use crate::transport::segment::{classify_request, Family, Position};
use crate::transport::Outgoing;
use crate::wire::bth::Op;
use crate::wire::ext::{AethKind, NAK_PSN_SEQUENCE};
use crate::wire::Packet;
use vrnic_hw::Counter;

/// Adds `n` of `counter` to the port's and QP `qpn`'s counters.
fn add(rnic: &Rnic, st: &RnicState, qpn: u32, counter: Counter, n: u64) {
    rnic.counters.add(counter, n);
    if let Some(qp) = st.objects.qp(qpn) {
        qp.counters.add(counter, n);
    }
}

fn each(rnic: &Rnic, st: &RnicState, qpn: u32, counts: &[(Counter, u64)]) {
    for &(counter, n) in counts {
        add(rnic, st, qpn, counter, n);
    }
}

fn requests(family: Family, sent: bool) -> Counter {
    match (family, sent) {
        (Family::Send, true) => Counter::TxSendRequests,
        (Family::Write, true) => Counter::TxWriteRequests,
        (Family::Read, true) => Counter::TxReadRequests,
        (Family::Atomic, true) => Counter::TxAtomicRequests,
        (Family::Send, false) => Counter::RxSendRequests,
        (Family::Write, false) => Counter::RxWriteRequests,
        (Family::Read, false) => Counter::RxReadRequests,
        (Family::Atomic, false) => Counter::RxAtomicRequests,
    }
}

/// The counter of an ACK or NAK packet (None: a response carrying data or a result).
fn acknowledgement(op: Op, kind: AethKind, sent: bool) -> Option<Counter> {
    if op != Op::Acknowledge {
        return None;
    }
    Some(match (kind, sent) {
        (AethKind::Ack { .. }, true) => Counter::TxAcks,
        (AethKind::Ack { .. }, false) => Counter::RxAcks,
        (AethKind::RnrNak { .. }, true) => Counter::RnrNaksSent,
        (AethKind::RnrNak { .. }, false) => Counter::RnrNaksReceived,
        (AethKind::Nak { code }, true) if code == NAK_PSN_SEQUENCE => Counter::SeqNaksSent,
        (AethKind::Nak { code }, false) if code == NAK_PSN_SEQUENCE => Counter::SeqNaksReceived,
        (AethKind::Nak { .. }, true) => Counter::ErrorNaksSent,
        (AethKind::Nak { .. }, false) => Counter::ErrorNaksReceived,
        (AethKind::Reserved, _) => return None,
    })
}

/// A frame of QP `qpn` built from `out` with `bytes` of payload; `resent`: the
/// requester sent this packet before.
pub fn sent(rnic: &Rnic, st: &RnicState, qpn: u32, out: &Outgoing, bytes: usize, resent: bool) {
    let op = out.bth.opcode.op;
    each(
        rnic,
        st,
        qpn,
        &[(Counter::TxPackets, 1), (Counter::TxBytes, bytes as u64)],
    );
    match classify_request(op) {
        Some(_) if resent => add(rnic, st, qpn, Counter::RetransmittedPackets, 1),
        Some((family, Position::First | Position::Only)) => {
            add(rnic, st, qpn, requests(family, true), 1)
        }
        _ => {}
    }
    if let Some(c) = out.aeth.and_then(|a| acknowledgement(op, a.kind(), true)) {
        add(rnic, st, qpn, c, 1);
    }
}

/// The requester waits out an RNR NAK and then sends again.
pub fn rnr_retry(rnic: &Rnic, st: &RnicState, qpn: u32) {
    add(rnic, st, qpn, Counter::RnrRetries, 1);
}

/// A frame that reached QP `qpn`'s engines.
pub fn received(rnic: &Rnic, st: &RnicState, qpn: u32, packet: &Packet<&[u8]>) {
    let bytes = packet.payload.len() as u64;
    each(
        rnic,
        st,
        qpn,
        &[(Counter::RxPackets, 1), (Counter::RxBytes, bytes)],
    );
    let op = packet.bth.opcode.op;
    if let Some(c) = packet
        .aeth
        .and_then(|a| acknowledgement(op, a.kind(), false))
    {
        add(rnic, st, qpn, c, 1);
    }
}

/// A new request packet executed with `outcome`: a message received at its first packet
/// (an RNR-NAKed one is received when it is sent again, as in-process).
pub fn executed(rnic: &Rnic, st: &RnicState, qpn: u32, ex: &Execute, outcome: Outcome) {
    let first = matches!(ex.position, Position::First | Position::Only);
    if first && outcome != Outcome::Rnr {
        add(rnic, st, qpn, requests(ex.family, false), 1);
    }
}

/// What the responder found in the packets it was given, between `before` and `after`.
pub fn responder(
    rnic: &Rnic,
    st: &RnicState,
    qpn: u32,
    before: &ResponderStats,
    after: &ResponderStats,
) {
    each(
        rnic,
        st,
        qpn,
        &[
            (
                Counter::DuplicateRequests,
                after.duplicates.saturating_sub(before.duplicates),
            ),
            (
                Counter::OutOfSequenceRequests,
                after.out_of_sequence.saturating_sub(before.out_of_sequence),
            ),
        ],
    );
}

/// What the requester found in the responses and timers it was given, between `before`
/// and `after`; `failed_retry`: a timeout ended the QP instead of sending again.
pub fn requester(
    rnic: &Rnic,
    st: &RnicState,
    qpn: u32,
    before: &RequesterStats,
    after: &RequesterStats,
    failed_retry: bool,
) {
    let timeouts = after.timeouts.saturating_sub(before.timeouts);
    each(
        rnic,
        st,
        qpn,
        &[
            (
                Counter::ImpliedNaks,
                after.implied_naks.saturating_sub(before.implied_naks),
            ),
            (Counter::LocalAckTimeouts, timeouts),
            (
                Counter::TransportRetries,
                timeouts.saturating_sub(u64::from(failed_retry)),
            ),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_and_naks_are_told_apart_by_syndrome_and_only_on_acknowledge_packets() {
        let ack = AethKind::Ack { credits: 0x1f };
        let rnr = AethKind::RnrNak { timer: 12 };
        let seq = AethKind::Nak {
            code: NAK_PSN_SEQUENCE,
        };
        let access = AethKind::Nak { code: 2 };
        let got = [ack, rnr, seq, access].map(|k| {
            (
                acknowledgement(Op::Acknowledge, k, true),
                acknowledgement(Op::Acknowledge, k, false),
            )
        });
        assert_eq!(
            got,
            [
                (Some(Counter::TxAcks), Some(Counter::RxAcks)),
                (Some(Counter::RnrNaksSent), Some(Counter::RnrNaksReceived)),
                (Some(Counter::SeqNaksSent), Some(Counter::SeqNaksReceived)),
                (
                    Some(Counter::ErrorNaksSent),
                    Some(Counter::ErrorNaksReceived)
                ),
            ]
        );
        // READ data and atomic results carry an AETH too: they are responses, not ACKs.
        assert_eq!(acknowledgement(Op::ReadResponseLast, ack, true), None);
        assert_eq!(acknowledgement(Op::AtomicAcknowledge, ack, false), None);
        assert_eq!(
            acknowledgement(Op::Acknowledge, AethKind::Reserved, true),
            None
        );
    }

    #[test]
    fn each_request_family_has_its_tx_and_rx_message_counter() {
        let families = [Family::Send, Family::Write, Family::Read, Family::Atomic];
        assert_eq!(
            families.map(|f| requests(f, true)),
            [
                Counter::TxSendRequests,
                Counter::TxWriteRequests,
                Counter::TxReadRequests,
                Counter::TxAtomicRequests
            ]
        );
        assert_eq!(
            families.map(|f| requests(f, false)),
            [
                Counter::RxSendRequests,
                Counter::RxWriteRequests,
                Counter::RxReadRequests,
                Counter::RxAtomicRequests
            ]
        );
    }
}
