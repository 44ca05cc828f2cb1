//! The requester: executes a QP's send WQEs in order, one chunk per transfer, waits out RNR
//! and unreachable targets, completes or fails each WQE, and flushes queues in ERR (SPEC
//! "Send queue processing").

use super::copy::Pieces;
use super::datagram::{self, Datagram};
use super::memory_ops;
use super::responder::{respond, Request, Response};
use super::{
    atomic, capture, receive, sge, wire, Budget, Peers, Progress, Route, CHUNK, WQE_BUDGET,
};
use crate::addr::{Address, Gid};
use crate::guest_memory::RamSnapshot;
use crate::objects::counters::{Op, Wire};
use crate::objects::qp::{packets, psn_add, WaitReason, Waiting};
use crate::objects::Qp;
use crate::rnic::contract;
use crate::rnic::fence::InFlight;
use crate::rnic::notify::{post_async, post_cqe};
use crate::rnic::{Rnic, RnicState};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vrnic_hw::{
    Access, AtomicSeg, ContractRule, Cqe, DbQpSlot, EventType, QpState, QpType, RecvWqeHeader,
    SendFlags, SendWqeHeader, Sge, VendorErr, WcOpcode, WcStatus, WrOpcode, XrcSeg, CQE_FLAG_RECV,
    UD_MAX_PAYLOAD, UD_PAYLOAD_OFFSET, XRC_PAYLOAD_OFFSET,
};

/// A failed WQE: its completion status and the device's reason.
type Failure = (WcStatus, VendorErr);

/// One chunk of the head WQE, resolved under the requester's lock and carried out without it.
pub struct Transfer {
    qpn: u32,
    /// The QP's epoch and queue position when resolved: completion checks them.
    epoch: u32,
    index: u32,
    wqe: SendWqeHeader,
    opcode: WrOpcode,
    len: u64,
    offset: u64,
    chunk: u64,
    pieces: Pieces,
    psn: u32,
    packets: u32,
    /// The QP's path MTU in bytes (the packet tap segments at it).
    mtu: u32,
    /// The chunk is sent again, and why (the QP was waiting for this retry).
    resent: Option<WaitReason>,
    /// Where the target is (the AV's LID or GID), and the requester's source GID.
    dest: Address,
    src_gid: Option<Gid>,
    dest_qpn: u32,
    /// The type the target QP must have: RC, UC, or XRC_TGT for an XRC_INI requester.
    transport: QpType,
    /// XRC_INI: the xrc_seg's SRQ of the target.
    remote_srqn: Option<u32>,
    /// Atomics: the operands.
    atomic: Option<AtomicSeg>,
    /// UD and GSI: the resolved address vector (boxed: RC transfers stay small).
    datagram: Option<Box<Datagram>>,
    mem: RamSnapshot,
    _in_flight: InFlight,
}

/// What the requester does next for a QP, decided under its lock.
enum Plan {
    Idle,
    Worked,
    Wait(Instant),
    Transfer(Box<Transfer>),
    /// A memory operation executed; the next WQE may follow in this pass.
    Executed,
    /// A memory operation revoked access: it completes once the DMA fence has passed.
    AfterFence(Fenced),
}

/// A memory operation waiting for the transfers in flight before its completion.
struct Fenced {
    epoch: u32,
    index: u32,
    wqe: SendWqeHeader,
}

/// Serves QP `qpn` of `rnic`: flushes it in ERR, runs its send queue in RTS.
pub fn service_qp(
    peers: &dyn Peers,
    rnic: &Arc<Rnic>,
    qpn: u32,
    now: Instant,
    budget: &mut Budget,
) -> Progress {
    if super::wire::on() {
        if let Some(p) = super::wire::service_qp(peers, rnic, qpn, now) {
            return p;
        }
    }
    let mut progress = Progress::default();
    let mut next = plan(rnic, &mut rnic.lock(), qpn, now);
    for done in 1..=WQE_BUDGET {
        let transfer = match next {
            Plan::Idle => break,
            Plan::Worked => return Progress::worked(),
            Plan::Wait(at) => {
                progress.retry_at = Some(at);
                break;
            }
            Plan::Transfer(t) => t,
            Plan::Executed => {
                progress.worked = true;
                if done == WQE_BUDGET {
                    break;
                }
                next = plan(rnic, &mut rnic.lock(), qpn, now);
                continue;
            }
            Plan::AfterFence(fenced) => {
                // No lock held, and this thread holds no transfer (lock rule 3).
                rnic.fence.wait();
                let mut st = rnic.lock();
                complete_fenced(rnic, &mut st, qpn, &fenced);
                progress.worked = true;
                if done == WQE_BUDGET {
                    break;
                }
                next = plan(rnic, &mut st, qpn, now);
                continue;
            }
        };
        budget.bytes = budget.bytes.saturating_sub(transfer.chunk.max(1));
        let response = carry_out(peers, rnic, &transfer);
        // One lock hold completes this WQE and resolves the next.
        let mut st = rnic.lock();
        match finish(rnic, &mut st, *transfer, response, now) {
            Step::Done => progress.worked = true,
            // Let the other QPs have their turn before the next chunk or after a failure.
            Step::Partial | Step::Failed => return Progress::worked(),
            Step::Waiting(at) => {
                progress.retry_at = Some(at);
                break;
            }
        }
        if budget.bytes == 0 || done == WQE_BUDGET {
            break;
        }
        next = plan(rnic, &mut st, qpn, now);
    }
    progress
}

/// Whether a QP has work for the requester now (a cheap look: two doorbell words).
pub enum Look {
    Idle,
    Work,
    WaitUntil(Instant),
}

/// A QP's producer indices as its driver last rang them.
struct Rung {
    sq_pi: u32,
    rq_pi: u32,
}

impl Rung {
    fn read(rnic: &Rnic, qp: &Qp) -> Self {
        if !qp.has_doorbell() {
            // XRC_TGT: no queues and no slot; nothing is ever posted.
            return Rung {
                sq_pi: qp.sq.ci,
                rq_pi: qp.rq.ci,
            };
        }
        let word = |field| rnic.doorbells.slot_word(qp.db_page, qp.db_slot, field);
        Rung {
            sq_pi: word(DbQpSlot::SQ_PI_OFF),
            // A QP with an SRQ, or an XRC_INI QP, has no receive queue: its rq_pi means
            // nothing.
            rq_pi: match qp.has_own_rq() {
                true => word(DbQpSlot::RQ_PI_OFF),
                false => qp.rq.ci,
            },
        }
    }

    /// A producer index beyond its ring: a doorbell error (SPEC "Posting work").
    fn overrun(&self, qp: &Qp) -> bool {
        self.sq_pi.wrapping_sub(qp.sq.ci) > qp.sq.ring.depth()
            || self.rq_pi.wrapping_sub(qp.rq.ci) > qp.rq.ring.depth()
    }
}

pub fn look(rnic: &Rnic, qp: &Qp, now: Instant) -> Look {
    let rung = Rung::read(rnic, qp);
    let sq_pending = rung.sq_pi != qp.sq.ci;
    match qp.state {
        QpState::Err if sq_pending || rung.rq_pi != qp.rq.ci || receive::srq_flush_due(qp) => {
            Look::Work
        }
        QpState::Err => Look::Idle,
        _ if rung.overrun(qp) => Look::Work,
        QpState::Rts | QpState::Sqd if sq_pending && qp.sends_allowed() => match qp.waiting {
            Some(w) if now < w.retry_at => Look::WaitUntil(w.retry_at),
            _ => Look::Work,
        },
        QpState::Reset | QpState::Init | QpState::Rtr | QpState::Sqe if sq_pending => Look::Work,
        _ => Look::Idle,
    }
}

fn plan(rnic: &Rnic, st: &mut RnicState, qpn: u32, now: Instant) -> Plan {
    let Some(mem) = st.mem() else {
        return Plan::Idle;
    };
    let Some(qp) = st.objects.qp(qpn) else {
        return Plan::Idle;
    };
    let rung = Rung::read(rnic, qp);
    let Rung { sq_pi, rq_pi } = rung;
    let qp_kind = qp.kind;
    if rung.overrun(qp) && qp.state != QpState::Err {
        contract::report(
            rnic,
            st,
            ContractRule::QpPiBeyondRing,
            format_args!("QP {qpn}: doorbell beyond the queue depth (sq_pi {sq_pi}, rq_pi {rq_pi}); moving to ERR"),
        );
        let from = || st.objects.qp(qpn).map(|qp| qp.state);
        rnic.trace.qp_state(qpn, from, QpState::Err);
        to_error(st, qpn);
        post_async(rnic, st, EventType::QpFatal, qpn, 0);
        return Plan::Worked;
    }
    match qp.state {
        QpState::Err => match flush(rnic, st, &mem, qpn, sq_pi, rq_pi) {
            true => Plan::Worked,
            false => Plan::Idle,
        },
        // SQD: only the started head WQE goes on (SPEC "Send queue drain").
        QpState::Rts | QpState::Sqd if qp.sq.ci != sq_pi && qp.sends_allowed() => {
            if let Some(w) = qp.waiting.filter(|w| now < w.retry_at) {
                return Plan::Wait(w.retry_at);
            }
            let (addr, wqe) = match read_wqe(&mem, st, qpn) {
                Ok(head) => head,
                Err(failure) => {
                    complete_send(rnic, st, &mem, qpn, &SendWqeHeader::default(), Err(failure));
                    return Plan::Worked;
                }
            };
            let first_chunk = || (qp.sq_offset == 0).then_some(qp.sq.ci);
            rnic.trace.wqe(qpn, qp_kind, &mem, addr, &wqe, first_chunk);
            if let Some(status) = rnic.faults.wqe(qpn, qp.sq.ci, !qp.sq_started) {
                complete_send(rnic, st, &mem, qpn, &wqe, Err((status, VendorErr::None)));
                return Plan::Worked;
            }
            // XRC_INI has no memory operations (SPEC "XRC"): resolve refuses them.
            if memory_ops::is_memory_op(wqe.opcode) && qp_kind != QpType::XrcIni {
                return memory_op(rnic, st, &mem, qpn, addr, &wqe);
            }
            match resolve(rnic, st, &mem, qpn, addr, wqe) {
                Ok(t) => {
                    started(st, qpn);
                    Plan::Transfer(Box::new(t))
                }
                Err((wqe, failure)) => {
                    complete_send(rnic, st, &mem, qpn, &wqe, Err(failure));
                    Plan::Worked
                }
            }
        }
        QpState::Reset | QpState::Init | QpState::Rtr | QpState::Sqe if sq_pi != qp.sq.ci => {
            let failure = (WcStatus::LocQpOpErr, VendorErr::QpState);
            let wqe = read_wqe(&mem, st, qpn).map(|w| w.1).unwrap_or_default();
            complete_send(rnic, st, &mem, qpn, &wqe, Err(failure));
            Plan::Worked
        }
        _ => Plan::Idle,
    }
}

/// The head send WQE of QP `qpn` has started: in SQD it runs to its completion.
fn started(st: &mut RnicState, qpn: u32) {
    if let Some(qp) = st.objects.qp_mut(qpn) {
        qp.sq_started = true;
    }
}

/// Executes the memory operation at the head of QP `qpn`'s send queue.
fn memory_op(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    addr: u64,
    wqe: &SendWqeHeader,
) -> Plan {
    let Some(qp) = st.objects.qp(qpn) else {
        return Plan::Idle;
    };
    let (epoch, index) = (qp.epoch, qp.sq.ci);
    match memory_ops::execute(&mut st.objects, mem, qpn, addr, wqe) {
        Ok(memory_ops::Done::Now) => {
            complete_send(rnic, st, mem, qpn, wqe, Ok(0));
            Plan::Executed
        }
        Ok(memory_ops::Done::AfterFence) => {
            started(st, qpn);
            Plan::AfterFence(Fenced {
                epoch,
                index,
                wqe: *wqe,
            })
        }
        Err(failure) => {
            complete_send(rnic, st, mem, qpn, wqe, Err(failure));
            Plan::Worked
        }
    }
}

/// Completes a memory operation after the fence, unless the QP forgot it meanwhile.
fn complete_fenced(rnic: &Rnic, st: &mut RnicState, qpn: u32, f: &Fenced) {
    let Some(mem) = st.mem() else {
        return;
    };
    let still_head = st
        .objects
        .qp(qpn)
        .is_some_and(|qp| qp.epoch == f.epoch && qp.sq.ci == f.index && qp.sends_allowed());
    if still_head {
        complete_send(rnic, st, &mem, qpn, &f.wqe, Ok(0));
    }
}

fn to_error(st: &mut RnicState, qpn: u32) {
    st.objects.qp_to_error(qpn);
}

/// Reads and validates the send WQE at the head of the queue: (address, header).
fn read_wqe(mem: &RamSnapshot, st: &RnicState, qpn: u32) -> Result<(u64, SendWqeHeader), Failure> {
    let qp = st
        .objects
        .qp(qpn)
        .ok_or((WcStatus::LocQpOpErr, VendorErr::BadWqe))?;
    let addr = qp
        .sq
        .ring
        .entry_addr(qp.sq.ci)
        .ok_or((WcStatus::LocQpOpErr, VendorErr::BadWqe))?;
    let wqe: SendWqeHeader = mem
        .read_obj(addr)
        .map_err(|_| (WcStatus::LocQpOpErr, VendorErr::DmaFault))?;
    Ok((addr, wqe))
}

/// The opcodes of an XRC_INI QP: those of RC but SEND_WITH_INV and the memory operations.
fn xrc_opcode(opcode: WrOpcode) -> bool {
    use WrOpcode::*;
    matches!(
        opcode,
        RdmaWrite | RdmaWriteWithImm | Send | SendWithImm | RdmaRead
    ) || atomic::is_atomic(opcode)
}

/// The remote_srqn of the xrc_seg at offset 32 of an XRC_INI WQE (reserved fields zero).
fn read_xrc_seg(mem: &RamSnapshot, addr: u64) -> Result<u32, Failure> {
    let seg: XrcSeg = mem
        .read_obj(addr + SendWqeHeader::SIZE as u64)
        .map_err(|_| (WcStatus::LocQpOpErr, VendorErr::DmaFault))?;
    match seg.nonzero_reserved() {
        Some(_) => Err((WcStatus::LocQpOpErr, VendorErr::BadWqe)),
        None => Ok(seg.remote_srqn.to_native()),
    }
}

/// Resolves the next chunk of the head WQE into a transfer (or the WQE's failure).
fn resolve(
    rnic: &Rnic,
    st: &RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    addr: u64,
    wqe: SendWqeHeader,
) -> Result<Transfer, (SendWqeHeader, Failure)> {
    let fail = |f: Failure| (wqe, f);
    let bad = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    let qp = st.objects.qp(qpn).ok_or(fail(bad))?;
    let bad_opcode = (WcStatus::LocQpOpErr, VendorErr::BadOpcode);
    let opcode = WrOpcode::try_from(wqe.opcode).map_err(|_| fail(bad_opcode))?;
    // UC has no responses to carry READ data or atomic results (SPEC "Unreliable
    // connected"); atomics are RC only.
    let no_response = matches!(opcode, WrOpcode::RdmaRead) || atomic::is_atomic(opcode);
    if qp.kind == QpType::Uc && no_response {
        return Err(fail(bad_opcode));
    }
    if qp.kind == QpType::XrcIni && !xrc_opcode(opcode) {
        return Err(fail(bad_opcode));
    }
    let known_flags = SendFlags::ALL.iter().fold(0u8, |acc, f| acc | u8::from(*f));
    if wqe.flags & !known_flags != 0 || wqe.nonzero_reserved().is_some() {
        return Err(fail(bad));
    }
    let datagram = match qp.is_datagram() {
        true => Some(Box::new(
            datagram::resolve(rnic, st, mem, qp, addr, &wqe).map_err(fail)?,
        )),
        false => None,
    };
    let stride = 1u64 << qp.sq.ring.entry_shift;
    // XRC_INI WQEs name the target's SRQ in an xrc_seg (SPEC "XRC").
    let remote_srqn = match qp.kind {
        QpType::XrcIni => Some(read_xrc_seg(mem, addr).map_err(fail)?),
        _ => None,
    };
    // Datagram WQEs carry their payload after the ud_av, XRC_INI ones after the xrc_seg.
    let payload_off = match (&datagram, remote_srqn) {
        (Some(_), _) => u64::from(UD_PAYLOAD_OFFSET),
        (None, Some(_)) => u64::from(XRC_PAYLOAD_OFFSET),
        (None, None) => SendWqeHeader::SIZE as u64,
    };
    let payload = addr + payload_off;
    let offset = qp.sq_offset;
    let mut atomic_seg = None;
    let (len, pieces) = if atomic::is_atomic(opcode) && datagram.is_none() {
        let (seg, sge) = atomic::read_wqe(mem, addr, payload_off, &wqe, stride).map_err(fail)?;
        atomic_seg = Some(seg);
        let sges = [sge];
        let access = u32::from(Access::LocalWrite);
        let len = sge::check(&st.objects, sge::Owner::of(qp), &sges, access).map_err(fail)?;
        (len, sge::pieces(&st.objects, &sges, 0, len))
    } else if wqe.flags & u8::from(SendFlags::Inline) != 0 {
        let len = u64::from(wqe.inline_len.to_native());
        if wqe.num_sge != 0
            || opcode == WrOpcode::RdmaRead
            || len > u64::from(qp.max_inline)
            || payload_off + len > stride
        {
            return Err(fail(bad));
        }
        // Inline data is read straight out of the WQE in guest memory.
        let offset = offset.min(len);
        let chunk = (len - offset).min(CHUNK);
        (len, vec![(payload + offset, chunk)])
    } else {
        let n = usize::from(wqe.num_sge);
        if wqe.inline_len.to_native() != 0
            || n > usize::from(qp.max_send_sge)
            || payload_off + (n * Sge::SIZE) as u64 > stride
        {
            return Err(fail(bad));
        }
        let sges = sge::read(mem, payload, n)
            .map_err(|_| fail((WcStatus::LocQpOpErr, VendorErr::DmaFault)))?;
        let access = if opcode == WrOpcode::RdmaRead {
            u32::from(Access::LocalWrite)
        } else {
            0
        };
        let len = sge::check(&st.objects, sge::Owner::of(qp), &sges, access).map_err(fail)?;
        let offset = offset.min(len);
        let chunk = (len - offset).min(CHUNK);
        (len, sge::pieces(&st.objects, &sges, offset, chunk))
    };
    if datagram.is_some() && len > u64::from(UD_MAX_PAYLOAD) {
        // A datagram is one packet: at most the port's MTU.
        return Err(fail((WcStatus::LocLenErr, VendorErr::Length)));
    }
    let offset = offset.min(len);
    let chunk = (len - offset).min(CHUNK);
    // The local buffers must be reachable before the target is involved: a local DMA
    // fault is the requester's error whatever the target's state (e.g. no receive posted).
    let local_ok = pieces.iter().all(|&(addr, n)| {
        usize::try_from(n).is_ok_and(|n| match no_response {
            // READ data and atomic results are written into the local buffers.
            true => mem.check_write(addr, n).is_ok(),
            false => mem.check_read(addr, n).is_ok(),
        })
    });
    if !local_ok {
        return Err(fail((WcStatus::LocProtErr, VendorErr::DmaFault)));
    }
    // RoCE mode names the peer by GID (SPEC "Send queue processing (RoCE mode, RC)"). A
    // source entry cleared since RTR leaves the request without a source the target knows.
    let (dest, src_gid) = if let Some(dg) = &datagram {
        (dg.dest, None)
    } else if rnic.link().is_eth() {
        let dgid = Address::Gid(Gid(qp.attr.dgid));
        (dgid, st.gid_table.get(qp.attr.sgid_index))
    } else {
        (Address::Lid(qp.attr.dlid.to_native()), None)
    };
    Ok(Transfer {
        qpn,
        epoch: qp.epoch,
        index: qp.sq.ci,
        wqe,
        opcode,
        len,
        offset,
        chunk,
        pieces,
        psn: qp.next_psn,
        packets: packets(chunk, qp.mtu_bytes()),
        mtu: qp.mtu_bytes(),
        resent: qp.waiting.map(|w| w.reason),
        dest,
        src_gid,
        dest_qpn: qp.attr.dest_qp_num.to_native(),
        transport: match qp.kind {
            QpType::XrcIni => QpType::XrcTgt,
            kind => kind,
        },
        remote_srqn,
        atomic: atomic_seg,
        datagram,
        mem: mem.clone(),
        _in_flight: rnic.fence.enter(),
    })
}

/// Sends the transfer to its target; no lock of the requester is held.
fn carry_out(peers: &dyn Peers, rnic: &Rnic, t: &Transfer) -> Response {
    let with_imm = matches!(t.opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
    let solicited = t.wqe.flags & u8::from(SendFlags::Solicited) != 0;
    if let Some(dg) = &t.datagram {
        let send = datagram::Send {
            dg,
            len: t.len,
            imm: with_imm.then_some(t.wqe.imm_data),
            solicited,
            payload: datagram::Payload::Guest {
                mem: &t.mem,
                pieces: &t.pieces,
            },
        };
        return match (peers.route(&t.dest), peers.wire(rnic)) {
            (Some(Route::Device(target)), _) => {
                let response = datagram::deliver(&target, &send);
                capture::datagram(rnic, &target, &send, t.psn, response);
                response
            }
            (Some(Route::Wire), Some(wire)) => wire::datagram::send(&wire, rnic, &send, t.psn),
            _ => {
                // Nothing answers to that address: the datagram is gone, as on a wire.
                datagram::dropped(rnic, "no route", dg.dest_qpn);
                Response::Done
            }
        };
    }
    let Some(Route::Device(target)) = peers.route(&t.dest) else {
        return Response::Unreachable;
    };
    let req = Request {
        opcode: t.opcode,
        src_lid: rnic.lid(),
        src_gid: t.src_gid,
        src_qpn: t.qpn,
        dest_qpn: t.dest_qpn,
        transport: t.transport,
        remote_srqn: t.remote_srqn,
        atomic: t.atomic,
        psn: t.psn,
        packets: t.packets,
        resent: t.resent,
        solicited,
        imm: with_imm.then_some(t.wqe.imm_data),
        remote_addr: t.wqe.remote_addr.to_native(),
        rkey: t.wqe.rkey.to_native(),
        len: t.len,
        offset: t.offset,
        chunk: t.chunk,
        pieces: &t.pieces,
        mem: &t.mem,
    };
    let response = respond(&target, &req);
    capture::exchange(rnic, &target, &req, &t.dest, t.mtu, response);
    response
}

enum Step {
    Done,
    /// A chunk of a long message moved; the rest follows in later passes.
    Partial,
    Failed,
    Waiting(Instant),
}

/// Applies the target's response to the QP, unless the QP forgot this work meanwhile.
fn finish(rnic: &Rnic, st: &mut RnicState, t: Transfer, response: Response, now: Instant) -> Step {
    // The snapshot the transfer was resolved with: still valid (an unmap waits for it).
    let mem = t.mem.clone();
    let response = match (t.transport, response) {
        // UC: sent is done, whatever the target made of it (SPEC "Unreliable connected").
        (QpType::Uc, r) if r != Response::LocalFault => Response::Done,
        (_, r) => r,
    };
    // On the wire whatever became of the QP since.
    count(rnic, st, &t, response);
    let Some(qp) = st.objects.qp_mut(t.qpn) else {
        return Step::Failed;
    };
    if qp.epoch != t.epoch || qp.sq.ci != t.index || !qp.sends_allowed() {
        // Moved to ERR or RESET (or destroyed and recreated) while the chunk was moving:
        // the WQE is flushed or forgotten, as SPEC says for those transitions.
        return Step::Failed;
    }
    let (reason, delay, retries) = match response {
        Response::Done => {
            qp.waiting = None;
            qp.next_psn = psn_add(qp.next_psn, t.packets);
            if t.offset + t.chunk < t.len {
                qp.sq_offset = t.offset + t.chunk;
                return Step::Partial;
            }
            complete_send(rnic, st, &mem, t.qpn, &t.wqe, Ok(t.len));
            return Step::Done;
        }
        Response::Remote(status, why) => {
            complete_send(rnic, st, &mem, t.qpn, &t.wqe, Err((status, why)));
            return Step::Failed;
        }
        Response::LocalFault => {
            let failure = (WcStatus::LocProtErr, VendorErr::DmaFault);
            complete_send(rnic, st, &mem, t.qpn, &t.wqe, Err(failure));
            return Step::Failed;
        }
        Response::Rnr(timer) => (
            WaitReason::Rnr,
            rnr_delay(timer),
            (qp.attr.rnr_retry < 7).then_some(qp.attr.rnr_retry),
        ),
        Response::Unreachable => match qp.attr.timeout {
            0 => (WaitReason::Unreachable, Duration::from_secs(1), None),
            t => (
                WaitReason::Unreachable,
                Duration::from_nanos(4096 << t.min(31)),
                Some(qp.attr.retry_cnt),
            ),
        },
    };
    // Retries left, this NAK or timeout included: rnr_retry or retry_cnt at the first
    // (SPEC: the requester retries that many times), fewer at each one after.
    let left = match qp.waiting {
        Some(w) if w.reason == reason => w.retries_left,
        _ => retries,
    };
    if left == Some(0) {
        qp.waiting = None;
        let failure = match reason {
            WaitReason::Rnr => (WcStatus::RnrRetryExcErr, VendorErr::Rnr),
            WaitReason::Unreachable => (WcStatus::RetryExcErr, VendorErr::Unreachable),
        };
        complete_send(rnic, st, &mem, t.qpn, &t.wqe, Err(failure));
        return Step::Failed;
    }
    let waiting = Waiting {
        reason,
        retry_at: now + delay,
        retries_left: left.map(|n| n - 1),
    };
    qp.waiting = Some(waiting);
    Step::Waiting(waiting.retry_at)
}

/// Counts transfer `t` and what came back at the port and at the QP (SPEC "Counters").
fn count(rnic: &Rnic, st: &RnicState, t: &Transfer, response: Response) {
    let Some(answer) = response.answer() else {
        return;
    };
    let wire = match &t.datagram {
        Some(_) => Some(datagram::wire(t.len)),
        None => Op::of(t.opcode).map(|op| Wire {
            op,
            bytes: t.chunk,
            packets: t.packets,
            first: t.offset == 0,
            last: t.offset + t.chunk == t.len,
            resent: t.resent,
            reliable: matches!(t.transport, QpType::Rc | QpType::XrcTgt),
        }),
    };
    let Some(w) = wire else {
        return;
    };
    rnic.counters.requested(&w, answer);
    if let Some(qp) = st.objects.qp(t.qpn) {
        qp.counters.requested(&w, answer);
    }
}

/// IBTA RNR NAK timer values (code -> microseconds).
fn rnr_delay(code: u8) -> Duration {
    const MICROS: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
        327_680, 491_520,
    ];
    Duration::from_micros(MICROS[usize::from(code & 31)])
}

fn wc_opcode(op: u8) -> WcOpcode {
    match WrOpcode::try_from(op) {
        Ok(WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) => WcOpcode::RdmaWrite,
        Ok(WrOpcode::RdmaRead) => WcOpcode::RdmaRead,
        Ok(WrOpcode::AtomicCmpAndSwp) => WcOpcode::CompSwap,
        Ok(WrOpcode::AtomicFetchAndAdd) => WcOpcode::FetchAdd,
        Ok(WrOpcode::RegMr) => WcOpcode::RegMr,
        Ok(WrOpcode::LocalInv) => WcOpcode::LocalInv,
        Ok(WrOpcode::BindMw) => WcOpcode::BindMw,
        _ => WcOpcode::Send,
    }
}

/// Retires the head send WQE: a CQE if signalled or failed; a failure moves the QP to ERR.
pub(crate) fn complete_send(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    wqe: &SendWqeHeader,
    outcome: Result<u64, Failure>,
) {
    if matches!(outcome, Err((_, VendorErr::BadWqe))) && wqe.nonzero_reserved().is_some() {
        contract::report(
            rnic,
            st,
            ContractRule::WqeReservedField,
            format_args!("QP {qpn}: a reserved field of its head send WQE is not zero"),
        );
    }
    let Some(qp) = st.objects.qp_mut(qpn) else {
        return;
    };
    let index = qp.sq.ci;
    qp.sq.ci = index.wrapping_add(1);
    qp.sq_offset = 0;
    qp.sq_started = false;
    let signaled = wqe.flags & u8::from(SendFlags::Signaled) != 0;
    let (status, why, len) = match outcome {
        Ok(len) => (WcStatus::Success, VendorErr::None, len),
        Err((status, why)) => {
            log::debug!(
                "{}: QP {qpn} WQE {index} failed: {status:?} ({why:?})",
                rnic.name()
            );
            rnic.trace.qp_state(qpn, || Some(qp.state), QpState::Err);
            qp.enter_error();
            // Still in the active set: it is being served.
            (status, why, 0)
        }
    };
    // SQD: this was the WQE the drain waited for (an error moved the QP to ERR instead).
    let drained = qp.state == QpState::Sqd && std::mem::take(&mut qp.sq_drained_due);
    if status != WcStatus::Success || signaled {
        let cqe = Cqe {
            wr_id: wqe.wr_id,
            byte_len: u32::try_from(len).unwrap_or(u32::MAX).into(),
            qpn: qpn.into(),
            wqe_index: ((index & (qp.sq.ring.depth() - 1)) as u16).into(),
            opcode: wc_opcode(wqe.opcode).into(),
            status: status.into(),
            vendor_err: why.into(),
            ..Default::default()
        };
        let cqn = qp.send_cqn;
        if post_cqe(rnic, st, mem, cqn, &cqe).is_err() {
            to_error(st, qpn);
            post_async(rnic, st, EventType::QpFatal, qpn, 0);
            return;
        }
    }
    if drained {
        post_async(rnic, st, EventType::SqDrained, qpn, 0);
    }
}

/// In ERR every outstanding WQE of both queues completes with WR_FLUSH_ERR (the head
/// receive WQE only once no request is being placed into it). Returns whether it did work.
fn flush(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    sq_pi: u32,
    rq_pi: u32,
) -> bool {
    let mut worked = false;
    for recv in [false, true] {
        loop {
            let Some(qp) = st.objects.qp_mut(qpn) else {
                return worked;
            };
            if recv && qp.receive_in_flight {
                break;
            }
            let (queue, pi, cqn) = if recv {
                (&mut qp.rq, rq_pi, qp.recv_cqn)
            } else {
                (&mut qp.sq, sq_pi, qp.send_cqn)
            };
            if queue.ci == pi {
                break;
            }
            if pi.wrapping_sub(queue.ci) > queue.ring.depth() {
                // A producer index beyond the ring: nothing sane to flush, drop it.
                queue.ci = pi;
                break;
            }
            let index = queue.ci;
            queue.ci = index.wrapping_add(1);
            let addr = queue.ring.entry_addr(index);
            let (wr_id, opcode) = if recv {
                let wr_id = addr
                    .and_then(|a| mem.read_obj::<RecvWqeHeader>(a).ok())
                    .map_or(0, |h| h.wr_id.to_native());
                (wr_id, WcOpcode::Recv)
            } else {
                let wqe = addr
                    .and_then(|a| mem.read_obj::<SendWqeHeader>(a).ok())
                    .unwrap_or_default();
                (wqe.wr_id.to_native(), wc_opcode(wqe.opcode))
            };
            let cqe = Cqe {
                wr_id: wr_id.into(),
                qpn: qpn.into(),
                wqe_index: ((index & (queue.ring.depth() - 1)) as u16).into(),
                opcode: opcode.into(),
                status: WcStatus::WrFlushErr.into(),
                vendor_err: VendorErr::Flush.into(),
                flags: if recv { CQE_FLAG_RECV as u8 } else { 0 },
                ..Default::default()
            };
            worked = true;
            if post_cqe(rnic, st, mem, cqn, &cqe).is_err() {
                // The CQ is broken: drop the rest of this queue.
                if let Some(qp) = st.objects.qp_mut(qpn) {
                    if recv {
                        qp.rq.ci = rq_pi
                    } else {
                        qp.sq.ci = sq_pi
                    }
                }
                break;
            }
        }
    }
    worked | receive::flush_srq(rnic, st, mem, qpn)
}
