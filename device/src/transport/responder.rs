//! One QP's receive side on the wire: the responder of IBTA Vol 1 §9.7, checked against
//! rxe's responder (rxe_resp.c: check_psn, check_op_seq, check_length, duplicate_request,
//! acknowledge, the error classes):
//! - the expected PSN (ePSN): a request at ePSN is new and executed; one in the half of
//!   PSN space behind it is a duplicate: a SEND/WRITE packet is ACKed again with the last
//!   PSN executed and not placed again (C9-105), a READ is answered again from the
//!   responder's resources for the range its RETH names (which must be the original's
//!   from that PSN on), an atomic gets its saved original value back without being
//!   executed again; one ahead of it is out of sequence: one NAK PSN sequence error, then
//!   silence until ePSN arrives (rxe's sent_psn_nak; an RNR NAK silences the same way);
//! - the opcode sequence: a Middle or Last without its First, or a new message inside
//!   another, is an invalid request (rxe's class C): NAK, and the QP fails;
//! - lengths: First and Middle carry one MTU, Last 1..MTU, Only 0..MTU, and a WRITE's
//!   packets add up to its RETH's DMA length (rxe's check_length/check_rkey);
//! - the data path decides what only it can: a receive WQE (none: RNR NAK with
//!   min_rnr_timer, the PSN not consumed), the rkey (NAK remote access), its own failures
//!   (NAK remote operational error);
//! - ACK coalescing (§9.7.5.1.2): an ACK at the last packet of a message, on AckReq, and
//!   at least every `ack_every` packets; an ACK waiting to be sent is replaced by a later
//!   one; READ responses and atomic ACKs acknowledge for themselves;
//! - the READ/atomic resources (max_dest_rd_atomic): a ring of the last ones, which
//!   duplicates are answered from (a forgotten one is dropped: rxe's class D);
//! - UC: no ACKs; a message with a lost packet is dropped whole, and the next First or
//!   Only resynchronizes the ePSN (rxe's drop_msg); a First inside a message starts the
//!   new one (rxe drops that packet as well).
//!
//! Every response goes out through one queue in PSN order, so an ACK never overtakes the
//! READ responses before it (the requester would take it for an implied NAK).

use super::psn::Psn;
use super::requester::ack_aeth;
use super::segment::{self, Family, Position, MAX_MESSAGE};
use super::{check24, check_transport, Outgoing, Payload, TransportError};
use crate::wire::bth::Op;
use crate::wire::ext::{
    AethKind, NAK_INVALID_REQUEST, NAK_PSN_SEQUENCE, NAK_REMOTE_ACCESS, NAK_REMOTE_OPERATIONAL,
};
use crate::wire::{Aeth, AtomicEth, Bth, Opcode, Packet, Reth, Transport};
use std::collections::VecDeque;
use vrnic_hw::EventType;

/// Responses queued at most before duplicates stop being answered (new requests always
/// are: the data path drains the queue between packets).
pub const MAX_QUEUED_REPLIES: usize = 256;

/// A QP's attributes as the responder uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderConfig {
    /// RC, UC, or XRC (an XRC_TGT QP).
    pub transport: Transport,
    /// The requester's QPN (responses go there).
    pub dest_qpn: u32,
    pub pkey: u16,
    pub mtu: u32,
    /// The first expected PSN (the QP's rq_psn).
    pub rq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    /// ACK at least every this many packets, even without AckReq.
    pub ack_every: u32,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            transport: Transport::Rc,
            dest_qpn: 0,
            pkey: crate::wire::bth::DEFAULT_PKEY,
            mtu: 1024,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 1,
            ack_every: 64,
        }
    }
}

/// A new request packet for the data path to check and carry out, then `finish`.
#[derive(Debug, PartialEq, Eq)]
pub struct Execute {
    pub op: Op,
    pub family: Family,
    pub position: Position,
    pub psn: Psn,
    /// Where this packet's payload (`packet.payload`) goes in the message.
    pub offset: u64,
    pub len: u32,
    /// WRITE: the message's RETH (this packet's bytes go at `va + offset`); READ: the
    /// request's. The data path checks the rkey for the whole range.
    pub reth: Option<Reth>,
    pub atomic: Option<AtomicEth>,
    pub imm: Option<[u8; 4]>,
    /// SEND with invalidate: the R_Key to invalidate once the message is placed.
    pub invalidate: Option<u32>,
    pub solicited: bool,
    pub xrc_srqn: Option<u32>,
    /// UC: the message being received lost its end; discard what was placed of it (a
    /// SEND's receive WQE serves this message instead).
    pub restart: bool,
    ack_req: bool,
    next: Option<InMsg>,
}

/// What the data path made of an `Execute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Placed (SEND/WRITE), allowed (READ: the responses follow).
    Done,
    /// An atomic executed: the word's original value.
    Atomic(u64),
    /// No receive WQE for a SEND (or WRITE with immediate).
    Rnr,
    Refused(Refusal),
}

/// Why the data path refused a request (RC: NAK, and the QP fails; UC: dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Receive WQE too short, misaligned atomic, an opcode the QP does not take.
    InvalidRequest,
    /// rkey, bounds, access rights.
    RemoteAccess,
    /// The responder's own failure (its memory, its receive WQE, its CQ).
    RemoteOperational,
}

impl Refusal {
    fn nak_code(self) -> u8 {
        match self {
            Refusal::InvalidRequest => NAK_INVALID_REQUEST,
            Refusal::RemoteAccess => NAK_REMOTE_ACCESS,
            Refusal::RemoteOperational => NAK_REMOTE_OPERATIONAL,
        }
    }
}

/// What `on_packet` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    Execute(Execute),
    /// Nothing to do for the data path (a duplicate answered, a NAK queued, a drop).
    Handled,
    /// UC: the message being received is dropped; discard what was placed of it.
    Abandoned,
    /// A protocol error the engine found: a NAK is queued; move the QP to ERR and post
    /// this event.
    Fatal(EventType),
}

/// What happened on the QP's wire, for its counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    pub packets: u64,
    pub duplicates: u64,
    pub out_of_sequence: u64,
    pub seq_naks: u64,
    pub rnr_naks: u64,
    pub acks: u64,
    /// UC packets dropped with their message.
    pub dropped: u64,
    pub ignored: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InMsg {
    family: Family,
    /// Bytes received so far.
    offset: u64,
    reth: Option<Reth>,
}

#[derive(Debug, Clone, Copy)]
enum Resource {
    Read {
        first: Psn,
        npsn: u32,
        va: u64,
        rkey: u32,
        len: u32,
        msn: u32,
    },
    Atomic {
        psn: Psn,
        original: u64,
        msn: u32,
    },
}

#[derive(Debug, Clone, Copy)]
enum Reply {
    Ack {
        psn: Psn,
        aeth: Aeth,
    },
    AtomicAck {
        psn: Psn,
        aeth: Aeth,
        original: u64,
    },
    Read {
        psn: Psn,
        va: u64,
        rkey: u32,
        remaining: u32,
        started: bool,
        msn: u32,
    },
}

/// One QP's receive side (see the module comment).
#[derive(Debug)]
pub struct Responder {
    cfg: ResponderConfig,
    epsn: Psn,
    /// Messages completed (24 bits, in every AETH).
    msn: u32,
    /// RC: a NAK went out for ePSN; out-of-sequence packets are dropped silently.
    nak_sent: bool,
    in_msg: Option<InMsg>,
    /// UC: dropping until the next First or Only.
    dropping: bool,
    /// Packets since the last ACK.
    unacked: u32,
    resources: VecDeque<Resource>,
    replies: VecDeque<Reply>,
    /// An `Execute` is out: packets wait for its `finish`.
    pending: bool,
    failed: bool,
    stats: ResponderStats,
}

impl Responder {
    pub fn new(cfg: ResponderConfig) -> Result<Responder, TransportError> {
        check_transport(cfg.transport)?;
        check24("destination QPN", cfg.dest_qpn)?;
        check24("rq_psn", cfg.rq_psn)?;
        if !segment::valid_mtu(cfg.mtu) {
            return Err(TransportError::Mtu(cfg.mtu));
        }
        Ok(Responder {
            epsn: Psn::new(cfg.rq_psn),
            msn: 0,
            nak_sent: false,
            in_msg: None,
            dropping: false,
            unacked: 0,
            resources: VecDeque::new(),
            replies: VecDeque::new(),
            pending: false,
            failed: false,
            stats: ResponderStats::default(),
            cfg,
        })
    }

    /// MODIFY_QP of a QP already receiving: the attributes a responder may change on the
    /// way (min_rnr_timer, max_dest_rd_atomic, the ACK interval); the PSN, transport, peer
    /// and MTU stay (a new connection makes a new responder).
    pub fn reconfigure(&mut self, cfg: ResponderConfig) {
        self.cfg.min_rnr_timer = cfg.min_rnr_timer;
        self.cfg.max_dest_rd_atomic = cfg.max_dest_rd_atomic;
        self.cfg.ack_every = cfg.ack_every;
        let slots = usize::from(cfg.max_dest_rd_atomic.max(1));
        while self.resources.len() > slots {
            self.resources.pop_front();
        }
    }

    /// The PSN expected next (QUERY_QP's rq_psn).
    pub fn expected_psn(&self) -> Psn {
        self.epsn
    }

    pub fn msn(&self) -> u32 {
        self.msn
    }

    pub fn stats(&self) -> &ResponderStats {
        &self.stats
    }

    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Responses are waiting for `poll_transmit`.
    pub fn has_replies(&self) -> bool {
        !self.replies.is_empty()
    }

    /// A request packet from the peer's requester. After an `Execute`, call `finish`
    /// before the next packet: until then packets are dropped (counted as ignored), as a
    /// responder busy with one packet would drop what it cannot queue.
    pub fn on_packet<P: AsRef<[u8]>>(&mut self, pkt: &Packet<P>) -> Received {
        let code = pkt.bth.opcode;
        let class = segment::classify_request(code.op);
        let Some((family, pos)) =
            class.filter(|_| !self.failed && !self.pending && code.transport == self.cfg.transport)
        else {
            self.stats.ignored += 1;
            return Received::Handled;
        };
        self.stats.packets += 1;
        let psn = Psn::new(pkt.bth.psn);
        if self.cfg.transport == Transport::Uc {
            return self.uc_packet(pkt, family, pos, psn);
        }
        match psn.diff(self.epsn) {
            d if d > 0 => {
                self.stats.out_of_sequence += 1;
                if !self.nak_sent {
                    self.nak_sent = true;
                    self.stats.seq_naks += 1;
                    self.nak(self.epsn, NAK_PSN_SEQUENCE);
                }
                return Received::Handled;
            }
            d if d < 0 => return self.duplicate(pkt, family, psn),
            _ => self.nak_sent = false,
        }
        let in_sequence = match (self.in_msg, pos) {
            (Some(m), Position::Middle | Position::Last) => m.family == family,
            (Some(_), _) => false,
            (None, pos) => pos.starts(),
        };
        match in_sequence
            .then(|| self.check(pkt, family, pos, psn))
            .flatten()
        {
            Some(ex) => {
                self.pending = true;
                Received::Execute(ex)
            }
            None => {
                self.nak(psn, NAK_INVALID_REQUEST);
                self.failed = true;
                Received::Fatal(EventType::QpReqErr)
            }
        }
    }

    /// UC: no ACK and no NAK; whatever breaks a message drops it whole.
    fn uc_packet<P: AsRef<[u8]>>(
        &mut self,
        pkt: &Packet<P>,
        family: Family,
        pos: Position,
        psn: Psn,
    ) -> Received {
        let mut restart = false;
        if pos.starts() {
            // A new message: it resynchronizes the PSN and ends one that lost its tail.
            restart = self.in_msg.take().is_some();
            self.epsn = psn;
            self.dropping = false;
        } else if self.dropping || psn != self.epsn || self.in_msg.map(|m| m.family) != Some(family)
        {
            self.stats.dropped += 1;
            self.dropping = true;
            return match self.in_msg.take() {
                Some(_) => Received::Abandoned,
                None => Received::Handled,
            };
        }
        match self.check(pkt, family, pos, psn) {
            Some(mut ex) => {
                ex.restart = restart;
                self.pending = true;
                Received::Execute(ex)
            }
            None => {
                self.stats.dropped += 1;
                self.dropping = true;
                match restart {
                    true => Received::Abandoned,
                    false => Received::Handled,
                }
            }
        }
    }

    /// The lengths and RETH of an in-sequence packet, and the `Execute` for it.
    fn check<P: AsRef<[u8]>>(
        &self,
        pkt: &Packet<P>,
        family: Family,
        pos: Position,
        psn: Psn,
    ) -> Option<Execute> {
        let mtu = self.cfg.mtu as usize;
        let len = pkt.payload.as_ref().len();
        let fits = match pos {
            Position::First | Position::Middle => len == mtu,
            Position::Last => (1..=mtu).contains(&len),
            Position::Only => len <= mtu,
        };
        if !fits {
            return None;
        }
        let offset = self.in_msg.map_or(0, |m| m.offset);
        let end = offset + len as u64;
        let reth = match (family, pos.starts()) {
            (Family::Write, false) => self.in_msg.and_then(|m| m.reth),
            _ => pkt.reth,
        };
        let resources = self.cfg.max_dest_rd_atomic > 0;
        let valid = match family {
            Family::Send => end <= MAX_MESSAGE,
            Family::Write => reth.is_some_and(|r| {
                let total = u64::from(r.dma_len);
                total <= MAX_MESSAGE
                    && if pos.ends() {
                        end == total
                    } else {
                        end < total
                    }
            }),
            Family::Read => resources && reth.is_some_and(|r| u64::from(r.dma_len) <= MAX_MESSAGE),
            Family::Atomic => resources && pkt.atomic_eth.is_some(),
        };
        if !valid {
            return None;
        }
        let next = match pos.ends() {
            true => None,
            false => Some(InMsg {
                family,
                offset: end,
                reth,
            }),
        };
        Some(Execute {
            op: pkt.bth.opcode.op,
            family,
            position: pos,
            psn,
            offset,
            len: len as u32,
            reth: reth.filter(|_| matches!(family, Family::Write | Family::Read)),
            atomic: pkt.atomic_eth,
            imm: pkt.imm,
            invalidate: pkt.ieth,
            solicited: pkt.bth.solicited,
            xrc_srqn: pkt.xrc_srqn,
            restart: false,
            ack_req: pkt.bth.ack_req,
            next,
        })
    }

    /// How the data path carried out `ex`.
    pub fn finish(&mut self, ex: Execute, outcome: Outcome) {
        self.pending = false;
        if self.failed || ex.psn != self.epsn {
            return;
        }
        let uc = self.cfg.transport == Transport::Uc;
        let outcome = match (ex.family, outcome) {
            // An atomic must say what it found.
            (Family::Atomic, Outcome::Done) => Outcome::Refused(Refusal::RemoteOperational),
            (_, o) => o,
        };
        match outcome {
            Outcome::Done | Outcome::Atomic(_) if uc => {
                self.epsn = self.epsn.add(1);
                self.in_msg = ex.next;
            }
            Outcome::Done | Outcome::Atomic(_) => self.executed(&ex, outcome),
            Outcome::Rnr | Outcome::Refused(_) if uc => {
                self.stats.dropped += 1;
                self.dropping = true;
                self.in_msg = None;
            }
            Outcome::Rnr => {
                // The PSN is not consumed: the requester resends from it after the timer.
                self.stats.rnr_naks += 1;
                self.nak_sent = true;
                let aeth = Aeth::new(
                    AethKind::RnrNak {
                        timer: self.cfg.min_rnr_timer,
                    },
                    self.msn,
                );
                self.replies.push_back(Reply::Ack { psn: ex.psn, aeth });
            }
            Outcome::Refused(why) => {
                self.nak(ex.psn, why.nak_code());
                self.failed = true;
            }
        }
    }

    /// An RC request executed: advance ePSN and the MSN, keep READ/atomic resources,
    /// queue what answers it.
    fn executed(&mut self, ex: &Execute, outcome: Outcome) {
        match ex.family {
            Family::Send | Family::Write => {
                self.epsn = self.epsn.add(1);
                self.in_msg = ex.next;
                self.unacked += 1;
                let ends = ex.position.ends();
                if ends {
                    self.msn = (self.msn + 1) & 0xFF_FFFF;
                }
                if ends || ex.ack_req || self.unacked >= self.cfg.ack_every.max(1) {
                    self.ack(ex.psn);
                }
            }
            Family::Read => {
                let Some(r) = ex.reth else {
                    return;
                };
                let npsn = segment::packets(u64::from(r.dma_len), self.cfg.mtu);
                self.epsn = self.epsn.add(npsn);
                self.msn = (self.msn + 1) & 0xFF_FFFF;
                self.unacked = 0;
                self.keep(Resource::Read {
                    first: ex.psn,
                    npsn,
                    va: r.va,
                    rkey: r.rkey,
                    len: r.dma_len,
                    msn: self.msn,
                });
                self.replies.push_back(Reply::Read {
                    psn: ex.psn,
                    va: r.va,
                    rkey: r.rkey,
                    remaining: r.dma_len,
                    started: false,
                    msn: self.msn,
                });
            }
            Family::Atomic => {
                let Outcome::Atomic(original) = outcome else {
                    return;
                };
                self.epsn = self.epsn.add(1);
                self.msn = (self.msn + 1) & 0xFF_FFFF;
                self.unacked = 0;
                self.keep(Resource::Atomic {
                    psn: ex.psn,
                    original,
                    msn: self.msn,
                });
                self.replies.push_back(Reply::AtomicAck {
                    psn: ex.psn,
                    aeth: ack_aeth(self.msn),
                    original,
                });
            }
        }
    }

    /// Keeps a READ/atomic resource; the oldest gives way (as rxe recycles its ring: the
    /// requester must not have more outstanding than max_dest_rd_atomic).
    fn keep(&mut self, r: Resource) {
        let slots = usize::from(self.cfg.max_dest_rd_atomic.max(1));
        while self.resources.len() >= slots {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    /// A request behind ePSN: a duplicate.
    fn duplicate<P: AsRef<[u8]>>(&mut self, pkt: &Packet<P>, family: Family, psn: Psn) -> Received {
        self.stats.duplicates += 1;
        if self.replies.len() >= MAX_QUEUED_REPLIES {
            // A peer repeating requests faster than the answers leave gets no more
            // answers queued: duplicates are retransmissions, dropping one is safe.
            self.stats.ignored += 1;
            return Received::Handled;
        }
        match family {
            // C9-105: ACK again the most recent PSN; nothing is placed twice.
            Family::Send | Family::Write => self.ack(self.epsn.sub(1)),
            Family::Read => {
                let found = self.resources.iter().find_map(|r| match *r {
                    Resource::Read {
                        first,
                        npsn,
                        va,
                        rkey,
                        len,
                        msn,
                    } if psn.within(first, npsn) => Some((first, va, rkey, len, msn)),
                    _ => None,
                });
                let mtu = u64::from(self.cfg.mtu);
                let replay = found
                    .zip(pkt.reth)
                    .filter(|((first, va, rkey, len, _), r)| {
                        // The range it names must be the original's from this PSN on.
                        let skip = u64::from(psn.since(*first)) * mtu;
                        r.rkey == *rkey
                            && r.va == va.wrapping_add(skip)
                            && u64::from(r.dma_len) + skip == u64::from(*len)
                    });
                match replay {
                    Some(((_, _, _, _, msn), r)) => self.replay_read(psn, r, msn),
                    // Not a READ of ours (or long forgotten): dropped, the requester
                    // times out.
                    None => self.stats.ignored += 1,
                }
            }
            Family::Atomic => {
                let saved = self.resources.iter().find_map(|r| match *r {
                    Resource::Atomic {
                        psn: p,
                        original,
                        msn,
                    } if p == psn => Some((original, msn)),
                    _ => None,
                });
                match saved {
                    Some((original, msn)) => self.replies.push_back(Reply::AtomicAck {
                        psn,
                        aeth: ack_aeth(msn),
                        original,
                    }),
                    None => self.stats.ignored += 1,
                }
            }
        }
        Received::Handled
    }

    /// Answers a duplicate READ from `psn` on, as `r` names it. A response to the same
    /// READ still queued is resumed there instead of a second one queued (rxe does the
    /// same): a peer repeating one READ gets one stream of responses, not one per copy.
    fn replay_read(&mut self, psn: Psn, r: Reth, msn: u32) {
        let queued = self.replies.iter_mut().find_map(|reply| match reply {
            Reply::Read {
                psn: at,
                va,
                remaining,
                started,
                msn: m,
                ..
            } if *m == msn => Some((at, va, remaining, started)),
            _ => None,
        });
        match queued {
            // Not sent that far yet: the stream reaches `psn` anyway.
            Some((at, ..)) if !psn.before(*at) => {}
            Some((at, va, remaining, started)) => {
                *at = psn;
                *va = r.va;
                *remaining = r.dma_len;
                *started = false;
            }
            None => self.replies.push_back(Reply::Read {
                psn,
                va: r.va,
                rkey: r.rkey,
                remaining: r.dma_len,
                started: false,
                msn,
            }),
        }
    }

    /// The data path could not read the response at `psn` (the key was revoked, its
    /// access or memory changed since the READ was accepted, or a duplicate names what
    /// it no longer may): the NAK `why` names goes there instead; the QP fails.
    pub fn refuse_read(&mut self, psn: Psn, why: Refusal) {
        self.replies.clear();
        self.nak(psn, why.nak_code());
        self.failed = true;
    }

    /// Queues an ACK of `psn`, replacing an ACK still waiting (coalescing).
    fn ack(&mut self, psn: Psn) {
        self.unacked = 0;
        let aeth = ack_aeth(self.msn);
        if let Some(Reply::Ack { psn: p, aeth: a }) = self.replies.back_mut() {
            if matches!(a.kind(), AethKind::Ack { .. }) && !psn.before(*p) {
                *p = psn;
                *a = aeth;
                return;
            }
        }
        self.stats.acks += 1;
        self.replies.push_back(Reply::Ack { psn, aeth });
    }

    fn nak(&mut self, psn: Psn, code: u8) {
        let aeth = Aeth::new(AethKind::Nak { code }, self.msn);
        self.replies.push_back(Reply::Ack { psn, aeth });
    }

    /// The next response to send (ACKs, NAKs, READ responses, atomic ACKs in order).
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        let mtu = self.cfg.mtu;
        let reply = self.replies.front_mut()?;
        let (op, psn, done) = match reply {
            Reply::Ack { psn, .. } => (Op::Acknowledge, *psn, true),
            Reply::AtomicAck { psn, .. } => (Op::AtomicAcknowledge, *psn, true),
            Reply::Read {
                psn,
                remaining,
                started,
                ..
            } => {
                let pos = match (*started, *remaining <= mtu) {
                    (false, true) => Position::Only,
                    (false, false) => Position::First,
                    (true, true) => Position::Last,
                    (true, false) => Position::Middle,
                };
                (segment::read_response_op(pos), *psn, pos.ends())
            }
        };
        let mut out = Outgoing::new(Bth {
            opcode: Opcode {
                transport: self.cfg.transport,
                op,
            },
            solicited: false,
            migreq: true,
            pkey: self.cfg.pkey,
            fecn: false,
            becn: false,
            dest_qpn: self.cfg.dest_qpn,
            ack_req: false,
            psn: psn.get(),
        });
        match reply {
            Reply::Ack { aeth, .. } => out.aeth = Some(*aeth),
            Reply::AtomicAck { aeth, original, .. } => {
                out.aeth = Some(*aeth);
                out.atomic_ack = Some(*original);
            }
            Reply::Read {
                psn,
                va,
                rkey,
                remaining,
                started,
                msn,
            } => {
                let n = (*remaining).min(mtu);
                if op != Op::ReadResponseMiddle {
                    out.aeth = Some(ack_aeth(*msn));
                }
                out.payload = Payload::Memory {
                    va: *va,
                    rkey: *rkey,
                    len: n,
                };
                *va = va.wrapping_add(u64::from(n));
                *remaining -= n;
                *psn = psn.add(1);
                *started = true;
            }
        }
        if done {
            self.replies.pop_front();
        }
        Some(out)
    }
}

#[cfg(test)]
#[path = "responder_tests.rs"]
mod tests;
