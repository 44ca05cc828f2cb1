//! Queue pairs (RC, UC, XRC_INI, XRC_TGT, and the datagram types UD and GSI) and the IBTA
//! state machine of MODIFY_QP.

use super::counters::Counters;
use super::queues::WorkQueue;
use std::sync::Arc;
use std::time::Instant;
use vrnic_hw::{QpAttr, QpState, QpType};

/// Why a QP's send queue is waiting before it retries its current WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// The target had no receive WQE.
    Rnr,
    /// The target QP was missing or not ready.
    Unreachable,
}

/// A send WQE waiting for a retry.
#[derive(Debug, Clone, Copy)]
pub struct Waiting {
    pub reason: WaitReason,
    pub retry_at: Instant,
    /// Retries left after the coming one; None retries forever (rnr_retry 7).
    pub retries_left: Option<u8>,
}

#[derive(Debug)]
pub struct Qp {
    pub qpn: u32,
    /// RC, UC, UD or GSI.
    pub kind: QpType,
    pub uctx: u32,
    pub pdn: u32,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    pub state: QpState,
    /// Attributes set by MODIFY_QP (state fields are kept in `state`).
    pub attr: QpAttr,
    pub sq: WorkQueue,
    pub rq: WorkQueue,
    /// Doorbell page (of context `uctx`) and slot.
    pub db_page: u32,
    pub db_slot: u32,
    pub max_send_sge: u8,
    pub max_recv_sge: u8,
    pub max_inline: u32,
    /// RoCE mode: the destination MAC of the AV (kept for a wire transport; the devices of
    /// this process are reached by GID).
    pub dmac: [u8; 6],
    pub waiting: Option<Waiting>,
    /// Bytes of the head send WQE already transferred: long messages move in chunks so one
    /// QP cannot hold the data path for the length of a huge transfer.
    pub sq_offset: u64,
    /// The head send WQE has started (a transfer resolved, a retry or RNR wait, a memory
    /// operation waiting for the DMA fence) and not completed: in SQD it still runs to its
    /// completion, while no other WQE starts (SPEC "Send queue drain").
    pub sq_started: bool,
    /// The move to SQD asked for SQ_DRAINED, and it is owed once the started WQE completes.
    pub sq_drained_due: bool,
    /// COMM_EST has been reported (first message received in RTR).
    pub comm_established: bool,
    /// PSN of the next request packet this QP sends (IBTA 9.7.1; 24 bits).
    pub next_psn: u32,
    /// PSN the responder expects next.
    pub expected_psn: u32,
    /// Bumped whenever outstanding work is forgotten (ERR, RESET): a transfer that started
    /// before does not complete anything after.
    pub epoch: u32,
    /// A request into this QP's receive queue is being placed outside the device lock: the
    /// head receive WQE must not be flushed until it ends.
    pub receive_in_flight: bool,
    /// QP_FLAG_SRQ: the SRQ receives come from (the QP's own `rq` is then unused). An
    /// XRC_TGT QP has one too: `srqn` is that of the message it is receiving, named by the
    /// request (SPEC "XRC").
    pub srq: Option<QpSrq>,
    /// XRC_TGT: its XRC domain.
    pub xrcdn: Option<u32>,
    /// What the QP did, from CREATE_QP (SPEC "Counters"); shared with the transfers that
    /// count after the device lock was released.
    pub counters: Arc<Counters>,
}

/// A QP's part of the SRQ it takes receive WQEs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpSrq {
    pub srqn: u32,
    /// The SRQ WQE (free-running index) this QP took for the message it is receiving; a
    /// message of several chunks keeps it until it completes.
    /// (An XRC_TGT QP names its SRQ per message: `srqn` is only meaningful with `taken`.)
    pub taken: Option<u32>,
    /// The QP entered ERR: flush `taken`, then post QP_LAST_WQE_REACHED.
    pub last_wqe_due: bool,
}

impl QpSrq {
    pub fn new(srqn: u32) -> Self {
        QpSrq {
            srqn,
            taken: None,
            last_wqe_due: false,
        }
    }
}

/// PSNs are 24-bit and wrap.
pub const PSN_MASK: u32 = 0xFF_FFFF;

/// Packets a message of `len` bytes takes at path MTU `mtu` bytes (at least one).
pub fn packets(len: u64, mtu: u32) -> u32 {
    let n = len.div_ceil(u64::from(mtu.max(256))).max(1);
    (n & u64::from(PSN_MASK)) as u32
}

/// `psn + n` in PSN space.
pub fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// Attribute mask bits (values of ibv_qp_attr_mask), generated from the spec's enum
/// `qp_attr_mask`; `mask::ALL` is every bit the device knows.
pub use vrnic_hw::qp_attr_mask as mask;

/// Attributes a transition of a QP of type `kind` requires and allows, per IBTA 11.2.5 /
/// ib_modify_qp_is_ok. `None` if the transition is not allowed.
pub fn transition(kind: QpType, from: QpState, to: QpState) -> Option<(u32, u32)> {
    match kind {
        QpType::Ud | QpType::Gsi => datagram_transition(kind == QpType::Gsi, from, to),
        QpType::Uc => uc_transition(from, to),
        QpType::XrcIni => xrc_ini_transition(from, to),
        QpType::XrcTgt => xrc_tgt_transition(from, to),
        QpType::Rc => rc_transition(from, to),
    }
}

/// XRC_INI: an RC requester without a receive side, so none of the responder's attributes
/// (MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER) anywhere (ib_modify_qp_is_ok's XRC_INI column).
fn xrc_ini_transition(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use mask::*;
    use QpState::*;
    let responder = MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    let (required, optional) = rc_transition(from, to)?;
    Some(match (from, to) {
        (Init, Rtr) => (required & !responder, optional),
        (Sqe, Rts) => return None,
        _ => (required, optional & !responder),
    })
}

/// XRC_TGT: an RC responder that never sends, so RTS needs only SQ_PSN and TIMEOUT and
/// no requester retry or READ attributes are taken (ib_modify_qp_is_ok's XRC_TGT column).
fn xrc_tgt_transition(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use mask::*;
    use QpState::*;
    let requester = RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC;
    let (required, optional) = rc_transition(from, to)?;
    Some(match (from, to) {
        (Rtr, Rts) => (SQ_PSN | TIMEOUT, optional),
        (Sqe, Rts) => return None,
        _ => (required, optional & !requester),
    })
}

/// UD and GSI: a Q_Key instead of a connection. The GSI QP needs no port (ib_mad gives
/// none: the special QPs know theirs).
fn datagram_transition(gsi: bool, from: QpState, to: QpState) -> Option<(u32, u32)> {
    use mask::*;
    use QpState::*;
    let port = if gsi { 0 } else { PORT };
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => (PKEY_INDEX | QKEY | port, PORT & !port),
        (Init, Init) => (0, PKEY_INDEX | PORT | QKEY),
        (Init, Rtr) => (0, PKEY_INDEX | QKEY),
        (Rtr, Rts) => (SQ_PSN, CUR_STATE | QKEY),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (0, CUR_STATE | QKEY),
        (Rts, Sqd) => (0, EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (0, PKEY_INDEX | QKEY),
        _ => return None,
    })
}

/// UC: connected like RC, without acknowledgements: no retries, no RNR, no READs or
/// atomics, so none of their attributes (ib_modify_qp_is_ok's UC columns).
fn uc_transition(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use mask::*;
    use QpState::*;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => (PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
        (Init, Init) => (0, PKEY_INDEX | PORT | ACCESS_FLAGS),
        (Init, Rtr) => (AV | PATH_MTU | DEST_QPN | RQ_PSN, ACCESS_FLAGS | PKEY_INDEX),
        (Rtr, Rts) => (SQ_PSN, CUR_STATE | ACCESS_FLAGS),
        (Rts, Rts) | (Sqd, Rts) => (0, CUR_STATE | ACCESS_FLAGS),
        (Rts, Sqd) => (0, EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (0, AV | ACCESS_FLAGS | PKEY_INDEX),
        (Sqe, Rts) => (0, CUR_STATE | ACCESS_FLAGS),
        _ => return None,
    })
}

fn rc_transition(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use mask::*;
    use QpState::*;
    let rts_optional = CUR_STATE | ACCESS_FLAGS | MIN_RNR_TIMER;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => (PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
        (Init, Init) => (0, PKEY_INDEX | PORT | ACCESS_FLAGS),
        (Init, Rtr) => (
            AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
            ACCESS_FLAGS | PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
            rts_optional,
        ),
        (Rts, Rts) | (Sqd, Rts) => (0, rts_optional),
        (Rts, Sqd) => (0, EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            0,
            rts_optional
                | AV
                | PATH_MTU
                | TIMEOUT
                | RETRY_CNT
                | RNR_RETRY
                | MAX_QP_RD_ATOMIC
                | MAX_DEST_RD_ATOMIC
                | PKEY_INDEX
                | PORT,
        ),
        (Sqe, Rts) => (0, CUR_STATE),
        _ => return None,
    })
}

impl Qp {
    /// Every QP but an XRC_TGT one has a doorbell slot (and rings).
    pub fn has_doorbell(&self) -> bool {
        self.kind != QpType::XrcTgt
    }

    /// Whether the QP has a receive queue of its own (not with an SRQ, not XRC).
    pub fn has_own_rq(&self) -> bool {
        self.srq.is_none() && !matches!(self.kind, QpType::XrcIni | QpType::XrcTgt)
    }

    /// Whether the QP's completions go to CQ `cqn` (an XRC_INI QP has no receive CQ, an
    /// XRC_TGT QP no CQ at all: its SRQs have them).
    pub fn uses_cq(&self, cqn: u32) -> bool {
        match self.kind {
            QpType::XrcTgt => false,
            QpType::XrcIni => self.send_cqn == cqn,
            _ => self.send_cqn == cqn || self.recv_cqn == cqn,
        }
    }

    /// Whether the QP is in PD `pdn` (an XRC_TGT QP has no PD).
    pub fn uses_pd(&self, pdn: u32) -> bool {
        self.kind != QpType::XrcTgt && self.pdn == pdn
    }

    /// A UD or GSI QP: sends carry an address vector, receives get a GRH.
    pub fn is_datagram(&self) -> bool {
        matches!(self.kind, QpType::Ud | QpType::Gsi)
    }

    /// Moves to ERR: nothing is executed or waited for any more; the queues get flushed
    /// (with an SRQ: the WQE it took, then QP_LAST_WQE_REACHED).
    pub fn enter_error(&mut self) {
        if self.state != QpState::Err {
            if let Some(srq) = self.srq.as_mut() {
                srq.last_wqe_due = true;
            }
        }
        self.state = QpState::Err;
        self.forget_work();
    }

    /// Drops every transfer in progress (ERR and RESET).
    pub fn forget_work(&mut self) {
        self.waiting = None;
        self.sq_offset = 0;
        self.sq_started = false;
        self.sq_drained_due = false;
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Path MTU in bytes (4096 until set).
    pub fn mtu_bytes(&self) -> u32 {
        match vrnic_hw::Mtu::try_from(self.attr.path_mtu) {
            Ok(mtu) => 128 << u8::from(mtu),
            Err(_) => 4096,
        }
    }

    /// Whether the send queue's head WQE may run: in RTS, and in SQD only the one that has
    /// started (SPEC "Send queue drain").
    pub fn sends_allowed(&self) -> bool {
        match self.state {
            QpState::Rts => true,
            QpState::Sqd => self.sq_started,
            _ => false,
        }
    }

    /// SQD with a started send WQE: QUERY_QP's sq_draining.
    pub fn sq_draining(&self) -> bool {
        self.state == QpState::Sqd && self.sq_started
    }

    /// Whether incoming requests are accepted in this state.
    pub fn receives_allowed(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_transitions_follow_ibta() {
        use QpState::*;
        let rc = |from, to| transition(QpType::Rc, from, to);
        assert_eq!(
            rc(Reset, Init).map(|t| t.0),
            Some(mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS)
        );
        assert!(rc(Reset, Rtr).is_none());
        assert!(rc(Init, Rts).is_none());
        assert!(rc(Rtr, Rts).is_some());
        assert!(rc(Rts, Init).is_none());
        assert_eq!(rc(Err, Reset), Some((0, 0)));
        assert!(rc(Err, Rts).is_none());
    }

    #[test]
    fn uc_transitions_connect_without_retry_or_read_attributes() {
        use QpState::*;
        let uc = |from, to| transition(QpType::Uc, from, to);
        assert_eq!(
            uc(Init, Rtr).map(|t| t.0),
            Some(mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN)
        );
        assert_eq!(uc(Rtr, Rts).map(|t| t.0), Some(mask::SQ_PSN));
        assert_eq!(
            uc(Rtr, Rts).map(|t| t.1 & (mask::TIMEOUT | mask::MAX_QP_RD_ATOMIC)),
            Some(0)
        );
        assert!(uc(Reset, Rtr).is_none());
    }

    #[test]
    fn xrc_transitions_follow_the_xrc_columns_of_ib_modify_qp_is_ok() {
        use mask::*;
        use QpState::*;
        let ini = |from, to| transition(QpType::XrcIni, from, to);
        let tgt = |from, to| transition(QpType::XrcTgt, from, to);
        assert_eq!(
            ini(Init, Rtr).map(|t| t.0),
            Some(AV | PATH_MTU | DEST_QPN | RQ_PSN)
        );
        assert_eq!(
            tgt(Init, Rtr).map(|t| t.0),
            Some(AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER)
        );
        assert_eq!(
            ini(Rtr, Rts).map(|t| t.0),
            Some(SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC)
        );
        assert_eq!(ini(Rtr, Rts).map(|t| t.1 & MIN_RNR_TIMER), Some(0));
        assert_eq!(
            tgt(Rtr, Rts),
            Some((SQ_PSN | TIMEOUT, CUR_STATE | ACCESS_FLAGS | MIN_RNR_TIMER))
        );
        assert_eq!(
            tgt(Sqd, Sqd).map(|t| t.1 & (RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC)),
            Some(0)
        );
        assert_eq!(
            ini(Sqd, Sqd).map(|t| t.1 & (MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER)),
            Some(0)
        );
        assert_eq!(
            ini(Reset, Init),
            Some((PKEY_INDEX | PORT | ACCESS_FLAGS, 0))
        );
        assert!(ini(Sqe, Rts).is_none() && tgt(Sqe, Rts).is_none());
        assert!(tgt(Init, Rts).is_none());
    }

    #[test]
    fn datagram_transitions_take_a_qkey_and_no_connection() {
        use QpState::*;
        let ud = |from, to| transition(QpType::Ud, from, to);
        let gsi = |from, to| transition(QpType::Gsi, from, to);
        assert_eq!(
            ud(Reset, Init),
            Some((mask::PKEY_INDEX | mask::PORT | mask::QKEY, 0))
        );
        assert_eq!(
            gsi(Reset, Init),
            Some((mask::PKEY_INDEX | mask::QKEY, mask::PORT))
        );
        assert_eq!(ud(Init, Rtr), Some((0, mask::PKEY_INDEX | mask::QKEY)));
        assert_eq!(ud(Rtr, Rts).map(|t| t.0), Some(mask::SQ_PSN));
        assert!(ud(Init, Rts).is_none());
    }
}
