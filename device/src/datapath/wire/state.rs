//! A wire QP's state as the guest sees it, kept from its engines: QUERY_QP's sq_psn and
//! rq_psn (`Requester::next_psn`, `Responder::expected_psn`), `Qp::waiting` while the
//! requester waits out an RNR NAK, `sq_started` while posted WQEs are outstanding (so SQD
//! drains them all before SQ_DRAINED, and QUERY_QP's sq_draining says so); and MODIFY_QP
//! of a QP already sending or receiving (RTS->RTS, SQD->SQD) passed to the engines'
//! `reconfigure`.

use super::engines::{requester_config, responder_config, QpEngines};
use crate::objects::qp::{WaitReason, Waiting};
use crate::objects::Qp;
use crate::rnic::RnicState;
use std::time::Instant;
use vrnic_hw::QpState;

/// After the engines of QP `qpn` have run: the QP shows what they hold.
pub fn sync(st: &mut RnicState, qpn: u32, e: &QpEngines, now: Instant) {
    let Some(qp) = st.objects.qp_mut(qpn).filter(|qp| qp.epoch == e.epoch) else {
        return;
    };
    qp.expected_psn = e.responder.expected_psn().get();
    if let Some(rq) = &e.requester {
        qp.next_psn = rq.next_psn().get();
    }
    if matches!(qp.state, QpState::Rts | QpState::Sqd) {
        qp.sq_started = !e.kept.is_empty();
    }
    if qp.waiting.is_some_and(|w| now >= w.retry_at) {
        qp.waiting = None;
    }
}

/// A posted WQE of QP `qpn` is about to complete, `more` of them still outstanding after
/// it: the SQ_DRAINED a move to SQD asked for stays owed (returned, taken from the QP so
/// that `complete_send` does not post it now) until the last one. The wait for an RNR
/// timer ends with it.
pub fn completing(st: &mut RnicState, qpn: u32, more: bool) -> bool {
    let Some(qp) = st.objects.qp_mut(qpn) else {
        return false;
    };
    qp.waiting = None;
    more && std::mem::take(&mut qp.sq_drained_due)
}

/// After `complete_send` of that WQE: with `more` outstanding the queue is still started
/// (`complete_send` cleared it, as for the in-process path's one started WQE), and the
/// `owed` SQ_DRAINED is owed again if the QP is still in SQD.
pub fn completed(st: &mut RnicState, qpn: u32, more: bool, owed: bool) {
    if let Some(qp) = st.objects.qp_mut(qpn).filter(|_| more) {
        qp.sq_started = matches!(qp.state, QpState::Rts | QpState::Sqd);
        qp.sq_drained_due = owed && qp.state == QpState::Sqd;
    }
}

/// The requester waits for an RNR timer until `until`, then sends again.
pub fn rnr_wait(st: &mut RnicState, qpn: u32, until: Instant, retries_left: Option<u8>) {
    if let Some(qp) = st.objects.qp_mut(qpn) {
        qp.waiting = Some(Waiting {
            reason: WaitReason::Rnr,
            retry_at: until,
            retries_left,
        });
    }
}

/// The attributes MODIFY_QP changed since the engines took them reach the engines (the
/// retry and RNR attributes, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer; the MTU
/// only once nothing is outstanding, tried again until then).
pub fn reconfigure(qp: &Qp, e: &mut QpEngines) {
    let mtu = qp.mtu_bytes();
    if let Ok(cfg) = responder_config(qp.kind, &qp.attr, mtu) {
        if cfg != e.responder_cfg {
            e.responder.reconfigure(cfg);
            e.responder_cfg = cfg;
        }
    }
    let (Some(rq), Ok(cfg)) = (
        e.requester.as_mut(),
        requester_config(qp.kind, &qp.attr, mtu),
    ) else {
        return;
    };
    if e.requester_cfg == Some(cfg) {
        return;
    }
    match rq.reconfigure(cfg) {
        Ok(()) => e.requester_cfg = Some(cfg),
        Err(err) => log::trace!("QP {}: requester not reconfigured yet: {err}", qp.qpn),
    }
}
