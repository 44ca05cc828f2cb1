//! Malformed admin answers: completions with a wrong command id, an unknown status, or a
//! created object's handle out of range or already in use; QUERY_DEVICE and QUERY_PORT
//! answers with nonsense values.

use super::{Class, Hostile, Kind};
use crate::objects::Objects;
use vrnic_hw::{
    AqCompletion, AqOpcode, AqStatus, DeviceAttr, PortAttr, DB_PAGES, DB_SLOTS_PER_PAGE,
};

impl Hostile {
    /// Corrupts the completion about to be published (called with the device's objects,
    /// the command's effect included).
    pub fn admin_completion(&self, objects: &Objects, c: &mut AqCompletion) {
        let Some(mut st) = self.active() else { return };
        let Some(kind) = st.draw(Class::Admin) else {
            return;
        };
        let rng = &mut st.rng;
        let ok = c.status == u8::from(AqStatus::Success);
        let opcode = AqOpcode::try_from(c.opcode).ok();
        let creates = ok && opcode.is_some_and(creates_handle);
        let before = (c.cmd_id.to_native(), c.status, c.result0.to_native());
        match kind {
            Kind::AdminCmdId => {
                c.cmd_id = c
                    .cmd_id
                    .to_native()
                    .wrapping_add(rng.range(1, 0xffff))
                    .into();
            }
            Kind::AdminStatus => {
                // aq_status ends at INTERNAL (11).
                c.status = rng.range(12, 0xff) as u8;
            }
            Kind::AdminHandleRange if creates => match (rng.below(3), opcode) {
                (
                    1,
                    Some(
                        AqOpcode::CreateCq
                        | AqOpcode::CreateEq
                        | AqOpcode::CreateQp
                        | AqOpcode::CreateSrq,
                    ),
                ) => {
                    c.result1 = (DB_SLOTS_PER_PAGE + rng.below(0x10000) as u32).into();
                }
                (
                    2,
                    Some(
                        AqOpcode::CreateCq
                        | AqOpcode::CreateEq
                        | AqOpcode::CreateQp
                        | AqOpcode::CreateSrq
                        | AqOpcode::AllocUctx,
                    ),
                ) => {
                    let field = if opcode == Some(AqOpcode::AllocUctx) {
                        &mut c.result1
                    } else {
                        &mut c.result2
                    };
                    *field = (DB_PAGES + rng.below(0x10000) as u32).into();
                }
                // Above every table and key space (keys are below 2^22, QPNs below 2^24).
                _ => c.result0 = (0xff00_0000 | rng.below(0x100_0000) as u32).into(),
            },
            Kind::AdminHandleInUse if creates => {
                let new = c.result0.to_native();
                let in_use: Vec<u32> = match opcode {
                    Some(AqOpcode::AllocUctx) => objects.uctxs.iter().map(|(n, _)| n).collect(),
                    Some(AqOpcode::AllocPd) => objects.pds.iter().map(|(n, _)| n).collect(),
                    Some(AqOpcode::CreateCq) => objects.cqs.iter().map(|(n, _)| n).collect(),
                    Some(AqOpcode::CreateEq) => objects.eqs.iter().map(|(n, _)| n).collect(),
                    Some(AqOpcode::CreateQp) => objects.qps.iter().map(|(_, q)| q.qpn).collect(),
                    Some(AqOpcode::CreateSrq) => objects.srqs.iter().map(|(n, _)| n).collect(),
                    Some(AqOpcode::AllocXrcd) => objects.xrcds.iter().map(|(n, _)| n).collect(),
                    _ => Vec::new(),
                };
                let others: Vec<u32> = in_use.into_iter().filter(|&n| n != new).collect();
                let Some(&other) = rng.pick(&others) else {
                    return;
                };
                c.result0 = other.into();
            }
            _ => return,
        }
        st.written(
            &self.device,
            kind,
            format_args!(
                "completion of opcode {:#x}: cmd_id {} status {} result0 {:#x} result1 {:#x} result2 {:#x} (was cmd_id {} status {} result0 {:#x})",
                c.opcode,
                c.cmd_id.to_native(),
                c.status,
                c.result0.to_native(),
                c.result1.to_native(),
                c.result2.to_native(),
                before.0,
                before.1,
                before.2
            ),
        );
    }

    /// The QUERY_DEVICE answer to write instead of `a`.
    pub fn device_attr(&self, mut a: DeviceAttr) -> DeviceAttr {
        let Some(mut st) = self.active() else {
            return a;
        };
        if st.draw(Class::Attr) != Some(Kind::AttrDevice) {
            return a;
        }
        let rng = &mut st.rng;
        let value = if rng.below(2) == 0 { 0 } else { u32::MAX };
        let fields: [(&str, &mut vm_memory::Le32); 18] = [
            ("max_qp", &mut a.max_qp),
            ("max_qp_wr", &mut a.max_qp_wr),
            ("max_sge", &mut a.max_sge),
            ("max_cq", &mut a.max_cq),
            ("max_cqe", &mut a.max_cqe),
            ("max_mr", &mut a.max_mr),
            ("max_pd", &mut a.max_pd),
            ("max_qp_rd_atom", &mut a.max_qp_rd_atom),
            ("max_qp_init_rd_atom", &mut a.max_qp_init_rd_atom),
            ("max_inline", &mut a.max_inline),
            ("max_msg_size", &mut a.max_msg_size),
            ("max_eq", &mut a.max_eq),
            ("max_uctx", &mut a.max_uctx),
            ("num_comp_vectors", &mut a.num_comp_vectors),
            ("max_srq", &mut a.max_srq),
            ("max_fast_reg_pages", &mut a.max_fast_reg_pages),
            ("max_mw", &mut a.max_mw),
            ("max_xrcd", &mut a.max_xrcd),
        ];
        let i = rng.below(fields.len() as u64 + 2) as usize;
        let name = match fields.into_iter().nth(i) {
            Some((name, field)) => {
                *field = value.into();
                name
            }
            None if i == 18 => {
                a.phys_port_cnt = if value == 0 { 0 } else { 0xff };
                "phys_port_cnt"
            }
            None => {
                a.page_size_cap = u64::from(value).into();
                "page_size_cap"
            }
        };
        st.written(
            &self.device,
            Kind::AttrDevice,
            format_args!("device_attr.{name} = {value:#x}"),
        );
        a
    }

    /// The QUERY_PORT answer to write instead of `a`.
    pub fn port_attr(&self, mut a: PortAttr) -> PortAttr {
        let Some(mut st) = self.active() else {
            return a;
        };
        if st.draw(Class::Attr) != Some(Kind::AttrPort) {
            return a;
        }
        let rng = &mut st.rng;
        let (name, value) = match rng.below(7) {
            0 => {
                a.state = rng.range(6, 0xff) as u8;
                ("state", u32::from(a.state))
            }
            1 => {
                a.max_mtu = [0, rng.range(6, 0xff)][rng.below(2) as usize] as u8;
                ("max_mtu", u32::from(a.max_mtu))
            }
            2 => {
                a.active_mtu = rng.range(6, 0xff) as u8;
                ("active_mtu", u32::from(a.active_mtu))
            }
            3 => {
                a.gid_tbl_len = [0u16, 0xffff][rng.below(2) as usize].into();
                ("gid_tbl_len", u32::from(a.gid_tbl_len.to_native()))
            }
            4 => {
                a.pkey_tbl_len = [0u16, 0xffff][rng.below(2) as usize].into();
                ("pkey_tbl_len", u32::from(a.pkey_tbl_len.to_native()))
            }
            5 => {
                a.max_msg_sz = 0.into();
                ("max_msg_sz", 0)
            }
            _ => {
                a.link_layer = rng.range(3, 0xff) as u8;
                ("link_layer", u32::from(a.link_layer))
            }
        };
        st.written(
            &self.device,
            Kind::AttrPort,
            format_args!("port_attr.{name} = {value:#x}"),
        );
        a
    }
}

/// Commands whose result0 is the handle of an object they created.
fn creates_handle(op: AqOpcode) -> bool {
    use AqOpcode::*;
    matches!(
        op,
        AllocUctx
            | AllocPd
            | RegMr
            | CreateCq
            | CreateEq
            | CreateQp
            | CreateSrq
            | AllocMr
            | AllocMw
            | AllocXrcd
    )
}
