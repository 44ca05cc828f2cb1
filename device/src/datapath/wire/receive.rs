//! The responder side of a wire QP: one request packet the engine passed on, accepted,
//! placed and completed by the in-process responder's own steps, with the payload taken
//! from the frame; and the bytes of READ responses read from the responder's MR.

use super::bytes::{gather, scatter};
use crate::addr::Gid;
use crate::datapath::copy::{Fault, Pieces};
use crate::datapath::responder::{accept, complete, Request, Response};
use crate::guest_memory::RamSnapshot;
use crate::rnic::{Rnic, RnicState};
use crate::transport::responder::{Execute, Outcome, Refusal};
use crate::transport::segment::{Family, Position};
use crate::wire::Packet;
use vrnic_hw::{WcStatus, WrOpcode};

/// What the engine's `Execute` of `packet` comes to at QP `qpn`.
pub fn execute(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    ex: &Execute,
    packet: &Packet,
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
        Family::Atomic => return Outcome::Refused(Refusal::InvalidRequest),
    };
    let (offset, chunk) = match ex.family {
        Family::Read => (0, rlen),
        _ => (ex.offset, chunk),
    };
    let none = Pieces::new();
    let req = Request {
        opcode,
        src_lid: 0,
        // The engine is this QP's and the frame came from its peer's address (checked by
        // the caller): the request is the connected peer's.
        src_gid: Some(Gid(qp.attr.dgid)),
        src_qpn: qp.attr.dest_qp_num.to_native(),
        dest_qpn: qpn,
        transport: qp.kind,
        remote_srqn: None,
        atomic: None,
        // The engine checked the PSN; the in-process tracker follows it.
        psn: qp.expected_psn,
        packets: 1,
        resent: None,
        solicited: ex.solicited,
        imm: ex.imm,
        remote_addr,
        rkey,
        len,
        offset,
        chunk,
        pieces: &none,
        mem,
    };
    let mut reached = None;
    let response = match accept(rnic, st, &req, &mut reached) {
        Ok(acc) => {
            let placed = match opcode {
                WrOpcode::RdmaRead => Ok(()),
                _ => scatter(&acc.mem, &acc.pieces, 0, &packet.payload)
                    .map_err(|_| Fault::Destination),
            };
            complete(rnic, st, &req, acc, placed)
        }
        Err(r) => r,
    };
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

/// `len` bytes at `va` of the MR (or window) `rkey` names at QP `qpn`: a READ response.
pub fn read_memory(
    st: &RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    va: u64,
    rkey: u32,
    len: u32,
) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let key = st.objects.remote_key(rkey, qpn).ok()?;
    let pieces: Pieces = key.range(va, u64::from(len))?.collect();
    gather(mem, &pieces, 0, len)
}
