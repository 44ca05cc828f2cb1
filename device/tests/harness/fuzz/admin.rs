//! Target 3: admin commands on an in-process device. The input is a sequence of batches of
//! commands with valid opcodes, handles taken from earlier completions, page lists pointing
//! into guest RAM and plausible sizes, each field sometimes mutated; now and then the
//! doorbell runs ahead of the commands written.
//!
//! Oracles: every completion echoes its command and carries an AqStatus (aq.rs); the device
//! never writes guest RAM outside the rings and output buffers the input named (no data
//! path runs here, so MRs must stay untouched too); afterwards the device still answers
//! QUERY_DEVICE and QUERY_PORT correctly.

use std::cell::RefCell;

use vm_memory::ByteValued;
use vrnic_hw::*;

use super::aq::{self, Aq};
use super::glue::{ib, is_roce, roce as roce_link};
use super::guest::{CanaryRam, PAGE};
use super::input::Input;
use super::objs::{allow_list, buffer, mutate_list, Heap, LAYOUTS};
use super::rig::{Rig, ACQ_ADDR, AQ_ADDR, INTERESTING_ADDRS};
use super::stats;

thread_local! {
    /// One rig per link mode (IB, RoCE): an input's first byte picks the device it drives.
    static RIGS: RefCell<[Option<Rig>; 2]> = const { RefCell::new([None, None]) };
}

/// Runs one input (the function both runners call).
pub fn run_one(input: &[u8]) {
    RIGS.with(|cell| {
        let mut rigs = cell.borrow_mut();
        let roce = input.first().is_some_and(|b| b & 1 == 1);
        let link = if roce { roce_link(0) } else { ib(0) };
        let rig = rigs[usize::from(roce)].get_or_insert_with(|| Rig::with_links(vec![link], false));
        run(rig, input.get(1..).unwrap_or_default());
    });
}

/// Forgets the rigs after a failure (one may be mid-command); the next input builds new ones.
pub fn discard() {
    RIGS.with(|cell| {
        if let Ok(mut rigs) = cell.try_borrow_mut() {
            for slot in rigs.iter_mut() {
                std::mem::forget(slot.take());
            }
        }
    });
}

/// `VRNIC_FUZZ_TRACE=1` prints every command and completion (to study a reproducer).
pub fn trace() -> bool {
    std::env::var_os("VRNIC_FUZZ_TRACE").is_some()
}

/// Objects the device created for this input, by handle (and owning context).
#[derive(Default)]
struct Handles {
    uctxs: Vec<u32>,
    pds: Vec<(u32, u32)>,
    mrs: Vec<(u32, u32)>,
    eqs: Vec<u32>,
    cqs: Vec<(u32, u32)>,
    qps: Vec<(u32, u32)>,
    srqs: Vec<(u32, u32)>,
    /// Memory windows (rkey, context).
    mws: Vec<(u32, u32)>,
    /// XRC domains (the kernel's).
    xrcds: Vec<u32>,
}

fn any_handle(inp: &mut Input) -> u32 {
    match inp.u8() % 6 {
        0 => 0,
        1 => 1,
        2 => u32::from(inp.u8()),
        3 => u32::MAX,
        4 => QPN_MAX + 1,
        _ => inp.u32(),
    }
}

/// The command a driver would send next to build up a working set of objects (so that
/// QPs exist often enough for MODIFY_QP and QUERY_QP to reach their deep paths).
fn next_step(inp: &mut Input, h: &Handles) -> AqOpcode {
    if h.uctxs.len() < 2 {
        AqOpcode::AllocUctx
    } else if h.pds.is_empty() {
        AqOpcode::AllocPd
    } else if h.eqs.is_empty() {
        AqOpcode::CreateEq
    } else if h.cqs.is_empty() {
        AqOpcode::CreateCq
    } else if h.qps.len() < 2 {
        AqOpcode::CreateQp
    } else {
        inp.pick(&[
            AqOpcode::ModifyQp,
            AqOpcode::ModifyQp,
            AqOpcode::ModifyQp,
            AqOpcode::QueryQp,
            AqOpcode::RegMr,
            AqOpcode::CreateQp,
            AqOpcode::SetGid,
            AqOpcode::CreateSrq,
            AqOpcode::ModifySrq,
            AqOpcode::AllocMr,
            AqOpcode::AllocMw,
            AqOpcode::AllocXrcd,
            AqOpcode::CreateSrq,
            AqOpcode::ResizeCq,
            AqOpcode::ReregMr,
        ])
    }
}

/// A handle from `list` (with its context), or now and then any number.
fn pick(inp: &mut Input, list: &[(u32, u32)]) -> (u32, u32) {
    if list.is_empty() || inp.chance(8) {
        (any_handle(inp), KERNEL_UCTX)
    } else {
        list[inp.below(list.len())]
    }
}

fn pick1(inp: &mut Input, list: &[u32]) -> u32 {
    if list.is_empty() || inp.chance(8) {
        any_handle(inp)
    } else {
        list[inp.below(list.len())]
    }
}

/// The context a command claims: mostly the owner, sometimes another one.
fn claim(inp: &mut Input, h: &Handles, owner: u32) -> u32 {
    if inp.chance(8) {
        pick1(inp, &h.uctxs)
    } else {
        owner
    }
}

fn header(inp: &mut Input, op: AqOpcode) -> AqHeader {
    AqHeader {
        opcode: if inp.chance(3) { inp.u8() } else { op.into() },
        reserved0: if inp.chance(2) { inp.u8() } else { 0 },
        ..Default::default()
    }
}

/// An output buffer: mostly fresh RAM of the right size; allowed for device writes.
fn out_buf(inp: &mut Input, ram: &mut CanaryRam, heap: &mut Heap, size: usize) -> (u64, u32) {
    let addr = if inp.chance(10) {
        inp.pick(INTERESTING_ADDRS)
    } else {
        heap.alloc_or_last(size as u64, 8)
    };
    let addr = inp.mostly_u64(addr);
    let len = inp.mostly_u32(size as u32);
    let _ = ram;
    (addr, len)
}

/// A ring of 2^depth_log2 entries of 2^entry_shift bytes (page list mutated sometimes).
fn ring(
    inp: &mut Input,
    ram: &mut CanaryRam,
    heap: &mut Heap,
    depth_log2: u8,
    entry_shift: u32,
) -> PageList {
    let bytes = 1u64 << (u32::from(depth_log2.min(16)) + entry_shift);
    let shift = if inp.chance(85) {
        12
    } else {
        12 + inp.below(10) as u32
    };
    let layout = inp.pick(LAYOUTS);
    let (list, _) = buffer(ram, heap, bytes, shift, layout);
    mutate_list(inp, list)
}

/// Records what the command, as finally written (any byte may have been mutated, the
/// opcode too), lets the device write: output buffers and rings.
fn allow_cmd(ram: &mut CanaryRam, bytes: &[u8; 128]) {
    fn parse<T: ByteValued + Default>(bytes: &[u8; 128]) -> T {
        let mut v = T::default();
        let n = v.as_slice().len();
        v.as_mut_slice().copy_from_slice(&bytes[..n]);
        v
    }
    match AqOpcode::try_from(bytes[0]) {
        Ok(AqOpcode::QueryDevice | AqOpcode::QueryPort) => {
            let c: CmdQuery = parse(bytes);
            ram.allow(c.out_addr.to_native(), u64::from(c.out_len.to_native()));
        }
        Ok(AqOpcode::QueryQp) => {
            let c: CmdModifyQp = parse(bytes);
            ram.allow(c.out_addr.to_native(), u64::from(c.out_len.to_native()));
        }
        Ok(AqOpcode::CreateCq) => allow_list(ram, &parse::<CmdCreateCq>(bytes).ring),
        Ok(AqOpcode::ResizeCq) => allow_list(ram, &parse::<CmdResizeCq>(bytes).ring),
        Ok(AqOpcode::CreateEq) => allow_list(ram, &parse::<CmdCreateEq>(bytes).ring),
        Ok(AqOpcode::CreateQp) => {
            let c: CmdCreateQp = parse(bytes);
            allow_list(ram, &c.sq_ring);
            allow_list(ram, &c.rq_ring);
        }
        Ok(AqOpcode::CreateSrq) => allow_list(ram, &parse::<CmdCreateSrq>(bytes).ring),
        Ok(AqOpcode::QuerySrq) => {
            let c: CmdModifySrq = parse(bytes);
            ram.allow(c.out_addr.to_native(), u64::from(c.out_len.to_native()));
        }
        Ok(AqOpcode::QueryCounters) => {
            let c: CmdQueryCounters = parse(bytes);
            ram.allow(c.out_addr.to_native(), u64::from(c.out_len.to_native()));
        }
        _ => {}
    }
}

fn access(inp: &mut Input) -> u32 {
    let a = u32::from(inp.u8()) & ACCESS_SUPPORTED_MASK;
    inp.mostly_u32(a)
}

fn build(inp: &mut Input, ram: &mut CanaryRam, heap: &mut Heap, h: &Handles) -> [u8; 128] {
    let op = if inp.chance(40) {
        next_step(inp, h)
    } else if inp.chance(3) {
        AqOpcode::QueryDevice
    } else {
        inp.pick(AqOpcode::ALL)
    };
    let hdr = header(inp, op);
    let mut bytes = [0u8; 128];
    let mut put = |s: &[u8]| bytes[..s.len()].copy_from_slice(s);
    match op {
        AqOpcode::AllocXrcd => {
            let cmd = CmdHandle {
                hdr,
                handle: inp.mostly_u32(0).into(),
                // Only the kernel may; a user context now and then.
                uctx: if inp.chance(10) {
                    pick1(inp, &h.uctxs)
                } else {
                    KERNEL_UCTX
                }
                .into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::DeallocXrcd => {
            let cmd = CmdHandle {
                hdr,
                handle: pick1(inp, &h.xrcds).into(),
                uctx: inp.mostly_u32(KERNEL_UCTX).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::ResizeCq => {
            let (cqn, owner) = pick(inp, &h.cqs);
            let depth = {
                let v = 1 + inp.below(12) as u8;
                inp.mostly_u8(v)
            };
            // No data path runs here: the producer index is 0, so is a right ci.
            let cmd = CmdResizeCq {
                hdr,
                cqn: cqn.into(),
                uctx: claim(inp, h, owner).into(),
                depth_log2: depth,
                ci: inp.mostly_u32(0).into(),
                ring: ring(inp, ram, heap, depth, Cqe::SIZE.trailing_zeros()),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::ReregMr => {
            let (mkey, owner) = pick(inp, &h.mrs);
            let flags = {
                let v = 1 + inp.below(rereg_flags::ALL as usize) as u32;
                inp.mostly_u32(v)
            };
            let mut cmd = CmdReregMr {
                hdr,
                mkey: mkey.into(),
                flags: flags.into(),
                uctx: claim(inp, h, owner).into(),
                ..Default::default()
            };
            // The fields the flags name (and now and then one they do not).
            if flags & rereg_flags::CHANGE_PD != 0 || inp.chance(5) {
                cmd.pdn = pick(inp, &h.pds).0.into();
            }
            if flags & rereg_flags::CHANGE_ACCESS != 0 || inp.chance(5) {
                cmd.access = access(inp).into();
            }
            if flags & rereg_flags::CHANGE_TRANSLATION != 0 || inp.chance(5) {
                let len = 1 + inp.len_up_to(64 << 10);
                let first = u64::from(inp.u16()) % PAGE;
                let layout = inp.pick(LAYOUTS);
                let (list, _) = buffer(ram, heap, first + len, 12, layout);
                cmd.pages = mutate_list(inp, list);
                let iova = (u64::from(inp.u16()) << 30) + first;
                cmd.iova = inp.mostly_u64(iova).into();
                cmd.length = inp.mostly_u64(len).into();
            }
            put(cmd.as_slice());
        }
        AqOpcode::QueryDevice | AqOpcode::QueryPort => {
            let size = if op == AqOpcode::QueryDevice {
                DeviceAttr::SIZE
            } else {
                PortAttr::SIZE
            };
            let (out_addr, out_len) = out_buf(inp, ram, heap, size);
            let cmd = CmdQuery {
                hdr,
                out_addr: out_addr.into(),
                out_len: out_len.into(),
                port: if op == AqOpcode::QueryPort {
                    inp.mostly_u8(PORT_NUM as u8)
                } else {
                    inp.mostly_u8(0)
                },
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::QueryCounters => {
            let (out_addr, out_len) = out_buf(inp, ram, heap, 8 * COUNTER_COUNT as usize);
            let qp_scope = inp.chance(2);
            let (qpn, owner) = if qp_scope {
                pick(inp, &h.qps)
            } else {
                (0, KERNEL_UCTX)
            };
            let cmd = CmdQueryCounters {
                hdr,
                out_addr: out_addr.into(),
                out_len: out_len.into(),
                scope: inp.mostly_u8(u8::from(qp_scope)),
                port: inp.mostly_u8(if qp_scope { 0 } else { PORT_NUM as u8 }),
                qpn: qpn.into(),
                uctx: claim(inp, h, owner).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::AllocUctx => {
            let cmd = CmdHandle {
                hdr,
                handle: inp.mostly_u32(0).into(),
                uctx: inp.mostly_u32(KERNEL_UCTX).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::DeallocUctx | AqOpcode::AllocPd => {
            let u = pick1(inp, &h.uctxs);
            let cmd = CmdHandle {
                hdr,
                handle: u.into(),
                uctx: claim(inp, h, u).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::DeallocPd
        | AqOpcode::DeregMr
        | AqOpcode::DestroyCq
        | AqOpcode::DestroyQp
        | AqOpcode::DestroySrq => {
            let list = match op {
                AqOpcode::DeallocPd => &h.pds,
                AqOpcode::DeregMr => &h.mrs,
                AqOpcode::DestroyCq => &h.cqs,
                AqOpcode::DestroySrq => &h.srqs,
                _ => &h.qps,
            };
            let (handle, owner) = pick(inp, list);
            let cmd = CmdHandle {
                hdr,
                handle: handle.into(),
                uctx: claim(inp, h, owner).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::DestroyEq => {
            let cmd = CmdHandle {
                hdr,
                handle: pick1(inp, &h.eqs).into(),
                uctx: inp.mostly_u32(KERNEL_UCTX).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::AllocMr => {
            let (pd, owner) = pick(inp, &h.pds);
            let max_pages = {
                let v = 1 + inp.below(MAX_FAST_REG_PAGES as usize) as u32;
                inp.mostly_u32(v)
            };
            let cmd = CmdAllocMr {
                hdr,
                pdn: pd.into(),
                // Only the kernel may; the PD's own context now and then.
                uctx: if inp.chance(10) { owner } else { KERNEL_UCTX }.into(),
                max_pages: max_pages.into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::AllocMw => {
            let (pd, owner) = pick(inp, &h.pds);
            let cmd = CmdAllocMw {
                hdr,
                pdn: pd.into(),
                uctx: claim(inp, h, owner).into(),
                mw_type: {
                    let v = 1 + inp.below(2) as u8;
                    inp.mostly_u8(v)
                },
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::DeallocMw => {
            let (mw, owner) = pick(inp, &h.mws);
            // Any variant of the window's index names it.
            let rkey = if inp.chance(20) {
                (mw & !0xFF) | u32::from(inp.u8())
            } else {
                mw
            };
            let cmd = CmdHandle {
                hdr,
                handle: rkey.into(),
                uctx: claim(inp, h, owner).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::RegMr => {
            let (pd, owner) = pick(inp, &h.pds);
            let len = 1 + inp.len_up_to(256 << 10);
            let shift = if inp.chance(80) {
                12
            } else {
                12 + inp.below(19) as u32
            };
            let first = u64::from(inp.u16()) % (1 << shift);
            let layout = inp.pick(LAYOUTS);
            let (list, _) = buffer(ram, heap, first + len, shift, layout);
            let list = mutate_list(inp, list);
            let iova = (u64::from(inp.u16()) << 30) + first;
            let cmd = CmdRegMr {
                hdr,
                pdn: pd.into(),
                access: access(inp).into(),
                iova: inp.mostly_u64(iova).into(),
                length: inp.mostly_u64(len).into(),
                pages: list,
                uctx: claim(inp, h, owner).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::CreateCq => {
            let u = pick1(inp, &h.uctxs);
            let depth = {
                let v = 1 + inp.below(12) as u8;
                inp.mostly_u8(v)
            };
            let cmd = CmdCreateCq {
                hdr,
                uctx: u.into(),
                eqn: pick1(inp, &h.eqs).into(),
                depth_log2: depth,
                ring: ring(inp, ram, heap, depth, Cqe::SIZE.trailing_zeros()),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::CreateEq => {
            let depth = {
                let v = 1 + inp.below(12) as u8;
                inp.mostly_u8(v)
            };
            let cmd = CmdCreateEq {
                hdr,
                depth_log2: depth,
                flags: inp.mostly_u8_below(2),
                msix_vector: {
                    let v = inp.below(MSIX_VECTORS as usize) as u16;
                    inp.mostly_u16(v)
                }
                .into(),
                ring: ring(inp, ram, heap, depth, 4),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::CreateQp => {
            let (pd, owner) = pick(inp, &h.pds);
            // CQs of the PD's context, mostly.
            let own: Vec<(u32, u32)> = h.cqs.iter().copied().filter(|&(_, u)| u == owner).collect();
            let cqs = if own.is_empty() || inp.chance(10) {
                &h.cqs
            } else {
                &own
            };
            let (scq, _) = pick(inp, cqs);
            let (rcq, _) = pick(inp, cqs);
            let sq_depth = {
                let v = 1 + inp.below(10) as u8;
                inp.mostly_u8(v)
            };
            let rq_depth = {
                let v = 1 + inp.below(10) as u8;
                inp.mostly_u8(v)
            };
            let max_send_sge = inp.mostly_u8_below(5);
            let max_recv_sge = inp.mostly_u8_below(5);
            let max_inline = {
                let v = [0, 16, 64, 128][inp.below(4)];
                inp.mostly_u32(v)
            };
            // RC mostly; UC; UD and the kernel's GSI QP, whose WQEs carry a ud_av; XRC_INI,
            // whose WQEs carry an xrc_seg, and the kernel's XRC_TGT QP.
            let qp_type = inp.pick(&[
                QpType::Rc,
                QpType::Rc,
                QpType::Uc,
                QpType::Ud,
                QpType::Gsi,
                QpType::XrcIni,
                QpType::XrcTgt,
            ]);
            let payload_off = match qp_type {
                QpType::Rc | QpType::Uc => SendWqeHeader::SIZE,
                QpType::XrcIni | QpType::XrcTgt => XRC_PAYLOAD_OFFSET as usize,
                _ => UD_PAYLOAD_OFFSET as usize,
            };
            let need_sq =
                payload_off + (Sge::SIZE * usize::from(max_send_sge)).max(max_inline as usize);
            let need_rq = RecvWqeHeader::SIZE + Sge::SIZE * usize::from(max_recv_sge);
            let fit =
                |need: usize, min: u32| (min..16).find(|s| need <= 1 << s).unwrap_or(min) as u8;
            let sq_shift = {
                let v = fit(need_sq, SEND_WQE_SHIFT_MIN);
                inp.mostly_u8(v)
            };
            let rq_shift = {
                let v = fit(need_rq, RECV_WQE_SHIFT_MIN);
                inp.mostly_u8(v)
            };
            // Now and then the receives come from an SRQ (then the RQ fields are zero).
            let srq = (inp.chance(4)).then(|| pick(inp, &h.srqs).0);
            let cmd = CmdCreateQp {
                hdr,
                uctx: claim(inp, h, owner).into(),
                pdn: pd.into(),
                send_cqn: scq.into(),
                recv_cqn: rcq.into(),
                qp_type: inp.mostly_u8(qp_type.into()),
                sq_depth_log2: sq_depth,
                rq_depth_log2: rq_depth,
                sq_wqe_shift: sq_shift,
                rq_wqe_shift: rq_shift,
                max_send_sge,
                max_recv_sge,
                max_inline: max_inline.into(),
                sq_ring: ring(inp, ram, heap, sq_depth, u32::from(sq_shift.min(12))),
                rq_ring: ring(inp, ram, heap, rq_depth, u32::from(rq_shift.min(12))),
                ..Default::default()
            };
            let cmd = match srq {
                // XRC_TGT: only the kernel, its type and a domain (mostly).
                _ if qp_type == QpType::XrcTgt && !inp.chance(10) => CmdCreateQp {
                    hdr,
                    uctx: inp.mostly_u32(KERNEL_UCTX).into(),
                    qp_type: qp_type.into(),
                    xrcdn: pick1(inp, &h.xrcds).into(),
                    ..Default::default()
                },
                // XRC_INI: no receive side (mostly).
                _ if qp_type == QpType::XrcIni && !inp.chance(10) => CmdCreateQp {
                    recv_cqn: 0.into(),
                    rq_depth_log2: 0,
                    rq_wqe_shift: 0,
                    max_recv_sge: 0,
                    rq_ring: PageList::default(),
                    ..cmd
                },
                Some(srqn) if !inp.chance(10) => CmdCreateQp {
                    flags: QP_FLAG_SRQ as u8,
                    srqn: srqn.into(),
                    rq_depth_log2: 0,
                    rq_wqe_shift: 0,
                    max_recv_sge: 0,
                    rq_ring: PageList::default(),
                    ..cmd
                },
                Some(srqn) => CmdCreateQp {
                    flags: inp.mostly_u8(QP_FLAG_SRQ as u8),
                    srqn: srqn.into(),
                    ..cmd
                },
                None => cmd,
            };
            put(cmd.as_slice());
        }
        AqOpcode::CreateSrq => {
            let (pd, owner) = pick(inp, &h.pds);
            let depth = {
                let v = 1 + inp.below(10) as u8;
                inp.mostly_u8(v)
            };
            let max_sge = {
                let v = 1 + inp.below(4) as u8;
                inp.mostly_u8(v)
            };
            let need = RecvWqeHeader::SIZE + Sge::SIZE * usize::from(max_sge);
            let shift = {
                let v = (RECV_WQE_SHIFT_MIN..16)
                    .find(|s| need <= 1 << s)
                    .unwrap_or(RECV_WQE_SHIFT_MIN) as u8;
                inp.mostly_u8(v)
            };
            let cmd = CmdCreateSrq {
                hdr,
                uctx: claim(inp, h, owner).into(),
                pdn: pd.into(),
                depth_log2: depth,
                wqe_shift: shift,
                max_sge,
                ring: ring(inp, ram, heap, depth, u32::from(shift.min(12))),
                ..Default::default()
            };
            // Now and then an XRC SRQ: a domain and a CQ (of the context, mostly).
            let cmd = match inp.chance(30) {
                true => CmdCreateSrq {
                    srq_type: inp.mostly_u8(SrqType::Xrc.into()),
                    xrcdn: pick1(inp, &h.xrcds).into(),
                    cqn: pick(inp, &h.cqs).0.into(),
                    ..cmd
                },
                false => cmd,
            };
            put(cmd.as_slice());
        }
        AqOpcode::ModifySrq | AqOpcode::QuerySrq => {
            let (srqn, owner) = pick(inp, &h.srqs);
            let query = op == AqOpcode::QuerySrq;
            let (out_addr, out_len) = if query {
                out_buf(inp, ram, heap, SrqAttr::SIZE)
            } else {
                (0, 0)
            };
            let (mask, limit) = if query && !inp.chance(10) {
                (0, 0)
            } else {
                let m = inp.mostly_u32(srq_attr_mask::LIMIT);
                let l = inp.below(1 << 10) as u32;
                (m, inp.mostly_u32(l))
            };
            let cmd = CmdModifySrq {
                hdr,
                srqn: srqn.into(),
                attr_mask: mask.into(),
                attr: SrqAttr {
                    srq_limit: limit.into(),
                    ..Default::default()
                },
                out_addr: out_addr.into(),
                out_len: out_len.into(),
                uctx: claim(inp, h, owner).into(),
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::ModifyQp | AqOpcode::QueryQp => {
            let (qpn, owner) = pick(inp, &h.qps);
            let (dest, _) = pick(inp, &h.qps);
            // The driver's transitions (mask and target state), then oddities.
            let steps: &[(u32, QpState)] = &[
                (0x39, QpState::Init),
                (0x12_9181, QpState::Rtr),
                (0x1_2e01, QpState::Rts),
                (0x1, QpState::Err),
                (0x1, QpState::Reset),
                (0x1, QpState::Sqd),
                (0x1, QpState::Rts),
                (0x3, QpState::Rts),
                // UD (PKEY_INDEX, PORT, QKEY) and GSI (no PORT) to INIT; RTR; RTS with SQ_PSN.
                (0x71, QpState::Init),
                (0x51, QpState::Init),
                (0x1, QpState::Rtr),
                (0x1_0001, QpState::Rts),
            ];
            let (mask, state) = if inp.chance(75) {
                inp.pick(steps)
            } else {
                (inp.u32() & 0x1f_ffff, inp.pick(QpState::ALL))
            };
            let (out_addr, out_len) = if op == AqOpcode::QueryQp {
                out_buf(inp, ram, heap, QpAttr::SIZE)
            } else {
                (0, 0)
            };
            let attr = QpAttr {
                qp_state: inp.mostly_u8(state.into()),
                cur_qp_state: inp.mostly_u8(0),
                path_mtu: {
                    let v = 1 + inp.below(5) as u8;
                    inp.mostly_u8(v)
                },
                timeout: inp.mostly_u8_below(32),
                retry_cnt: inp.mostly_u8_below(8),
                rnr_retry: inp.mostly_u8_below(8),
                min_rnr_timer: inp.mostly_u8_below(32),
                max_rd_atomic: inp.mostly_u8_below(17),
                max_dest_rd_atomic: inp.mostly_u8_below(17),
                port_num: inp.mostly_u8(PORT_NUM as u8),
                qp_access_flags: access(inp).into(),
                dest_qp_num: inp.mostly_u32(dest).into(),
                rq_psn: (inp.u32() & 0xff_ffff).into(),
                sq_psn: (inp.u32() & 0xff_ffff).into(),
                dlid: inp.mostly_u16(1).into(),
                qkey: inp.mostly_u32(GSI_QKEY).into(),
                // RoCE mode's AV: a GRH naming a GID of the table.
                is_global: inp.mostly_u8(1),
                sgid_index: inp.mostly_u8_below(3),
                dgid: {
                    let mut g = [0u8; 16];
                    g[10] = 0xff;
                    g[11] = 0xff;
                    g[15] = inp.u8();
                    g
                },
                ..Default::default()
            };
            // QUERY_QP takes no attributes: mostly none.
            let query = op == AqOpcode::QueryQp && !inp.chance(10);
            let (mask, attr) = if query {
                (0, QpAttr::default())
            } else {
                (mask, attr)
            };
            let cmd = CmdModifyQp {
                hdr,
                qpn: qpn.into(),
                attr_mask: inp.mostly_u32(mask).into(),
                attr,
                out_addr: out_addr.into(),
                out_len: out_len.into(),
                uctx: claim(inp, h, owner).into(),
                // RoCE mode's AV carries the destination MAC.
                dmac: if inp.chance(3) {
                    [2, 0, 0, 0, 0, inp.u8()]
                } else {
                    [0; 6]
                },
                ..Default::default()
            };
            put(cmd.as_slice());
        }
        AqOpcode::SetGid => {
            let mut gid = [0u8; 16];
            for b in gid.iter_mut() {
                *b = inp.u8();
            }
            let cmd = CmdSetGid {
                hdr,
                port: inp.mostly_u8(PORT_NUM as u8),
                index: inp.mostly_u8_below(GID_TABLE_LEN as usize + 1),
                gid_type: inp.mostly_u8(u8::from(GidType::RoceV2)),
                valid: inp.mostly_u8(1),
                uctx: inp.mostly_u32(KERNEL_UCTX).into(),
                gid,
                ..Default::default()
            };
            put(cmd.as_slice());
        }
    }
    // Now and then a reserved or any other byte is set (cmd_id, bytes 4..8, is the driver's).
    if inp.chance(4) {
        let at = 8 + inp.below(120);
        bytes[at] = inp.u8();
    }
    allow_cmd(ram, &bytes);
    bytes
}

/// What a successful command must have answered, as far as the command alone says.
fn check_answer(cmd: &[u8; 128], results: [u32; 4]) {
    if cmd[0] == u8::from(AqOpcode::QueryCounters) {
        let at = CmdQueryCounters::OUT_LEN_OFF;
        let out_len = u32::from_le_bytes([cmd[at], cmd[at + 1], cmd[at + 2], cmd[at + 3]]);
        assert!(
            out_len != 0 && out_len.is_multiple_of(8) && out_len <= 8 * COUNTER_COUNT_MAX,
            "QUERY_COUNTERS accepted out_len {out_len}"
        );
        assert_eq!(
            results[0],
            (out_len / 8).min(COUNTER_COUNT),
            "QUERY_COUNTERS result0: the values written"
        );
    }
}

/// Records the objects a successful command created and forgets those it destroyed.
fn record(h: &mut Handles, cmd: &[u8; 128], results: [u32; 4]) {
    let u32_at =
        |off: usize| u32::from_le_bytes([cmd[off], cmd[off + 1], cmd[off + 2], cmd[off + 3]]);
    let handle = u32_at(8);
    let r0 = results[0];
    let Ok(op) = AqOpcode::try_from(cmd[0]) else {
        return;
    };
    match op {
        AqOpcode::AllocUctx => h.uctxs.push(r0),
        AqOpcode::DeallocUctx => h.uctxs.retain(|&u| u != handle),
        AqOpcode::AllocPd => h.pds.push((r0, u32_at(12))),
        AqOpcode::DeallocPd => h.pds.retain(|&(p, _)| p != handle),
        AqOpcode::RegMr => h.mrs.push((r0, u32_at(CmdRegMr::UCTX_OFF))),
        AqOpcode::DeregMr => h.mrs.retain(|&(m, _)| m != handle),
        AqOpcode::AllocMr => h.mrs.push((r0, KERNEL_UCTX)),
        AqOpcode::AllocMw => h.mws.push((r0, u32_at(CmdAllocMw::UCTX_OFF))),
        AqOpcode::DeallocMw => h.mws.retain(|&(m, _)| m >> 8 != handle >> 8),
        AqOpcode::CreateCq => h.cqs.push((r0, u32_at(CmdCreateCq::UCTX_OFF))),
        AqOpcode::DestroyCq => h.cqs.retain(|&(c, _)| c != handle),
        AqOpcode::CreateEq => h.eqs.push(r0),
        AqOpcode::DestroyEq => h.eqs.retain(|&e| e != handle),
        AqOpcode::CreateQp => h.qps.push((r0, u32_at(CmdCreateQp::UCTX_OFF))),
        AqOpcode::DestroyQp => h.qps.retain(|&(q, _)| q != handle),
        AqOpcode::CreateSrq => h.srqs.push((r0, u32_at(CmdCreateSrq::UCTX_OFF))),
        AqOpcode::DestroySrq => h.srqs.retain(|&(q, _)| q != handle),
        AqOpcode::AllocXrcd => h.xrcds.push(r0),
        AqOpcode::DeallocXrcd => h.xrcds.retain(|&x| x != handle),
        _ => {}
    }
}

/// The final well-formed requests: QUERY_DEVICE and QUERY_PORT answer with the device's
/// identity.
pub fn check_alive(
    aq: &mut Aq,
    dev: &mut super::glue::Dev,
    aqram: &mut CanaryRam,
    ram: &mut CanaryRam,
    heap: &mut Heap,
    lid: u16,
) {
    let out = heap.alloc_or_last(PAGE, PAGE);
    ram.allow(out, PAGE);
    let cmd = CmdQuery {
        hdr: AqHeader {
            opcode: AqOpcode::QueryDevice.into(),
            ..Default::default()
        },
        out_addr: out.into(),
        out_len: (DeviceAttr::SIZE as u32).into(),
        ..Default::default()
    };
    let done = aq.run(dev, aqram, &cmd);
    assert_eq!(
        done.status,
        AqStatus::Success,
        "final QUERY_DEVICE: {done:?}"
    );
    let attr: DeviceAttr = ram.read_obj(out).expect("device_attr");
    assert_eq!(
        attr.vendor_id.to_native(),
        PCI_VENDOR_ID,
        "final QUERY_DEVICE vendor"
    );
    let cmd = CmdQuery {
        hdr: AqHeader {
            opcode: AqOpcode::QueryPort.into(),
            ..Default::default()
        },
        out_addr: out.into(),
        out_len: (PortAttr::SIZE as u32).into(),
        port: PORT_NUM as u8,
        ..Default::default()
    };
    let done = aq.run(dev, aqram, &cmd);
    assert_eq!(done.status, AqStatus::Success, "final QUERY_PORT: {done:?}");
    let port: PortAttr = ram.read_obj(out).expect("port_attr");
    assert_eq!(port.lid.to_native(), lid, "final QUERY_PORT lid");
}

fn run(rig: &mut Rig, input: &[u8]) {
    let mut inp = Input::new(input);
    rig.begin();
    let depth_log2 = 1 + inp.below(5) as u32;
    let (dev, ram, aqram) = (&mut rig.world.devs[0], &mut rig.rams[0], &mut rig.aqs[0]);
    let mut aq = aq::enable(dev, aqram, AQ_ADDR, ACQ_ADDR, depth_log2)
        .expect("the device refused a valid admin queue");
    let mut heap = Rig::heap(2);
    let mut h = Handles {
        uctxs: vec![KERNEL_UCTX],
        ..Default::default()
    };
    let mut batches = 0;
    while !inp.is_empty() && batches < 64 {
        batches += 1;
        let n = 1 + inp.below(aq.depth().min(4));
        let cmds: Vec<[u8; 128]> = (0..n)
            .map(|_| build(&mut inp, ram, &mut heap, &h))
            .collect();
        let extra = if inp.chance(3) {
            inp.below(3) as u32
        } else {
            0
        };
        let done = aq.submit(dev, aqram, &cmds, extra);
        for (cmd, d) in cmds.iter().zip(&done) {
            if trace() {
                eprintln!("admin: {:02x?} -> {d:?}", &cmd[..]);
            }
            let op = AqOpcode::try_from(cmd[0])
                .map_or_else(|_| "unknown opcode".into(), |o| format!("{o:?}"));
            stats::count("admin", format_args!("{op} {:?}", d.status));
            if let Some(results) = d.ok() {
                check_answer(cmd, results);
                record(&mut h, cmd, results);
            }
        }
    }
    let lid = if is_roce(dev) { 0 } else { 1 };
    check_alive(&mut aq, dev, aqram, ram, &mut heap, lid);
    rig.finish("admin");
}
