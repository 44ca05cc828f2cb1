//! Datagram QPs (UD and GSI) as a driver sets them up: the UD state machine to RTS with a
//! Q_Key, address vectors for IB (LID) and RoCE (GRH) peers, and a datagram end with its
//! own CQs.

use vrnic_hw::*;

use super::commands::{mask, PeerAddr};
use super::driver::FakeDriver;
use super::queues::{Cq, Qp, QpCaps};

/// The Q_Key the tests' UD QPs use.
pub const TEST_QKEY: u32 = 0x1111_2222;

/// A datagram QP with its own CQs, of context `uctx` (KERNEL_UCTX for a GSI QP).
#[derive(Debug)]
pub struct UdEnd {
    pub uctx: u32,
    pub pd: u32,
    pub send_cq: Cq,
    pub recv_cq: Cq,
    pub qp: Qp,
}

impl FakeDriver {
    /// A UD QP (or, with `QpType::Gsi`, the device's GSI QP in the kernel context) brought
    /// to RTS with Q_Key `qkey`.
    pub fn ud_end(&mut self, qp_type: QpType, qkey: u32) -> UdEnd {
        self.ud_end_with(QpCaps::of(qp_type), qkey, 6)
    }

    /// `ud_end` with queue sizes `caps` and CQs of 2^cq_depth_log2 entries.
    pub fn ud_end_with(&mut self, caps: QpCaps, qkey: u32, cq_depth_log2: u32) -> UdEnd {
        let qp_type = caps.qp_type;
        let uctx = match qp_type {
            QpType::Gsi => KERNEL_UCTX,
            _ => self.alloc_uctx(),
        };
        let pd = self.alloc_pd(uctx);
        let send_cq = self.create_cq(uctx, cq_depth_log2);
        let recv_cq = self.create_cq(uctx, cq_depth_log2);
        let qp = self.create_qp(uctx, pd, &send_cq, &recv_cq, caps);
        self.ud_to_rts(&qp, qkey);
        UdEnd {
            uctx,
            pd,
            send_cq,
            recv_cq,
            qp,
        }
    }

    /// RESET -> INIT (P_Key index, port, Q_Key) -> RTR -> RTS (SQ PSN).
    pub fn ud_to_rts(&mut self, qp: &Qp, qkey: u32) {
        use QpAttrMask::*;
        let init = QpAttr {
            qp_state: QpState::Init.into(),
            port_num: PORT_NUM as u8,
            qkey: qkey.into(),
            ..Default::default()
        };
        self.modify_qp(qp, mask(&[State, PkeyIndex, Port, Qkey]), init)
            .ok();
        let rtr = QpAttr {
            qp_state: QpState::Rtr.into(),
            ..Default::default()
        };
        self.modify_qp(qp, mask(&[State]), rtr).ok();
        let rts = QpAttr {
            qp_state: QpState::Rts.into(),
            sq_psn: 0x42.into(),
            ..Default::default()
        };
        self.modify_qp(qp, mask(&[State, SqPsn]), rts).ok();
    }
}

/// An address vector to QP `remote_qpn` of `peer` with `qkey` (a GRH for GID peers; IB
/// peers get none unless `ib_grh` names the destination GID).
pub fn ud_av(peer: PeerAddr, remote_qpn: u32, qkey: u32) -> UdAv {
    let mut av = UdAv {
        remote_qpn: remote_qpn.into(),
        remote_qkey: qkey.into(),
        sl: 3,
        ..Default::default()
    };
    match peer {
        PeerAddr::Lid(lid) => av.dlid = lid.into(),
        PeerAddr::Gid {
            dgid,
            sgid_index,
            dmac,
        } => {
            av.is_global = 1;
            av.sgid_index = sgid_index;
            av.dgid = dgid;
            av.dmac = dmac;
            av.hop_limit = 64;
            av.traffic_class = 0x20;
            av.flow_label = 0x12345.into();
        }
    }
    av
}
