//! XRC as a driver sees it (SPEC "XRC"): domains of the kernel context, XRC SRQs that
//! complete on a CQ of their own, XRC_INI QPs whose send WQEs carry an xrc_seg, and
//! XRC_TGT QPs of the kernel with no queues and no doorbell slot.

use vrnic_hw::*;

use super::commands::{cmd_handle, header, Layout};
use super::driver::{AdminResult, FakeDriver};
use super::queues::{Cq, Qp, QpCaps, Ring};
use super::srq::Srq;

/// The queue sizes of an XRC_INI QP: no receive queue.
pub fn xrc_ini_caps() -> QpCaps {
    QpCaps {
        rq_depth_log2: 0,
        max_recv_sge: 0,
        ..QpCaps::of(QpType::XrcIni)
    }
}

/// A ring that is not there (the queues an XRC QP lacks).
fn no_ring() -> Ring {
    Ring {
        pages: Vec::new(),
        depth_log2: 0,
        entry_shift: 0,
        page_list: PageList::default(),
    }
}

impl FakeDriver {
    pub fn alloc_xrcd_cmd(uctx: u32) -> CmdHandle {
        cmd_handle(AqOpcode::AllocXrcd, 0, uctx)
    }

    /// ALLOC_XRCD by the kernel context.
    pub fn alloc_xrcd(&mut self) -> u32 {
        self.admin(&Self::alloc_xrcd_cmd(KERNEL_UCTX)).ok()[0]
    }

    pub fn dealloc_xrcd(&mut self, xrcdn: u32) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DeallocXrcd, xrcdn, KERNEL_UCTX))
    }

    /// CREATE_SRQ of an XRC SRQ of `uctx` in domain `xrcdn`, completing on `cq`.
    pub fn create_xrc_srq_cmd(
        &mut self,
        uctx: u32,
        pd: u32,
        xrcdn: u32,
        cq: &Cq,
        depth_log2: u32,
        max_sge: u8,
    ) -> (CmdCreateSrq, Ring) {
        let (mut cmd, ring) = self.create_srq_cmd(uctx, pd, depth_log2, max_sge);
        cmd.srq_type = SrqType::Xrc.into();
        cmd.xrcdn = xrcdn.into();
        cmd.cqn = cq.cqn.into();
        (cmd, ring)
    }

    pub fn create_xrc_srq(
        &mut self,
        uctx: u32,
        pd: u32,
        xrcdn: u32,
        cq: &Cq,
        depth_log2: u32,
        max_sge: u8,
    ) -> Srq {
        let (cmd, ring) = self.create_xrc_srq_cmd(uctx, pd, xrcdn, cq, depth_log2, max_sge);
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

    /// CREATE_QP of an XRC_TGT QP: only uctx (the kernel's), qp_type and xrcdn.
    pub fn create_xrc_tgt_cmd(xrcdn: u32) -> CmdCreateQp {
        CmdCreateQp {
            hdr: header(AqOpcode::CreateQp),
            uctx: KERNEL_UCTX.into(),
            qp_type: QpType::XrcTgt.into(),
            xrcdn: xrcdn.into(),
            ..Default::default()
        }
    }

    /// An XRC_TGT QP in domain `xrcdn` (it has no rings: its `Qp` only names it).
    pub fn create_xrc_tgt(&mut self, xrcdn: u32) -> Qp {
        let r = self.admin(&Self::create_xrc_tgt_cmd(xrcdn)).ok();
        assert_eq!((r[1], r[2]), (0, 0), "an XRC_TGT QP has no doorbell slot");
        Qp {
            qpn: r[0],
            uctx: KERNEL_UCTX,
            pd: 0,
            page: 0,
            slot: 0,
            sq: no_ring(),
            rq: no_ring(),
            sq_pi: 0,
            rq_pi: 0,
            caps: QpCaps::of(QpType::XrcTgt),
            send_cqn: 0,
            recv_cqn: 0,
        }
    }

    /// CREATE_QP of an XRC_INI QP of `caps` (send sizes; see `xrc_ini_caps`) sending to
    /// `send_cq` (receive fields all zero).
    pub fn create_xrc_ini_cmd(
        &mut self,
        uctx: u32,
        pd: u32,
        send_cq: &Cq,
        caps: QpCaps,
    ) -> (CmdCreateQp, Qp) {
        let sq = self.alloc_ring(caps.sq_depth_log2, caps.sq_wqe_shift(), Layout::Scattered);
        let cmd = CmdCreateQp {
            hdr: header(AqOpcode::CreateQp),
            uctx: uctx.into(),
            pdn: pd.into(),
            send_cqn: send_cq.cqn.into(),
            qp_type: QpType::XrcIni.into(),
            sq_depth_log2: caps.sq_depth_log2 as u8,
            sq_wqe_shift: caps.sq_wqe_shift() as u8,
            max_send_sge: caps.max_send_sge,
            max_inline: caps.max_inline.into(),
            sq_ring: sq.page_list,
            ..Default::default()
        };
        let qp = Qp {
            qpn: 0,
            uctx,
            pd,
            page: 0,
            slot: 0,
            sq,
            rq: no_ring(),
            sq_pi: 0,
            rq_pi: 0,
            caps,
            send_cqn: send_cq.cqn,
            recv_cqn: 0,
        };
        (cmd, qp)
    }

    pub fn create_xrc_ini(&mut self, uctx: u32, pd: u32, send_cq: &Cq) -> Qp {
        self.create_xrc_ini_with(uctx, pd, send_cq, xrc_ini_caps())
    }

    pub fn create_xrc_ini_with(&mut self, uctx: u32, pd: u32, send_cq: &Cq, caps: QpCaps) -> Qp {
        let (cmd, mut qp) = self.create_xrc_ini_cmd(uctx, pd, send_cq, caps);
        let [qpn, slot, page, _] = self.admin(&cmd).ok();
        qp.qpn = qpn;
        qp.page = page;
        qp.slot = slot;
        qp
    }
}
