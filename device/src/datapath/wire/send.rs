//! The requester side of a wire QP: its new send WQEs read, checked and posted to the
//! requester engine (their pieces kept for the whole message), and the engine's actions
//! (completions, READ data) carried out.

use super::bytes::scatter;
use super::engines::{Kept, QpEngines};
use crate::datapath::requester::complete_send;
use crate::datapath::sge;
use crate::guest_memory::RamSnapshot;
use crate::rnic::{Rnic, RnicState};
use crate::transport::requester::{Action, Message};
use crate::transport::{MsgOp, WqeId};
use vrnic_hw::{Access, QpState, QpType, SendFlags, SendWqeHeader, VendorErr, WcStatus, WrOpcode};

type Failure = (WcStatus, VendorErr);

/// The message of a send WQE and its local pieces, or why the WQE fails. Atomics, SEND
/// with invalidate and the memory operations are not on the wire yet: BAD_OPCODE.
fn resolve(
    st: &RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    addr: u64,
    wqe: &SendWqeHeader,
) -> Result<(Message, crate::datapath::copy::Pieces), Failure> {
    let bad = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    let qp = st.objects.qp(qpn).ok_or(bad)?;
    let bad_opcode = (WcStatus::LocQpOpErr, VendorErr::BadOpcode);
    let opcode = WrOpcode::try_from(wqe.opcode).map_err(|_| bad_opcode)?;
    let op = match opcode {
        WrOpcode::Send => MsgOp::Send,
        WrOpcode::SendWithImm => MsgOp::SendImm(wqe.imm_data),
        WrOpcode::RdmaWrite => MsgOp::Write,
        WrOpcode::RdmaWriteWithImm => MsgOp::WriteImm(wqe.imm_data),
        WrOpcode::RdmaRead if qp.kind == QpType::Rc => MsgOp::Read,
        _ => return Err(bad_opcode),
    };
    let known_flags = SendFlags::ALL.iter().fold(0u8, |acc, f| acc | u8::from(*f));
    if wqe.flags & !known_flags != 0 || wqe.nonzero_reserved().is_some() {
        return Err(bad);
    }
    let stride = 1u64 << qp.sq.ring.entry_shift;
    let payload = addr + SendWqeHeader::SIZE as u64;
    let reading = opcode == WrOpcode::RdmaRead;
    let (len, pieces) = if wqe.flags & u8::from(SendFlags::Inline) != 0 {
        let len = u64::from(wqe.inline_len.to_native());
        if wqe.num_sge != 0
            || reading
            || len > u64::from(qp.max_inline)
            || SendWqeHeader::SIZE as u64 + len > stride
        {
            return Err(bad);
        }
        (len, vec![(payload, len)])
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
        let access = match reading {
            true => u32::from(Access::LocalWrite),
            false => 0,
        };
        let len = sge::check(&st.objects, sge::Owner::of(qp), &sges, access)?;
        (len, sge::pieces(&st.objects, &sges, 0, len))
    };
    let local_ok = pieces.iter().all(|&(a, n)| {
        usize::try_from(n).is_ok_and(|n| match reading {
            true => mem.check_write(a, n).is_ok(),
            false => mem.check_read(a, n).is_ok(),
        })
    });
    if !local_ok {
        return Err((WcStatus::LocProtErr, VendorErr::DmaFault));
    }
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
    Ok((msg, pieces))
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
            Ok((wqe, (msg, pieces))) => {
                let Some(rq) = e.requester.as_mut() else {
                    return worked;
                };
                if let Err(err) = rq.post(WqeId(index), msg) {
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
                e.kept.push_back(Kept { index, wqe, pieces });
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

/// Carries out the requester's actions; `payload` is the packet they answer (READ data).
/// Returns whether the QP failed (its engines are to be dropped).
pub fn apply(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    actions: &mut Vec<Action>,
    payload: Option<&[u8]>,
) -> bool {
    let mut failed = false;
    for action in actions.drain(..) {
        match action {
            Action::Place { wqe, offset, len } => {
                let (Some(kept), Some(p)) = (e.kept.iter().find(|k| k.index == wqe.0), payload)
                else {
                    continue;
                };
                let bytes = p.get(..len as usize).unwrap_or(p);
                if scatter(mem, &kept.pieces, offset, bytes).is_err() {
                    log::debug!(
                        "{}: QP {qpn}: READ data not placed at {offset}",
                        rnic.name()
                    );
                }
            }
            Action::Complete {
                wqe,
                status,
                vendor_err,
                byte_len,
            } => {
                let Some(kept) = e.kept.pop_front() else {
                    continue;
                };
                let head = st.objects.qp(qpn).map(|qp| qp.sq.ci);
                if kept.index != wqe.0 || head != Some(wqe.0) {
                    log::warn!("{}: QP {qpn}: wire completion out of order", rnic.name());
                }
                let outcome = match status {
                    WcStatus::Success => Ok(u64::from(byte_len)),
                    s => Err((s, vendor_err)),
                };
                failed |= outcome.is_err();
                complete_send(rnic, st, mem, qpn, &kept.wqe, outcome);
            }
            // Not posted on the wire yet (atomics, memory operations); the engine's own
            // timers drive RNR waits.
            Action::AtomicResult { .. } | Action::Local { .. } | Action::RnrWait { .. } => {}
        }
    }
    failed
}
