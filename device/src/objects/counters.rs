//! The counters of a port or of a QP (SPEC "Counters"), and what one transfer adds to them
//! as the packets a RoCE v2 wire would carry.
//!
//! A set is a fixed array of atomics indexed by `vrnic_hw::Counter`: the data path adds to
//! it with relaxed ordering (each value is exact, the set is not read at one instant, as
//! SPEC says), once per transfer or CQE, never per byte. The port's set lives in the
//! device (`Rnic::counters`), each QP's in the QP (shared, so the responder can count
//! after it released the target's lock).

use super::qp::WaitReason;
use std::sync::atomic::{AtomicU64, Ordering};
use vrnic_hw::{Counter, WcStatus, WrOpcode};

/// Counters of this version of the spec.
pub const COUNT: usize = vrnic_hw::COUNTER_COUNT as usize;

/// The name tools show for `counter`: its hw-spec name lowercased (tx_packets), as the
/// guest's kernel names its hw counters.
pub fn name(counter: Counter) -> String {
    counter.name().to_ascii_lowercase()
}

/// `values` (value i being counter i) with their names, in counter order.
pub fn named(values: &[u64; COUNT]) -> impl Iterator<Item = (String, u64)> + '_ {
    Counter::ALL
        .iter()
        .map(move |&c| (name(c), values[c as usize]))
}

/// One value per enum counter.
#[derive(Debug)]
pub struct Counters([AtomicU64; COUNT]);

impl Default for Counters {
    fn default() -> Self {
        Counters(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Counters {
    /// Adds `n` (wrapping modulo 2^64).
    #[inline]
    pub fn add(&self, counter: Counter, n: u64) {
        if n != 0 {
            self.0[counter as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn inc(&self, counter: Counter) {
        self.0[counter as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, counter: Counter) -> u64 {
        self.0[counter as usize].load(Ordering::Relaxed)
    }

    /// Every value, value i being counter i.
    pub fn read(&self) -> [u64; COUNT] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }

    pub fn clear(&self) {
        for value in &self.0 {
            value.store(0, Ordering::Relaxed);
        }
    }

    /// A CQE written with `status`.
    pub fn completion(&self, status: u8) {
        self.inc(Counter::Completions);
        let status = WcStatus::try_from(status).ok();
        if !matches!(status, Some(WcStatus::Success | WcStatus::WrFlushErr)) {
            self.inc(Counter::CompletionErrors);
        }
        if let Some(counter) = status.and_then(status_counter) {
            self.inc(counter);
        }
    }

    /// The requester's side of transfer `w` and of what came back.
    pub fn requested(&self, w: &Wire, answer: Answer) {
        let (packets, bytes) = w.request_packets();
        self.add(Counter::TxPackets, packets);
        self.add(Counter::TxBytes, bytes);
        match w.resent {
            None if w.first => self.inc(w.op.tx_requests()),
            None => {}
            Some(WaitReason::Rnr) => self.inc(Counter::RnrRetries),
            Some(WaitReason::Unreachable) => self.inc(Counter::TransportRetries),
        }
        if !w.reliable {
            return;
        }
        match answer {
            Answer::Done => {
                let (packets, bytes) = w.response_packets();
                self.add(Counter::RxPackets, packets);
                self.add(Counter::RxBytes, bytes);
                if w.acked() {
                    self.inc(Counter::RxAcks);
                }
            }
            Answer::RnrNak => {
                self.inc(Counter::RxPackets);
                self.inc(Counter::RnrNaksReceived);
            }
            Answer::ErrorNak => {
                self.inc(Counter::RxPackets);
                self.inc(Counter::ErrorNaksReceived);
            }
            Answer::Dropped => {}
        }
    }

    /// The responder's side of transfer `w`: what it received and what it answered.
    pub fn responded(&self, w: &Wire, answer: Answer) {
        // An unreliable QP drops what it cannot take without a word (SPEC "Unreliable
        // connected"): nothing was received.
        let answer = match answer {
            Answer::RnrNak if !w.reliable => Answer::Dropped,
            a => a,
        };
        if answer == Answer::Dropped {
            return;
        }
        let (packets, bytes) = w.request_packets();
        self.add(Counter::RxPackets, packets);
        self.add(Counter::RxBytes, bytes);
        // A request that found no receive WQE was not received as a message; its resend is.
        if w.first && answer != Answer::RnrNak {
            self.inc(w.op.rx_requests());
        }
        if !w.reliable {
            return;
        }
        match answer {
            Answer::Done => {
                let (packets, bytes) = w.response_packets();
                self.add(Counter::TxPackets, packets);
                self.add(Counter::TxBytes, bytes);
                if w.acked() {
                    self.inc(Counter::TxAcks);
                }
            }
            Answer::RnrNak => {
                self.inc(Counter::TxPackets);
                self.inc(Counter::RnrNaksSent);
            }
            Answer::ErrorNak => {
                self.inc(Counter::TxPackets);
                self.inc(Counter::ErrorNaksSent);
            }
            Answer::Dropped => {}
        }
    }
}

/// The counter of CQEs with `status` (the statuses the device never writes have none).
fn status_counter(status: WcStatus) -> Option<Counter> {
    use WcStatus::*;
    Some(match status {
        LocLenErr => Counter::CqeLocLenErr,
        LocQpOpErr => Counter::CqeLocQpOpErr,
        LocProtErr => Counter::CqeLocProtErr,
        WrFlushErr => Counter::CqeWrFlushErr,
        MwBindErr => Counter::CqeMwBindErr,
        BadRespErr => Counter::CqeBadRespErr,
        LocAccessErr => Counter::CqeLocAccessErr,
        RemInvReqErr => Counter::CqeRemInvReqErr,
        RemAccessErr => Counter::CqeRemAccessErr,
        RemOpErr => Counter::CqeRemOpErr,
        RetryExcErr => Counter::CqeRetryExcErr,
        RnrRetryExcErr => Counter::CqeRnrRetryExcErr,
        FatalErr => Counter::CqeFatalErr,
        GeneralErr => Counter::CqeGeneralErr,
        _ => return None,
    })
}

/// The kind of message, as its packets' opcodes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Send,
    Write,
    Read,
    Atomic,
}

impl Op {
    /// The message kind of a work request that moves data (None for memory operations).
    pub fn of(opcode: WrOpcode) -> Option<Op> {
        use WrOpcode::*;
        match opcode {
            Send | SendWithImm | SendWithInv => Some(Op::Send),
            RdmaWrite | RdmaWriteWithImm => Some(Op::Write),
            RdmaRead => Some(Op::Read),
            AtomicCmpAndSwp | AtomicFetchAndAdd => Some(Op::Atomic),
            LocalInv | BindMw | RegMr => None,
        }
    }

    fn tx_requests(self) -> Counter {
        match self {
            Op::Send => Counter::TxSendRequests,
            Op::Write => Counter::TxWriteRequests,
            Op::Read => Counter::TxReadRequests,
            Op::Atomic => Counter::TxAtomicRequests,
        }
    }

    fn rx_requests(self) -> Counter {
        match self {
            Op::Send => Counter::RxSendRequests,
            Op::Write => Counter::RxWriteRequests,
            Op::Read => Counter::RxReadRequests,
            Op::Atomic => Counter::RxAtomicRequests,
        }
    }
}

/// One transfer (one chunk of a message) as the wire carries it.
#[derive(Debug, Clone, Copy)]
pub struct Wire {
    pub op: Op,
    /// Payload bytes of the chunk (the data a SEND or WRITE carries, a READ returns).
    pub bytes: u64,
    /// Packets the chunk's data takes at the path MTU (at least 1).
    pub packets: u32,
    /// The chunk starts its message, and ends it.
    pub first: bool,
    pub last: bool,
    /// The request is sent again, and why.
    pub resent: Option<WaitReason>,
    /// RC or XRC: answered by ACKs, responses and NAKs (UC and datagrams are not).
    pub reliable: bool,
}

impl Wire {
    /// (packets, payload bytes) of the request: SEND and WRITE carry their data; a READ
    /// or an atomic is one packet without payload (an atomic's operands and result travel
    /// in its AtomicETH and AtomicAckETH headers), sent when the message starts or again.
    fn request_packets(&self) -> (u64, u64) {
        match self.op {
            Op::Send | Op::Write => (u64::from(self.packets), self.bytes),
            Op::Read | Op::Atomic if self.first || self.resent.is_some() => (1, 0),
            Op::Read | Op::Atomic => (0, 0),
        }
    }

    /// (packets, payload bytes) of the response to an accepted request: READ data, an
    /// atomic's response, or the ACK that ends a SEND or WRITE.
    fn response_packets(&self) -> (u64, u64) {
        match self.op {
            Op::Read => (u64::from(self.packets), self.bytes),
            Op::Atomic => (1, 0),
            Op::Send | Op::Write if self.last => (1, 0),
            Op::Send | Op::Write => (0, 0),
        }
    }

    fn acked(&self) -> bool {
        matches!(self.op, Op::Send | Op::Write) && self.last
    }
}

/// What a request got (the transfer's outcome as the wire would show it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Accepted: ACKed, or answered with READ data or an atomic's response.
    Done,
    RnrNak,
    /// A NAK for a remote access, invalid request or operation error.
    ErrorNak,
    /// Nothing came back: no such QP, not ready, not connected, out of sequence.
    Dropped,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(bytes: u64, packets: u32) -> Wire {
        Wire {
            op: Op::Write,
            bytes,
            packets,
            first: true,
            last: true,
            resent: None,
            reliable: true,
        }
    }

    #[test]
    fn an_acked_write_counts_its_packets_one_message_and_one_ack_on_each_side() {
        let (req, resp) = (Counters::default(), Counters::default());
        let w = write(5000, 2);

        req.requested(&w, Answer::Done);
        resp.responded(&w, Answer::Done);

        use Counter::*;
        let r = |c| req.get(c);
        let s = |c| resp.get(c);
        assert_eq!(
            [
                r(TxPackets),
                r(TxBytes),
                r(TxWriteRequests),
                r(RxPackets),
                r(RxAcks)
            ],
            [2, 5000, 1, 1, 1]
        );
        assert_eq!(
            [
                s(RxPackets),
                s(RxBytes),
                s(RxWriteRequests),
                s(TxPackets),
                s(TxAcks)
            ],
            [2, 5000, 1, 1, 1]
        );
        assert_eq!(r(RxBytes) + s(TxBytes), 0, "ACKs carry no payload");
    }

    #[test]
    fn a_resend_after_an_rnr_nak_counts_packets_and_a_retry_but_no_new_message() {
        let (req, resp) = (Counters::default(), Counters::default());
        let mut w = write(100, 1);
        w.op = Op::Send;
        req.requested(&w, Answer::RnrNak);
        resp.responded(&w, Answer::RnrNak);
        w.resent = Some(WaitReason::Rnr);

        req.requested(&w, Answer::Done);
        resp.responded(&w, Answer::Done);

        use Counter::*;
        assert_eq!(
            [
                req.get(TxPackets),
                req.get(TxSendRequests),
                req.get(RnrRetries),
                req.get(RnrNaksReceived)
            ],
            [2, 1, 1, 1]
        );
        assert_eq!(
            [
                resp.get(RxPackets),
                resp.get(RxSendRequests),
                resp.get(RnrNaksSent)
            ],
            [2, 1, 1]
        );
        assert_eq!(resp.get(TxPackets), 2, "the RNR NAK and the ACK");
    }

    #[test]
    fn a_completion_counts_its_status_and_errors_exclude_flushes() {
        let c = Counters::default();
        for status in [
            WcStatus::Success,
            WcStatus::WrFlushErr,
            WcStatus::RemAccessErr,
        ] {
            c.completion(status.into());
        }
        c.completion(0xEE);

        use Counter::*;
        assert_eq!(
            [
                c.get(Completions),
                c.get(CompletionErrors),
                c.get(CqeWrFlushErr),
                c.get(CqeRemAccessErr)
            ],
            [4, 2, 1, 1]
        );
    }

    #[test]
    fn counters_wrap_modulo_2_pow_64() {
        let c = Counters::default();
        c.add(Counter::TxBytes, u64::MAX);
        c.add(Counter::TxBytes, 2);
        assert_eq!(c.get(Counter::TxBytes), 1);
    }
}
