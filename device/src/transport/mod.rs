//! The reliability engine of RC (and XRC) and the simpler rules of UC on a RoCEv2 wire
//! (IBTA Vol 1 chapter 9, §9.7 reliable service), as sans-I/O state
//! machines: they touch no memory and do no I/O. The data path feeds them events (a send
//! WQE, a decoded received packet, the time) and performs what they answer (send this
//! packet with this payload, place this payload, complete WQE n with this status, wait).
//!
//! A foundation layer: it imports `wire` (headers and opcodes) and nothing of devices,
//! QPs or guest memory; WQEs are named by the data path's `WqeId`.
//!
//! - `psn`: 24-bit PSN serial arithmetic and windows.
//! - `segment`: a message cut into packets by path MTU, and the opcode of each.
//! - `requester`: one QP's send side: PSNs, outstanding WQEs, ACK/NAK handling, READ
//!   responses, atomic ACKs, retransmission on timeout, RNR waits, completions.
//! - `responder`: one QP's receive side: the expected PSN, duplicates, NAKs, ACK
//!   coalescing, the READ/atomic resources of `max_dest_rd_atomic`, UC resync.
//!
//! # The interface the data path calls
//!
//! Requester (one per RC/UC/XRC_INI QP in RTS, made from its attributes):
//! ```text
//! let mut rq = Requester::new(RequesterConfig { sq_psn, mtu, timeout, retry_cnt, .. })?;
//! rq.post(WqeId(sq_index), Message { op: MsgOp::Send, len, remote_addr, rkey, .. })?;
//! while let Some(out) = rq.poll_transmit(now, &mut actions) {
//!     // out.bth / out.reth / ...: headers; out.payload: Payload::Wqe { wqe, offset, len }
//!     // names bytes of the WQE's local buffers; build the frame with out.packet(..).
//! }
//! // A response arrives (decoded by wire::Packet::decode, demultiplexed by dest QPN):
//! rq.on_packet(&packet, now, &mut actions);
//! // actions: Place { wqe, offset, len } (this packet's payload into the READ's local
//! // buffers at offset), AtomicResult { wqe, original }, Complete { wqe, status,
//! // vendor_err, byte_len } (in posting order; an error status: the QP moves to ERR and
//! // the data path flushes the rest), RnrWait { .. } (for the QP's `waiting` view),
//! // Local { wqe } (execute a memory operation, then rq.local_done(..)).
//! // Timers: call rq.on_timer(now, &mut actions) at rq.next_timer().
//! ```
//! Responder (one per RC/UC/XRC_TGT QP from RTR on):
//! ```text
//! let mut rs = Responder::new(ResponderConfig { rq_psn, mtu, max_dest_rd_atomic, .. })?;
//! match rs.on_packet(&packet) {
//!     Received::Execute(ex) => {
//!         // The data path checks and does what ex names (claim a receive WQE, check the
//!         // rkey, place packet.payload at ex.offset, execute the atomic, complete the
//!         // receive at ex.last) and says how it went:
//!         rs.finish(ex, Outcome::Done);   // or Rnr, Atomic(original), Refused(..)
//!     }
//!     Received::Handled => {}             // a duplicate re-ACKed, a NAK queued, a drop
//!     Received::Abandoned => {}           // UC: discard the message being received
//!     Received::Fatal(event) => {}        // move the QP to ERR, post `event`
//! }
//! while let Some(out) = rs.poll_transmit() { /* ACKs, NAKs, READ responses (Payload::
//!     Memory { va, rkey, len }: read from the responder's MR), atomic ACKs, in PSN order */ }
//! ```
//! A SEND of 3000 bytes at MTU 1024 therefore goes: `post` -> `poll_transmit` gives SEND
//! First (PSN p), Middle (p+1), Last (p+2, AckReq) -> the peer's responder executes each
//! and queues one ACK of p+2 -> `on_packet(ACK p+2)` gives `Complete { wqe, Success }`.
//!
//! # What the data path does to use it
//!
//! - Make the engines from the QP: `RequesterConfig` at RTR->RTS (`transport` from the QP
//!   type: RC, UC, XRC for XRC_INI; `dest_qpn`, `sq_psn`, `mtu` = `Qp::mtu_bytes`,
//!   `timeout`, `retry_cnt`, `rnr_retry`, `max_rd_atomic`), `ResponderConfig` at INIT->RTR
//!   (`rq_psn`, `max_dest_rd_atomic`, `min_rnr_timer`, XRC for XRC_TGT); `reconfigure` on
//!   RTS->RTS and SQD->SQD; drop both on ERR and RESET (the data path's flush completes
//!   the WQEs, as today). `Requester::next_psn` and `Responder::expected_psn` are
//!   QUERY_QP's sq_psn and rq_psn.
//! - Requester: read each new send WQE as `plan` does now (checks, local buffers), then
//!   `post` it (`WqeId` = its free-running SQ index; memory operations: `post_local`, and
//!   execute them at `Action::Local`), keeping its local buffers (by key) until its
//!   `Complete`: `Payload::Wqe { offset, len }` names bytes of those buffers, `Place` and
//!   `AtomicResult` write into them. `Complete` maps onto `complete_send` (in order; the
//!   CQE's opcode from the WQE); an error status moves the QP to ERR. `RnrWait` fills
//!   `Qp::waiting` (reason RNR); `next_timer` is the poller's `retry_at`.
//! - Responder: on `Execute`, do what `accept` + `complete` do for one packet (claim the
//!   receive WQE at a SEND's First/Only or a WRITE_WITH_IMM's Last, check the rkey of
//!   `reth` for the whole message at its first packet, place `packet.payload` at
//!   `offset`, run the atomic, complete the receive at Last/Only with `imm`/`invalidate`/
//!   `solicited`, post COMM_EST on the first in RTR) and report `Outcome`; on `Refused`
//!   the data path moves the QP to ERR with its event as `fail` does now (RC), on
//!   `Fatal(event)` the same with `event`. `Payload::Memory` of READ responses is read
//!   from the MR named by its rkey.
//! - Statuses: REM_* and RETRY_EXC_ERR/RNR_RETRY_EXC_ERR carry the vendor_err codes the
//!   in-process path uses (REMOTE_ERROR, REMOTE_ACCESS, UNREACHABLE, RNR); a malformed
//!   READ response completes with BAD_RESP_ERR (`vendor_err` LENGTH), as SPEC documents.
//! - Counters: `RequesterStats`/`ResponderStats` (retransmitted packets, timeouts,
//!   sequence/RNR/implied NAKs, duplicates, out-of-sequence) feed SPEC's counters
//!   (`datapath::wire::count`).

pub mod psn;
pub mod requester;
pub mod responder;
pub mod segment;

#[cfg(test)]
mod channel;
#[cfg(test)]
mod testing;

pub use psn::Psn;
pub use requester::{Requester, RequesterConfig};
pub use responder::{Responder, ResponderConfig};
pub use segment::MsgOp;

use crate::addr::Mac;
use crate::wire::{Aeth, AtomicEth, Bth, Network, Packet, Reth, Transport};
use std::time::Duration;

/// A send WQE as the data path names it (its free-running send queue index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WqeId(pub u32);

/// Where the payload of an outgoing packet comes from; the engine holds no bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    None,
    /// Bytes `[offset, offset + len)` of the message of a send WQE (its local buffers).
    Wqe {
        wqe: WqeId,
        offset: u64,
        len: u32,
    },
    /// `len` bytes at `va` of the responder's memory under `rkey` (a READ response; the
    /// rkey was checked when the READ was executed).
    Memory {
        va: u64,
        rkey: u32,
        len: u32,
    },
}

impl Payload {
    pub fn len(&self) -> u32 {
        match *self {
            Payload::None => 0,
            Payload::Wqe { len, .. } | Payload::Memory { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A packet to send: its transport headers and where its payload is. The data path adds
/// the Ethernet/IP/UDP part with `packet` (the ICRC is the encoder's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub bth: Bth,
    pub xrc_srqn: Option<u32>,
    pub reth: Option<Reth>,
    pub atomic_eth: Option<AtomicEth>,
    pub aeth: Option<Aeth>,
    pub atomic_ack: Option<u64>,
    pub imm: Option<[u8; 4]>,
    pub ieth: Option<u32>,
    pub payload: Payload,
}

impl Outgoing {
    fn new(bth: Bth) -> Outgoing {
        Outgoing {
            bth,
            xrc_srqn: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
            payload: Payload::None,
        }
    }

    pub fn psn(&self) -> Psn {
        Psn::new(self.bth.psn)
    }

    /// The whole packet, with `payload` the bytes `self.payload` names.
    pub fn packet(
        &self,
        src_mac: Mac,
        dst_mac: Mac,
        net: Network,
        udp_src_port: u16,
        payload: Vec<u8>,
    ) -> Packet {
        let mut p = Packet::new(src_mac, dst_mac, net, udp_src_port, self.bth);
        p.xrc_srqn = self.xrc_srqn;
        p.reth = self.reth;
        p.atomic_eth = self.atomic_eth;
        p.aeth = self.aeth;
        p.atomic_ack = self.atomic_ack;
        p.imm = self.imm;
        p.ieth = self.ieth;
        p.payload = payload;
        p
    }
}

/// Why an engine cannot be made or a WQE not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("transport {0:?} is not connected (RC, UC or XRC)")]
    Transport(Transport),
    #[error("path MTU {0} is not 256, 512, 1024, 2048 or 4096")]
    Mtu(u32),
    #[error("{what} {value:#x} does not fit its 24 bits")]
    Range { what: &'static str, value: u32 },
    #[error("a {0}-byte message is longer than 2^31 bytes")]
    Length(u64),
    #[error("UC has no RDMA READ or atomics")]
    UcReadAtomic,
    #[error("an XRC request needs the target's SRQ number")]
    XrcSrq,
    #[error("WQE {0} is not the memory operation the requester asked for")]
    NotLocal(u32),
    #[error("the path MTU cannot change while packets are outstanding")]
    Busy,
    #[error("the QP failed: it takes no more work")]
    Failed,
}

fn check24(what: &'static str, value: u32) -> Result<(), TransportError> {
    match value & !psn::PSN_MASK {
        0 => Ok(()),
        _ => Err(TransportError::Range { what, value }),
    }
}

fn check_transport(t: Transport) -> Result<(), TransportError> {
    match t {
        Transport::Rc | Transport::Uc | Transport::Xrc => Ok(()),
        Transport::Ud => Err(TransportError::Transport(t)),
    }
}

/// The local ACK timeout of attribute `timeout` (4.096 us * 2^timeout; 0 disables the
/// timer, as IBTA and ibv_modify_qp(3) define it).
pub fn ack_timeout(timeout: u8) -> Option<Duration> {
    match timeout {
        0 => None,
        t => Some(Duration::from_nanos(4096u64 << t.min(31))),
    }
}

/// The RNR NAK timer of code `code` (the IBTA RNR timer table: rxe's rnrnak_usec,
/// ibv_modify_qp(3)'s min_rnr_timer values).
pub fn rnr_delay(code: u8) -> Duration {
    const MICROS: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
        327_680, 491_520,
    ];
    Duration::from_micros(MICROS[usize::from(code & 31)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_follow_the_ibta_tables() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8192)));
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(4096 << 14)));
        assert_eq!(rnr_delay(0), Duration::from_micros(655_360));
        assert_eq!(rnr_delay(1), Duration::from_micros(10));
        assert_eq!(rnr_delay(31), Duration::from_micros(491_520));
    }
}
