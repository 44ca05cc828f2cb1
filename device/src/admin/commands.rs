//! Decoding and dispatch of admin commands, and the small ones: queries, contexts, PDs.

use super::error::{
    bad_field, bad_handle, bad_size, busy, no_resources, permission, CmdError, CmdResult,
};
use super::prefetch::PageListReads;
use crate::guest_memory::RamSnapshot;
use crate::objects::Pd;
use crate::rnic::{Rnic, RnicState};
use vm_memory::ByteValued;
use vrnic_hw::*;

/// Runs one command and returns its completion (never fails as a whole) and whether the
/// completion must wait for transfers in flight (the command revoked access to memory).
pub fn execute(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    cmd: &[u8],
    reads: &mut PageListReads,
) -> (AqCompletion, bool) {
    let hdr: AqHeader = parse(cmd);
    let opcode = AqOpcode::try_from(hdr.opcode);
    let outcome = match opcode {
        Ok(opcode) => run(rnic, st, mem, reads, opcode, cmd),
        Err(_) => Err(CmdError::new(AqStatus::BadOpcode, AqHeader::OPCODE_OFF)),
    };
    match &outcome {
        Ok(r) => log::trace!(
            "{}: admin {:#x} id {} -> ok {r:x?}",
            rnic.name(),
            hdr.opcode,
            hdr.cmd_id.to_native()
        ),
        Err(e) => log::debug!(
            "{}: admin {:#x} id {} -> {e}",
            rnic.name(),
            hdr.opcode,
            hdr.cmd_id.to_native()
        ),
    }
    if let Err(
        e @ CmdError {
            rule: Some(rule), ..
        },
    ) = &outcome
    {
        let (op, id) = (hdr.opcode, hdr.cmd_id.to_native());
        crate::rnic::contract::report(rnic, st, *rule, format_args!("admin {op:#x} id {id}: {e}"));
    }
    let revokes = outcome.is_ok()
        && matches!(
            opcode,
            Ok(AqOpcode::DeregMr
                | AqOpcode::ReregMr
                | AqOpcode::DeallocMw
                | AqOpcode::DestroyQp
                | AqOpcode::ModifyQp)
        );
    (
        super::completion(hdr.cmd_id.to_native(), hdr.opcode, outcome),
        revokes,
    )
}

fn run(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    reads: &mut PageListReads,
    opcode: AqOpcode,
    cmd: &[u8],
) -> CmdResult<[u32; 4]> {
    use AqOpcode::*;
    match opcode {
        QueryDevice => query_device(rnic, mem, &checked(cmd)?),
        QueryPort => query_port(rnic, mem, &checked(cmd)?),
        AllocUctx => alloc_uctx(rnic, st, &checked(cmd)?),
        DeallocUctx => dealloc_uctx(rnic, st, &checked(cmd)?),
        AllocPd => alloc_pd(st, &checked(cmd)?),
        DeallocPd => dealloc_pd(st, &checked(cmd)?),
        RegMr => super::memory::reg_mr(st, mem, reads, &checked(cmd)?),
        DeregMr => super::memory::dereg_mr(st, &checked(cmd)?),
        CreateCq => super::queues::create_cq(rnic, st, mem, reads, &checked(cmd)?),
        DestroyCq => super::queues::destroy_cq(rnic, st, &checked(cmd)?),
        CreateEq => super::queues::create_eq(rnic, st, mem, reads, &checked(cmd)?),
        DestroyEq => super::queues::destroy_eq(rnic, st, &checked(cmd)?),
        CreateQp => super::qp::create_qp(rnic, st, mem, reads, &checked(cmd)?),
        ModifyQp => super::qp::modify_qp(rnic, st, &checked(cmd)?),
        QueryQp => super::qp::query_qp(st, mem, &checked(cmd)?),
        DestroyQp => super::qp::destroy_qp(rnic, st, &checked(cmd)?),
        SetGid => super::gid::set_gid(rnic, st, &checked(cmd)?),
        CreateSrq => super::srq::create_srq(rnic, st, mem, reads, &checked(cmd)?),
        ModifySrq => super::srq::modify_srq(rnic, st, &checked(cmd)?),
        QuerySrq => super::srq::query_srq(st, mem, &checked(cmd)?),
        DestroySrq => super::srq::destroy_srq(rnic, st, &checked(cmd)?),
        AllocMr => super::memory::alloc_mr(st, &checked(cmd)?),
        AllocMw => super::mw::alloc_mw(st, &checked(cmd)?),
        DeallocMw => super::mw::dealloc_mw(st, &checked(cmd)?),
        AllocXrcd => super::xrcd::alloc_xrcd(rnic, st, &checked(cmd)?),
        DeallocXrcd => super::xrcd::dealloc_xrcd(rnic, st, &checked(cmd)?),
        ResizeCq => super::queues::resize_cq(rnic, st, mem, reads, &checked(cmd)?),
        ReregMr => super::memory::rereg_mr(st, mem, reads, &checked(cmd)?),
        QueryCounters => super::counters::query_counters(rnic, st, mem, &checked(cmd)?),
    }
}

/// Copies the leading bytes of `bytes` into a `T` (no alignment needed).
pub fn parse<T: ByteValued + Default>(bytes: &[u8]) -> T {
    let mut value = T::default();
    let dst = value.as_mut_slice();
    let n = dst.len().min(bytes.len());
    dst[..n].copy_from_slice(&bytes[..n]);
    value
}

/// Types with a generated reserved-field check.
pub trait Reserved {
    fn first_nonzero_reserved(&self) -> Option<(&'static str, usize)>;
}

macro_rules! reserved {
    ($($t:ty),*) => {$(impl Reserved for $t {
        fn first_nonzero_reserved(&self) -> Option<(&'static str, usize)> {
            self.nonzero_reserved()
        }
    })*};
}
reserved!(
    CmdQuery,
    CmdHandle,
    CmdRegMr,
    CmdAllocMr,
    CmdAllocMw,
    CmdCreateCq,
    CmdCreateEq,
    CmdCreateQp,
    CmdModifyQp,
    CmdSetGid,
    CmdCreateSrq,
    CmdModifySrq,
    CmdResizeCq,
    CmdReregMr,
    CmdQueryCounters
);

/// Decodes a command, refusing non-zero reserved fields.
fn checked<T: ByteValued + Default + Reserved>(cmd: &[u8]) -> CmdResult<T> {
    let value: T = parse(cmd);
    match value.first_nonzero_reserved() {
        Some((_, offset)) => Err(bad_field(offset).breaks(ContractRule::CmdReservedField)),
        None => Ok(value),
    }
}

/// Writes an answer struct to the guest buffer a query named.
pub fn write_out<T: ByteValued>(
    mem: &RamSnapshot,
    addr: u64,
    len: u32,
    value: &T,
    addr_off: usize,
    len_off: usize,
) -> CmdResult<()> {
    if (len as usize) < std::mem::size_of::<T>() {
        return Err(bad_size(len_off));
    }
    mem.write_obj(addr, value)
        .map_err(|_| CmdError::new(AqStatus::BadAddress, addr_off))
}

/// The context a command names must exist.
pub fn uctx_exists(st: &RnicState, uctx: u32, field: usize) -> CmdResult<()> {
    st.objects
        .uctxs
        .get(uctx)
        .map(|_| ())
        .ok_or(bad_handle(field))
}

/// An object owned by `owner` may be used on behalf of `caller` if they match or the
/// caller is the kernel.
pub fn owned(owner: u32, caller: u32, field: usize) -> CmdResult<()> {
    if owner == caller || caller == KERNEL_UCTX {
        Ok(())
    } else {
        Err(permission(field).breaks(ContractRule::CmdForeignObject))
    }
}

/// Writes a QUERY_DEVICE/QUERY_PORT answer to the buffer the command names.
fn answer_query<T: ByteValued>(
    mem: &RamSnapshot,
    cmd: &CmdQuery,
    answer: &T,
) -> CmdResult<[u32; 4]> {
    let (addr, len) = (cmd.out_addr.to_native(), cmd.out_len.to_native());
    write_out(
        mem,
        addr,
        len,
        answer,
        CmdQuery::OUT_ADDR_OFF,
        CmdQuery::OUT_LEN_OFF,
    )?;
    Ok([0; 4])
}

fn query_device(rnic: &Rnic, mem: &RamSnapshot, cmd: &CmdQuery) -> CmdResult<[u32; 4]> {
    if cmd.port != 0 {
        return Err(bad_field(CmdQuery::PORT_OFF));
    }
    let ids = &rnic.config.ids;
    let attr = DeviceAttr {
        fw_ver: (1u64 << 32).into(),
        node_guid: rnic.node_guid.to_be().into(),
        sys_image_guid: rnic.node_guid.to_be().into(),
        max_mr_size: (u64::from(bar0::MAX_MR_SIZE_HI_RESET) << 32
            | u64::from(bar0::MAX_MR_SIZE_LO_RESET))
        .into(),
        page_size_cap: u64::from(bar0::PAGE_SIZE_CAP_RESET).into(),
        vendor_id: u32::from(ids.vendor).into(),
        vendor_part_id: u32::from(ids.device).into(),
        hw_ver: PCI_REVISION.into(),
        max_qp: bar0::MAX_QP_RESET.into(),
        max_qp_wr: bar0::MAX_QP_WR_RESET.into(),
        max_sge: bar0::MAX_SGE_RESET.into(),
        max_cq: bar0::MAX_CQ_RESET.into(),
        max_cqe: bar0::MAX_CQE_RESET.into(),
        max_mr: bar0::MAX_MR_RESET.into(),
        max_pd: bar0::MAX_PD_RESET.into(),
        max_qp_rd_atom: bar0::MAX_QP_RD_ATOM_RESET.into(),
        max_qp_init_rd_atom: bar0::MAX_QP_RD_ATOM_RESET.into(),
        max_inline: bar0::MAX_INLINE_RESET.into(),
        max_msg_size: bar0::MAX_MSG_SIZE_RESET.into(),
        max_eq: bar0::MAX_EQ_RESET.into(),
        max_uctx: bar0::MAX_UCTX_RESET.into(),
        num_comp_vectors: (MSIX_VECTORS - 1).into(),
        phys_port_cnt: 1,
        atomic_cap: AtomicCap::Hca.into(),
        max_srq: MAX_SRQ.into(),
        max_fast_reg_pages: MAX_FAST_REG_PAGES.into(),
        max_mw: MAX_MW.into(),
        max_xrcd: MAX_XRCD.into(),
        ..Default::default()
    };
    answer_query(mem, cmd, &rnic.hostile.device_attr(attr))
}

fn query_port(rnic: &Rnic, mem: &RamSnapshot, cmd: &CmdQuery) -> CmdResult<[u32; 4]> {
    if u32::from(cmd.port) != PORT_NUM {
        return Err(bad_field(CmdQuery::PORT_OFF));
    }
    let mut attr = PortAttr {
        state: PortState::Active.into(),
        max_mtu: Mtu::Size4096.into(),
        active_mtu: Mtu::Size4096.into(),
        phys_state: 5,
        lid: rnic.lid().into(),
        max_msg_sz: bar0::MAX_MSG_SIZE_RESET.into(),
        pkey_tbl_len: 1.into(),
        active_width: 2,
        active_speed: 32,
        ..Default::default()
    };
    if rnic.faults.port_down() {
        (attr.state, attr.phys_state) = (PortState::Down.into(), 3);
    }
    match rnic.link().mac() {
        // RoCE mode: the driver fills the GID table with SET_GID.
        Some(mac) => {
            attr.link_layer = LinkLayer::Ethernet.into();
            attr.gid_tbl_len = (GID_TABLE_LEN as u16).into();
            attr.mac = mac.0;
        }
        None => {
            attr.link_layer = LinkLayer::Infiniband.into();
            attr.gid_tbl_len = 1.into();
            attr.gid[0] = 0xfe;
            attr.gid[1] = 0x80;
            attr.gid[8..].copy_from_slice(&rnic.node_guid.to_be_bytes());
        }
    }
    answer_query(mem, cmd, &rnic.hostile.port_attr(attr))
}

fn alloc_uctx(rnic: &Rnic, st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    if cmd.handle.to_native() != 0 {
        return Err(bad_field(CmdHandle::HANDLE_OFF));
    }
    if cmd.uctx.to_native() != KERNEL_UCTX {
        return Err(permission(CmdHandle::UCTX_OFF));
    }
    let (uctx, page) = st.objects.alloc_uctx().ok_or_else(no_resources)?;
    rnic.doorbells.give_page(page);
    log::debug!(
        "{}: uctx {uctx} allocated, first doorbell page {page}",
        rnic.name()
    );
    Ok([uctx, page, 0, 0])
}

fn dealloc_uctx(rnic: &Rnic, st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let uctx = cmd.handle.to_native();
    if uctx == KERNEL_UCTX {
        return Err(bad_handle(CmdHandle::HANDLE_OFF));
    }
    owned(uctx, cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    uctx_exists(st, uctx, CmdHandle::HANDLE_OFF)?;
    let o = &st.objects;
    let in_use = o.pds.iter().any(|(_, pd)| pd.uctx == uctx)
        || o.cqs.iter().any(|(_, cq)| cq.uctx == uctx)
        || o.qps.iter().any(|(_, qp)| qp.uctx == uctx)
        || o.mkeys().any(|key| key.uctx() == uctx)
        || o.srqs.iter().any(|(_, srq)| srq.uctx == uctx);
    if in_use {
        return Err(busy(CmdHandle::HANDLE_OFF));
    }
    for page in st.objects.dealloc_uctx(uctx) {
        rnic.doorbells.release_page(page);
    }
    Ok([0; 4])
}

fn alloc_pd(st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let uctx = cmd.handle.to_native();
    uctx_exists(st, uctx, CmdHandle::HANDLE_OFF)?;
    owned(uctx, cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    let pdn = st.objects.pds.free_index(0).ok_or_else(no_resources)?;
    st.objects.pds.insert_at(pdn, Pd { uctx });
    Ok([pdn as u32, 0, 0, 0])
}

fn dealloc_pd(st: &mut RnicState, cmd: &CmdHandle) -> CmdResult<[u32; 4]> {
    let pdn = cmd.handle.to_native();
    let pd = st
        .objects
        .pds
        .get(pdn)
        .ok_or(bad_handle(CmdHandle::HANDLE_OFF))?;
    owned(pd.uctx, cmd.uctx.to_native(), CmdHandle::UCTX_OFF)?;
    let o = &st.objects;
    if o.mkeys().any(|key| key.pdn() == pdn)
        || o.qps.iter().any(|(_, qp)| qp.uses_pd(pdn))
        || o.srqs.iter().any(|(_, srq)| srq.pdn == pdn)
    {
        return Err(busy(CmdHandle::HANDLE_OFF));
    }
    st.objects.pds.remove(pdn);
    Ok([0; 4])
}
