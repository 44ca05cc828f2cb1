//! The requester: executes a QP's send WQEs in order, waits out RNR and unreachable
//! targets, completes or fails each WQE, and flushes queues in ERR (SPEC "Send queue
//! processing").

use super::completion::post_cqe;
use super::copy::sub_range;
use super::events::post_async;
use super::responder::{respond, Request, Response};
use super::sge;
use super::Progress;
use crate::fabric::Fabric;
use crate::guest_memory::RamSnapshot;
use crate::objects::qp::{WaitReason, Waiting};
use crate::rnic::{Rnic, RnicState};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vrnic_hw::{
    Access, Cqe, EventType, QpState, RecvWqeHeader, SendFlags, SendWqeHeader, Sge, VendorErr,
    WcOpcode, WcStatus, WrOpcode, CQE_FLAG_RECV,
};

/// WQEs one QP may execute per pass, so one busy QP cannot starve the others.
const BUDGET: usize = 32;
/// Bytes of one message moved per pass.
const CHUNK: u64 = 1 << 20;

/// A failed WQE: its completion status and the device's reason.
type Failure = (WcStatus, VendorErr);

/// Serves QP `qpn` of `rnic`: flushes it in ERR, runs its send queue in RTS.
pub fn service_qp(
    fabric: &Fabric,
    rnic: &Arc<Rnic>,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    now: Instant,
) -> Progress {
    let Some(qp) = st.objects.qp(qpn) else {
        return Progress::default();
    };
    let sq_pi = rnic.doorbells.slot_word(qp.uctx, qp.db_slot, 0);
    let rq_pi = rnic.doorbells.slot_word(qp.uctx, qp.db_slot, 1);
    let overrun = sq_pi.wrapping_sub(qp.sq.ci) > qp.sq.ring.depth()
        || rq_pi.wrapping_sub(qp.rq.ci) > qp.rq.ring.depth();
    if overrun && qp.state != QpState::Err {
        log::warn!("{}: QP {qpn}: doorbell beyond the queue depth (sq_pi {sq_pi}, rq_pi {rq_pi}); moving to ERR", rnic.name());
        to_error(st, qpn);
        post_async(rnic, st, EventType::QpFatal, qpn, 0);
        return Progress::worked();
    }
    match qp.state {
        QpState::Err => flush(rnic, st, mem, qpn, sq_pi, rq_pi),
        QpState::Rts => run_send_queue(fabric, rnic, st, mem, qpn, sq_pi, now),
        QpState::Reset | QpState::Init | QpState::Rtr | QpState::Sqe if sq_pi != qp.sq.ci => {
            let failure = (WcStatus::LocQpOpErr, VendorErr::QpState);
            let wqe = read_wqe(mem, st, qpn).map(|w| w.1).unwrap_or_default();
            complete_send(rnic, st, mem, qpn, &wqe, Err(failure));
            Progress::worked()
        }
        _ => Progress::default(),
    }
}

fn to_error(st: &mut RnicState, qpn: u32) {
    if let Some(qp) = st.objects.qp_mut(qpn) {
        qp.enter_error();
    }
}

fn run_send_queue(
    fabric: &Fabric,
    rnic: &Arc<Rnic>,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    sq_pi: u32,
    now: Instant,
) -> Progress {
    let mut progress = Progress::default();
    for _ in 0..BUDGET {
        let Some(qp) = st.objects.qp(qpn) else { break };
        if qp.state != QpState::Rts || qp.sq.ci == sq_pi {
            break;
        }
        if qp
            .waiting
            .is_some_and(|w| w.reason == WaitReason::Unreachable && now < w.retry_at)
        {
            progress.retry_at = qp.waiting.map(|w| w.retry_at);
            break;
        }
        let (addr, wqe) = match read_wqe(mem, st, qpn) {
            Ok(found) => found,
            Err(failure) => {
                complete_send(rnic, st, mem, qpn, &SendWqeHeader::default(), Err(failure));
                return Progress::worked();
            }
        };
        match execute(fabric, rnic, st, mem, qpn, addr, &wqe, now) {
            Step::Done(len) => {
                complete_send(rnic, st, mem, qpn, &wqe, Ok(len));
                progress.worked = true;
            }
            Step::Failed(failure) => {
                complete_send(rnic, st, mem, qpn, &wqe, Err(failure));
                return Progress::worked();
            }
            // Let the other QPs have their turn before the next chunk.
            Step::Partial => return Progress::worked(),
            Step::Waiting(retry_at) => {
                progress.retry_at = Some(retry_at);
                break;
            }
        }
    }
    progress
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

enum Step {
    Done(u64),
    /// A chunk of a long message moved; the rest follows in later passes.
    Partial,
    Failed(Failure),
    Waiting(Instant),
}

/// Runs one WQE against its target.
#[allow(clippy::too_many_arguments)]
fn execute(
    fabric: &Fabric,
    rnic: &Arc<Rnic>,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    addr: u64,
    wqe: &SendWqeHeader,
    now: Instant,
) -> Step {
    let (pieces, len, opcode) = match gather(st, mem, qpn, addr, wqe) {
        Ok(found) => found,
        Err(failure) => return Step::Failed(failure),
    };
    // This pass moves one chunk of the message: [offset, offset + chunk).
    let offset = st.objects.qp(qpn).map_or(0, |qp| qp.sq_offset).min(len);
    let chunk = (len - offset).min(CHUNK);
    let pieces = sub_range(&pieces, offset, chunk);
    // The local buffers must be reachable before the target is involved: a local DMA
    // fault is the requester's error whatever the target's state (e.g. no receive posted).
    let local_ok = pieces.iter().all(|&(addr, n)| {
        usize::try_from(n).is_ok_and(|n| match opcode {
            WrOpcode::RdmaRead => mem.check_write(addr, n).is_ok(),
            _ => mem.check_read(addr, n).is_ok(),
        })
    });
    if !local_ok {
        return Step::Failed((WcStatus::LocProtErr, VendorErr::DmaFault));
    }
    let Some(qp) = st.objects.qp(qpn) else {
        return Step::Failed((WcStatus::LocQpOpErr, VendorErr::BadWqe));
    };
    let (dlid, dest_qpn) = (qp.attr.dlid.to_native(), qp.attr.dest_qp_num.to_native());
    let with_imm = matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
    let req = Request {
        opcode,
        src_lid: rnic.lid(),
        src_qpn: qpn,
        dest_qpn,
        solicited: wqe.flags & u8::from(SendFlags::Solicited) != 0,
        imm: with_imm.then_some(wqe.imm_data),
        remote_addr: wqe.remote_addr.to_native(),
        rkey: wqe.rkey.to_native(),
        len,
        offset,
        chunk,
        pieces: &pieces,
        mem,
    };
    let response = match fabric.by_lid(dlid) {
        None => Response::Unreachable,
        Some(target) if Arc::ptr_eq(&target, rnic) => respond(&target, st, &req),
        Some(target) => respond(&target, &mut target.lock(), &req),
    };
    let Some(qp) = st.objects.qp_mut(qpn) else {
        return Step::Failed((WcStatus::LocQpOpErr, VendorErr::BadWqe));
    };
    let (reason, delay, retries) = match response {
        Response::Done => {
            qp.waiting = None;
            if offset + chunk < len {
                qp.sq_offset = offset + chunk;
                return Step::Partial;
            }
            return Step::Done(len);
        }
        Response::Remote(status, why) => return Step::Failed((status, why)),
        Response::LocalFault => return Step::Failed((WcStatus::LocProtErr, VendorErr::DmaFault)),
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
    let waiting = match qp.waiting {
        Some(w) if w.reason == reason && now < w.retry_at => w,
        Some(w) if w.reason == reason => match w.retries_left {
            Some(0) => {
                qp.waiting = None;
                let failure = match reason {
                    WaitReason::Rnr => (WcStatus::RnrRetryExcErr, VendorErr::Rnr),
                    WaitReason::Unreachable => (WcStatus::RetryExcErr, VendorErr::Unreachable),
                };
                return Step::Failed(failure);
            }
            left => Waiting {
                reason,
                retry_at: now + delay,
                retries_left: left.map(|n| n - 1),
            },
        },
        _ => Waiting {
            reason,
            retry_at: now + delay,
            retries_left: retries,
        },
    };
    qp.waiting = Some(waiting);
    Step::Waiting(waiting.retry_at)
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

/// Validates the WQE and resolves its local data: (pieces, length, opcode).
fn gather(
    st: &RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    addr: u64,
    wqe: &SendWqeHeader,
) -> Result<(super::copy::Pieces, u64, WrOpcode), Failure> {
    let bad = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    let qp = st.objects.qp(qpn).ok_or(bad)?;
    let opcode = match WrOpcode::try_from(wqe.opcode) {
        Ok(WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd) | Err(_) => {
            return Err((WcStatus::LocQpOpErr, VendorErr::BadOpcode))
        }
        Ok(op) => op,
    };
    let known_flags = SendFlags::ALL.iter().fold(0u8, |acc, f| acc | u8::from(*f));
    if wqe.flags & !known_flags != 0 || wqe.nonzero_reserved().is_some() {
        return Err(bad);
    }
    let stride = 1u64 << qp.sq.ring.entry_shift;
    let payload = addr + SendWqeHeader::SIZE as u64;
    if wqe.flags & u8::from(SendFlags::Inline) != 0 {
        let len = u64::from(wqe.inline_len.to_native());
        if wqe.num_sge != 0
            || opcode == WrOpcode::RdmaRead
            || len > u64::from(qp.max_inline)
            || SendWqeHeader::SIZE as u64 + len > stride
        {
            return Err(bad);
        }
        // Inline data is read straight out of the WQE in guest memory.
        return Ok((vec![(payload, len)], len, opcode));
    }
    let n = usize::from(wqe.num_sge);
    if wqe.inline_len.to_native() != 0
        || n > usize::from(qp.max_send_sge)
        || (SendWqeHeader::SIZE + n * Sge::SIZE) as u64 > stride
    {
        return Err(bad);
    }
    let sges =
        sge::read(mem, payload, n).map_err(|_| (WcStatus::LocQpOpErr, VendorErr::DmaFault))?;
    let access = if opcode == WrOpcode::RdmaRead {
        u32::from(Access::LocalWrite)
    } else {
        0
    };
    let (pieces, len) = sge::resolve(&st.objects, qp.pdn, &sges, access)?;
    Ok((pieces, len, opcode))
}

fn wc_opcode(op: u8) -> WcOpcode {
    match WrOpcode::try_from(op) {
        Ok(WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) => WcOpcode::RdmaWrite,
        Ok(WrOpcode::RdmaRead) => WcOpcode::RdmaRead,
        Ok(WrOpcode::AtomicCmpAndSwp) => WcOpcode::CompSwap,
        Ok(WrOpcode::AtomicFetchAndAdd) => WcOpcode::FetchAdd,
        _ => WcOpcode::Send,
    }
}

/// Retires the head send WQE: a CQE if signalled or failed; a failure moves the QP to ERR.
fn complete_send(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    wqe: &SendWqeHeader,
    outcome: Result<u64, Failure>,
) {
    let Some(qp) = st.objects.qp_mut(qpn) else {
        return;
    };
    let index = qp.sq.ci;
    qp.sq.ci = index.wrapping_add(1);
    qp.sq_offset = 0;
    let signaled = wqe.flags & u8::from(SendFlags::Signaled) != 0;
    let (status, why, len) = match outcome {
        Ok(len) => (WcStatus::Success, VendorErr::None, len),
        Err((status, why)) => {
            log::debug!(
                "{}: QP {qpn} WQE {index} failed: {status:?} ({why:?})",
                rnic.name()
            );
            qp.enter_error();
            (status, why, 0)
        }
    };
    if status == WcStatus::Success && !signaled {
        return;
    }
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
    }
}

/// In ERR every outstanding WQE of both queues completes with WR_FLUSH_ERR.
fn flush(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    qpn: u32,
    sq_pi: u32,
    rq_pi: u32,
) -> Progress {
    let mut progress = Progress::default();
    for recv in [false, true] {
        loop {
            let Some(qp) = st.objects.qp_mut(qpn) else {
                return progress;
            };
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
            progress.worked = true;
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
    progress
}
