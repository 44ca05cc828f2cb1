//! One QP's send side on the wire: the requester of IBTA Vol 1 §9.7 (reliable service),
//! checked against rxe's requester and completer (rxe_req.c, rxe_comp.c: check_psn,
//! check_ack, the retry states). PSNs for each WQE, the packets of each message, the
//! outstanding WQEs until their ACK, READ responses or atomic ACK, and what the
//! responder's answers mean:
//! - any response acknowledges every request before its PSN, an ACK also the one at it
//!   (§9.7.5.1.2, coalesced acknowledge messages); a NAK therefore acknowledges what is
//!   before it;
//! - an ACK (or response) past a READ or atomic whose response has not arrived is an
//!   implied NAK: the response was lost, the READ is requested again from its first
//!   missing response (rxe: check_psn, "complete send/write or error read/atomic");
//! - NAK PSN sequence error: go back N from the NAK'd PSN;
//! - RNR NAK: wait the time its timer code names, then resend from its PSN,
//!   `rnr_retry` times (7: forever), then RNR_RETRY_EXC_ERR;
//! - NAK invalid request / remote access / remote operational error: the WQE completes
//!   with REM_INV_REQ_ERR / REM_ACCESS_ERR / REM_OP_ERR and the QP fails;
//! - no progress within the local ACK timeout (4.096 us * 2^timeout; 0: none): go back to
//!   the oldest unacknowledged PSN, `retry_cnt` times, then RETRY_EXC_ERR. Sequence NAKs
//!   and implied NAKs count against `retry_cnt` too, as rxe counts them (unlike rxe,
//!   retry_cnt 7 is 7 retries: only rnr_retry has a "forever"); a retry already under way
//!   from the same PSN is not started again (rxe's started_retry); progress restores both
//!   counts (rxe's reset_retry_counters).
//!
//! At most `max_rd_atomic` READs and atomics are outstanding (later WQEs wait behind the
//! one that would exceed it: the queue stays in order), a FENCE WQE waits for the READs
//! and atomics before it, and at most `window` PSNs are outstanding. UC: the packets go
//! out once and the WQE completes when its last packet has left.

use super::psn::{Psn, HALF};
use super::segment::{self, MsgOp, Position, MAX_MESSAGE};
use super::{
    ack_timeout, check24, check_transport, rnr_delay, Outgoing, Payload, TransportError, WqeId,
};
use crate::wire::bth::Op;
use crate::wire::ext::{
    AethKind, NAK_INVALID_REQUEST, NAK_PSN_SEQUENCE, NAK_REMOTE_ACCESS, NAK_REMOTE_OPERATIONAL,
};
use crate::wire::{Aeth, AtomicEth, Bth, Opcode, Packet, Reth, Transport};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use vrnic_hw::{VendorErr, WcStatus};

/// A QP's attributes as the requester uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequesterConfig {
    /// RC, UC, or XRC (an XRC_INI QP).
    pub transport: Transport,
    pub dest_qpn: u32,
    pub pkey: u16,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// The PSN of the first packet (the QP's sq_psn).
    pub sq_psn: u32,
    /// Local ACK timeout exponent (0: no timer).
    pub timeout: u8,
    pub retry_cnt: u8,
    /// 7: retry forever.
    pub rnr_retry: u8,
    /// READs and atomics outstanding at once (0 is taken as 1, so a READ can always run).
    pub max_rd_atomic: u8,
    /// AckReq is set on the last packet of each message and at least every this many.
    pub ack_req_every: u32,
    /// PSNs outstanding at most (a single larger message still goes alone).
    pub window: u32,
}

impl Default for RequesterConfig {
    fn default() -> Self {
        RequesterConfig {
            transport: Transport::Rc,
            dest_qpn: 0,
            pkey: crate::wire::bth::DEFAULT_PKEY,
            mtu: 1024,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ack_req_every: 64,
            window: 1024,
        }
    }
}

/// A send WQE as the wire needs it (the data path has checked it and its local buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    pub op: MsgOp,
    /// Bytes of the message (atomics: ignored, always 8).
    pub len: u64,
    pub remote_addr: u64,
    pub rkey: u32,
    pub fence: bool,
    pub solicited: bool,
    /// XRC: the target's SRQ.
    pub xrc_srqn: Option<u32>,
}

impl Message {
    pub fn new(op: MsgOp, len: u64) -> Message {
        Message {
            op,
            len,
            remote_addr: 0,
            rkey: 0,
            fence: false,
            solicited: false,
            xrc_srqn: None,
        }
    }

    pub fn remote(self, remote_addr: u64, rkey: u32) -> Message {
        Message {
            remote_addr,
            rkey,
            ..self
        }
    }

    fn byte_len(&self) -> u32 {
        match self.op.is_atomic() {
            true => 8,
            false => self.len as u32,
        }
    }
}

/// What the data path does for the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Place the payload of the packet just handled into the READ's local buffers at
    /// this message offset.
    Place { wqe: WqeId, offset: u64, len: u32 },
    /// Write an atomic's original value into its local buffer.
    AtomicResult { wqe: WqeId, original: u64 },
    /// Retire the WQE (in posting order). Any status but SUCCESS: the QP moves to ERR,
    /// the engine takes no more work and the data path flushes the WQEs after it.
    Complete {
        wqe: WqeId,
        status: WcStatus,
        vendor_err: VendorErr,
        byte_len: u32,
    },
    /// Execute the memory operation WQE (then call `local_done`).
    Local { wqe: WqeId },
    /// The send queue waits for an RNR timer (the QP's `waiting` view); None: forever.
    RnrWait {
        until: Instant,
        retries_left: Option<u8>,
    },
}

/// What happened on the QP's wire, for its counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequesterStats {
    pub packets: u64,
    /// Packets sent again (go back N, timeouts, RNR).
    pub retransmitted: u64,
    pub timeouts: u64,
    pub seq_naks: u64,
    pub rnr_naks: u64,
    pub implied_naks: u64,
    /// Responses for PSNs not outstanding (duplicates, ghosts) or of the wrong kind.
    pub ignored: u64,
}

#[derive(Debug)]
struct Entry {
    id: WqeId,
    msg: Message,
    /// Valid once started: PSNs are given when the first packet goes.
    first: Psn,
    npsn: u32,
    started: bool,
    /// PSNs acknowledged (SEND/WRITE) or responses received (READ, atomic).
    progress: u32,
    /// A memory operation the data path executes (no packet; `msg` is a placeholder).
    local: bool,
    /// The data path could not reach its local buffers: nothing more of it (or after it)
    /// is sent, and it completes with this once every WQE before it has.
    aborted: Option<(WcStatus, VendorErr)>,
}

impl Entry {
    fn done(&self) -> bool {
        self.started && self.progress >= self.npsn
    }

    fn holds(&self, psn: Psn) -> bool {
        self.started && !self.local && psn.within(self.first, self.npsn)
    }
}

/// One QP's send side (see the module comment).
#[derive(Debug)]
pub struct Requester {
    cfg: RequesterConfig,
    timeout: Option<Duration>,
    entries: VecDeque<Entry>,
    /// The PSN the next new packet takes.
    next_psn: Psn,
    /// The first PSN never sent yet: what is before it and sent is a retransmission.
    fresh: Psn,
    /// The next packet to (re)send: entry index and its packet.
    cursor: usize,
    cursor_pkt: u32,
    retries_left: u8,
    rnr_left: u8,
    ack_deadline: Option<Instant>,
    rnr_until: Option<Instant>,
    /// The PSN a retry started from, until progress is made.
    rewound: Option<Psn>,
    /// READs and atomics started and not completed.
    reads: usize,
    since_ack_req: u32,
    failed: bool,
    stats: RequesterStats,
}

impl Requester {
    pub fn new(cfg: RequesterConfig) -> Result<Requester, TransportError> {
        check_transport(cfg.transport)?;
        check24("destination QPN", cfg.dest_qpn)?;
        check24("sq_psn", cfg.sq_psn)?;
        if !segment::valid_mtu(cfg.mtu) {
            return Err(TransportError::Mtu(cfg.mtu));
        }
        Ok(Requester {
            timeout: ack_timeout(cfg.timeout),
            entries: VecDeque::new(),
            next_psn: Psn::new(cfg.sq_psn),
            fresh: Psn::new(cfg.sq_psn),
            cursor: 0,
            cursor_pkt: 0,
            retries_left: cfg.retry_cnt,
            rnr_left: cfg.rnr_retry,
            ack_deadline: None,
            rnr_until: None,
            rewound: None,
            reads: 0,
            since_ack_req: 0,
            failed: false,
            stats: RequesterStats::default(),
            cfg,
        })
    }

    /// Takes WQE `id` (after those posted before it).
    pub fn post(&mut self, id: WqeId, msg: Message) -> Result<(), TransportError> {
        if self.failed {
            return Err(TransportError::Failed);
        }
        if msg.len > MAX_MESSAGE {
            return Err(TransportError::Length(msg.len));
        }
        if self.cfg.transport == Transport::Uc && msg.op.is_read_or_atomic() {
            return Err(TransportError::UcReadAtomic);
        }
        if self.cfg.transport == Transport::Xrc && msg.xrc_srqn.is_none() {
            return Err(TransportError::XrcSrq);
        }
        let npsn = match msg.op.is_atomic() {
            true => 1,
            false => segment::packets(msg.len, self.cfg.mtu),
        };
        self.entries.push_back(Entry {
            id,
            msg,
            first: Psn::default(),
            npsn,
            started: false,
            progress: 0,
            local: false,
            aborted: None,
        });
        Ok(())
    }

    /// Takes WQE `id`, a memory operation (REG_MR, LOCAL_INV, BIND_MW): it puts nothing on
    /// the wire, and runs in queue order: `Action::Local` asks for it once every WQE before
    /// it has completed, and the WQEs after it wait for `local_done`.
    pub fn post_local(&mut self, id: WqeId) -> Result<(), TransportError> {
        if self.failed {
            return Err(TransportError::Failed);
        }
        self.entries.push_back(Entry {
            id,
            msg: Message::new(MsgOp::Send, 0),
            first: Psn::default(),
            npsn: 1,
            started: false,
            progress: 0,
            local: true,
            aborted: None,
        });
        Ok(())
    }

    /// The memory operation `Action::Local` asked for ended with `status`: it completes
    /// (an error fails the QP as any failed WQE does) and the WQEs after it may go.
    pub fn local_done(
        &mut self,
        id: WqeId,
        status: WcStatus,
        why: VendorErr,
        now: Instant,
        out: &mut Vec<Action>,
    ) -> Result<(), TransportError> {
        match self.entries.front() {
            Some(e) if e.local && e.started && e.id == id => {}
            _ => return Err(TransportError::NotLocal(id.0)),
        }
        if status != WcStatus::Success {
            self.fail(status, why, out);
            return Ok(());
        }
        let before = self.una();
        if let Some(e) = self.entries.front_mut() {
            e.progress = 1;
        }
        self.advanced(before, now, out);
        Ok(())
    }

    /// WQE `id` cannot go on: its local buffers are gone (deregistered, unmapped). Nothing
    /// more of it or of the WQEs after it is sent; it completes with `status` once every
    /// WQE before it has, and the QP fails then (an unknown `id`: nothing happens).
    pub fn abort(
        &mut self,
        id: WqeId,
        status: WcStatus,
        why: VendorErr,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.aborted.get_or_insert((status, why));
            let before = self.una();
            self.advanced(before, now, out);
        }
    }

    /// MODIFY_QP of a QP already sending (RTS to RTS, SQD to SQD): the retry attributes,
    /// max_rd_atomic and the pacing take effect at once; the retry counts start afresh.
    /// The PSN, transport and peer stay, and the MTU may change only while nothing is
    /// outstanding (started messages keep their packets).
    pub fn reconfigure(&mut self, cfg: RequesterConfig) -> Result<(), TransportError> {
        if cfg.mtu != self.cfg.mtu {
            if !segment::valid_mtu(cfg.mtu) {
                return Err(TransportError::Mtu(cfg.mtu));
            }
            if self.outstanding() {
                return Err(TransportError::Busy);
            }
            self.cfg.mtu = cfg.mtu;
            for e in self
                .entries
                .iter_mut()
                .filter(|e| !e.local && !e.msg.op.is_atomic())
            {
                e.npsn = segment::packets(e.msg.len, cfg.mtu);
            }
        }
        self.cfg.timeout = cfg.timeout;
        self.cfg.retry_cnt = cfg.retry_cnt;
        self.cfg.rnr_retry = cfg.rnr_retry;
        self.cfg.max_rd_atomic = cfg.max_rd_atomic;
        self.cfg.ack_req_every = cfg.ack_req_every;
        self.cfg.window = cfg.window;
        self.timeout = ack_timeout(cfg.timeout);
        self.retries_left = cfg.retry_cnt;
        self.rnr_left = cfg.rnr_retry;
        Ok(())
    }

    /// The PSN the next new packet takes (QUERY_QP's sq_psn).
    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }

    pub fn stats(&self) -> &RequesterStats {
        &self.stats
    }

    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// WQEs posted and not completed.
    pub fn pending(&self) -> usize {
        self.entries.len()
    }

    /// When `on_timer` (or `poll_transmit`, after an RNR wait) wants to run.
    pub fn next_timer(&self) -> Option<Instant> {
        match (self.ack_deadline, self.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The oldest PSN not acknowledged (or whose response has not arrived).
    fn una(&self) -> Psn {
        match self.entries.front() {
            Some(e) if e.started && !e.local => e.first.add(e.progress),
            _ => self.next_psn,
        }
    }

    fn outstanding(&self) -> bool {
        self.entries.front().is_some_and(|e| e.started && !e.local)
    }

    /// Whether `psn` was sent and is not acknowledged yet.
    fn in_flight(&self, psn: Psn) -> bool {
        let una = self.una();
        psn.within(una, self.next_psn.since(una))
    }

    /// The next packet to send, if any may go now. UC completions it causes go to `out`.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<Action>) -> Option<Outgoing> {
        if self.failed {
            return None;
        }
        if let Some(until) = self.rnr_until {
            if now < until {
                return None;
            }
            self.rnr_until = None;
        }
        let (index, k) = loop {
            let e = self.entries.get(self.cursor)?;
            if e.aborted.is_some() {
                return None;
            }
            if e.local {
                // A memory operation runs once all before it completed; all after wait.
                if self.cursor == 0 && !e.started {
                    out.push(Action::Local { wqe: e.id });
                    self.entries[0].started = true;
                }
                return None;
            }
            if !e.started {
                break (self.cursor, 0);
            }
            // What was acknowledged meanwhile is not sent again.
            let k = self.cursor_pkt.max(e.progress);
            if k < e.npsn {
                break (self.cursor, k);
            }
            self.cursor += 1;
            self.cursor_pkt = 0;
        };
        if self.entries[index].started {
            // Within a long message too, at most `window` PSNs are outstanding (UC has no
            // acknowledgement: its packets are paced by the data path's budget alone).
            let psn = self.entries[index].first.add(k);
            let limit = self.cfg.window.clamp(1, HALF - 1);
            if self.cfg.transport != Transport::Uc
                && !self.entries[index].msg.op.is_read_or_atomic()
                && psn.since(self.una()) >= limit
            {
                return None;
            }
        } else {
            if !self.may_start(index) {
                return None;
            }
            let e = &mut self.entries[index];
            e.first = self.next_psn;
            e.started = true;
            self.next_psn = self.next_psn.add(e.npsn);
            if e.msg.op.is_read_or_atomic() {
                self.reads += 1;
            }
        }
        let packet = self.build(index, k);
        let e = &self.entries[index];
        let whole = e.msg.op.is_read_or_atomic() || k + 1 >= e.npsn;
        // A READ request stands for the PSNs of all the responses it asks for.
        let end = match e.msg.op.is_read_or_atomic() {
            true => e.first.add(e.npsn),
            false => packet.psn().add(1),
        };
        self.stats.packets += 1;
        if packet.psn().before(self.fresh) {
            self.stats.retransmitted += 1;
        }
        if self.fresh.before(end) {
            self.fresh = end;
        }
        if whole {
            self.cursor += 1;
            self.cursor_pkt = 0;
        } else {
            self.cursor_pkt = k + 1;
        }
        if self.cfg.transport == Transport::Uc {
            // UC has no acknowledgement: sent is done.
            if whole {
                if let Some(e) = self.entries.pop_front() {
                    self.cursor = self.cursor.saturating_sub(1);
                    out.push(complete(&e, WcStatus::Success, VendorErr::None));
                }
            }
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = self.timeout.map(|t| now + t);
        }
        Some(packet)
    }

    /// Whether entry `index` may start: the READ/atomic limit, a fence, the window.
    fn may_start(&self, index: usize) -> bool {
        let e = &self.entries[index];
        // Every READ/atomic started is before this entry, which has not started.
        let reads = self.reads;
        if e.msg.op.is_read_or_atomic() && reads >= usize::from(self.cfg.max_rd_atomic.max(1)) {
            return false;
        }
        if e.msg.fence && reads > 0 {
            return false;
        }
        let in_flight = self.next_psn.since(self.una());
        let limit = self.cfg.window.clamp(1, HALF - 1);
        in_flight == 0 || in_flight.saturating_add(e.npsn) <= limit
    }

    /// Packet `k` of entry `index` (for a READ: the request for responses k on).
    fn build(&mut self, index: usize, k: u32) -> Outgoing {
        let cfg = self.cfg;
        let e = &self.entries[index];
        let msg = e.msg;
        let psn = e.first.add(k);
        let pos = Position::of(k, e.npsn);
        let mut out = Outgoing::new(Bth {
            opcode: Opcode {
                transport: cfg.transport,
                op: segment::request_op(msg.op, pos),
            },
            solicited: false,
            migreq: true,
            pkey: cfg.pkey,
            fecn: false,
            becn: false,
            dest_qpn: cfg.dest_qpn,
            ack_req: false,
            psn: psn.get(),
        });
        if cfg.transport == Transport::Xrc {
            out.xrc_srqn = msg.xrc_srqn;
        }
        let last = match msg.op {
            MsgOp::Read => {
                let (offset, _) = segment::piece(msg.len, cfg.mtu, k);
                out.reth = Some(Reth {
                    va: msg.remote_addr.wrapping_add(offset),
                    rkey: msg.rkey,
                    dma_len: (msg.len - offset) as u32,
                });
                true
            }
            MsgOp::CompareSwap { compare, swap } => {
                out.atomic_eth = Some(atomic_eth(&msg, swap, compare));
                true
            }
            MsgOp::FetchAdd { add } => {
                out.atomic_eth = Some(atomic_eth(&msg, add, 0));
                true
            }
            op => {
                let (offset, len) = segment::piece(msg.len, cfg.mtu, k);
                out.payload = Payload::Wqe {
                    wqe: e.id,
                    offset,
                    len,
                };
                if k == 0 && matches!(op, MsgOp::Write | MsgOp::WriteImm(_)) {
                    out.reth = Some(Reth {
                        va: msg.remote_addr,
                        rkey: msg.rkey,
                        dma_len: msg.len as u32,
                    });
                }
                if pos.ends() {
                    match op {
                        MsgOp::SendImm(imm) | MsgOp::WriteImm(imm) => out.imm = Some(imm),
                        MsgOp::SendInv(rkey) => out.ieth = Some(rkey),
                        _ => {}
                    }
                }
                pos.ends()
            }
        };
        // SE only on the packet that ends the message (the BTH's SE bit, §9.2).
        out.bth.solicited = msg.solicited && last;
        let ack_req = last || self.since_ack_req + 1 >= cfg.ack_req_every;
        out.bth.ack_req = ack_req && cfg.transport != Transport::Uc;
        self.since_ack_req = if ack_req { 0 } else { self.since_ack_req + 1 };
        out
    }

    /// A response packet from the peer's responder.
    pub fn on_packet<P: AsRef<[u8]>>(
        &mut self,
        pkt: &Packet<P>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let code = pkt.bth.opcode;
        if self.failed
            || self.cfg.transport == Transport::Uc
            || code.transport != self.cfg.transport
            || code.is_request()
        {
            self.stats.ignored += 1;
            return;
        }
        let psn = Psn::new(pkt.bth.psn);
        let aeth = pkt.aeth.map(|a| a.kind());
        match (code.op, aeth) {
            (Op::Acknowledge, Some(AethKind::Ack { .. })) => self.on_ack(psn, now, out),
            (Op::Acknowledge, Some(AethKind::RnrNak { timer })) => {
                self.on_rnr(psn, timer, now, out)
            }
            (Op::Acknowledge, Some(AethKind::Nak { code })) => match code {
                NAK_PSN_SEQUENCE => self.on_seq_nak(psn, now, out),
                NAK_INVALID_REQUEST => self.on_error(psn, WcStatus::RemInvReqErr, now, out),
                NAK_REMOTE_ACCESS => self.on_error(psn, WcStatus::RemAccessErr, now, out),
                NAK_REMOTE_OPERATIONAL => self.on_error(psn, WcStatus::RemOpErr, now, out),
                // Reserved codes (and RD's invalid RD request): not for RC.
                _ => self.stats.ignored += 1,
            },
            (Op::AtomicAcknowledge, Some(AethKind::Ack { .. })) => match pkt.atomic_ack {
                Some(original) => self.on_atomic_ack(psn, original, now, out),
                None => self.stats.ignored += 1,
            },
            (Op::ReadResponseMiddle, None) => {
                self.on_read_response(psn, Position::Middle, pkt.payload.as_ref().len(), now, out)
            }
            (op, Some(AethKind::Ack { .. })) => match segment::classify_read_response(op) {
                Some(pos) => self.on_read_response(psn, pos, pkt.payload.as_ref().len(), now, out),
                None => self.stats.ignored += 1,
            },
            _ => self.stats.ignored += 1,
        }
    }

    /// The local ACK timer or the RNR timer may have expired.
    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.failed {
            return;
        }
        let Some(deadline) = self.ack_deadline.filter(|d| now >= *d) else {
            return;
        };
        if !self.outstanding() {
            self.ack_deadline = None;
            return;
        }
        self.stats.timeouts += 1;
        let una = self.una();
        let _ = self.go_back(una, true, now, out);
        log::trace!("requester: ACK timeout (deadline {deadline:?}), resending from {una}");
    }

    fn on_ack(&mut self, psn: Psn, now: Instant, out: &mut Vec<Action>) {
        if !self.in_flight(psn) {
            // A duplicate ACK (the responder's answer to a resent request) or a ghost.
            self.stats.ignored += 1;
            return;
        }
        if let Some(lost) = self.ack_through(psn, now, out) {
            self.implied_nak(lost, now, out);
        }
    }

    fn on_seq_nak(&mut self, psn: Psn, now: Instant, out: &mut Vec<Action>) {
        if !self.in_flight(psn) {
            self.stats.ignored += 1;
            return;
        }
        self.stats.seq_naks += 1;
        // The NAK acknowledges every request before its PSN.
        let from = self.ack_through(psn.sub(1), now, out).unwrap_or(psn);
        let _ = self.go_back(from, false, now, out);
    }

    fn on_rnr(&mut self, psn: Psn, timer: u8, now: Instant, out: &mut Vec<Action>) {
        if !self.in_flight(psn) {
            self.stats.ignored += 1;
            return;
        }
        self.stats.rnr_naks += 1;
        if let Some(lost) = self.ack_through(psn.sub(1), now, out) {
            self.implied_nak(lost, now, out);
            return;
        }
        if self.rnr_until.is_some() && self.rewound == Some(psn) {
            return;
        }
        if self.cfg.rnr_retry != 7 {
            if self.rnr_left == 0 {
                self.fail(WcStatus::RnrRetryExcErr, VendorErr::Rnr, out);
                return;
            }
            self.rnr_left -= 1;
        }
        self.rewind_to(psn);
        self.rewound = Some(psn);
        let until = now + rnr_delay(timer);
        self.rnr_until = Some(until);
        // The ACK timer does not run while the requester itself waits.
        self.ack_deadline = None;
        out.push(Action::RnrWait {
            until,
            retries_left: (self.cfg.rnr_retry != 7).then_some(self.rnr_left),
        });
    }

    fn on_error(&mut self, psn: Psn, status: WcStatus, now: Instant, out: &mut Vec<Action>) {
        if !self.in_flight(psn) {
            self.stats.ignored += 1;
            return;
        }
        // Requests before the NAK'd one completed; the WQE it names fails.
        let _ = self.ack_through(psn.sub(1), now, out);
        let why = match status {
            WcStatus::RemAccessErr => VendorErr::RemoteAccess,
            _ => VendorErr::RemoteError,
        };
        self.fail(status, why, out);
    }

    fn on_atomic_ack(&mut self, psn: Psn, original: u64, now: Instant, out: &mut Vec<Action>) {
        if !self.in_flight(psn) {
            self.stats.ignored += 1;
            return;
        }
        let Some(i) = self.find(psn) else {
            self.stats.ignored += 1;
            return;
        };
        let e = &self.entries[i];
        if !e.msg.op.is_atomic() || e.progress > 0 {
            self.stats.ignored += 1;
            return;
        }
        if let Some(lost) = self.ack_through(psn.sub(1), now, out) {
            self.implied_nak(lost, now, out);
            return;
        }
        // The acknowledgement may have retired the WQEs before it.
        let Some(i) = self.find(psn) else {
            return;
        };
        let before = self.una();
        let e = &mut self.entries[i];
        e.progress = 1;
        out.push(Action::AtomicResult {
            wqe: e.id,
            original,
        });
        self.advanced(before, now, out);
    }

    fn on_read_response(
        &mut self,
        psn: Psn,
        pos: Position,
        len: usize,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if !self.in_flight(psn) {
            self.stats.ignored += 1;
            return;
        }
        let Some(i) = self.find(psn) else {
            self.stats.ignored += 1;
            return;
        };
        let e = &self.entries[i];
        if e.msg.op != MsgOp::Read {
            self.stats.ignored += 1;
            return;
        }
        let k = psn.since(e.first);
        let expected = e.first.add(e.progress);
        if k < e.progress {
            // A response to a request sent again: already placed.
            self.stats.ignored += 1;
            return;
        }
        if k > e.progress {
            // Responses were lost between: ask again from the first one missing.
            let from = self
                .ack_through(expected.sub(1), now, out)
                .unwrap_or(expected);
            self.implied_nak(from, now, out);
            return;
        }
        if let Some(lost) = self.ack_through(psn.sub(1), now, out) {
            self.implied_nak(lost, now, out);
            return;
        }
        let Some(i) = self.find(psn) else {
            return;
        };
        let e = &self.entries[i];
        let last = k + 1 >= e.npsn;
        let (offset, n) = segment::piece(e.msg.len, self.cfg.mtu, k);
        // A response stream may restart (First/Only) anywhere after a retry (rxe's
        // check_ack: "read retries of partial data may restart from read response first"),
        // but the packet count and lengths are the READ's.
        let placed = pos.ends() == last && (pos.starts() || k > 0) && len == n as usize;
        if !placed {
            self.fail(WcStatus::BadRespErr, VendorErr::Length, out);
            return;
        }
        let before = self.una();
        let id = e.id;
        self.entries[i].progress += 1;
        out.push(Action::Place {
            wqe: id,
            offset,
            len: n,
        });
        self.advanced(before, now, out);
    }

    /// Applies an acknowledgement of every PSN up to `last`: SEND/WRITE entries it covers
    /// progress; a READ or atomic it passes without its response is returned (implied NAK).
    fn ack_through(&mut self, last: Psn, now: Instant, out: &mut Vec<Action>) -> Option<Psn> {
        let before = self.una();
        let mut lost = None;
        for e in self.entries.iter_mut() {
            if !e.started || e.local || last.before(e.first) {
                break;
            }
            if e.msg.op.is_read_or_atomic() {
                let expected = e.first.add(e.progress);
                if !e.done() && !last.before(expected) {
                    lost = Some(expected);
                }
                if !e.done() {
                    break;
                }
                continue;
            }
            let covered = last.since(e.first).saturating_add(1).min(e.npsn);
            e.progress = e.progress.max(covered);
            if e.progress < e.npsn {
                break;
            }
        }
        self.advanced(before, now, out);
        lost
    }

    /// Retires the finished WQEs at the head; progress since `before` restarts the timer
    /// and the retry counts (they count retries without progress).
    fn advanced(&mut self, before: Psn, now: Instant, out: &mut Vec<Action>) {
        loop {
            match self.entries.front() {
                Some(Entry {
                    aborted: Some((status, why)),
                    ..
                }) => {
                    let (status, why) = (*status, *why);
                    self.fail(status, why, out);
                    return;
                }
                Some(e) if e.done() => {}
                _ => break,
            }
            let Some(e) = self.entries.pop_front() else {
                break;
            };
            match self.cursor {
                0 => self.cursor_pkt = 0,
                _ => self.cursor -= 1,
            }
            if e.msg.op.is_read_or_atomic() {
                self.reads = self.reads.saturating_sub(1);
            }
            out.push(complete(&e, WcStatus::Success, VendorErr::None));
        }
        if self.una() != before {
            self.retries_left = self.cfg.retry_cnt;
            self.rnr_left = self.cfg.rnr_retry;
            self.rewound = None;
            self.ack_deadline = match self.outstanding() {
                true => self.timeout.map(|t| now + t),
                false => None,
            };
        }
    }

    fn implied_nak(&mut self, from: Psn, now: Instant, out: &mut Vec<Action>) {
        if self.go_back(from, false, now, out) {
            self.stats.implied_naks += 1;
        }
    }

    /// Go back N: resend from `psn`, if retries are left (a timeout always counts; a NAK
    /// for a retry already under way from the same PSN does not start another). Whether
    /// a retry started.
    fn go_back(&mut self, psn: Psn, timeout: bool, now: Instant, out: &mut Vec<Action>) -> bool {
        if !timeout && self.rewound == Some(psn) {
            return false;
        }
        if self.retries_left == 0 {
            self.fail(WcStatus::RetryExcErr, VendorErr::Unreachable, out);
            return false;
        }
        self.retries_left -= 1;
        self.rewind_to(psn);
        self.rewound = Some(psn);
        self.rnr_until = None;
        self.ack_deadline = self.timeout.map(|t| now + t);
        true
    }

    /// The entry holding `psn` (started entries are a prefix in PSN order).
    fn find(&self, psn: Psn) -> Option<usize> {
        let base = self.entries.front()?.first;
        let target = psn.since(base);
        let n = self
            .entries
            .partition_point(|e| e.started && e.first.since(base) <= target);
        let i = n.checked_sub(1)?;
        self.entries[i].holds(psn).then_some(i)
    }

    /// Moves the send cursor back to `psn`.
    fn rewind_to(&mut self, psn: Psn) {
        match self.find(psn) {
            Some(i) => {
                self.cursor = i;
                self.cursor_pkt = psn.since(self.entries[i].first);
            }
            None => {
                self.cursor = self.entries.iter().take_while(|e| e.started).count();
                self.cursor_pkt = 0;
            }
        }
    }

    /// The head WQE fails: the QP is done (its other WQEs are flushed by the data path).
    fn fail(&mut self, status: WcStatus, why: VendorErr, out: &mut Vec<Action>) {
        if let Some(e) = self.entries.front() {
            out.push(complete(e, status, why));
        }
        log::debug!("requester: WQE failed with {status:?} ({why:?})");
        self.entries.clear();
        self.reads = 0;
        self.failed = true;
        self.ack_deadline = None;
        self.rnr_until = None;
    }
}

fn atomic_eth(msg: &Message, swap_add: u64, compare: u64) -> AtomicEth {
    AtomicEth {
        va: msg.remote_addr,
        rkey: msg.rkey,
        swap_add,
        compare,
    }
}

fn complete(e: &Entry, status: WcStatus, vendor_err: VendorErr) -> Action {
    Action::Complete {
        wqe: e.id,
        status,
        vendor_err,
        byte_len: match status {
            WcStatus::Success => e.msg.byte_len(),
            _ => 0,
        },
    }
}

/// The AETH of a response, for tests and the responder.
pub(super) fn ack_aeth(msn: u32) -> Aeth {
    Aeth::new(
        AethKind::Ack {
            credits: crate::wire::ext::CREDITS_INVALID,
        },
        msn,
    )
}

#[cfg(test)]
#[path = "requester_tests.rs"]
mod tests;
