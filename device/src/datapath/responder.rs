//! The target side of a request: checks the QP, its PSN and the rkey or consumes a receive
//! WQE, places the data and completes the receive (SPEC "Send queue processing", "Data
//! placement"). `respond` takes the target's lock twice, to accept and to complete, and
//! copies in between with no lock held.

use super::copy::{copy, Fault, Pieces};
use super::{atomic, memory_ops, receive, sge};
use crate::addr::Gid;
use crate::guest_memory::RamSnapshot;
use crate::objects::counters::{Answer, Counters, Op, Wire};
use crate::objects::qp::{psn_add, WaitReason};
use crate::rnic::fence::InFlight;
use crate::rnic::notify::post_async;
use crate::rnic::{Rnic, RnicState};
use std::sync::Arc;
use vrnic_hw::{
    Access, AtomicSeg, Cqe, EventType, QpState, QpType, VendorErr, WcFlags, WcOpcode, WcStatus,
    WrOpcode, CQE_FLAG_SOLICITED,
};

/// A request travelling from a requester QP to its target.
pub struct Request<'a> {
    pub opcode: WrOpcode,
    /// The requester's LID (IB mode) or source GID (RoCE mode).
    pub src_lid: u16,
    pub src_gid: Option<Gid>,
    pub src_qpn: u32,
    pub dest_qpn: u32,
    /// RC, UC or XRC_TGT: a target QP of another type does not answer.
    pub transport: QpType,
    /// XRC: the SRQ of the target's XRC domain the request is for (SPEC "XRC").
    pub remote_srqn: Option<u32>,
    /// Atomics: the operands (SPEC "Atomics").
    pub atomic: Option<AtomicSeg>,
    /// PSN of the request's first packet, and how many packets it takes.
    pub psn: u32,
    pub packets: u32,
    /// The requester sends this chunk again (after an RNR NAK or no response).
    pub resent: Option<WaitReason>,
    pub solicited: bool,
    pub imm: Option<[u8; 4]>,
    pub remote_addr: u64,
    pub rkey: u32,
    /// Length of the whole message.
    pub len: u64,
    /// This request moves bytes `[offset, offset + chunk)` of the message.
    pub offset: u64,
    pub chunk: u64,
    /// The requester's local pieces of this chunk (source of WRITE/SEND, destination of READ).
    pub pieces: &'a Pieces,
    pub mem: &'a RamSnapshot,
}

impl Request<'_> {
    /// This chunk ends the message: completions follow it.
    fn is_last(&self) -> bool {
        self.offset + self.chunk == self.len
    }

    /// The chunk as a wire carries it (None for opcodes that move no data).
    pub fn wire(&self) -> Option<Wire> {
        Some(Wire {
            op: Op::of(self.opcode)?,
            bytes: self.chunk,
            packets: self.packets,
            first: self.offset == 0,
            last: self.is_last(),
            resent: self.resent,
            reliable: matches!(self.transport, QpType::Rc | QpType::XrcTgt),
        })
    }

    /// The request consumes a receive WQE with its data (a SEND of any kind).
    fn is_send(&self) -> bool {
        matches!(
            self.opcode,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv
        )
    }
}

/// What the requester learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    Done,
    /// No receive WQE: retry after the target's RNR timer (the code).
    Rnr(u8),
    /// No such QP, not ready to receive, not connected to the requester, or out of
    /// sequence: the request is dropped as a packet would be, and the requester times out.
    Unreachable,
    /// The target refused or failed the request.
    Remote(WcStatus, VendorErr),
    /// The requester's own memory faulted during the transfer.
    LocalFault,
}

impl Response {
    /// What a wire would have carried back (None: the requester's own memory failed, so
    /// the request never left).
    pub fn answer(self) -> Option<Answer> {
        match self {
            Response::Done => Some(Answer::Done),
            Response::Rnr(_) => Some(Answer::RnrNak),
            Response::Remote(..) => Some(Answer::ErrorNak),
            Response::Unreachable => Some(Answer::Dropped),
            Response::LocalFault => None,
        }
    }
}

/// A request the target accepted: where its bytes go (or come from).
pub(crate) struct Accepted {
    pub(crate) pieces: Pieces,
    pub(crate) mem: RamSnapshot,
    epoch: u32,
    _in_flight: InFlight,
}

/// Handles `req` at the target device `rnic`, and counts what it received and answered
/// at the port and at the target QP (SPEC "Counters").
pub fn respond(rnic: &Rnic, req: &Request) -> Response {
    let mut reached = None;
    let response = exchange(rnic, req, &mut reached);
    if let (Some(qp), Some(answer), Some(w)) = (reached, response.answer(), req.wire()) {
        rnic.counters.responded(&w, answer);
        qp.responded(&w, answer);
    }
    response
}

/// Accepts, places and completes `req`; `reached` gets the counters of the QP it names.
fn exchange(rnic: &Rnic, req: &Request, reached: &mut Option<Arc<Counters>>) -> Response {
    let accepted = accept(rnic, &mut rnic.lock(), req, reached);
    let acc = match accepted {
        Ok(acc) => acc,
        Err(response) => return response,
    };
    let result = match (req.opcode, req.atomic) {
        (WrOpcode::RdmaRead, _) => copy(req.mem, req.pieces, &acc.mem, &acc.pieces, req.chunk),
        (op, Some(seg)) if atomic::is_atomic(op) => {
            atomic::execute(op, &seg, &acc.mem, &acc.pieces, req.mem, req.pieces)
        }
        _ => copy(&acc.mem, &acc.pieces, req.mem, req.pieces, req.chunk),
    };
    complete(rnic, &mut rnic.lock(), req, acc, result)
}

pub(crate) fn accept(
    rnic: &Rnic,
    st: &mut RnicState,
    req: &Request,
    reached: &mut Option<Arc<Counters>>,
) -> Result<Accepted, Response> {
    if !st.serving() {
        return Err(Response::Unreachable);
    }
    let Some(mem) = st.mem() else {
        return Err(Response::Unreachable);
    };
    let Some(qp) = st.objects.qp(req.dest_qpn) else {
        return Err(Response::Unreachable);
    };
    // A request dropped from here on (Unreachable) is not counted either.
    *reached = Some(qp.counters.clone());
    // RC: only the connected peer reaches a QP; anything else is dropped, as a packet from a
    // stranger would be, and its sender times out. The peer is named by the link mode's
    // address: its LID, or in RoCE mode its source GID.
    let from_peer = if rnic.link().is_eth() {
        req.src_gid == Some(Gid(qp.attr.dgid))
    } else {
        qp.attr.dlid.to_native() == req.src_lid
    };
    let connected = qp.attr.dest_qp_num.to_native() == req.src_qpn && from_peer;
    if qp.kind != req.transport || !qp.receives_allowed() || !connected {
        return Err(Response::Unreachable);
    }
    if qp.kind == QpType::Uc && req.offset == 0 && req.psn != qp.expected_psn {
        // UC never retransmits: a message lost on the way leaves a gap in the PSNs, and the
        // next message's first packet resynchronizes the responder (IBTA 9.7.5.2.1).
        if let Some(qp) = st.objects.qp_mut(req.dest_qpn) {
            qp.expected_psn = req.psn;
        }
    }
    let Some(qp) = st.objects.qp(req.dest_qpn) else {
        return Err(Response::Unreachable);
    };
    let qp_pdn = qp.pdn;
    if req.psn != qp.expected_psn {
        let expected = qp.expected_psn;
        st.warn(
            rnic,
            format_args!(
                "QP {}: request with PSN {:#x}, expected {expected:#x}; dropped",
                req.dest_qpn, req.psn
            ),
        );
        return Err(Response::Unreachable);
    }
    if qp.state == QpState::Rtr && !qp.comm_established {
        if let Some(qp) = st.objects.qp_mut(req.dest_qpn) {
            qp.comm_established = true;
        }
        post_async(rnic, st, EventType::CommEst, req.dest_qpn, 0);
    }
    // Remote keys are checked against the QP's PD, or for XRC the named SRQ's.
    let pdn = match req.remote_srqn {
        Some(srqn) => xrc_srq(rnic, st, req, srqn)?,
        None => qp_pdn,
    };
    let pieces = match req.opcode {
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
            let dst = remote_access(rnic, st, req, Access::RemoteWrite, pdn)?;
            if req.imm.is_some() && !receive::claim(rnic, st, req.dest_qpn) {
                return Err(rnr(st, req.dest_qpn));
            }
            dst
        }
        WrOpcode::Send | WrOpcode::SendWithImm => send_buffers(rnic, st, &mem, req)?,
        WrOpcode::SendWithInv => {
            let pieces = send_buffers(rnic, st, &mem, req)?;
            if !memory_ops::can_invalidate_remotely(&st.objects, req.rkey, req.dest_qpn, pdn) {
                return Err(refuse_invalidation(rnic, st, &mem, req));
            }
            pieces
        }
        WrOpcode::RdmaRead => {
            if st
                .objects
                .qp(req.dest_qpn)
                .is_some_and(|qp| qp.attr.max_dest_rd_atomic == 0)
            {
                return Err(fail(
                    rnic,
                    st,
                    req.dest_qpn,
                    EventType::QpReqErr,
                    WcStatus::RemInvReqErr,
                    VendorErr::RemoteAccess,
                ));
            }
            remote_access(rnic, st, req, Access::RemoteRead, pdn)?
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            atomic_target(rnic, st, req, pdn)?
        }
        WrOpcode::LocalInv | WrOpcode::BindMw | WrOpcode::RegMr => {
            return Err(fail(
                rnic,
                st,
                req.dest_qpn,
                EventType::QpReqErr,
                WcStatus::RemInvReqErr,
                VendorErr::BadOpcode,
            ))
        }
    };
    let Some(qp) = st.objects.qp_mut(req.dest_qpn) else {
        return Err(Response::Unreachable);
    };
    if req.is_send() {
        qp.receive_in_flight = true;
    }
    Ok(Accepted {
        pieces,
        mem,
        epoch: qp.epoch,
        _in_flight: rnic.fence.enter(),
    })
}

/// The PD of the XRC SRQ `srqn` a request to an XRC_TGT QP names, which the QP then takes
/// its receive WQE from. An SRQ that is not an XRC SRQ of the QP's domain: the TGT QP moves
/// to ERR with QP_REQ_ERR, the requester gets REM_INV_REQ_ERR (BAD_SRQ).
fn xrc_srq(rnic: &Rnic, st: &mut RnicState, req: &Request, srqn: u32) -> Result<u32, Response> {
    let qpn = req.dest_qpn;
    let xrcdn = st.objects.qp(qpn).and_then(|qp| qp.xrcdn);
    let pdn = st
        .objects
        .srqs
        .get(srqn)
        .filter(|srq| srq.xrc.is_some_and(|x| Some(x.xrcdn) == xrcdn))
        .map(|srq| srq.pdn);
    let taker = st.objects.qp_mut(qpn).and_then(|qp| qp.srq.as_mut());
    match (pdn, taker) {
        // A message keeps the WQE it took; a new one names its SRQ.
        (Some(pdn), Some(s)) if s.taken.is_none() || s.srqn == srqn => {
            s.srqn = srqn;
            Ok(pdn)
        }
        // No such SRQ, or one other than that of the WQE the QP holds for an unfinished
        // message (its requester restarted mid-message).
        _ => {
            let (event, status) = (EventType::QpReqErr, WcStatus::RemInvReqErr);
            Err(fail(rnic, st, qpn, event, status, VendorErr::BadSrq))
        }
    }
}

/// After the copy: advance the PSN and complete the receive, or report the fault.
pub(crate) fn complete(
    rnic: &Rnic,
    st: &mut RnicState,
    req: &Request,
    acc: Accepted,
    result: Result<(), Fault>,
) -> Response {
    let Some(qp) = receive::copy_ended(rnic, st, req.dest_qpn, acc.epoch) else {
        return Response::Unreachable;
    };
    // READ and atomics move data back to the requester.
    let reading = req.opcode == WrOpcode::RdmaRead || atomic::is_atomic(req.opcode);
    let sending = req.is_send();
    match result {
        Ok(()) => {}
        Err(Fault::Source) if !reading => return Response::LocalFault,
        Err(Fault::Destination) if reading => return Response::LocalFault,
        Err(_) => {
            if sending {
                finish_receive(
                    rnic,
                    st,
                    &acc.mem,
                    req,
                    WcOpcode::Recv,
                    WcStatus::LocProtErr,
                    VendorErr::DmaFault,
                    0,
                );
            }
            return target_memory_fault(rnic, st, req.dest_qpn);
        }
    }
    qp.expected_psn = psn_add(qp.expected_psn, req.packets);
    match req.opcode {
        WrOpcode::RdmaWriteWithImm if req.is_last() => {
            complete_receive(rnic, st, &acc.mem, req, WcOpcode::RecvRdmaWithImm)
        }
        WrOpcode::Send | WrOpcode::SendWithImm if req.is_last() => {
            complete_receive(rnic, st, &acc.mem, req, WcOpcode::Recv)
        }
        WrOpcode::SendWithInv if req.is_last() => {
            let pdn = qp.pdn;
            // After the data is placed (SPEC "Memory operations"); the key may have changed
            // since the request was accepted.
            if memory_ops::invalidate_remotely(&mut st.objects, req.rkey, req.dest_qpn, pdn) {
                complete_receive(rnic, st, &acc.mem, req, WcOpcode::Recv)
            } else {
                refuse_invalidation(rnic, st, &acc.mem, req)
            }
        }
        _ => Response::Done,
    }
}

/// The target word of an atomic: the responder takes atomics (max_dest_rd_atomic), the
/// address is 8-byte aligned (MISALIGNED), and rkey, PD, bounds and REMOTE_ATOMIC of the
/// MR and the QP allow it (SPEC "Atomics").
fn atomic_target(
    rnic: &Rnic,
    st: &mut RnicState,
    req: &Request,
    pdn: u32,
) -> Result<Pieces, Response> {
    let takes_atomics = st
        .objects
        .qp(req.dest_qpn)
        .is_some_and(|qp| qp.attr.max_dest_rd_atomic > 0);
    let refusal = match (takes_atomics, req.remote_addr % atomic::ATOMIC_LEN) {
        (false, _) => Some(VendorErr::RemoteAccess),
        (true, 0) => None,
        (true, _) => Some(VendorErr::Misaligned),
    };
    if let Some(why) = refusal {
        let (event, status) = (EventType::QpReqErr, WcStatus::RemInvReqErr);
        return Err(fail(rnic, st, req.dest_qpn, event, status, why));
    }
    remote_access(rnic, st, req, Access::RemoteAtomic, pdn)
}

/// The target QP moves to ERR with an async event; the requester gets `status`. A UC
/// target drops what it cannot accept instead and stays as it is (SPEC "Unreliable
/// connected"), unless its own memory or receive WQE failed (QP_FATAL).
fn fail(
    rnic: &Rnic,
    st: &mut RnicState,
    qpn: u32,
    event: EventType,
    status: WcStatus,
    why: VendorErr,
) -> Response {
    let uc = st.objects.qp(qpn).is_some_and(|qp| qp.kind == QpType::Uc);
    if uc && event != EventType::QpFatal {
        st.log(
            rnic,
            log::Level::Debug,
            format_args!("UC QP {qpn} dropped a request ({why:?})"),
        );
        return Response::Remote(status, why);
    }
    st.warn(
        rnic,
        format_args!("QP {qpn} refused a request ({why:?}); moving to ERR"),
    );
    let from = || st.objects.qp(qpn).map(|qp| qp.state);
    rnic.trace.qp_state(qpn, from, QpState::Err);
    st.objects.qp_to_error(qpn);
    post_async(rnic, st, event, qpn, u32::from(u8::from(why)));
    // The target's own poller flushes the QP, and may be asleep on another shard.
    rnic.wake();
    Response::Remote(status, why)
}

/// The pieces of the target MR (or window) range named by rkey, checked for `access`
/// (SPEC: key, PD `pdn` (the QP's, or an XRC SRQ's), access of MR or window and QP, bounds).
fn remote_range(
    st: &RnicState,
    req: &Request,
    access: Access,
    pdn: u32,
) -> Result<Pieces, VendorErr> {
    let message = (req.remote_addr, req.len);
    let chunk = (req.remote_addr + req.offset, req.chunk);
    key_range(st, req.dest_qpn, req.rkey, access, pdn, message, chunk)
}

/// The pieces of `chunk` (address, length) of a message at `message` (address, length)
/// under `rkey` at QP `qpn`, checked for `access` as `remote_range` checks a request.
fn key_range(
    st: &RnicState,
    qpn: u32,
    rkey: u32,
    access: Access,
    pdn: u32,
    (addr, len): (u64, u64),
    (start, chunk): (u64, u64),
) -> Result<Pieces, VendorErr> {
    let qp = st.objects.qp(qpn).ok_or(VendorErr::Unreachable)?;
    let bit = u32::from(access);
    if len == 0 {
        // IBTA C9-88: a zero-length RDMA WRITE or READ touches no memory, so its R_Key and
        // VA are not checked (rsockets sends its control messages as zero-length
        // WRITE_WITH_IMM with neither set); the QP's access flags still apply.
        if qp.attr.qp_access_flags.to_native() & bit == 0 {
            return Err(VendorErr::RemoteAccess);
        }
        return Ok(Pieces::new());
    }
    // An MR, a VALID fast-registration MR or a bound window (objects::keys).
    let key = st.objects.remote_key(rkey, qpn)?;
    if key.pdn() != pdn {
        return Err(VendorErr::PdMismatch);
    }
    if !key.allows(bit) || qp.attr.qp_access_flags.to_native() & bit == 0 {
        return Err(VendorErr::RemoteAccess);
    }
    // The whole message must fit, whichever chunk this is.
    key.range(addr, len).ok_or(VendorErr::RemoteBounds)?;
    Ok(key
        .range(start, chunk)
        .ok_or(VendorErr::RemoteBounds)?
        .collect())
}

/// The pieces of one READ response (`len` bytes at `va` under `rkey`) of RC QP `qpn`,
/// checked again as the READ was when accepted (key and its state, PD, REMOTE_READ of
/// the key and the QP, bounds), since a key may be revoked or changed while its
/// responses go out, and a duplicate READ asks for them again later. Refused: the QP
/// moves to ERR with QP_ACCESS_ERR, as at the READ's acceptance.
pub(crate) fn read_response(
    rnic: &Rnic,
    st: &mut RnicState,
    qpn: u32,
    va: u64,
    rkey: u32,
    len: u64,
) -> Result<Pieces, Response> {
    let pdn = st.objects.qp(qpn).map_or(0, |qp| qp.pdn);
    key_range(st, qpn, rkey, Access::RemoteRead, pdn, (va, len), (va, len)).map_err(|why| {
        fail(
            rnic,
            st,
            qpn,
            EventType::QpAccessErr,
            WcStatus::RemAccessErr,
            why,
        )
    })
}

/// The target's own memory could not be reached: its QP fails (QP_FATAL), the requester
/// gets REM_OP_ERR.
pub(crate) fn target_memory_fault(rnic: &Rnic, st: &mut RnicState, qpn: u32) -> Response {
    fail(
        rnic,
        st,
        qpn,
        EventType::QpFatal,
        WcStatus::RemOpErr,
        VendorErr::RemoteDmaFault,
    )
}

/// `remote_range`, or the refusal (target QP to ERR with QP_ACCESS_ERR, REM_ACCESS_ERR).
fn remote_access(
    rnic: &Rnic,
    st: &mut RnicState,
    req: &Request,
    access: Access,
    pdn: u32,
) -> Result<Pieces, Response> {
    remote_range(st, req, access, pdn).map_err(|why| {
        fail(
            rnic,
            st,
            req.dest_qpn,
            EventType::QpAccessErr,
            WcStatus::RemAccessErr,
            why,
        )
    })
}

/// Where the chunk of a SEND goes: the head receive WQE's buffers, or the refusal.
fn send_buffers(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    req: &Request,
) -> Result<Pieces, Response> {
    if !receive::claim(rnic, st, req.dest_qpn) {
        return Err(rnr(st, req.dest_qpn));
    }
    match receive_buffers(st, mem, req) {
        Ok(pieces) => Ok(pieces),
        Err(ReceiveError::TooShort) => {
            let (status, why) = (WcStatus::LocLenErr, VendorErr::Length);
            finish_receive(rnic, st, mem, req, WcOpcode::Recv, status, why, 0);
            Err(fail(
                rnic,
                st,
                req.dest_qpn,
                EventType::QpReqErr,
                WcStatus::RemInvReqErr,
                VendorErr::Length,
            ))
        }
        Err(ReceiveError::Wqe(status, why)) => {
            // The receive WQE's own fault is reported to the receiver (CQE, event data);
            // the requester only learns that the target failed the request.
            finish_receive(rnic, st, mem, req, WcOpcode::Recv, status, why, 0);
            fail(
                rnic,
                st,
                req.dest_qpn,
                EventType::QpFatal,
                WcStatus::RemOpErr,
                why,
            );
            Err(Response::Remote(WcStatus::RemOpErr, VendorErr::RemoteError))
        }
    }
}

/// A SEND_WITH_INV whose key the target may not invalidate: its receive completes with
/// LOC_PROT_ERR, the target QP moves to ERR with QP_REQ_ERR, the requester gets
/// REM_INV_REQ_ERR (SPEC "Memory operations").
fn refuse_invalidation(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    req: &Request,
) -> Response {
    let (status, why) = (WcStatus::LocProtErr, VendorErr::MkeyState);
    finish_receive(rnic, st, mem, req, WcOpcode::Recv, status, why, 0);
    fail(
        rnic,
        st,
        req.dest_qpn,
        EventType::QpReqErr,
        WcStatus::RemInvReqErr,
        why,
    )
}

fn rnr(st: &RnicState, qpn: u32) -> Response {
    Response::Rnr(st.objects.qp(qpn).map_or(0, |qp| qp.attr.min_rnr_timer))
}

/// Why the head receive WQE cannot take a message.
enum ReceiveError {
    /// The message is longer than the WQE's buffers.
    TooShort,
    /// The WQE itself is bad: the receiver's completion status and reason.
    Wqe(WcStatus, VendorErr),
}

impl From<(WcStatus, VendorErr)> for ReceiveError {
    fn from((status, why): (WcStatus, VendorErr)) -> Self {
        ReceiveError::Wqe(status, why)
    }
}

/// The pieces of the head receive WQE's buffers that this chunk fills.
fn receive_buffers(
    st: &RnicState,
    mem: &RamSnapshot,
    req: &Request,
) -> Result<Pieces, ReceiveError> {
    let (sges, capacity) = receive::head(st, mem, req.dest_qpn)?;
    if req.len > capacity {
        return Err(ReceiveError::TooShort);
    }
    Ok(sge::pieces(&st.objects, &sges, req.offset, req.chunk))
}

/// Completes the receive WQE at the head of the target's RQ with success.
fn complete_receive(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    req: &Request,
    opcode: WcOpcode,
) -> Response {
    let len = u32::try_from(req.len).unwrap_or(u32::MAX);
    if finish_receive(
        rnic,
        st,
        mem,
        req,
        opcode,
        WcStatus::Success,
        VendorErr::None,
        len,
    ) {
        Response::Done
    } else {
        fail(
            rnic,
            st,
            req.dest_qpn,
            EventType::QpFatal,
            WcStatus::RemOpErr,
            VendorErr::RemoteError,
        )
    }
}

/// Consumes the head receive WQE of the target QP and writes its CQE. False if the CQ is broken.
#[allow(clippy::too_many_arguments)]
fn finish_receive(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    req: &Request,
    opcode: WcOpcode,
    status: WcStatus,
    why: VendorErr,
    byte_len: u32,
) -> bool {
    let invalidated = req.opcode == WrOpcode::SendWithInv && status == WcStatus::Success;
    let cqe = Cqe {
        byte_len: byte_len.into(),
        // SEND_WITH_INV: the key it invalidated, little-endian (SPEC "WITH_INV").
        imm_data: match invalidated {
            true => req.rkey.to_le_bytes(),
            false => req.imm.unwrap_or_default(),
        },
        src_qp: req.src_qpn.into(),
        opcode: opcode.into(),
        status: status.into(),
        wc_flags: if invalidated {
            WcFlags::WithInv.into()
        } else if req.imm.is_some() {
            WcFlags::WithImm.into()
        } else {
            0
        },
        vendor_err: why.into(),
        flags: if req.solicited {
            CQE_FLAG_SOLICITED as u8
        } else {
            0
        },
        ..Default::default()
    };
    receive::complete_head(rnic, st, mem, req.dest_qpn, cqe)
}
