//! CREATE_QP (RC, UC, UD, GSI, with or without an SRQ; XRC_INI and XRC_TGT), MODIFY_QP
//! (the IBTA state machine), QUERY_QP and DESTROY_QP.

use super::commands::{owned, uctx_exists, write_out};
use super::error::{
    bad_field, bad_handle, bad_size, busy, no_resources, permission, CmdError, CmdResult,
};
use super::prefetch::PageListReads;
use super::queues::{read_ring, release_slot, take_slot};
use crate::guest_memory::RamSnapshot;
use crate::objects::page_list::GuestPages;
use crate::objects::qp::{mask, transition, QpSrq};
use crate::objects::{Qp, Ring, WorkQueue};
use crate::rnic::notify::post_async;
use crate::rnic::{Rnic, RnicState};
use vrnic_hw::*;

const MAX_WR_LOG2: u8 = bar0::MAX_QP_WR_RESET.trailing_zeros() as u8;

pub fn create_qp(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    reads: &mut PageListReads,
    cmd: &CmdCreateQp,
) -> CmdResult<[u32; 4]> {
    let uctx = cmd.uctx.to_native();
    uctx_exists(st, uctx, CmdCreateQp::UCTX_OFF)?;
    if cmd.qp_type == u8::from(QpType::XrcTgt) {
        return create_xrc_tgt(rnic, st, cmd);
    }
    let pdn = cmd.pdn.to_native();
    let pd = st
        .objects
        .pds
        .get(pdn)
        .ok_or(bad_handle(CmdCreateQp::PDN_OFF))?;
    owned(pd.uctx, uctx, CmdCreateQp::PDN_OFF)?;
    let xrc_ini = cmd.qp_type == u8::from(QpType::XrcIni);
    let mut cqs = vec![(cmd.send_cqn.to_native(), CmdCreateQp::SEND_CQN_OFF)];
    if !xrc_ini {
        cqs.push((cmd.recv_cqn.to_native(), CmdCreateQp::RECV_CQN_OFF));
    }
    for (cqn, off) in cqs {
        let cq = st.objects.cqs.get(cqn).ok_or(bad_handle(off))?;
        owned(cq.uctx, uctx, off)?;
    }
    if cmd.xrcdn.to_native() != 0 {
        return Err(bad_field(CmdCreateQp::XRCDN_OFF));
    }
    let kind = match QpType::try_from(cmd.qp_type) {
        Ok(k @ (QpType::Rc | QpType::Uc | QpType::Ud)) => k,
        // SPEC "XRC": an RC requester with no receive side at all.
        Ok(QpType::XrcIni) => {
            let unused_rq = [
                (cmd.recv_cqn.to_native() == 0, CmdCreateQp::RECV_CQN_OFF),
                (cmd.rq_depth_log2 == 0, CmdCreateQp::RQ_DEPTH_LOG2_OFF),
                (cmd.rq_wqe_shift == 0, CmdCreateQp::RQ_WQE_SHIFT_OFF),
                (cmd.max_recv_sge == 0, CmdCreateQp::MAX_RECV_SGE_OFF),
                (cmd.rq_ring == PageList::default(), CmdCreateQp::RQ_RING_OFF),
            ];
            if let Some((_, at)) = unused_rq.iter().find(|(zero, _)| !zero) {
                return Err(bad_field(*at));
            }
            QpType::XrcIni
        }
        // SPEC "Link modes": one GSI QP per RoCE device, the kernel's.
        Ok(QpType::Gsi) => {
            if uctx != KERNEL_UCTX {
                return Err(permission(CmdCreateQp::UCTX_OFF));
            }
            if !rnic.link().is_eth() {
                return Err(CmdError::new(
                    AqStatus::NotSupported,
                    CmdCreateQp::QP_TYPE_OFF,
                ));
            }
            if st.objects.gsi_qpn.is_some() {
                return Err(busy(CmdCreateQp::QP_TYPE_OFF));
            }
            QpType::Gsi
        }
        // Handled above.
        Ok(QpType::XrcTgt) | Err(_) => return Err(bad_field(CmdCreateQp::QP_TYPE_OFF)),
    };
    let datagram = matches!(kind, QpType::Ud | QpType::Gsi);
    let srq = super::srq::srq_of_new_qp(st, cmd, kind)?;
    let own_rq = srq.is_none() && !xrc_ini;
    let mut depths = vec![(cmd.sq_depth_log2, CmdCreateQp::SQ_DEPTH_LOG2_OFF)];
    if own_rq {
        depths.push((cmd.rq_depth_log2, CmdCreateQp::RQ_DEPTH_LOG2_OFF));
    }
    for (depth, off) in depths {
        if !(1..=MAX_WR_LOG2).contains(&depth) {
            return Err(bad_size(off));
        }
    }
    let max_sge = bar0::MAX_SGE_RESET;
    if u32::from(cmd.max_send_sge) > max_sge {
        return Err(bad_size(CmdCreateQp::MAX_SEND_SGE_OFF));
    }
    if u32::from(cmd.max_recv_sge) > max_sge {
        return Err(bad_size(CmdCreateQp::MAX_RECV_SGE_OFF));
    }
    let max_inline = cmd.max_inline.to_native();
    if max_inline > bar0::MAX_INLINE_RESET {
        return Err(bad_size(CmdCreateQp::MAX_INLINE_OFF));
    }
    // Datagram WQEs carry a ud_av before their payload, XRC_INI WQEs an xrc_seg.
    let (payload_off, min_shift) = if datagram {
        (UD_PAYLOAD_OFFSET as usize, UD_SEND_WQE_SHIFT_MIN)
    } else if xrc_ini {
        (XRC_PAYLOAD_OFFSET as usize, XRC_SEND_WQE_SHIFT_MIN)
    } else {
        (SendWqeHeader::SIZE, SEND_WQE_SHIFT_MIN)
    };
    let send_need =
        payload_off + (Sge::SIZE * usize::from(cmd.max_send_sge)).max(max_inline as usize);
    let sq_shift = u32::from(cmd.sq_wqe_shift);
    if !(min_shift..=SEND_WQE_SHIFT_MAX).contains(&sq_shift) || send_need > 1 << sq_shift {
        return Err(bad_size(CmdCreateQp::SQ_WQE_SHIFT_OFF));
    }
    let recv_need = RecvWqeHeader::SIZE + Sge::SIZE * usize::from(cmd.max_recv_sge);
    let rq_shift = u32::from(cmd.rq_wqe_shift);
    let rq_shift_ok =
        (RECV_WQE_SHIFT_MIN..=RECV_WQE_SHIFT_MAX).contains(&rq_shift) && recv_need <= 1 << rq_shift;
    if own_rq && !rq_shift_ok {
        return Err(bad_size(CmdCreateQp::RQ_WQE_SHIFT_OFF));
    }
    let sq = read_ring(
        reads,
        mem,
        &cmd.sq_ring,
        CmdCreateQp::SQ_RING_OFF,
        cmd.sq_depth_log2,
        1 << sq_shift,
    )?;
    let rq = match own_rq {
        true => read_ring(
            reads,
            mem,
            &cmd.rq_ring,
            CmdCreateQp::RQ_RING_OFF,
            cmd.rq_depth_log2,
            1 << rq_shift,
        )?,
        // Receives come from the SRQ (or there are none: XRC_INI).
        false => no_ring(),
    };
    if st.objects.qps.free_index(0).is_none() {
        return Err(no_resources());
    }
    let (db_page, db_slot) = take_slot(rnic, st, uctx)?;
    let (index, qpn) = st.objects.next_qpn().ok_or_else(no_resources)?;
    st.objects.insert_qp(
        index,
        Qp {
            qpn,
            kind,
            uctx,
            pdn,
            send_cqn: cmd.send_cqn.to_native(),
            recv_cqn: cmd.recv_cqn.to_native(),
            state: QpState::Reset,
            attr: QpAttr::default(),
            sq: WorkQueue { ring: sq, ci: 0 },
            rq: WorkQueue { ring: rq, ci: 0 },
            db_page,
            db_slot,
            max_send_sge: cmd.max_send_sge,
            max_recv_sge: cmd.max_recv_sge,
            max_inline,
            dmac: [0; 6],
            waiting: None,
            sq_offset: 0,
            sq_started: false,
            sq_drained_due: false,
            comm_established: false,
            next_psn: 0,
            expected_psn: 0,
            epoch: 0,
            receive_in_flight: false,
            srq,
            xrcdn: None,
            counters: Default::default(),
        },
    );
    if kind == QpType::Gsi {
        st.objects.gsi_qpn = Some(qpn);
    }
    log::debug!(
        "{}: {kind:?} QP {qpn} created (uctx {uctx}, page {db_page}, slot {db_slot})",
        rnic.name()
    );
    Ok([qpn, db_slot, db_page, 0])
}

/// An empty ring nothing reads (a QP without a queue of its own).
fn no_ring() -> Ring {
    Ring {
        pages: GuestPages::list(Vec::new(), PAGE_SHIFT_MIN),
        depth_log2: 0,
        entry_shift: RECV_WQE_SHIFT_MIN as u8,
    }
}

/// CREATE_QP of an XRC_TGT QP (SPEC "XRC"): the kernel's, in a live XRC domain, with no
/// PD, CQ, queue or doorbell slot (results 1 and 2 are 0); every other field is zero.
fn create_xrc_tgt(rnic: &Rnic, st: &mut RnicState, cmd: &CmdCreateQp) -> CmdResult<[u32; 4]> {
    if cmd.uctx.to_native() != KERNEL_UCTX {
        return Err(permission(CmdCreateQp::UCTX_OFF));
    }
    let unused = [
        (cmd.pdn.to_native() == 0, CmdCreateQp::PDN_OFF),
        (cmd.send_cqn.to_native() == 0, CmdCreateQp::SEND_CQN_OFF),
        (cmd.recv_cqn.to_native() == 0, CmdCreateQp::RECV_CQN_OFF),
        (cmd.sq_depth_log2 == 0, CmdCreateQp::SQ_DEPTH_LOG2_OFF),
        (cmd.rq_depth_log2 == 0, CmdCreateQp::RQ_DEPTH_LOG2_OFF),
        (cmd.sq_wqe_shift == 0, CmdCreateQp::SQ_WQE_SHIFT_OFF),
        (cmd.rq_wqe_shift == 0, CmdCreateQp::RQ_WQE_SHIFT_OFF),
        (cmd.max_send_sge == 0, CmdCreateQp::MAX_SEND_SGE_OFF),
        (cmd.max_recv_sge == 0, CmdCreateQp::MAX_RECV_SGE_OFF),
        (cmd.flags == 0, CmdCreateQp::FLAGS_OFF),
        (cmd.max_inline.to_native() == 0, CmdCreateQp::MAX_INLINE_OFF),
        (cmd.srqn.to_native() == 0, CmdCreateQp::SRQN_OFF),
        (cmd.sq_ring == PageList::default(), CmdCreateQp::SQ_RING_OFF),
        (cmd.rq_ring == PageList::default(), CmdCreateQp::RQ_RING_OFF),
    ];
    if let Some((_, at)) = unused.iter().find(|(zero, _)| !zero) {
        return Err(bad_field(*at));
    }
    let xrcdn = cmd.xrcdn.to_native();
    st.objects
        .xrcds
        .get(xrcdn)
        .ok_or(bad_handle(CmdCreateQp::XRCDN_OFF))?;
    let (index, qpn) = st.objects.next_qpn().ok_or_else(no_resources)?;
    st.objects.insert_qp(
        index,
        Qp {
            qpn,
            kind: QpType::XrcTgt,
            uctx: KERNEL_UCTX,
            pdn: 0,
            send_cqn: 0,
            recv_cqn: 0,
            state: QpState::Reset,
            attr: QpAttr::default(),
            sq: WorkQueue {
                ring: no_ring(),
                ci: 0,
            },
            rq: WorkQueue {
                ring: no_ring(),
                ci: 0,
            },
            db_page: 0,
            db_slot: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline: 0,
            dmac: [0; 6],
            waiting: None,
            sq_offset: 0,
            sq_started: false,
            sq_drained_due: false,
            comm_established: false,
            next_psn: 0,
            expected_psn: 0,
            epoch: 0,
            receive_in_flight: false,
            // Each request names the SRQ (`srqn` is set per message).
            srq: Some(QpSrq::new(0)),
            xrcdn: Some(xrcdn),
            counters: Default::default(),
        },
    );
    log::debug!("{}: XRC_TGT QP {qpn} created (XRCD {xrcdn})", rnic.name());
    Ok([qpn, 0, 0, 0])
}

/// Byte offset of a qp_attr field within MODIFY_QP.
const fn attr_off(field: usize) -> usize {
    CmdModifyQp::ATTR_OFF + field
}

/// Checks the values of the attributes named by `m`.
fn validate(attr: &QpAttr, m: u32) -> CmdResult<()> {
    let checks: [(u32, bool, usize); 12] = [
        (
            mask::PATH_MTU,
            Mtu::try_from(attr.path_mtu).is_ok(),
            QpAttr::PATH_MTU_OFF,
        ),
        (mask::TIMEOUT, attr.timeout <= 31, QpAttr::TIMEOUT_OFF),
        (mask::RETRY_CNT, attr.retry_cnt <= 7, QpAttr::RETRY_CNT_OFF),
        (mask::RNR_RETRY, attr.rnr_retry <= 7, QpAttr::RNR_RETRY_OFF),
        (
            mask::MIN_RNR_TIMER,
            attr.min_rnr_timer <= 31,
            QpAttr::MIN_RNR_TIMER_OFF,
        ),
        (
            mask::MAX_QP_RD_ATOMIC,
            u32::from(attr.max_rd_atomic) <= bar0::MAX_QP_RD_ATOM_RESET,
            QpAttr::MAX_RD_ATOMIC_OFF,
        ),
        (
            mask::MAX_DEST_RD_ATOMIC,
            u32::from(attr.max_dest_rd_atomic) <= bar0::MAX_QP_RD_ATOM_RESET,
            QpAttr::MAX_DEST_RD_ATOMIC_OFF,
        ),
        (
            mask::PORT,
            u32::from(attr.port_num) == PORT_NUM,
            QpAttr::PORT_NUM_OFF,
        ),
        (
            mask::PKEY_INDEX,
            attr.pkey_index.to_native() == 0,
            QpAttr::PKEY_INDEX_OFF,
        ),
        (
            mask::ACCESS_FLAGS,
            attr.qp_access_flags.to_native() & !ACCESS_SUPPORTED_MASK == 0,
            QpAttr::QP_ACCESS_FLAGS_OFF,
        ),
        (
            mask::DEST_QPN,
            attr.dest_qp_num.to_native() <= QPN_MAX,
            QpAttr::DEST_QP_NUM_OFF,
        ),
        (
            mask::AV,
            attr.sl <= 15 && attr.is_global <= 1,
            QpAttr::SL_OFF,
        ),
    ];
    for (bit, ok, off) in checks {
        if m & bit != 0 && !ok {
            return Err(bad_field(attr_off(off)));
        }
    }
    for (bit, psn, off) in [
        (mask::RQ_PSN, attr.rq_psn, QpAttr::RQ_PSN_OFF),
        (mask::SQ_PSN, attr.sq_psn, QpAttr::SQ_PSN_OFF),
    ] {
        if m & bit != 0 && psn.to_native() > 0xFF_FFFF {
            return Err(bad_field(attr_off(off)));
        }
    }
    Ok(())
}

/// Copies the attributes named by `m` from `new` into `cur`.
fn apply(cur: &mut QpAttr, new: &QpAttr, m: u32) {
    let set = |bit: u32| m & bit != 0;
    if set(mask::ACCESS_FLAGS) {
        cur.qp_access_flags = new.qp_access_flags;
    }
    if set(mask::PKEY_INDEX) {
        cur.pkey_index = new.pkey_index;
    }
    if set(mask::PORT) {
        cur.port_num = new.port_num;
    }
    if set(mask::QKEY) {
        cur.qkey = new.qkey;
    }
    if set(mask::AV) {
        cur.dlid = new.dlid;
        cur.sl = new.sl;
        cur.src_path_bits = new.src_path_bits;
        cur.static_rate = new.static_rate;
        cur.is_global = new.is_global;
        cur.sgid_index = new.sgid_index;
        cur.dgid = new.dgid;
        cur.flow_label = new.flow_label;
        cur.hop_limit = new.hop_limit;
        cur.traffic_class = new.traffic_class;
    }
    type Copy = fn(&mut QpAttr, &QpAttr);
    let fields: [(u32, Copy); 11] = [
        (mask::PATH_MTU, |c, n| c.path_mtu = n.path_mtu),
        (mask::TIMEOUT, |c, n| c.timeout = n.timeout),
        (mask::RETRY_CNT, |c, n| c.retry_cnt = n.retry_cnt),
        (mask::RNR_RETRY, |c, n| c.rnr_retry = n.rnr_retry),
        (mask::RQ_PSN, |c, n| c.rq_psn = n.rq_psn),
        (mask::SQ_PSN, |c, n| c.sq_psn = n.sq_psn),
        (mask::MAX_QP_RD_ATOMIC, |c, n| {
            c.max_rd_atomic = n.max_rd_atomic
        }),
        (mask::MAX_DEST_RD_ATOMIC, |c, n| {
            c.max_dest_rd_atomic = n.max_dest_rd_atomic
        }),
        (mask::MIN_RNR_TIMER, |c, n| {
            c.min_rnr_timer = n.min_rnr_timer
        }),
        (mask::DEST_QPN, |c, n| c.dest_qp_num = n.dest_qp_num),
        (mask::EN_SQD_ASYNC_NOTIFY, |c, n| {
            c.en_sqd_async_notify = n.en_sqd_async_notify
        }),
    ];
    for (bit, copy) in fields {
        if set(bit) {
            copy(cur, new);
        }
    }
}

pub fn modify_qp(rnic: &Rnic, st: &mut RnicState, cmd: &CmdModifyQp) -> CmdResult<[u32; 4]> {
    let qpn = cmd.qpn.to_native();
    let qp = st.objects.qp(qpn).ok_or(bad_handle(CmdModifyQp::QPN_OFF))?;
    owned(qp.uctx, cmd.uctx.to_native(), CmdModifyQp::UCTX_OFF)?;
    if cmd.out_addr.to_native() != 0 || cmd.out_len.to_native() != 0 {
        return Err(bad_field(CmdModifyQp::OUT_ADDR_OFF));
    }
    let m = cmd.attr_mask.to_native();
    let unsupported = mask::ALT_PATH | mask::PATH_MIG_STATE | mask::CAP;
    if m & !mask::ALL != 0 || m & unsupported != 0 {
        return Err(bad_field(CmdModifyQp::ATTR_MASK_OFF));
    }
    let attr = &cmd.attr;
    let (current, kind) = (qp.state, qp.kind);
    if m & mask::CUR_STATE != 0 && QpState::try_from(attr.cur_qp_state) != Ok(current) {
        return Err(CmdError::new(
            AqStatus::BadState,
            attr_off(QpAttr::CUR_QP_STATE_OFF),
        ));
    }
    let target = if m & mask::STATE != 0 {
        QpState::try_from(attr.qp_state).map_err(|_| bad_field(attr_off(QpAttr::QP_STATE_OFF)))?
    } else {
        current
    };
    let bad_state = CmdError::new(AqStatus::BadState, attr_off(QpAttr::QP_STATE_OFF));
    let (required, optional) = transition(kind, current, target).ok_or(bad_state)?;
    if current == QpState::Sqd && target == QpState::Sqd && qp.sq_draining() {
        // SPEC "Send queue drain": attributes change only once the queue has drained.
        return Err(bad_state);
    }
    let given = m & !(mask::STATE | mask::CUR_STATE);
    if given & required != required || given & !(required | optional) != 0 {
        return Err(bad_field(CmdModifyQp::ATTR_MASK_OFF));
    }
    validate(attr, m)?;
    let roce_av = rnic.link().is_eth() && m & mask::AV != 0;
    if roce_av {
        // SPEC "Send queue processing (RoCE mode, RC)": the peer is named by a GRH.
        if attr.is_global != 1 {
            return Err(bad_field(attr_off(QpAttr::IS_GLOBAL_OFF)));
        }
        if st.gid_table.get(attr.sgid_index).is_none() {
            return Err(bad_field(attr_off(QpAttr::SGID_INDEX_OFF)));
        }
    } else if cmd.dmac != [0; 6] {
        return Err(bad_field(CmdModifyQp::DMAC_OFF));
    }
    let qp = st
        .objects
        .qp_mut(qpn)
        .ok_or(bad_handle(CmdModifyQp::QPN_OFF))?;
    apply(&mut qp.attr, attr, m);
    if roce_av {
        qp.dmac = cmd.dmac;
    }
    if m & mask::SQ_PSN != 0 {
        qp.next_psn = attr.sq_psn.to_native();
    }
    if m & mask::RQ_PSN != 0 {
        qp.expected_psn = attr.rq_psn.to_native();
    }
    if target == QpState::Err {
        // Also starts an SRQ QP's last-WQE report (SPEC "Shared receive queues").
        qp.enter_error();
    }
    rnic.trace.qp_state(qpn, || Some(qp.state), target);
    qp.state = target;
    let (page, slot) = (qp.db_page, qp.db_slot);
    // SQ_DRAINED is owed only if this move to SQD asks for it.
    let notify = m & mask::EN_SQD_ASYNC_NOTIFY != 0 && attr.en_sqd_async_notify != 0;
    let has_doorbell = qp.has_doorbell();
    match target {
        QpState::Reset => {
            qp.sq.ci = 0;
            qp.rq.ci = 0;
            qp.forget_work();
            qp.comm_established = false;
            qp.next_psn = 0;
            qp.expected_psn = 0;
            qp.attr = QpAttr::default();
            qp.dmac = [0; 6];
            if let Some(srq) = qp.srq.as_mut() {
                // Forgotten like every outstanding WQE.
                srq.taken = None;
                srq.last_wqe_due = false;
            }
            if has_doorbell {
                rnic.doorbells.clear_slot(page, slot);
            }
        }
        QpState::Sqd if current != QpState::Sqd => {
            // A started WQE runs to its completion, which posts the event (requester);
            // with none started the queue has drained now.
            qp.sq_drained_due = notify && qp.sq_started;
            if notify && !qp.sq_started {
                post_async(rnic, st, EventType::SqDrained, qpn, 0);
            }
        }
        QpState::Rts => qp.sq_drained_due = false,
        _ => {}
    }
    // WQEs posted in a state that does not run them, or a queue to flush, wait for this.
    st.objects.mark_active(qpn);
    log::debug!(
        "{}: QP {qpn} {current:?} -> {target:?} (mask {m:#x})",
        rnic.name()
    );
    Ok([0; 4])
}

pub fn query_qp(st: &mut RnicState, mem: &RamSnapshot, cmd: &CmdModifyQp) -> CmdResult<[u32; 4]> {
    let qp = st
        .objects
        .qp(cmd.qpn.to_native())
        .ok_or(bad_handle(CmdModifyQp::QPN_OFF))?;
    owned(qp.uctx, cmd.uctx.to_native(), CmdModifyQp::UCTX_OFF)?;
    if cmd.attr_mask.to_native() != 0 {
        return Err(bad_field(CmdModifyQp::ATTR_MASK_OFF));
    }
    if cmd.dmac != [0; 6] {
        return Err(bad_field(CmdModifyQp::DMAC_OFF));
    }
    let mut attr = qp.attr;
    // The PSNs as they are now, not as they were set.
    attr.sq_psn = qp.next_psn.into();
    attr.rq_psn = qp.expected_psn.into();
    attr.qp_state = qp.state.into();
    attr.cur_qp_state = qp.state.into();
    attr.sq_draining = u8::from(qp.sq_draining());
    write_out(
        mem,
        cmd.out_addr.to_native(),
        cmd.out_len.to_native(),
        &attr,
        CmdModifyQp::OUT_ADDR_OFF,
        CmdModifyQp::OUT_LEN_OFF,
    )?;
    Ok([0; 4])
}

pub fn destroy_qp(rnic: &Rnic, st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let qpn = cmd.handle.to_native();
    let qp = st
        .objects
        .qp(qpn)
        .ok_or(bad_handle(CmdHandle::HANDLE_OFF))?;
    owned(qp.uctx, cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    let (uctx, page, slot, has_doorbell) = (qp.uctx, qp.db_page, qp.db_slot, qp.has_doorbell());
    st.objects.remove_qp(qpn);
    if has_doorbell {
        release_slot(st, uctx, page, slot);
        rnic.doorbells.clear_slot(page, slot);
    }
    log::debug!("{}: QP {qpn} destroyed", rnic.name());
    Ok([0; 4])
}
