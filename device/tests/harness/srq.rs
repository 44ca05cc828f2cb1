//! Shared receive queues as a driver sees them (SPEC "Shared receive queues"): CREATE_SRQ
//! and its siblings, posting receive WQEs to an SRQ (a producer index in its doorbell slot,
//! no flag, no kick), and QPs that take their receives from one.

use vrnic_hw::*;

use super::commands::{cmd_handle, header, Layout};
use super::driver::{AdminResult, FakeDriver};
use super::queues::{Cq, Qp, QpCaps, RecvWr, Ring};

/// A shared receive queue of context `uctx`.
#[derive(Debug, Clone)]
pub struct Srq {
    pub srqn: u32,
    pub uctx: u32,
    pub pd: u32,
    /// Doorbell page (of `uctx`) and slot, as CREATE_SRQ returned them.
    pub page: u32,
    pub slot: u32,
    pub ring: Ring,
    /// Free-running producer index.
    pub pi: u32,
}

/// The receive WQE size for `max_sge` SGEs.
pub fn srq_wqe_shift(max_sge: u8) -> u32 {
    let need = RecvWqeHeader::SIZE + Sge::SIZE * usize::from(max_sge);
    (RECV_WQE_SHIFT_MIN..=RECV_WQE_SHIFT_MAX)
        .find(|s| need <= 1 << s)
        .expect("receive WQE too large")
}

impl FakeDriver {
    /// CREATE_SRQ of 2^depth_log2 WQEs holding `max_sge` SGEs, and its ring.
    pub fn create_srq_cmd(
        &mut self,
        uctx: u32,
        pd: u32,
        depth_log2: u32,
        max_sge: u8,
    ) -> (CmdCreateSrq, Ring) {
        let shift = srq_wqe_shift(max_sge);
        let ring = self.alloc_ring(depth_log2, shift, Layout::Scattered);
        let cmd = CmdCreateSrq {
            hdr: header(AqOpcode::CreateSrq),
            uctx: uctx.into(),
            pdn: pd.into(),
            depth_log2: depth_log2 as u8,
            wqe_shift: shift as u8,
            max_sge,
            ring: ring.page_list,
            ..Default::default()
        };
        (cmd, ring)
    }

    pub fn create_srq(&mut self, uctx: u32, pd: u32, depth_log2: u32, max_sge: u8) -> Srq {
        let (cmd, ring) = self.create_srq_cmd(uctx, pd, depth_log2, max_sge);
        let [srqn, slot, page, _] = self.admin(&cmd).ok();
        Srq {
            srqn,
            uctx,
            pd,
            page,
            slot,
            ring,
            pi: 0,
        }
    }

    pub fn modify_srq_cmd(srq: &Srq, attr_mask: u32, limit: u32) -> CmdModifySrq {
        CmdModifySrq {
            hdr: header(AqOpcode::ModifySrq),
            srqn: srq.srqn.into(),
            attr_mask: attr_mask.into(),
            attr: SrqAttr {
                srq_limit: limit.into(),
                ..Default::default()
            },
            uctx: srq.uctx.into(),
            ..Default::default()
        }
    }

    /// MODIFY_SRQ with LIMIT: arms the limit event at `limit` (0 disarms).
    pub fn arm_srq_limit(&mut self, srq: &Srq, limit: u32) -> AdminResult {
        self.admin(&Self::modify_srq_cmd(srq, srq_attr_mask::LIMIT, limit))
    }

    pub fn query_srq_cmd(srq: &Srq, out: u64, out_len: u32) -> CmdModifySrq {
        CmdModifySrq {
            hdr: header(AqOpcode::QuerySrq),
            srqn: srq.srqn.into(),
            out_addr: out.into(),
            out_len: out_len.into(),
            uctx: srq.uctx.into(),
            ..Default::default()
        }
    }

    pub fn query_srq(&mut self, srq: &Srq) -> SrqAttr {
        let out = self.mem.alloc(SrqAttr::SIZE as u64, 8);
        self.admin(&Self::query_srq_cmd(srq, out, SrqAttr::SIZE as u32))
            .ok();
        self.mem.read_obj(out)
    }

    pub fn destroy_srq(&mut self, srq: &Srq) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DestroySrq, srq.srqn, srq.uctx))
    }

    /// Writes the WQEs at the SRQ's producer index, then stores the new index in its
    /// doorbell slot (release; an SRQ needs no flag and no kick).
    pub fn post_srq_recvs(&mut self, srq: &mut Srq, wrs: &[RecvWr]) {
        let stride = 1usize << srq.ring.entry_shift;
        for wr in wrs {
            let mut wqe = wr.encode();
            assert!(wqe.len() <= stride, "WQE larger than the SRQ's WQE size");
            wqe.resize(stride, 0);
            self.mem.write(srq.ring.entry(srq.pi), &wqe);
            srq.pi = srq.pi.wrapping_add(1);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.db_store(srq.page, srq.slot, 0, srq.pi);
    }

    pub fn post_srq_recv(&mut self, srq: &mut Srq, wr: &RecvWr) {
        self.post_srq_recvs(srq, std::slice::from_ref(wr));
    }

    /// CREATE_QP for a QP taking its receives from `srq`: QP_FLAG_SRQ, srqn, and every
    /// receive queue field zero.
    pub fn create_qp_on_srq_cmd(
        &mut self,
        uctx: u32,
        pd: u32,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        srq: &Srq,
    ) -> (CmdCreateQp, Qp) {
        let caps = QpCaps {
            rq_depth_log2: 1,
            max_recv_sge: 1,
            ..caps
        };
        let (mut cmd, qp) = self.create_qp_cmd(uctx, pd, send_cq, recv_cq, caps);
        cmd.flags = QP_FLAG_SRQ as u8;
        cmd.srqn = srq.srqn.into();
        cmd.rq_depth_log2 = 0;
        cmd.rq_wqe_shift = 0;
        cmd.max_recv_sge = 0;
        cmd.rq_ring = PageList::default();
        (cmd, qp)
    }

    pub fn create_qp_on_srq(
        &mut self,
        uctx: u32,
        pd: u32,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        srq: &Srq,
    ) -> Qp {
        let (cmd, mut qp) = self.create_qp_on_srq_cmd(uctx, pd, send_cq, recv_cq, caps, srq);
        let [qpn, slot, page, _] = self.admin(&cmd).ok();
        qp.qpn = qpn;
        qp.page = page;
        qp.slot = slot;
        qp
    }
}

/// The srq_attr QUERY_SRQ reports, as a tuple (max_wr, max_sge, srq_limit).
pub fn srq_attr(a: &SrqAttr) -> (u32, u32, u32) {
    (
        a.max_wr.to_native(),
        a.max_sge.to_native(),
        a.srq_limit.to_native(),
    )
}
