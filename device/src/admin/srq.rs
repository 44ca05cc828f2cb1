//! CREATE_SRQ (basic and XRC), MODIFY_SRQ, QUERY_SRQ, DESTROY_SRQ, and the SRQ fields of
//! CREATE_QP (SPEC "Shared receive queues", "XRC").

use super::commands::{owned, uctx_exists, write_out};
use super::error::{bad_field, bad_handle, bad_size, busy, no_resources, CmdError, CmdResult};
use super::prefetch::PageListReads;
use super::queues::{read_ring, release_slot, take_slot};
use crate::guest_memory::RamSnapshot;
use crate::objects::qp::QpSrq;
use crate::objects::srq::XrcSrq;
use crate::objects::Srq;
use crate::rnic::{Rnic, RnicState};
use vm_memory::ByteValued;
use vrnic_hw::*;

const MAX_WR_LOG2: u8 = bar0::MAX_QP_WR_RESET.trailing_zeros() as u8;

pub fn create_srq(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    reads: &mut PageListReads,
    cmd: &CmdCreateSrq,
) -> CmdResult<[u32; 4]> {
    let uctx = cmd.uctx.to_native();
    uctx_exists(st, uctx, CmdCreateSrq::UCTX_OFF)?;
    let pdn = cmd.pdn.to_native();
    let pd = st
        .objects
        .pds
        .get(pdn)
        .ok_or(bad_handle(CmdCreateSrq::PDN_OFF))?;
    owned(pd.uctx, uctx, CmdCreateSrq::PDN_OFF)?;
    let xrc = xrc_of_new_srq(st, cmd)?;
    if !(1..=MAX_WR_LOG2).contains(&cmd.depth_log2) {
        return Err(bad_size(CmdCreateSrq::DEPTH_LOG2_OFF));
    }
    if !(1..=bar0::MAX_SGE_RESET).contains(&u32::from(cmd.max_sge)) {
        return Err(bad_size(CmdCreateSrq::MAX_SGE_OFF));
    }
    let need = RecvWqeHeader::SIZE + Sge::SIZE * usize::from(cmd.max_sge);
    let shift = u32::from(cmd.wqe_shift);
    if !(RECV_WQE_SHIFT_MIN..=RECV_WQE_SHIFT_MAX).contains(&shift) || need > 1 << shift {
        return Err(bad_size(CmdCreateSrq::WQE_SHIFT_OFF));
    }
    let ring = read_ring(
        reads,
        mem,
        &cmd.ring,
        CmdCreateSrq::RING_OFF,
        cmd.depth_log2,
        1 << shift,
    )?;
    let srqn = st.objects.srqs.free_index(0).ok_or_else(no_resources)?;
    let (db_page, db_slot) = take_slot(rnic, st, uctx)?;
    st.objects.srqs.insert_at(
        srqn,
        Srq {
            uctx,
            pdn,
            ring,
            max_sge: cmd.max_sge,
            db_page,
            db_slot,
            ci: 0,
            limit: 0,
            error: false,
            xrc,
        },
    );
    log::debug!(
        "{}: SRQ {srqn} created (uctx {uctx}, depth 2^{}, page {db_page}, slot {db_slot})",
        rnic.name(),
        cmd.depth_log2
    );
    Ok([srqn as u32, db_slot, db_page, 0])
}

/// CREATE_SRQ's srq_type, xrcdn and cqn: None for a basic SRQ (both zero), else the XRC
/// domain (any context may use the kernel's domains) and a CQ of the SRQ's context.
fn xrc_of_new_srq(st: &RnicState, cmd: &CmdCreateSrq) -> CmdResult<Option<XrcSrq>> {
    let (xrcdn, cqn) = (cmd.xrcdn.to_native(), cmd.cqn.to_native());
    match SrqType::try_from(cmd.srq_type) {
        Ok(SrqType::Basic) => {
            if xrcdn != 0 {
                return Err(bad_field(CmdCreateSrq::XRCDN_OFF));
            }
            if cqn != 0 {
                return Err(bad_field(CmdCreateSrq::CQN_OFF));
            }
            Ok(None)
        }
        Ok(SrqType::Xrc) => {
            st.objects
                .xrcds
                .get(xrcdn)
                .ok_or(bad_handle(CmdCreateSrq::XRCDN_OFF))?;
            let cq = st
                .objects
                .cqs
                .get(cqn)
                .ok_or(bad_handle(CmdCreateSrq::CQN_OFF))?;
            owned(cq.uctx, cmd.uctx.to_native(), CmdCreateSrq::CQN_OFF)?;
            Ok(Some(XrcSrq { xrcdn, cqn }))
        }
        Err(_) => Err(bad_field(CmdCreateSrq::SRQ_TYPE_OFF)),
    }
}

/// Byte offset of an srq_attr field within MODIFY_SRQ / QUERY_SRQ.
const fn attr_off(field: usize) -> usize {
    CmdModifySrq::ATTR_OFF + field
}

/// The SRQ a MODIFY_SRQ or QUERY_SRQ names, used on behalf of its `uctx`.
fn named<'a>(st: &'a mut RnicState, cmd: &CmdModifySrq) -> CmdResult<&'a mut Srq> {
    let srq = st
        .objects
        .srqs
        .get_mut(cmd.srqn.to_native())
        .ok_or(bad_handle(CmdModifySrq::SRQN_OFF))?;
    owned(srq.uctx, cmd.uctx.to_native(), CmdModifySrq::UCTX_OFF)?;
    Ok(srq)
}

pub fn modify_srq(rnic: &Rnic, st: &mut RnicState, cmd: &CmdModifySrq) -> CmdResult<[u32; 4]> {
    let srq = named(st, cmd)?;
    if cmd.out_addr.to_native() != 0 || cmd.out_len.to_native() != 0 {
        return Err(bad_field(CmdModifySrq::OUT_ADDR_OFF));
    }
    let m = cmd.attr_mask.to_native();
    if m & !srq_attr_mask::ALL != 0 {
        return Err(bad_field(CmdModifySrq::ATTR_MASK_OFF));
    }
    if m & srq_attr_mask::MAX_WR != 0 {
        // Resizing is not offered.
        return Err(CmdError::new(
            AqStatus::NotSupported,
            CmdModifySrq::ATTR_MASK_OFF,
        ));
    }
    if m & srq_attr_mask::LIMIT != 0 {
        let limit = cmd.attr.srq_limit.to_native();
        if limit > srq.ring.depth() {
            return Err(bad_field(attr_off(SrqAttr::SRQ_LIMIT_OFF)));
        }
        srq.limit = limit;
        log::debug!(
            "{}: SRQ {} limit armed at {limit}",
            rnic.name(),
            cmd.srqn.to_native()
        );
    }
    Ok([0; 4])
}

pub fn query_srq(st: &mut RnicState, mem: &RamSnapshot, cmd: &CmdModifySrq) -> CmdResult<[u32; 4]> {
    let srq = named(st, cmd)?;
    if cmd.attr_mask.to_native() != 0 {
        return Err(bad_field(CmdModifySrq::ATTR_MASK_OFF));
    }
    if let Some(at) = cmd.attr.as_slice().iter().position(|b| *b != 0) {
        // QUERY_SRQ carries no attributes: name the field the first nonzero byte is in.
        return Err(bad_field(attr_off(at / 4 * 4)));
    }
    let attr = SrqAttr {
        max_wr: srq.ring.depth().into(),
        max_sge: u32::from(srq.max_sge).into(),
        srq_limit: srq.limit.into(),
        ..Default::default()
    };
    write_out(
        mem,
        cmd.out_addr.to_native(),
        cmd.out_len.to_native(),
        &attr,
        CmdModifySrq::OUT_ADDR_OFF,
        CmdModifySrq::OUT_LEN_OFF,
    )?;
    Ok([0; 4])
}

pub fn destroy_srq(rnic: &Rnic, st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let srqn = cmd.handle.to_native();
    let srq = st
        .objects
        .srqs
        .get(srqn)
        .ok_or(bad_handle(CmdHandle::HANDLE_OFF))?;
    owned(srq.uctx, cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    // An XRC SRQ does not wait for the TGT QPs that serve it (SPEC "XRC"): a WQE one of
    // them took is lost, as on RESET, and later requests naming the SRQ fail.
    let xrc = srq.xrc.is_some();
    if !xrc && st.objects.qps.iter().any(|(_, qp)| uses(qp, srqn)) {
        return Err(busy(CmdHandle::HANDLE_OFF));
    }
    let (uctx, page, slot) = (srq.uctx, srq.db_page, srq.db_slot);
    if xrc {
        for (_, qp) in st.objects.qps.iter_mut() {
            if let (Some(s), Some(_)) = (qp.srq.as_mut(), qp.xrcdn) {
                if s.srqn == srqn {
                    s.taken = None;
                }
            }
        }
    }
    st.objects.srqs.remove(srqn);
    release_slot(st, uctx, page, slot);
    rnic.doorbells.clear_slot(page, slot);
    log::debug!("{}: SRQ {srqn} destroyed", rnic.name());
    Ok([0; 4])
}

/// A QP created with QP_FLAG_SRQ on SRQ `srqn` (XRC_TGT QPs name SRQs per message).
fn uses(qp: &crate::objects::Qp, srqn: u32) -> bool {
    qp.xrcdn.is_none() && qp.srq.is_some_and(|s| s.srqn == srqn)
}

/// CREATE_QP's flags and srqn: the SRQ the new QP of type `kind` takes its receives from,
/// or None for a QP with its own receive queue. With an SRQ every receive queue field must
/// be zero.
pub fn srq_of_new_qp(st: &RnicState, cmd: &CmdCreateQp, kind: QpType) -> CmdResult<Option<QpSrq>> {
    let flags = u32::from(cmd.flags);
    if flags & !QP_FLAG_SRQ != 0 {
        return Err(bad_field(CmdCreateQp::FLAGS_OFF));
    }
    let srqn = cmd.srqn.to_native();
    if flags & QP_FLAG_SRQ == 0 {
        return match srqn {
            0 => Ok(None),
            _ => Err(bad_field(CmdCreateQp::SRQN_OFF)),
        };
    }
    if matches!(kind, QpType::Gsi | QpType::XrcIni | QpType::XrcTgt) {
        return Err(bad_field(CmdCreateQp::FLAGS_OFF));
    }
    let unused_rq = [
        (cmd.rq_depth_log2 == 0, CmdCreateQp::RQ_DEPTH_LOG2_OFF),
        (cmd.rq_wqe_shift == 0, CmdCreateQp::RQ_WQE_SHIFT_OFF),
        (cmd.max_recv_sge == 0, CmdCreateQp::MAX_RECV_SGE_OFF),
        (cmd.rq_ring == PageList::default(), CmdCreateQp::RQ_RING_OFF),
    ];
    if let Some((_, at)) = unused_rq.iter().find(|(zero, _)| !zero) {
        return Err(bad_field(*at));
    }
    let srq = st
        .objects
        .srqs
        .get(srqn)
        .ok_or(bad_handle(CmdCreateQp::SRQN_OFF))?;
    if srq.uctx != cmd.uctx.to_native() {
        return Err(super::error::permission(CmdCreateQp::SRQN_OFF));
    }
    if srq.xrc.is_some() {
        // XRC SRQs serve XRC_TGT QPs, through each request's xrc_seg.
        return Err(bad_field(CmdCreateQp::SRQN_OFF));
    }
    Ok(Some(QpSrq::new(srqn)))
}
