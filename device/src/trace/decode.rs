//! Decoding what the device handles into event bodies, with hw-spec's names: admin
//! commands and their completions, send WQEs, CQEs, EQEs. Runs only while someone traces.

use super::event::{Body, Name};
use crate::guest_memory::RamSnapshot;
use std::collections::BTreeMap;
use vm_memory::ByteValued;
use vrnic_hw::*;

/// Copies the leading bytes of `bytes` into a `T` (short input leaves zeros).
fn parse<T: ByteValued + Default>(bytes: &[u8]) -> T {
    let mut value = T::default();
    let dst = value.as_mut_slice();
    let n = dst.len().min(bytes.len());
    dst[..n].copy_from_slice(&bytes[..n]);
    value
}

fn number(value: u64) -> Name {
    Name::Owned(format!("{value:#x}"))
}

/// The fields of an admin command that name objects or sizes, and the QP it concerns.
fn admin_fields(opcode: AqOpcode, cmd: &[u8]) -> (BTreeMap<Name, u64>, Option<u32>) {
    use AqOpcode::*;
    let mut f: BTreeMap<Name, u64> = BTreeMap::new();
    let mut put = |name: &'static str, value: u64| {
        f.insert(Name::Borrowed(name), value);
    };
    let mut qpn = None;
    match opcode {
        QueryDevice | QueryPort => {
            let c: CmdQuery = parse(cmd);
            put("out_len", c.out_len.to_native().into());
            put("port", c.port.into());
        }
        AllocUctx | AllocPd | AllocXrcd => {
            let c: CmdHandle = parse(cmd);
            put("uctx", c.uctx.to_native().into());
        }
        DeallocUctx | DeallocPd | DeregMr | DestroyCq | DestroyEq | DestroyQp | DestroySrq
        | DeallocMw | DeallocXrcd => {
            let c: CmdHandle = parse(cmd);
            put("handle", c.handle.to_native().into());
            put("uctx", c.uctx.to_native().into());
            if opcode == DestroyQp {
                qpn = Some(c.handle.to_native());
            }
        }
        RegMr => {
            let c: CmdRegMr = parse(cmd);
            put("pdn", c.pdn.to_native().into());
            put("access", c.access.to_native().into());
            put("iova", c.iova.to_native());
            put("length", c.length.to_native());
            put("uctx", c.uctx.to_native().into());
        }
        ReregMr => {
            let c: CmdReregMr = parse(cmd);
            put("mkey", c.mkey.to_native().into());
            put("flags", c.flags.to_native().into());
            put("pdn", c.pdn.to_native().into());
            put("iova", c.iova.to_native());
            put("length", c.length.to_native());
        }
        CreateCq => {
            let c: CmdCreateCq = parse(cmd);
            put("uctx", c.uctx.to_native().into());
            put("eqn", c.eqn.to_native().into());
            put("depth_log2", c.depth_log2.into());
        }
        ResizeCq => {
            let c: CmdResizeCq = parse(cmd);
            put("cqn", c.cqn.to_native().into());
            put("depth_log2", c.depth_log2.into());
        }
        CreateEq => {
            let c: CmdCreateEq = parse(cmd);
            put("depth_log2", c.depth_log2.into());
            put("flags", c.flags.into());
            put("msix_vector", c.msix_vector.to_native().into());
        }
        CreateQp => {
            let c: CmdCreateQp = parse(cmd);
            put("uctx", c.uctx.to_native().into());
            put("pdn", c.pdn.to_native().into());
            put("send_cqn", c.send_cqn.to_native().into());
            put("recv_cqn", c.recv_cqn.to_native().into());
            put("qp_type", c.qp_type.into());
            put("sq_depth_log2", c.sq_depth_log2.into());
            put("rq_depth_log2", c.rq_depth_log2.into());
            put("srqn", c.srqn.to_native().into());
        }
        ModifyQp | QueryQp => {
            let c: CmdModifyQp = parse(cmd);
            qpn = Some(c.qpn.to_native());
            put("qpn", c.qpn.to_native().into());
            if opcode == ModifyQp {
                put("attr_mask", c.attr_mask.to_native().into());
                if c.attr_mask.to_native() & u32::from(QpAttrMask::State) != 0 {
                    put("qp_state", c.attr.qp_state.into());
                }
            }
        }
        SetGid => {
            let c: CmdSetGid = parse(cmd);
            put("index", c.index.into());
            put("valid", c.valid.into());
        }
        CreateSrq => {
            let c: CmdCreateSrq = parse(cmd);
            put("uctx", c.uctx.to_native().into());
            put("pdn", c.pdn.to_native().into());
            put("depth_log2", c.depth_log2.into());
        }
        ModifySrq | QuerySrq => {
            let c: CmdModifySrq = parse(cmd);
            put("srqn", c.srqn.to_native().into());
            put("attr_mask", c.attr_mask.to_native().into());
        }
        AllocMr => {
            let c: CmdAllocMr = parse(cmd);
            put("pdn", c.pdn.to_native().into());
            put("max_pages", c.max_pages.to_native().into());
        }
        AllocMw => {
            let c: CmdAllocMw = parse(cmd);
            put("pdn", c.pdn.to_native().into());
            put("mw_type", c.mw_type.into());
        }
        QueryCounters => {
            let c: CmdQueryCounters = parse(cmd);
            put("scope", c.scope.into());
            put("qpn", c.qpn.to_native().into());
            if c.scope == u8::from(CounterScope::Qp) {
                qpn = Some(c.qpn.to_native());
            }
        }
    }
    (f, qpn)
}

/// An admin command and the completion the device published for it: (QP, body).
pub fn admin(cmd: &[u8], done: &AqCompletion, duration_ns: u64) -> (Option<u32>, Body) {
    let hdr: AqHeader = parse(cmd);
    let status = AqStatus::try_from(done.status);
    let ok = status == Ok(AqStatus::Success);
    let results = [done.result0, done.result1, done.result2, done.result3].map(|r| r.to_native());
    let (fields, mut qpn, opcode) = match AqOpcode::try_from(hdr.opcode) {
        Ok(op) => {
            let (fields, qpn) = admin_fields(op, cmd);
            (fields, qpn, Name::Borrowed(op.name()))
        }
        Err(_) => (BTreeMap::new(), None, number(hdr.opcode.into())),
    };
    if ok && hdr.opcode == u8::from(AqOpcode::CreateQp) {
        qpn = Some(results[0]);
    }
    let body = Body::Admin {
        opcode,
        cmd_id: hdr.cmd_id.to_native(),
        fields,
        status: status.map_or_else(|_| number(done.status.into()), |s| s.name().into()),
        results: if ok { results.to_vec() } else { Vec::new() },
        duration_ns,
    };
    (qpn, body)
}

/// Where a WQE's SGEs start: after the header, the ud_av (datagrams) or the xrc_seg.
fn payload_offset(kind: QpType) -> u64 {
    match kind {
        QpType::Ud | QpType::Gsi => u64::from(UD_PAYLOAD_OFFSET),
        QpType::XrcIni => u64::from(XRC_PAYLOAD_OFFSET),
        _ => SendWqeHeader::SIZE as u64,
    }
}

fn remote(opcode: Result<WrOpcode, ()>) -> bool {
    use WrOpcode::*;
    matches!(
        opcode,
        Ok(RdmaWrite | RdmaWriteWithImm | RdmaRead | AtomicCmpAndSwp | AtomicFetchAndAdd)
    )
}

/// A send WQE at `addr` of a QP of `kind`, taken at free-running `index`.
pub fn wqe(mem: &RamSnapshot, addr: u64, w: &SendWqeHeader, kind: QpType, index: u32) -> Body {
    let opcode = WrOpcode::try_from(w.opcode).map_err(|_| ());
    let flags = SendFlags::ALL
        .iter()
        .filter(|f| w.flags & u8::from(**f) != 0)
        .map(|f| Name::Borrowed(f.name()))
        .collect();
    let length = if w.flags & u8::from(SendFlags::Inline) != 0 {
        u64::from(w.inline_len.to_native())
    } else {
        let first = addr + payload_offset(kind);
        (0..u64::from(w.num_sge))
            .filter_map(|i| mem.read_obj::<Sge>(first + i * Sge::SIZE as u64).ok())
            .map(|s| u64::from(s.length.to_native()))
            .sum()
    };
    let remote = remote(opcode);
    Body::Wqe {
        index,
        opcode: opcode.map_or_else(|_| number(w.opcode.into()), |o| o.name().into()),
        flags,
        wr_id: w.wr_id.to_native(),
        length,
        sges: w.num_sge,
        remote_addr: remote.then(|| w.remote_addr.to_native()),
        rkey: remote.then(|| w.rkey.to_native()),
    }
}

fn named<T: TryFrom<u8>>(value: u8, name: impl Fn(T) -> &'static str) -> Name {
    T::try_from(value).map_or_else(|_| number(value.into()), |v| name(v).into())
}

/// A CQE written to CQ `cqn`.
pub fn cqe(cqn: u32, c: &Cqe) -> Body {
    Body::Cqe {
        cqn,
        wqe_index: c.wqe_index.to_native(),
        opcode: named(c.opcode, WcOpcode::name),
        status: named(c.status, WcStatus::name),
        byte_len: c.byte_len.to_native(),
        vendor_err: named(c.vendor_err, VendorErr::name),
        wr_id: c.wr_id.to_native(),
    }
}

/// The QP an event of `event_type` about object `obj` concerns.
pub fn eqe_qpn(event_type: u8, obj: u32) -> Option<u32> {
    use EventType::*;
    matches!(
        EventType::try_from(event_type),
        Ok(QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | QpLastWqeReached)
    )
    .then_some(obj)
}

/// An EQE written to EQ `eqn`.
pub fn eqe(eqn: u32, e: &Eqe) -> Body {
    Body::Eqe {
        eqn,
        event: named(e.event_type, EventType::name),
        obj: e.obj.to_native(),
        data: e.data.to_native(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admin_command_is_decoded_with_its_hw_spec_names_and_results() {
        let cmd = CmdModifyQp {
            hdr: AqHeader {
                opcode: AqOpcode::ModifyQp.into(),
                cmd_id: 9.into(),
                ..Default::default()
            },
            qpn: 0x10001.into(),
            attr_mask: u32::from(QpAttrMask::State).into(),
            attr: QpAttr {
                qp_state: QpState::Init.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let done = AqCompletion {
            status: AqStatus::BadState.into(),
            ..Default::default()
        };
        let (qpn, body) = admin(cmd.as_slice(), &done, 5);
        assert_eq!(qpn, Some(0x10001));
        let Body::Admin {
            opcode,
            cmd_id,
            fields,
            status,
            results,
            duration_ns,
        } = body
        else {
            panic!("not an admin event: {body:?}")
        };
        assert_eq!((opcode.as_ref(), cmd_id), ("MODIFY_QP", 9));
        assert_eq!(status, AqStatus::BadState.name());
        assert_eq!(fields.get("qpn"), Some(&0x10001));
        assert_eq!(
            fields.get("qp_state"),
            Some(&u64::from(u8::from(QpState::Init)))
        );
        assert!(results.is_empty(), "a failed command has no results");
        assert_eq!(duration_ns, 5);
    }

    #[test]
    fn an_unknown_opcode_is_shown_as_its_number() {
        let mut cmd = [0u8; 128];
        cmd[0] = 0xee;
        let done = AqCompletion {
            status: AqStatus::BadOpcode.into(),
            ..Default::default()
        };
        let (_, body) = admin(&cmd, &done, 0);
        assert!(matches!(body, Body::Admin { opcode, .. } if opcode == "0xee"));
    }
}
