//! The responder side of a wire QP: one request packet the engine passed on, accepted,
//! placed and completed by the in-process responder's own steps, with the payload taken
//! from the frame (an atomic executed on the word, its original value for the engine);
//! and the bytes of READ responses read from the responder's MR.

use super::bytes::{gather, scatter};
use crate::addr::Gid;
use crate::datapath::atomic::{read_modify_write, ATOMIC_LEN};
use crate::datapath::copy::{Fault, Pieces};
use crate::datapath::responder::{
    accept, complete, read_response, target_memory_fault, Request, Response,
};
use crate::guest_memory::RamSnapshot;
use crate::objects::Qp;
use crate::rnic::{Rnic, RnicState};
use crate::transport::responder::{Execute, Outcome, Refusal};
use crate::transport::segment::{Family, Position};
use crate::wire::bth::Op;
use crate::wire::Packet;
use vrnic_hw::{AtomicSeg, WcStatus, WrOpcode};

/// What the engine's `Execute` of `packet` comes to at QP `qpn`.
pub fn execute(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    ex: &Execute,
    packet: &Packet<&[u8]>,
) -> Outcome {
    let Some(qp) = st.objects.qp(qpn) else {
        return Outcome::Refused(Refusal::RemoteOperational);
    };
    let last = matches!(ex.position, Position::Last | Position::Only);
    let chunk = u64::from(ex.len);
    let (va, rk, rlen) = ex
        .reth
        .map_or((0, 0, 0), |r| (r.va, r.rkey, u64::from(r.dma_len)));
    let (opcode, len, remote_addr, rkey) = match ex.family {
        Family::Send => {
            let opcode = match (ex.invalidate, ex.imm) {
                (Some(_), _) => WrOpcode::SendWithInv,
                (None, Some(_)) => WrOpcode::SendWithImm,
                (None, None) => WrOpcode::Send,
            };
            // The length is known at the last packet; before it at least one more byte
            // follows, so the receive buffer check holds at every packet.
            let len = ex.offset + chunk + u64::from(!last);
            (opcode, len, 0, ex.invalidate.unwrap_or(0))
        }
        Family::Write => {
            let opcode = match ex.imm {
                Some(_) => WrOpcode::RdmaWriteWithImm,
                None => WrOpcode::RdmaWrite,
            };
            (opcode, rlen, va, rk)
        }
        Family::Read => (WrOpcode::RdmaRead, rlen, va, rk),
        Family::Atomic => return atomic(rnic, st, mem, qpn, ex),
    };
    let (offset, chunk) = match ex.family {
        // Each response is checked and read when it goes (`read_memory`).
        Family::Read => (0, 0),
        _ => (ex.offset, chunk),
    };
    let none = Pieces::new();
    let req = Request {
        solicited: ex.solicited,
        imm: ex.imm,
        remote_addr,
        rkey,
        len,
        offset,
        chunk,
        ..from_peer(qp, qpn, opcode, &none, mem)
    };
    let mut reached = None;
    let response = match accept(rnic, st, &req, &mut reached) {
        Ok(acc) => {
            let placed = match opcode {
                WrOpcode::RdmaRead => Ok(()),
                _ => scatter(&acc.mem, &acc.pieces, packet.payload).map_err(|_| Fault::Destination),
            };
            complete(rnic, st, &req, acc, placed)
        }
        Err(r) => r,
    };
    outcome(response)
}

/// A one-packet request of QP `qpn`'s connected peer as the in-process responder takes
/// it: the engine is this QP's and the frame came from its peer's address (checked by the
/// caller); the engine checked the PSN and the in-process tracker follows it; no local
/// pieces (the payload comes from the frame). Callers set what the packet carries.
fn from_peer<'a>(
    qp: &Qp,
    qpn: u32,
    opcode: WrOpcode,
    none: &'a Pieces,
    mem: &'a RamSnapshot,
) -> Request<'a> {
    Request {
        opcode,
        src_lid: 0,
        src_gid: Some(Gid(qp.attr.dgid)),
        src_qpn: qp.attr.dest_qp_num.to_native(),
        dest_qpn: qpn,
        transport: qp.kind,
        remote_srqn: None,
        atomic: None,
        psn: qp.expected_psn,
        packets: 1,
        resent: None,
        solicited: false,
        imm: None,
        remote_addr: 0,
        rkey: 0,
        len: 0,
        offset: 0,
        chunk: 0,
        pieces: none,
        mem,
    }
}

/// The engine's view of what the in-process responder answered.
fn outcome(response: Response) -> Outcome {
    match response {
        Response::Done => Outcome::Done,
        Response::Rnr(_) => Outcome::Rnr,
        Response::Remote(WcStatus::RemAccessErr, _) => Outcome::Refused(Refusal::RemoteAccess),
        Response::Remote(WcStatus::RemInvReqErr, _) => Outcome::Refused(Refusal::InvalidRequest),
        Response::Remote(..) | Response::Unreachable | Response::LocalFault => {
            Outcome::Refused(Refusal::RemoteOperational)
        }
    }
}

/// An atomic the engine passed on (a new PSN: a duplicate is answered from the engine's
/// resources and never comes here, so the word changes once): checked by the in-process
/// responder's steps (max_dest_rd_atomic, alignment, rkey, PD, bounds, REMOTE_ATOMIC),
/// then the read-modify-write; its original value goes back in the AtomicAckETH.
fn atomic(rnic: &Rnic, st: &mut RnicState, mem: &RamSnapshot, qpn: u32, ex: &Execute) -> Outcome {
    let (Some(qp), Some(eth)) = (st.objects.qp(qpn), ex.atomic) else {
        return Outcome::Refused(Refusal::InvalidRequest);
    };
    let (opcode, seg) = match ex.op {
        Op::CompareSwap => (
            WrOpcode::AtomicCmpAndSwp,
            AtomicSeg {
                compare_add: eth.compare.into(),
                swap: eth.swap_add.into(),
            },
        ),
        _ => (
            WrOpcode::AtomicFetchAndAdd,
            AtomicSeg {
                compare_add: eth.swap_add.into(),
                swap: 0.into(),
            },
        ),
    };
    let none = Pieces::new();
    let req = Request {
        atomic: Some(seg),
        remote_addr: eth.va,
        rkey: eth.rkey,
        len: ATOMIC_LEN,
        chunk: ATOMIC_LEN,
        ..from_peer(qp, qpn, opcode, &none, mem)
    };
    let mut reached = None;
    let (response, original) = match accept(rnic, st, &req, &mut reached) {
        Ok(acc) => {
            let done = read_modify_write(opcode, &seg, &acc.mem, &acc.pieces);
            let original = done.as_ref().ok().copied();
            (complete(rnic, st, &req, acc, done.map(|_| ())), original)
        }
        Err(r) => (r, None),
    };
    match (response, original) {
        (Response::Done, Some(original)) => Outcome::Atomic(original),
        (r, _) => outcome(r),
    }
}

/// The bytes at `va` of the MR (or window) `rkey` names at QP `qpn` into `out`: a READ
/// response, checked as the READ was (`responder::read_response`) and read now. Refused
/// (the key no longer allows it, or its memory is gone): the QP has moved to ERR, and the
/// NAK the responder owes the peer instead.
pub fn read_memory(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    va: u64,
    rkey: u32,
    out: &mut [u8],
) -> Result<(), Refusal> {
    let pieces = read_response(rnic, st, qpn, va, rkey, out.len() as u64)
        .map_err(|_| Refusal::RemoteAccess)?;
    gather(mem, &pieces, out).ok_or_else(|| {
        target_memory_fault(rnic, st, qpn);
        Refusal::RemoteOperational
    })
}
