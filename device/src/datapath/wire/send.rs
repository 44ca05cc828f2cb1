//! The requester side of a wire QP: its new send WQEs read, checked and posted to the
//! requester engine (their pieces kept for the whole message; memory operations posted as
//! local work), and the engine's actions (completions, READ data, atomic results, memory
//! operations) carried out.

use super::bytes::scatter;
use super::engines::{Kept, LocalBuffers, QpEngines};
use super::{local, state};
use crate::datapath::requester::complete_send;
use crate::datapath::{atomic, sge};
use crate::guest_memory::RamSnapshot;
use crate::rnic::{Rnic, RnicState};
use crate::transport::requester::{Action, Message};
use crate::transport::{MsgOp, WqeId};
use std::time::Instant;
use vrnic_hw::{Access, QpState, QpType, SendFlags, SendWqeHeader, VendorErr, WcStatus, WrOpcode};

type Failure = (WcStatus, VendorErr);

/// What a send WQE is for the requester engine.
enum Resolved {
    /// A message on the wire and its local buffers (payload source, READ target, atomic
    /// result buffer), resolved at each use.
    Message(Message, LocalBuffers),
    /// A memory operation (REG_MR, LOCAL_INV, BIND_MW): checked and executed by the
    /// in-process helpers when the engine reaches it (`Action::Local`).
    Local,
}

/// The message of a send WQE and its local buffers, or why the WQE fails. XRC is not on
/// the wire; UC has no READ or atomics (BAD_OPCODE, as in-process).
fn resolve(
    st: &RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    addr: u64,
    wqe: &SendWqeHeader,
) -> Result<Resolved, Failure> {
    let bad = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    let qp = st.objects.qp(qpn).ok_or(bad)?;
    let bad_opcode = (WcStatus::LocQpOpErr, VendorErr::BadOpcode);
    let opcode = WrOpcode::try_from(wqe.opcode).map_err(|_| bad_opcode)?;
    let rc = qp.kind == QpType::Rc;
    let op = match opcode {
        WrOpcode::Send => MsgOp::Send,
        WrOpcode::SendWithImm => MsgOp::SendImm(wqe.imm_data),
        WrOpcode::SendWithInv => MsgOp::SendInv(wqe.rkey.to_native()),
        WrOpcode::RdmaWrite => MsgOp::Write,
        WrOpcode::RdmaWriteWithImm => MsgOp::WriteImm(wqe.imm_data),
        WrOpcode::RdmaRead if rc => MsgOp::Read,
        // The operands are read with the WQE's atomic_seg below.
        WrOpcode::AtomicCmpAndSwp if rc => MsgOp::CompareSwap {
            compare: 0,
            swap: 0,
        },
        WrOpcode::AtomicFetchAndAdd if rc => MsgOp::FetchAdd { add: 0 },
        WrOpcode::RegMr | WrOpcode::LocalInv | WrOpcode::BindMw => return Ok(Resolved::Local),
        _ => return Err(bad_opcode),
    };
    let known_flags = SendFlags::ALL.iter().fold(0u8, |acc, f| acc | u8::from(*f));
    if wqe.flags & !known_flags != 0 || wqe.nonzero_reserved().is_some() {
        return Err(bad);
    }
    let stride = 1u64 << qp.sq.ring.entry_shift;
    let payload = addr + SendWqeHeader::SIZE as u64;
    // READ data and atomic results are written into the local buffers.
    let reading = opcode == WrOpcode::RdmaRead || atomic::is_atomic(opcode);
    let mut op = op;
    let owner = sge::Owner::of(qp);
    let (len, local) = if atomic::is_atomic(opcode) {
        let at = SendWqeHeader::SIZE as u64;
        let (seg, sge) = atomic::read_wqe(mem, addr, at, wqe, stride)?;
        let (compare_add, swap) = (seg.compare_add.to_native(), seg.swap.to_native());
        op = match opcode {
            WrOpcode::AtomicCmpAndSwp => MsgOp::CompareSwap {
                compare: compare_add,
                swap,
            },
            _ => MsgOp::FetchAdd { add: compare_add },
        };
        LocalBuffers::checked(&st.objects, owner, vec![sge], u32::from(Access::LocalWrite))?
    } else if wqe.flags & u8::from(SendFlags::Inline) != 0 {
        let len = u64::from(wqe.inline_len.to_native());
        if wqe.num_sge != 0
            || reading
            || len > u64::from(qp.max_inline)
            || SendWqeHeader::SIZE as u64 + len > stride
        {
            return Err(bad);
        }
        (len, LocalBuffers::Inline { addr: payload, len })
    } else {
        let n = usize::from(wqe.num_sge);
        if wqe.inline_len.to_native() != 0
            || n > usize::from(qp.max_send_sge)
            || (SendWqeHeader::SIZE + n * vrnic_hw::Sge::SIZE) as u64 > stride
        {
            return Err(bad);
        }
        let sges =
            sge::read(mem, payload, n).map_err(|_| (WcStatus::LocQpOpErr, VendorErr::DmaFault))?;
        let access = match opcode == WrOpcode::RdmaRead {
            true => u32::from(Access::LocalWrite),
            false => 0,
        };
        LocalBuffers::checked(&st.objects, owner, sges, access)?
    };
    let flag = |f: SendFlags| wqe.flags & u8::from(f) != 0;
    let msg = Message {
        op,
        len,
        remote_addr: wqe.remote_addr.to_native(),
        rkey: wqe.rkey.to_native(),
        fence: flag(SendFlags::Fence),
        solicited: flag(SendFlags::Solicited),
        xrc_srqn: None,
    };
    Ok(Resolved::Message(msg, local))
}

/// Posts QP `qpn`'s WQEs from `e.posted` up to the producer index `sq_pi` (at most
/// `max`). A WQE that fails its checks completes with its error once every WQE before it
/// has completed (the QP then moves to ERR). Returns whether it did anything.
pub fn post_new(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    sq_pi: u32,
    max: usize,
) -> bool {
    let mut worked = false;
    for _ in 0..max {
        let Some(qp) = st.objects.qp(qpn) else {
            return worked;
        };
        // SQD: the WQEs already posted run to completion, no new one starts.
        if e.posted == sq_pi || e.requester.is_none() || qp.state == QpState::Sqd {
            return worked;
        }
        let index = e.posted;
        let Some(addr) = qp.sq.ring.entry_addr(index) else {
            return worked;
        };
        let head = index == qp.sq.ci;
        let resolved = mem
            .read_obj::<SendWqeHeader>(addr)
            .map_err(|_| (WcStatus::LocQpOpErr, VendorErr::DmaFault))
            .and_then(|wqe| resolve(st, mem, qpn, addr, &wqe).map(|r| (wqe, r)));
        match resolved {
            Ok((wqe, resolved)) => {
                let Some(rq) = e.requester.as_mut() else {
                    return worked;
                };
                let (posted, local) = match resolved {
                    Resolved::Message(msg, local) => (rq.post(WqeId(index), msg), local),
                    Resolved::Local => (rq.post_local(WqeId(index)), LocalBuffers::None),
                };
                if let Err(err) = posted {
                    if !head {
                        return worked;
                    }
                    log::debug!(
                        "{}: QP {qpn} WQE {index} refused by the wire: {err}",
                        rnic.name()
                    );
                    let failure = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
                    complete_send(rnic, st, mem, qpn, &wqe, Err(failure));
                    e.requester = None;
                    return true;
                }
                e.kept.push_back(Kept {
                    index,
                    wqe,
                    local,
                    fault: false,
                });
                e.posted = index.wrapping_add(1);
                worked = true;
            }
            Err(failure) if head => {
                let wqe = mem.read_obj::<SendWqeHeader>(addr).unwrap_or_default();
                complete_send(rnic, st, mem, qpn, &wqe, Err(failure));
                e.requester = None;
                return true;
            }
            // Reported when the WQEs before it have completed.
            Err(_) => return worked,
        }
    }
    worked
}

/// Carries out the requester's actions (and those they lead to: a memory operation's
/// completion); `payload` is the packet they answer (READ data). Returns whether the QP
/// failed (its engines are to be dropped).
#[allow(clippy::too_many_arguments)]
pub fn apply(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    actions: &mut Vec<Action>,
    payload: Option<&[u8]>,
    now: Instant,
) -> bool {
    let mut failed = false;
    while !actions.is_empty() {
        let batch = std::mem::take(actions);
        for action in batch {
            failed |= apply_one(rnic, st, mem, e, qpn, action, payload, now, actions);
        }
    }
    state::sync(st, qpn, e, now);
    failed
}

#[allow(clippy::too_many_arguments)]
fn apply_one(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    action: Action,
    payload: Option<&[u8]>,
    now: Instant,
    queued: &mut Vec<Action>,
) -> bool {
    match action {
        Action::Place { wqe, offset, len } => {
            let Some(p) = payload else {
                return false;
            };
            let bytes = p.get(..len as usize).unwrap_or(p);
            place(rnic, st, mem, e, qpn, wqe, offset, bytes, now, queued);
        }
        Action::AtomicResult { wqe, original } => {
            let bytes = original.to_le_bytes();
            place(rnic, st, mem, e, qpn, wqe, 0, &bytes, now, queued);
        }
        Action::Complete {
            wqe,
            status,
            vendor_err,
            byte_len,
        } => {
            let Some(kept) = e.kept.pop_front() else {
                return false;
            };
            let head = st.objects.qp(qpn).map(|qp| qp.sq.ci);
            if kept.index != wqe.0 || head != Some(wqe.0) {
                log::warn!("{}: QP {qpn}: wire completion out of order", rnic.name());
            }
            // The local buffer could not take the READ data or the atomic's result: the
            // requester's own memory failed, as in-process (LOC_PROT_ERR, DMA_FAULT).
            let outcome = match (status, kept.fault) {
                (WcStatus::Success, false) => Ok(u64::from(byte_len)),
                (WcStatus::Success, true) => Err((WcStatus::LocProtErr, VendorErr::DmaFault)),
                (s, _) => Err((s, vendor_err)),
            };
            let more = !e.kept.is_empty();
            let owed = state::completing(st, qpn, more);
            complete_send(rnic, st, mem, qpn, &kept.wqe, outcome);
            state::completed(st, qpn, more, owed);
            return outcome.is_err();
        }
        Action::Local { wqe } => local::execute(rnic, st, mem, e, qpn, wqe, now, queued),
        // The engine's own timers drive the resend; the QP shows the wait.
        Action::RnrWait {
            until,
            retries_left,
        } => {
            super::count::rnr_retry(rnic, st, qpn);
            state::rnr_wait(st, qpn, until, retries_left);
        }
    }
    false
}

/// Writes `bytes` (READ data, an atomic's result) at message offset `offset` of WQE
/// `wqe`'s local buffers, resolved through their keys now. Buffers that can no longer be
/// reached are not touched again: the WQE ends LOC_PROT_ERR (`Requester::abort`).
#[allow(clippy::too_many_arguments)]
fn place(
    rnic: &Rnic,
    st: &RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    wqe: WqeId,
    offset: u64,
    bytes: &[u8],
    now: Instant,
    queued: &mut Vec<Action>,
) {
    let Some(kept) = e.kept.iter_mut().find(|k| k.index == wqe.0) else {
        return;
    };
    if kept.fault {
        return;
    }
    let placed = kept
        .local
        .resolve(&st.objects, offset, bytes.len() as u64)
        .is_some_and(|pieces| scatter(mem, &pieces, bytes).is_ok());
    if !placed {
        log::debug!(
            "{}: QP {qpn}: WQE {}: local buffer unreachable at {offset}",
            rnic.name(),
            wqe.0
        );
        kept.fault = true;
        if let Some(rq) = e.requester.as_mut() {
            rq.abort(wqe, WcStatus::LocProtErr, VendorErr::DmaFault, now, queued);
        }
    }
}
