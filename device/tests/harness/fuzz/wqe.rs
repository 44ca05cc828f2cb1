//! Target 4: doorbells and WQEs on a live device (the poller runs) with real guest memory,
//! in IB mode, in RoCE mode, and in RoCE mode across a RoCEv2 wire between two hosts.
//! Each input sets up a context, PDs, MRs (contiguous, DIRECT, INDIRECT; some over the
//! read-only or fd-less ranges), CQs, now and then an SRQ its QPs receive from, and two RC,
//! UC or UD QPs connected in loopback (or across two devices), or an XRC_INI QP connected
//! in loopback to an XRC_TGT QP that serves an XRC SRQ (WQEs with an xrc_seg), then runs a
//! sequence of operations: send and receive WQEs with known opcodes (atomics on RC) whose SGEs name live
//! MRs (offsets and lengths at the edges, sometimes mutated), doorbells at or near the
//! producer index, CQ arming, CQ/EQ polling, QP state changes, MR deregistration during
//! traffic, raw WQE bytes, and memory operations (REG_MR of fast-registration MRs when the
//! side is the kernel's, LOCAL_INV, BIND_MW of type 1 and 2 windows, SEND_WITH_INV) whose
//! keys then serve as lkeys and rkeys.
//!
//! Oracles: every CQE that appears is well-formed (known status, vendor_err and, on
//! success, opcode; a QP of this CQ; a wr_id that was posted); every EQE has a known type and
//! zero reserved bytes; a sentinel QP pair in another context still completes an RDMA WRITE
//! with the right bytes, and the admin queue still answers; the device never writes guest
//! RAM outside the rings and MRs the input registered.

use std::cell::RefCell;
use std::collections::HashSet;
use std::time::Instant;

use vm_memory::ByteValued;
use vrnic_hw::*;

use super::admin::check_alive;
use super::aq::{self, Aq, Done};
use super::glue::{self, Dev};
use super::guest::{CanaryRam, PAGE};
use super::input::Input;
use super::objs::{buffer, describe, Heap, Layout, LAYOUTS};
use super::rig::{Rig, ACQ_ADDR, AQ_ADDR, OUTSIDE_ADDRS};
use super::stats;
use crate::harness::TIMEOUT;

thread_local! {
    /// Two IB-mode devices, two RoCE-mode ones, and two RoCE-mode ones on two hosts joined
    /// by a RoCEv2 wire: an input's first byte picks the pair (bit 0: RoCE; with it, bit
    /// 1: the wire pair).
    static RIGS: RefCell<[Option<Rig>; 3]> = const { RefCell::new([None, None, None]) };
}

/// Runs one input (the function both runners call).
pub fn run_one(input: &[u8]) {
    RIGS.with(|cell| {
        let mut rigs = cell.borrow_mut();
        let first = input.first().copied().unwrap_or(0);
        let roce = first & 1 == 1;
        let which = usize::from(roce) + usize::from(roce && first & 2 != 0);
        let rig = rigs[which].get_or_insert_with(|| match which {
            0 => Rig::with_links(vec![glue::ib(0), glue::ib(1)], true),
            1 => Rig::with_links(vec![glue::roce(0), glue::roce(1)], true),
            _ => Rig::wire_pair(true),
        });
        let sent = rig.world.wire_frames();
        run(rig, input.get(1..).unwrap_or_default(), roce);
        if rig.world.wire_frames() > sent {
            stats::count("wqe", "an input put frames on the RoCEv2 wire");
        }
    });
}

/// Forgets the rigs after a failure; the next input builds new ones.
pub fn discard() {
    RIGS.with(|cell| {
        if let Ok(mut rigs) = cell.try_borrow_mut() {
            for slot in rigs.iter_mut() {
                std::mem::forget(slot.take());
            }
        }
    });
}

/// RoCE rigs: device `n` (1-based, as IB LIDs are) holds GID 0 ::ffff:10.0.0.n; the
/// inputs name peers by that number in both modes.
fn gid_of(n: u16) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[10, 0, 0, n as u8]);
    g
}

/// RoCE rigs: device `n`'s MAC (`glue::roce(n - 1)`), where a peer's frames go.
fn mac_of(n: u16) -> [u8; 6] {
    [0x02, 0xf0, 0, 0, 0, n as u8]
}

fn is_datagram(kind: QpType) -> bool {
    matches!(kind, QpType::Ud | QpType::Gsi)
}

/// Every access right but MW_BIND (the inputs bind no windows).
const ACCESS_ALL: u32 = ACCESS_SUPPORTED_MASK & !(Access::MwBind as u32);

#[derive(Debug, Clone)]
struct Ring {
    pages: Vec<u64>,
    depth_log2: u32,
    entry_shift: u32,
}

impl Ring {
    fn depth(&self) -> u32 {
        1 << self.depth_log2
    }

    fn entry(&self, index: u32) -> u64 {
        let off = u64::from(index & (self.depth() - 1)) << self.entry_shift;
        self.pages[(off / PAGE) as usize] + off % PAGE
    }

    fn phase(&self, ci: u32) -> u8 {
        (((ci >> self.depth_log2) & 1) ^ 1) as u8
    }
}

struct Cq {
    cqn: u32,
    /// Doorbell page (of `uctx`) and slot, as CREATE_CQ returned them.
    page: u32,
    slot: u32,
    uctx: u32,
    ring: Ring,
    ci: u32,
    arm_seq: u32,
}

struct Eq {
    eqn: u32,
    page: u32,
    slot: u32,
    ring: Ring,
    ci: u32,
}

struct Qp {
    qpn: u32,
    /// RC, UC, UD, GSI or XRC_INI.
    kind: QpType,
    /// UD and GSI: the (device number, QPN) its datagrams go to.
    ud_peer: (u16, u32),
    uctx: u32,
    page: u32,
    slot: u32,
    sq: Ring,
    rq: Ring,
    sq_pi: u32,
    rq_pi: u32,
    /// WQEs the device completed (from CQEs' wqe_index), as a driver tracks them to never
    /// post more than the ring holds.
    sq_done: u32,
    rq_done: u32,
    max_send_sge: u8,
    max_recv_sge: u8,
    max_inline: u32,
    /// Indexes in `Ctx::cqs`.
    cqs: [usize; 2],
    /// Its receives come from the input's SRQ (`Ctx::srq`).
    on_srq: bool,
}

/// The input's SRQ, which some of its QPs take their receives from.
struct Srq {
    srqn: u32,
    uctx: u32,
    page: u32,
    slot: u32,
    ring: Ring,
    max_sge: u8,
    pi: u32,
    /// WQEs completed (from receive CQEs' wqe_index), approximately: WQEs of an SRQ
    /// complete out of order.
    done: u32,
}

/// XRC: the XRC_TGT QP (kernel, no rings) serving the input's XRC SRQ, and the index in
/// `Ctx::cqs` of the SRQ's CQ (where the TGT QP's completions appear).
#[derive(Clone, Copy)]
struct XrcTgt {
    qpn: u32,
    cq: usize,
}

#[derive(Debug, Clone)]
struct Mr {
    key: u32,
    iova: u64,
    len: u64,
    pages: Vec<u64>,
    first: u64,
}

impl Mr {
    /// The guest-physical pieces of `[offset, offset + len)` of the MR.
    fn pieces(&self, offset: u64, len: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = self.first + offset;
        let end = at + len;
        while at < end {
            let n = (PAGE - at % PAGE).min(end - at);
            out.push((self.pages[(at / PAGE) as usize] + at % PAGE, n));
            at += n;
        }
        out
    }
}

/// One input's world on the device.
struct Ctx<'r> {
    dev: &'r mut Dev,
    ram: &'r mut CanaryRam,
    aqram: &'r mut CanaryRam,
    heap: Heap,
    aq: Aq,
    eqs: Vec<Eq>,
    cqs: Vec<Cq>,
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
    /// The user context's two PDs.
    pds: [u32; 2],
    /// MRs of the responder's device when it is another one (None: this device's).
    remote: Option<Vec<Mr>>,
    /// Keys of deregistered MRs (still named by SGEs now and then).
    stale_keys: Vec<u32>,
    /// Fast-registration MRs (key, max_pages) and memory windows (rkey) of the input's
    /// context, named by memory operations.
    frmrs: Vec<(u32, u32)>,
    mws: Vec<u32>,
    /// wr_ids that may legitimately appear in a CQE (0: a zeroed ring slot).
    wr_ids: HashSet<u64>,
    next_wr: u64,
    /// The devices are in RoCE mode: peers are named by GID.
    roce: bool,
    cqes: u64,
    srq: Option<Srq>,
    /// XRC mode: the TGT QP the input's XRC_INI QP is connected to (its SRQ is `srq`).
    xrc_tgt: Option<XrcTgt>,
}

fn admin_ok<T: ByteValued>(c: &mut Ctx, cmd: &T, what: &str) -> [u32; 4] {
    let done: Done = c.aq.run(c.dev, c.aqram, cmd);
    done.ok()
        .unwrap_or_else(|| panic!("set-up command {what} failed: {done:?}"))
}

fn hdr(op: AqOpcode) -> AqHeader {
    AqHeader {
        opcode: op.into(),
        ..Default::default()
    }
}

fn handle_cmd(op: AqOpcode, handle: u32, uctx: u32) -> CmdHandle {
    CmdHandle {
        hdr: hdr(op),
        handle: handle.into(),
        uctx: uctx.into(),
        ..Default::default()
    }
}

/// A zeroed ring, contiguous or scattered, allowed for device writes.
fn ring(c: &mut Ctx, depth_log2: u32, entry_shift: u32, layout: Layout) -> (PageList, Ring) {
    let bytes = 1u64 << (depth_log2 + entry_shift);
    let (list, pages) = buffer(c.ram, &mut c.heap, bytes, 12, layout);
    for &p in &pages {
        c.ram.write(p, &[0u8; PAGE as usize]);
        c.ram.allow(p, PAGE);
    }
    (
        list,
        Ring {
            pages,
            depth_log2,
            entry_shift,
        },
    )
}

fn create_eq(c: &mut Ctx, is_async: bool, vector: u16) {
    let (list, ring) = ring(c, 6, 4, Layout::Contiguous);
    let cmd = CmdCreateEq {
        hdr: hdr(AqOpcode::CreateEq),
        depth_log2: 6,
        flags: if is_async { EQ_FLAG_ASYNC as u8 } else { 0 },
        msix_vector: vector.into(),
        ring: list,
        ..Default::default()
    };
    let [eqn, slot, page, _] = admin_ok(c, &cmd, "CREATE_EQ");
    c.eqs.push(Eq {
        eqn,
        page,
        slot,
        ring,
        ci: 0,
    });
}

/// A CQ of `uctx` whose events go to the completion EQ; returns its index in `c.cqs`.
fn create_cq(c: &mut Ctx, uctx: u32, depth_log2: u32, layout: Layout) -> usize {
    let (list, ring) = ring(c, depth_log2, Cqe::SIZE.trailing_zeros(), layout);
    let cmd = CmdCreateCq {
        hdr: hdr(AqOpcode::CreateCq),
        uctx: uctx.into(),
        eqn: c.eqs[1].eqn.into(),
        depth_log2: depth_log2 as u8,
        ring: list,
        ..Default::default()
    };
    let [cqn, slot, page, _] = admin_ok(c, &cmd, "CREATE_CQ");
    if super::admin::trace() {
        eprintln!("wqe: CQ {cqn}: 2^{depth_log2} entries, {layout:?}, slot {slot} of page {page}");
    }
    c.cqs.push(Cq {
        cqn,
        page,
        slot,
        uctx,
        ring,
        ci: 0,
        arm_seq: 0,
    });
    c.cqs.len() - 1
}

/// The smallest WQE size (log2) holding `header` + `body` bytes, within `min..=max`.
fn wqe_shift(header: usize, body: usize, min: u32, max: u32) -> u32 {
    (min..=max).find(|s| header + body <= 1 << s).unwrap_or(max)
}

#[derive(Clone, Copy)]
struct Caps {
    sq_depth_log2: u32,
    rq_depth_log2: u32,
    max_send_sge: u8,
    max_recv_sge: u8,
    max_inline: u32,
    layout: Layout,
    kind: QpType,
}

impl Caps {
    fn from_input(inp: &mut Input, kind: QpType) -> Self {
        Caps {
            kind,
            sq_depth_log2: 2 + inp.below(5) as u32,
            rq_depth_log2: 2 + inp.below(5) as u32,
            max_send_sge: 1 + inp.below(4) as u8,
            max_recv_sge: 1 + inp.below(4) as u8,
            max_inline: [0, 16, 64, 200][inp.below(4)],
            layout: inp.pick(LAYOUTS),
        }
    }
}

/// An SRQ of `uctx` in PD `pd` (`c.srq`); with `xrc` (domain, CQ index) an XRC SRQ.
fn create_srq(inp: &mut Input, c: &mut Ctx, uctx: u32, pd: u32, xrc: Option<(u32, usize)>) {
    let depth_log2 = 2 + inp.below(5) as u32;
    let max_sge = 1 + inp.below(4) as u8;
    let shift = wqe_shift(
        RecvWqeHeader::SIZE,
        Sge::SIZE * usize::from(max_sge),
        RECV_WQE_SHIFT_MIN,
        RECV_WQE_SHIFT_MAX,
    );
    let layout = inp.pick(LAYOUTS);
    let (list, ring) = ring(c, depth_log2, shift, layout);
    let cmd = CmdCreateSrq {
        hdr: hdr(AqOpcode::CreateSrq),
        uctx: uctx.into(),
        pdn: pd.into(),
        depth_log2: depth_log2 as u8,
        wqe_shift: shift as u8,
        max_sge,
        ring: list,
        ..Default::default()
    };
    let cmd = match xrc {
        Some((xrcdn, cq)) => CmdCreateSrq {
            srq_type: SrqType::Xrc.into(),
            xrcdn: xrcdn.into(),
            cqn: c.cqs[cq].cqn.into(),
            ..cmd
        },
        None => cmd,
    };
    let [srqn, slot, page, _] = admin_ok(c, &cmd, "CREATE_SRQ");
    c.srq = Some(Srq {
        srqn,
        uctx,
        page,
        slot,
        ring,
        max_sge,
        pi: 0,
        done: 0,
    });
}

fn create_qp(c: &mut Ctx, uctx: u32, pd: u32, send_cq: usize, recv_cq: usize, caps: Caps) -> usize {
    // A UD WQE carries its ud_av before the payload, an XRC_INI WQE its xrc_seg.
    let xrc_ini = caps.kind == QpType::XrcIni;
    let (header, min) = match (is_datagram(caps.kind), xrc_ini) {
        (true, _) => (UD_PAYLOAD_OFFSET as usize, UD_SEND_WQE_SHIFT_MIN),
        (false, true) => (XRC_PAYLOAD_OFFSET as usize, XRC_SEND_WQE_SHIFT_MIN),
        (false, false) => (SendWqeHeader::SIZE, SEND_WQE_SHIFT_MIN),
    };
    let sq_shift = wqe_shift(
        header,
        (Sge::SIZE * usize::from(caps.max_send_sge)).max(caps.max_inline as usize),
        min,
        SEND_WQE_SHIFT_MAX,
    );
    let rq_shift = wqe_shift(
        RecvWqeHeader::SIZE,
        Sge::SIZE * usize::from(caps.max_recv_sge),
        RECV_WQE_SHIFT_MIN,
        RECV_WQE_SHIFT_MAX,
    );
    let (sq_list, sq) = ring(c, caps.sq_depth_log2, sq_shift, caps.layout);
    let (rq_list, rq) = ring(c, caps.rq_depth_log2, rq_shift, caps.layout);
    // The input's QPs use its SRQ (the GSI QP cannot; the sentinel's context has none).
    let srqn = c
        .srq
        .as_ref()
        .filter(|s| caps.kind != QpType::Gsi && s.uctx == uctx && !xrc_ini)
        .map(|s| s.srqn);
    let cmd = CmdCreateQp {
        hdr: hdr(AqOpcode::CreateQp),
        uctx: uctx.into(),
        pdn: pd.into(),
        send_cqn: c.cqs[send_cq].cqn.into(),
        recv_cqn: c.cqs[recv_cq].cqn.into(),
        qp_type: caps.kind.into(),
        sq_depth_log2: caps.sq_depth_log2 as u8,
        rq_depth_log2: caps.rq_depth_log2 as u8,
        sq_wqe_shift: sq_shift as u8,
        rq_wqe_shift: rq_shift as u8,
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline: caps.max_inline.into(),
        sq_ring: sq_list,
        rq_ring: rq_list,
        ..Default::default()
    };
    let cmd = match srqn {
        Some(srqn) => CmdCreateQp {
            flags: QP_FLAG_SRQ as u8,
            srqn: srqn.into(),
            rq_depth_log2: 0,
            rq_wqe_shift: 0,
            max_recv_sge: 0,
            rq_ring: PageList::default(),
            ..cmd
        },
        // XRC_INI: no receive side at all.
        None if xrc_ini => CmdCreateQp {
            recv_cqn: 0.into(),
            rq_depth_log2: 0,
            rq_wqe_shift: 0,
            max_recv_sge: 0,
            rq_ring: PageList::default(),
            ..cmd
        },
        None => cmd,
    };
    let [qpn, slot, page, _] = admin_ok(c, &cmd, "CREATE_QP");
    if super::admin::trace() {
        eprintln!(
            "wqe: QP {qpn}: SQ pages {:#x?} RQ pages {:x?}",
            sq.pages, rq.pages
        );
    }
    c.qps.push(Qp {
        qpn,
        kind: caps.kind,
        ud_peer: (0, 0),
        uctx,
        page,
        slot,
        sq,
        rq,
        sq_pi: 0,
        rq_pi: 0,
        sq_done: 0,
        rq_done: 0,
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline: caps.max_inline,
        cqs: [send_cq, recv_cq],
        // XRC_INI: its receive operations feed the XRC SRQ its TGT QP serves.
        on_srq: srqn.is_some() || xrc_ini,
    });
    c.qps.len() - 1
}

fn modify(c: &mut Ctx, qp: usize, mask: u32, attr: QpAttr) -> Done {
    let (qpn, uctx) = (c.qps[qp].qpn, c.qps[qp].uctx);
    modify_qpn(c, qpn, uctx, mask, attr)
}

fn modify_qpn(c: &mut Ctx, qpn: u32, uctx: u32, mask: u32, attr: QpAttr) -> Done {
    let cmd = CmdModifyQp {
        hdr: hdr(AqOpcode::ModifyQp),
        qpn: qpn.into(),
        attr_mask: mask.into(),
        attr,
        uctx: uctx.into(),
        // RoCE: where the peer's frames go (on a wire pair, its wire port).
        dmac: match c.roce && mask & QpAttrMask::Av as u32 != 0 {
            true => mac_of(attr.dlid.to_native()),
            false => [0; 6],
        },
        ..Default::default()
    };
    c.aq.run(c.dev, c.aqram, &cmd)
}

#[derive(Clone, Copy)]
struct Conn {
    access: u32,
    mtu: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    rd_atomic: u8,
    dlid: u16,
    /// UD: the QP's Q_Key.
    qkey: u32,
}

/// The Q_Key of the inputs' UD QPs.
const UD_QKEY: u32 = 0x0123_4567;

impl Conn {
    fn sentinel() -> Self {
        Conn {
            access: ACCESS_ALL,
            mtu: Mtu::Size4096.into(),
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 16,
            dlid: 1,
            qkey: UD_QKEY,
        }
    }

    fn from_input(inp: &mut Input, dlid: u16) -> Self {
        Conn {
            access: if !inp.mutate(10) {
                ACCESS_ALL
            } else {
                u32::from(inp.u8()) & ACCESS_ALL
            },
            mtu: 1 + inp.below(5) as u8,
            // Mostly a patient requester (7: retry RNR forever), as perftest configures.
            retry_cnt: if inp.mutate(20) {
                inp.below(8) as u8
            } else {
                7
            },
            rnr_retry: if inp.mutate(20) {
                inp.below(7) as u8
            } else {
                7
            },
            min_rnr_timer: inp.below(4) as u8,
            rd_atomic: 1 + inp.below(16) as u8,
            dlid: if inp.mutate(5) {
                inp.pick(&[0, 1, 2, 3, 0xffff])
            } else {
                dlid
            },
            qkey: if inp.mutate(10) { inp.u32() } else { UD_QKEY },
        }
    }
}

/// RESET -> INIT -> RTR -> RTS towards `dest`; the outcome of each step (they may fail
/// when the input moved the QP elsewhere first).
fn connect(c: &mut Ctx, qp: usize, dest: u32, o: Conn) -> bool {
    let ok = match is_datagram(c.qps[qp].kind) {
        true => {
            // A datagram QP has no connection: its sends name (dlid, dest) in every WQE.
            c.qps[qp].ud_peer = (o.dlid, dest);
            ud_steps(c, qp, o)
        }
        false => {
            let q = &c.qps[qp];
            let (qpn, uctx, kind) = (q.qpn, q.uctx, q.kind);
            connect_steps(c, (qpn, uctx), kind, dest, o)
        }
    };
    if super::admin::trace() {
        eprintln!("wqe: connect QP {} to {dest}: {ok}", c.qps[qp].qpn);
    }
    ok
}

/// RESET -> INIT (P_Key index, port, Q_Key) -> RTR -> RTS (SQ PSN) of a UD QP.
fn ud_steps(c: &mut Ctx, qp: usize, o: Conn) -> bool {
    use QpAttrMask::*;
    let m = |bits: &[QpAttrMask]| bits.iter().fold(0u32, |a, b| a | *b as u32);
    let steps = [
        (
            m(&[State, PkeyIndex, Port, Qkey]),
            QpAttr {
                qp_state: QpState::Init.into(),
                port_num: PORT_NUM as u8,
                qkey: o.qkey.into(),
                ..Default::default()
            },
        ),
        (
            m(&[State]),
            QpAttr {
                qp_state: QpState::Rtr.into(),
                ..Default::default()
            },
        ),
        (
            m(&[State, SqPsn]),
            QpAttr {
                qp_state: QpState::Rts.into(),
                sq_psn: 0x200u32.into(),
                ..Default::default()
            },
        ),
    ];
    steps
        .into_iter()
        .all(|(mask, attr)| modify(c, qp, mask, attr).status == AqStatus::Success)
}

/// RC; UC (which takes none of RC's READ, atomic, RNR and retry attributes); XRC_INI (no
/// responder attributes) or XRC_TGT (no requester ones) of QP `(qpn, uctx)`.
fn connect_steps(c: &mut Ctx, (qpn, uctx): (u32, u32), kind: QpType, dest: u32, o: Conn) -> bool {
    use QpAttrMask::*;
    let m = |bits: &[QpAttrMask]| bits.iter().fold(0u32, |a, b| a | *b as u32);
    let init = QpAttr {
        qp_state: QpState::Init.into(),
        port_num: PORT_NUM as u8,
        qp_access_flags: o.access.into(),
        ..Default::default()
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr.into(),
        path_mtu: o.mtu,
        dest_qp_num: dest.into(),
        rq_psn: 0x200u32.into(),
        max_dest_rd_atomic: o.rd_atomic,
        min_rnr_timer: o.min_rnr_timer,
        dlid: o.dlid.into(),
        // RoCE mode: the peer by GRH (MODIFY_QP refuses an AV without one).
        is_global: u8::from(c.roce),
        dgid: if c.roce { gid_of(o.dlid) } else { [0; 16] },
        hop_limit: 64,
        ..Default::default()
    };
    let rts = QpAttr {
        qp_state: QpState::Rts.into(),
        timeout: 8,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        sq_psn: 0x200u32.into(),
        max_rd_atomic: o.rd_atomic,
        ..Default::default()
    };
    let keep = match kind {
        QpType::Uc => !m(&[
            MaxDestRdAtomic,
            MinRnrTimer,
            Timeout,
            RetryCnt,
            RnrRetry,
            MaxQpRdAtomic,
        ]),
        QpType::XrcIni => !m(&[MaxDestRdAtomic, MinRnrTimer]),
        QpType::XrcTgt => !m(&[RetryCnt, RnrRetry, MaxQpRdAtomic]),
        _ => u32::MAX,
    };
    let steps = [
        (m(&[State, PkeyIndex, Port, AccessFlags]), init),
        (
            m(&[
                State,
                Av,
                PathMtu,
                DestQpn,
                RqPsn,
                MaxDestRdAtomic,
                MinRnrTimer,
            ]),
            rtr,
        ),
        (
            m(&[State, Timeout, RetryCnt, RnrRetry, SqPsn, MaxQpRdAtomic]),
            rts,
        ),
    ];
    steps
        .into_iter()
        .all(|(mask, attr)| modify_qpn(c, qpn, uctx, mask & keep, attr).status == AqStatus::Success)
}

/// What REG_MR registers: `len` bytes from byte `first` of fresh pages in `layout`, or of
/// the given pages (anywhere, mapped or not).
struct MrReq {
    uctx: u32,
    pd: u32,
    len: u64,
    access: u32,
    pages: Option<Vec<u64>>,
    layout: Layout,
    first: u64,
}

fn reg_mr(c: &mut Ctx, req: MrReq) -> Option<Mr> {
    let MrReq {
        uctx,
        pd,
        len,
        access,
        pages,
        layout,
        first,
    } = req;
    let n = (first + len).div_ceil(PAGE).max(1);
    let (list, pages) = match pages {
        Some(p) => {
            let list = describe(c.ram, &mut c.heap, &p, 12, layout);
            (list, p)
        }
        None => buffer(c.ram, &mut c.heap, n * PAGE, 12, layout),
    };
    for &p in &pages {
        c.ram.allow(p, PAGE);
    }
    c.next_wr += 1;
    let iova = 0x7f00_0000_0000u64 + (c.next_wr << 30) + first;
    let cmd = CmdRegMr {
        hdr: hdr(AqOpcode::RegMr),
        pdn: pd.into(),
        access: access.into(),
        iova: iova.into(),
        length: len.into(),
        pages: list,
        uctx: uctx.into(),
        ..Default::default()
    };
    let done = c.aq.run(c.dev, c.aqram, &cmd);
    let key = done.ok()?[0];
    if super::admin::trace() {
        eprintln!(
            "wqe: MR {key:#x} pd {pd} iova {iova:#x} len {len:#x} first {first:#x} pages {:x?}",
            &pages[..pages.len().min(4)]
        );
    }
    Some(Mr {
        key,
        iova,
        len,
        pages,
        first,
    })
}

/// Rings word `word` of doorbell slot `slot` of page `page` (a trapped BAR2 write, which
/// also wakes the poller).
fn doorbell(dev: &mut Dev, page: u32, slot: u32, word: u32, value: u32) {
    let offset =
        u64::from(page) * u64::from(DB_PAGE_SIZE) + db_slot_offset(slot) + u64::from(word) * 4;
    if offset + 4 <= u64::from(BAR_DB_SIZE) {
        dev.write32(BAR_DB, offset, value);
    }
}

/// SPEC "Posting work" for a QP doorbell: the producer index, then the slot's flag byte,
/// then PAGE_FLAG (each a trapped BAR2 write; `flags` false leaves them out, as a buggy
/// driver might).
fn qp_doorbell(dev: &mut Dev, page: u32, slot: u32, word: u32, value: u32, flags: bool) {
    doorbell(dev, page, slot, word, value);
    if !flags {
        return;
    }
    let base = u64::from(page) * u64::from(DB_PAGE_SIZE);
    if base + u64::from(DB_PAGE_SIZE) <= u64::from(BAR_DB_SIZE) {
        let _ = dev.write(BAR_DB, base + db_flag_offset(slot), &[1]);
        dev.write32(BAR_DB, base + db_page::PAGE_FLAG, 1);
    }
}

/// An SGE into a live MR (at its edges, sometimes past them or with a stale key).
fn sge(inp: &mut Input, c: &Ctx) -> Sge {
    if c.mrs.is_empty() || inp.mutate(2) {
        return Sge {
            addr: inp.u64().into(),
            length: inp.u32().into(),
            lkey: inp.u32().into(),
        };
    }
    let mr = &c.mrs[inp.below(c.mrs.len())];
    let offset = inp.len_up_to(mr.len);
    let len = inp.len_up_to((mr.len - offset).min(64 << 10));
    let key = if !c.stale_keys.is_empty() && inp.mutate(3) {
        c.stale_keys[inp.below(c.stale_keys.len())]
    } else {
        mr.key
    };
    let sge = Sge {
        addr: (mr.iova + offset).into(),
        length: (len as u32).into(),
        lkey: key.into(),
    };
    if !inp.mutate(8) {
        return sge;
    }
    Sge {
        addr: inp.mostly_u64(sge.addr.to_native()).into(),
        length: inp.mostly_u32(sge.length.to_native()).into(),
        lkey: inp.mostly_u32(key).into(),
    }
}

fn new_wr_id(c: &mut Ctx) -> u64 {
    c.next_wr += 1;
    let id = 0x5700_0000_0000_0000 | c.next_wr;
    c.wr_ids.insert(id);
    id
}

fn post_send(inp: &mut Input, c: &mut Ctx, qp: usize) {
    let ud = is_datagram(c.qps[qp].kind);
    let opcodes: &[WrOpcode] = match c.qps[qp].kind {
        _ if ud => &[WrOpcode::Send, WrOpcode::SendWithImm],
        // UC: no READ, no atomics (they fail with BAD_OPCODE: now and then drawn anyway).
        QpType::Uc => &[
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWriteWithImm,
            WrOpcode::Send,
            WrOpcode::SendWithImm,
        ],
        _ => &[
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWriteWithImm,
            WrOpcode::Send,
            WrOpcode::SendWithImm,
            WrOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp,
            WrOpcode::AtomicFetchAndAdd,
        ],
    };
    let opcode: u8 = if inp.mutate(2) {
        inp.u8()
    } else if inp.mutate(10) {
        inp.pick(&[WrOpcode::AtomicFetchAndAdd, WrOpcode::RdmaRead])
            .into()
    } else {
        inp.pick(opcodes).into()
    };
    if WrOpcode::try_from(opcode).is_ok_and(is_atomic) && !inp.mutate(10) {
        return post_atomic(inp, c, qp, opcode);
    }
    let mut flags = u8::from(SendFlags::Signaled) * u8::from(inp.chance(80));
    if inp.chance(10) {
        flags |= u8::from(SendFlags::Fence);
    }
    if inp.chance(10) {
        flags |= u8::from(SendFlags::Solicited);
    }
    let inline = inp.chance(15);
    if inline {
        flags |= u8::from(SendFlags::Inline);
    }
    let flags = if inp.mutate(5) {
        inp.mostly_u8(flags)
    } else {
        flags
    };
    let max_sge = c.qps[qp].max_send_sge;
    let num_sge = inp.mostly_u8_below(usize::from(max_sge) + 1);
    let mut body = Vec::new();
    let mut inline_len = 0u32;
    if inline {
        let max_inline = c.qps[qp].max_inline;
        inline_len = {
            let v = inp.len_up_to(u64::from(max_inline)) as u32;
            inp.mostly_u32(v)
        };
        body = vec![0xa5; inline_len.min(1024) as usize];
    } else {
        for _ in 0..num_sge.min(16) {
            let mut sge = sge(inp, c);
            if ud && !inp.mutate(10) {
                // Mostly within the MTU (UD_MAX_PAYLOAD over at most four SGEs).
                sge.length = sge.length.to_native().min(1024).into();
            }
            body.extend_from_slice(sge.as_slice());
        }
    }
    let remote = c.remote.as_ref().unwrap_or(&c.mrs);
    let (remote_addr, rkey) = if ud && !inp.mutate(10) {
        (0, 0)
    } else if remote.is_empty() || inp.mutate(5) {
        (inp.u64(), inp.u32())
    } else {
        // The message's length (SGEs or inline), so that the remote range mostly fits.
        let msg: u64 = if inline {
            u64::from(inline_len)
        } else {
            body.chunks(Sge::SIZE)
                .map(|s| u64::from(u32::from_le_bytes([s[8], s[9], s[10], s[11]])))
                .sum()
        };
        let mr = &remote[inp.below(remote.len())];
        let off = inp.len_up_to(mr.len.saturating_sub(msg));
        let (addr, key) = (mr.iova + off, mr.key);
        if inp.mutate(8) {
            (inp.mostly_u64(addr), inp.mostly_u32(key))
        } else {
            (addr, key)
        }
    };
    let wr_id = new_wr_id(c);
    let header = SendWqeHeader {
        opcode,
        flags,
        num_sge: if inline { inp.mostly_u8(0) } else { num_sge },
        reserved0: if inp.mutate(2) { inp.u8() } else { 0 },
        imm_data: inp.u32().to_le_bytes(),
        wr_id: wr_id.into(),
        remote_addr: remote_addr.into(),
        rkey: rkey.into(),
        inline_len: inline_len.into(),
    };
    let mut wqe = header.as_slice().to_vec();
    if ud {
        wqe.extend_from_slice(ud_av(inp, c.qps[qp].ud_peer, c.roce).as_slice());
    }
    xrc_seg(inp, c, qp, &mut wqe);
    wqe.extend_from_slice(&body);
    if super::admin::trace() {
        let sges: Vec<Sge> = body
            .chunks_exact(Sge::SIZE)
            .map(|b| Sge {
                addr: u64::from_le_bytes(b[..8].try_into().unwrap_or_default()).into(),
                length: u32::from_le_bytes(b[8..12].try_into().unwrap_or_default()).into(),
                lkey: u32::from_le_bytes(b[12..16].try_into().unwrap_or_default()).into(),
            })
            .collect();
        eprintln!("wqe: post on QP {}: {header:?} {sges:?}", c.qps[qp].qpn);
    }
    write_sq(c, qp, &wqe);
}

/// XRC_INI: appends the xrc_seg naming the input's XRC SRQ (now and then another SRQ, or
/// reserved bytes set).
fn xrc_seg(inp: &mut Input, c: &Ctx, qp: usize, wqe: &mut Vec<u8>) {
    if c.qps[qp].kind != QpType::XrcIni {
        return;
    }
    let srqn = c.srq.as_ref().map_or(0, |s| s.srqn);
    let seg = XrcSeg {
        remote_srqn: inp.mostly_u32(srqn).into(),
        reserved0: if inp.mutate(3) { inp.u32() } else { 0 }.into(),
        ..Default::default()
    };
    wqe.extend_from_slice(seg.as_slice());
}

fn is_atomic(op: WrOpcode) -> bool {
    matches!(op, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
}

/// An atomic WQE: header, atomic_seg, one SGE of 8 bytes for the original value, aimed at
/// an 8-byte word of a remote MR; now and then with another SGE count or length, or a
/// misaligned or arbitrary remote address.
fn post_atomic(inp: &mut Input, c: &mut Ctx, qp: usize, opcode: u8) {
    let mut result = sge(inp, c);
    if !inp.mutate(10) {
        result.length = 8.into();
    }
    let remote = c.remote.as_ref().unwrap_or(&c.mrs);
    let (remote_addr, rkey) = if remote.is_empty() || inp.mutate(8) {
        (inp.u64(), inp.u32())
    } else {
        let mr = &remote[inp.below(remote.len())];
        let off = inp.len_up_to(mr.len.saturating_sub(8)) & !7;
        let misalign = if inp.mutate(10) {
            1 + inp.below(7) as u64
        } else {
            0
        };
        (mr.iova + off + misalign, mr.key)
    };
    let wr_id = new_wr_id(c);
    let flags = u8::from(SendFlags::Signaled) * u8::from(inp.chance(80));
    let header = SendWqeHeader {
        opcode,
        flags: inp.mostly_u8(flags),
        num_sge: inp.mostly_u8(1),
        wr_id: wr_id.into(),
        remote_addr: remote_addr.into(),
        rkey: rkey.into(),
        ..Default::default()
    };
    let seg = AtomicSeg {
        compare_add: inp.u64().into(),
        swap: inp.u64().into(),
    };
    let mut wqe = header.as_slice().to_vec();
    xrc_seg(inp, c, qp, &mut wqe);
    wqe.extend_from_slice(seg.as_slice());
    wqe.extend_from_slice(result.as_slice());
    if super::admin::trace() {
        eprintln!(
            "wqe: atomic on QP {}: {header:?} {seg:?} {result:?}",
            c.qps[qp].qpn
        );
    }
    write_sq(c, qp, &wqe);
}

/// The address vector of a UD send to `(dlid, qpn)`: mostly right, now and then with
/// another QPN, Q_Key (bit 31: the QP's own), a GRH or spoiled fields.
fn ud_av(inp: &mut Input, (dlid, qpn): (u16, u32), roce: bool) -> UdAv {
    // RoCE mode needs the GRH; IB mode takes one now and then.
    let global = if roce {
        !inp.mutate(10)
    } else {
        inp.chance(20)
    };
    let qkey = if inp.chance(20) { 1 << 31 } else { UD_QKEY };
    let mut av = UdAv {
        remote_qpn: inp.mostly_u32(qpn).into(),
        remote_qkey: inp.mostly_u32(qkey).into(),
        dlid: inp.mostly_u16(dlid).into(),
        sl: inp.mostly_u8(0),
        is_global: inp.mostly_u8(u8::from(global)),
        hop_limit: inp.u8(),
        traffic_class: inp.u8(),
        flow_label: inp.u32().into(),
        ..Default::default()
    };
    if global && roce {
        av.dgid = gid_of(dlid);
        av.dmac = mac_of(dlid);
    } else if global {
        av.dgid[0] = 0xfe;
        av.dgid[1] = 0x80;
        av.dgid[15] = inp.u8();
    }
    if inp.mutate(5) {
        av.reserved0 = inp.u8();
        av.sgid_index = inp.u8();
    }
    av
}

fn write_sq(c: &mut Ctx, qp: usize, bytes: &[u8]) {
    let q = &mut c.qps[qp];
    let stride = 1usize << q.sq.entry_shift;
    let mut wqe = bytes.to_vec();
    wqe.resize(stride, 0);
    let at = q.sq.entry(q.sq_pi);
    q.sq_pi = q.sq_pi.wrapping_add(1);
    c.ram.write(at, &wqe);
}

fn post_recv(inp: &mut Input, c: &mut Ctx, qp: usize) {
    let srq_sges = c
        .srq
        .as_ref()
        .filter(|_| c.qps[qp].on_srq)
        .map(|s| s.max_sge);
    let max_sge = srq_sges.unwrap_or(c.qps[qp].max_recv_sge);
    let num_sge = inp.mostly_u8_below(usize::from(max_sge) + 1);
    let wr_id = new_wr_id(c);
    let header = RecvWqeHeader {
        wr_id: wr_id.into(),
        num_sge,
        reserved0: if inp.mutate(2) {
            [inp.u8(), 0, 0, 0, 0, 0, 0]
        } else {
            [0; 7]
        },
    };
    let mut wqe = header.as_slice().to_vec();
    for _ in 0..num_sge.min(16) {
        wqe.extend_from_slice(sge(inp, c).as_slice());
    }
    let (ring, pi) = match c.srq.as_mut().filter(|_| c.qps[qp].on_srq) {
        Some(s) => (&s.ring, &mut s.pi),
        None => {
            let q = &mut c.qps[qp];
            (&q.rq, &mut q.rq_pi)
        }
    };
    let stride = 1usize << ring.entry_shift;
    wqe.resize(stride.max(wqe.len()), 0);
    wqe.truncate(stride);
    let at = ring.entry(*pi);
    *pi = pi.wrapping_add(1);
    c.ram.write(at, &wqe);
}

/// The receive producer index a QP's receives are posted at (its own, or its SRQ's), and
/// the depth and completed count of that ring.
fn recv_ring(c: &Ctx, qp: usize) -> (u32, u32, u32) {
    match c.srq.as_ref().filter(|_| c.qps[qp].on_srq) {
        Some(s) => (s.pi, s.ring.depth(), s.done),
        None => {
            let q = &c.qps[qp];
            (q.rq_pi, q.rq.depth(), q.rq_done)
        }
    }
}

/// A producer index near `pi`: itself mostly, else a little behind or ahead (up to past
/// the ring), or anything.
fn near(inp: &mut Input, pi: u32, depth: u32) -> u32 {
    match inp.u8() % 20 {
        0..=16 => pi,
        17 => pi.wrapping_sub(1 + inp.below(2) as u32),
        18 => pi.wrapping_add(1 + inp.below(depth as usize + 2) as u32),
        _ => inp.u32(),
    }
}

fn ring_sq(c: &mut Ctx, qp: usize, value: u32) {
    let (page, slot) = (c.qps[qp].page, c.qps[qp].slot);
    qp_doorbell(c.dev, page, slot, 0, value, true);
}

/// Publishes a receive producer index: the QP's (with the flags), or its SRQ's (the SRQ's
/// slot only: SRQ doorbells need no flag).
fn ring_rq(c: &mut Ctx, qp: usize, value: u32) {
    if let Some(s) = c.srq.as_ref().filter(|_| c.qps[qp].on_srq) {
        let (page, slot) = (s.page, s.slot);
        doorbell(c.dev, page, slot, 0, value);
        return;
    }
    let (page, slot) = (c.qps[qp].page, c.qps[qp].slot);
    qp_doorbell(c.dev, page, slot, 1, value, true);
}

/// Consumes and checks every CQE present on CQ `i`; returns them.
fn poll_cq(c: &mut Ctx, i: usize) -> Vec<Cqe> {
    let mut out = Vec::new();
    let mut qpns: Vec<u32> = c
        .qps
        .iter()
        .filter(|q| q.cqs.contains(&i))
        .map(|q| q.qpn)
        .collect();
    // The XRC SRQ's completions name the TGT QP.
    qpns.extend(c.xrc_tgt.filter(|t| t.cq == i).map(|t| t.qpn));
    for _ in 0..c.cqs[i].ring.depth() {
        let cq = &c.cqs[i];
        let addr = cq.ring.entry(cq.ci);
        let Some(owner) = c.ram.load::<u8>(addr + Cqe::OWNER_OFF as u64) else {
            break;
        };
        if owner & 1 != cq.ring.phase(cq.ci) {
            break;
        }
        let cqe: Cqe = c.ram.read_obj(addr).expect("CQE in RAM");
        if super::admin::trace() {
            eprintln!("wqe: CQ {} {cqe:?}", cq.cqn);
        }
        check_cqe(&cqe, &qpns, &c.wr_ids, cq.cqn);
        // Which memory operations got through (the statuses alone do not say).
        let memory_op = matches!(
            WcOpcode::try_from(cqe.opcode),
            Ok(WcOpcode::RegMr | WcOpcode::LocalInv | WcOpcode::BindMw)
        );
        if cqe.status == u8::from(WcStatus::Success)
            && cqe.flags & CQE_FLAG_RECV as u8 == 0
            && memory_op
        {
            stats::count(
                "wqe",
                format_args!("done {:?}", WcOpcode::try_from(cqe.opcode)),
            );
        }
        if cqe.wc_flags & u8::from(WcFlags::WithInv) != 0 {
            stats::count("wqe", format_args!("received WITH_INV"));
        }
        let kind = c
            .qps
            .iter()
            .find(|q| q.qpn == cqe.qpn.to_native())
            .map_or(QpType::Rc, |q| q.kind);
        let tgt_cqe = c.xrc_tgt.is_some_and(|t| t.qpn == cqe.qpn.to_native());
        stats::count(
            "wqe",
            format_args!(
                "{}{:?}/{:?}",
                match kind {
                    QpType::Ud => "UD ",
                    QpType::Gsi => "GSI ",
                    QpType::Uc => "UC ",
                    QpType::XrcIni => "XRC ",
                    _ if tgt_cqe => "XRC_TGT ",
                    _ => "",
                },
                WcStatus::try_from(cqe.status).unwrap_or(WcStatus::GeneralErr),
                VendorErr::try_from(cqe.vendor_err).unwrap_or(VendorErr::None)
            ),
        );
        let tgt = c.xrc_tgt.is_some_and(|t| t.qpn == cqe.qpn.to_native());
        if let Some(s) = c.srq.as_mut().filter(|_| tgt) {
            let depth = s.ring.depth();
            let idx = u32::from(cqe.wqe_index.to_native()) & (depth - 1);
            let ahead = idx.wrapping_sub(s.done & (depth - 1)) & (depth - 1);
            s.done = s.done.wrapping_add(ahead + 1);
        } else if let Some(q) = c.qps.iter_mut().find(|q| q.qpn == cqe.qpn.to_native()) {
            let srq = c.srq.as_mut().filter(|_| q.on_srq);
            let (done, depth) = match srq {
                _ if cqe.opcode & 0x80 == 0 => (&mut q.sq_done, q.sq.depth()),
                Some(s) => (&mut s.done, s.ring.depth()),
                None => (&mut q.rq_done, q.rq.depth()),
            };
            let idx = u32::from(cqe.wqe_index.to_native()) & (depth - 1);
            let ahead = idx.wrapping_sub(*done & (depth - 1)) & (depth - 1);
            *done = done.wrapping_add(ahead + 1);
        }
        let cq = &mut c.cqs[i];
        cq.ci = cq.ci.wrapping_add(1);
        let (page, slot, ci) = (cq.page, cq.slot, cq.ci);
        doorbell(c.dev, page, slot, 0, ci);
        c.cqes += 1;
        out.push(cqe);
    }
    out
}

fn check_cqe(cqe: &Cqe, qpns: &[u32], wr_ids: &HashSet<u64>, cqn: u32) {
    let status = WcStatus::try_from(cqe.status)
        .unwrap_or_else(|s| panic!("CQ {cqn}: CQE status {s} is not a wc_status: {cqe:?}"));
    let vendor = VendorErr::try_from(cqe.vendor_err)
        .unwrap_or_else(|v| panic!("CQ {cqn}: CQE vendor_err {v} unknown: {cqe:?}"));
    assert!(
        qpns.contains(&cqe.qpn.to_native()),
        "CQ {cqn}: CQE for QP {} which does not use this CQ: {cqe:?}",
        cqe.qpn.to_native()
    );
    assert!(
        wr_ids.contains(&cqe.wr_id.to_native()),
        "CQ {cqn}: CQE with a wr_id never posted: {cqe:?}"
    );
    assert_eq!(
        cqe.nonzero_reserved(),
        None,
        "CQ {cqn}: CQE with reserved bytes set: {cqe:?}"
    );
    assert!(
        NetworkType::try_from(cqe.network_type).is_ok(),
        "CQ {cqn}: CQE with an unknown network_type: {cqe:?}"
    );
    if status == WcStatus::Success {
        assert!(
            WcOpcode::try_from(cqe.opcode).is_ok(),
            "CQ {cqn}: successful CQE with unknown opcode: {cqe:?}"
        );
        assert_eq!(
            vendor,
            VendorErr::None,
            "CQ {cqn}: successful CQE with a vendor_err: {cqe:?}"
        );
    }
}

fn poll_eqs(c: &mut Ctx) {
    for i in 0..c.eqs.len() {
        for _ in 0..c.eqs[i].ring.depth() {
            let eq = &c.eqs[i];
            let addr = eq.ring.entry(eq.ci);
            let Some(owner) = c.ram.load::<u8>(addr + Eqe::OWNER_OFF as u64) else {
                break;
            };
            if owner & 1 != eq.ring.phase(eq.ci) {
                break;
            }
            let eqe: Eqe = c.ram.read_obj(addr).expect("EQE in RAM");
            if super::admin::trace() {
                eprintln!("wqe: EQ {} {eqe:?}", eq.eqn);
            }
            assert!(
                EventType::try_from(eqe.event_type).is_ok(),
                "EQ {}: unknown event type: {eqe:?}",
                eq.eqn
            );
            assert_eq!(
                eqe.nonzero_reserved(),
                None,
                "EQ {}: EQE reserved bytes: {eqe:?}",
                eq.eqn
            );
            stats::count(
                "wqe",
                format_args!(
                    "event {:?}",
                    EventType::try_from(eqe.event_type).unwrap_or(EventType::DeviceFatal)
                ),
            );
            let eq = &mut c.eqs[i];
            eq.ci = eq.ci.wrapping_add(1);
            let (page, slot, ci) = (eq.page, eq.slot, eq.ci);
            doorbell(c.dev, page, slot, 0, ci);
        }
    }
}

/// One device's user objects: a context, two PDs, two CQs shared by its QPs, its QPs and
/// where each QP is connected (LID, QPN).
struct Side {
    cqs: [usize; 2],
    qps: Vec<usize>,
    peers: Vec<(u16, u32)>,
}

/// The sentinel QP (connected to a twin on the same device), its CQ and its MR.
struct Sentinel {
    qp: usize,
    cq: usize,
    mr: Mr,
}

/// Creates the EQs, a user context with two PDs and two CQs, `n` QPs and a few MRs.
fn setup_side(inp: &mut Input, c: &mut Ctx, n: usize, kind: QpType) -> Side {
    create_eq(c, true, 0);
    create_eq(c, false, 1);
    // Now and then the kernel's own objects: only its QPs post REG_MR work requests.
    let uctx = match inp.chance(20) {
        true => KERNEL_UCTX,
        false => admin_ok(
            c,
            &handle_cmd(AqOpcode::AllocUctx, 0, KERNEL_UCTX),
            "ALLOC_UCTX",
        )[0],
    };
    let pd = admin_ok(c, &handle_cmd(AqOpcode::AllocPd, uctx, uctx), "ALLOC_PD")[0];
    let other_pd = admin_ok(c, &handle_cmd(AqOpcode::AllocPd, uctx, uctx), "ALLOC_PD")[0];
    c.pds = [pd, other_pd];
    // Mostly deep enough not to overflow between polls; now and then tiny (CQ overflow).
    let depth = |inp: &mut Input| if inp.mutate(10) { 2 } else { 8 };
    let (d0, d1) = (depth(inp), depth(inp));
    let cq0 = create_cq(c, uctx, d0, inp.pick(LAYOUTS));
    let cq1 = create_cq(c, uctx, d1, inp.pick(LAYOUTS));
    if kind == QpType::XrcIni {
        // An XRC domain of the kernel, an XRC SRQ of the context completing on cq1, and
        // the kernel's TGT QP serving it.
        let xrcdn = admin_ok(
            c,
            &handle_cmd(AqOpcode::AllocXrcd, 0, KERNEL_UCTX),
            "ALLOC_XRCD",
        )[0];
        let srq_pd = if inp.mutate(20) { other_pd } else { pd };
        create_srq(inp, c, uctx, srq_pd, Some((xrcdn, cq1)));
        let cmd = CmdCreateQp {
            hdr: hdr(AqOpcode::CreateQp),
            uctx: KERNEL_UCTX.into(),
            qp_type: QpType::XrcTgt.into(),
            xrcdn: xrcdn.into(),
            ..Default::default()
        };
        let qpn = admin_ok(c, &cmd, "CREATE_QP (XRC_TGT)")[0];
        c.xrc_tgt = Some(XrcTgt { qpn, cq: cq1 });
    } else if inp.chance(25) {
        // The QPs' receives come from an SRQ, in the PD the QPs use or the other one.
        let srq_pd = if inp.chance(20) { other_pd } else { pd };
        create_srq(inp, c, uctx, srq_pd, None);
    }
    let qps = (0..n)
        .map(|_| {
            let caps = Caps::from_input(inp, kind);
            create_qp(c, uctx, pd, cq0, cq1, caps)
        })
        .collect();
    let n_mrs = 1 + inp.below(4);
    for _ in 0..n_mrs {
        let len = 1 + inp.len_up_to(64 << 10);
        let access = if !inp.mutate(15) {
            ACCESS_ALL
        } else {
            u32::from(inp.u8()) & ACCESS_ALL
        };
        let first = if inp.chance(30) {
            u64::from(inp.u16()) % PAGE
        } else {
            0
        };
        let layout = inp.pick(LAYOUTS);
        let pages = inp.mutate(10).then(|| {
            let n = (first + len).div_ceil(PAGE);
            // Not in RAM: an MR over the input's own rings would let RDMA data overwrite
            // them, which breaks the CQE oracles without any device fault.
            let base = inp.pick(OUTSIDE_ADDRS);
            (0..n).map(|i| base.wrapping_add(i * PAGE)).collect()
        });
        let in_pd = if inp.mutate(15) { other_pd } else { pd };
        let req = MrReq {
            uctx,
            pd: in_pd,
            len,
            access,
            pages,
            layout,
            first,
        };
        if let Some(mr) = reg_mr(c, req) {
            c.mrs.push(mr);
        }
    }
    alloc_keys(inp, c, uctx, pd);
    Side {
        cqs: [cq0, cq1],
        qps,
        peers: Vec::new(),
    }
}

/// A few fast-registration MRs (kernel side) and memory windows in PD `pd`.
fn alloc_keys(inp: &mut Input, c: &mut Ctx, uctx: u32, pd: u32) {
    if uctx == KERNEL_UCTX {
        for _ in 0..1 + inp.below(2) {
            let max_pages = 1 + inp.below(16) as u32;
            let cmd = CmdAllocMr {
                hdr: hdr(AqOpcode::AllocMr),
                pdn: pd.into(),
                uctx: KERNEL_UCTX.into(),
                max_pages: max_pages.into(),
                ..Default::default()
            };
            let key = admin_ok(c, &cmd, "ALLOC_MR")[0];
            c.frmrs.push((key, max_pages));
        }
    }
    for _ in 0..inp.below(3) {
        let kind = inp.pick(&[MwType::Type1, MwType::Type2]);
        let cmd = CmdAllocMw {
            hdr: hdr(AqOpcode::AllocMw),
            pdn: pd.into(),
            uctx: uctx.into(),
            mw_type: kind.into(),
            ..Default::default()
        };
        let rkey = admin_ok(c, &cmd, "ALLOC_MW")[0];
        c.mws.push(rkey);
    }
}

/// `key` under another variant now and then (as ib_inc_rkey does), else as it is.
fn new_variant(inp: &mut Input, key: u32) -> u32 {
    match inp.chance(70) {
        true => (key & !0xFF) | u32::from((key as u8).wrapping_add(1 + inp.below(3) as u8)),
        false => key,
    }
}

/// Any key the input knows: MRs (with windows and registrations), FRMRs, windows.
fn any_key(inp: &mut Input, c: &Ctx) -> u32 {
    let keys: Vec<u32> = c
        .mrs
        .iter()
        .map(|m| m.key)
        .chain(c.frmrs.iter().map(|f| f.0))
        .chain(c.mws.iter().copied())
        .collect();
    if keys.is_empty() || inp.mutate(5) {
        return inp.u32();
    }
    let key = keys[inp.below(keys.len())];
    if inp.mutate(5) {
        new_variant(inp, key)
    } else {
        key
    }
}

/// A memory operation (REG_MR, LOCAL_INV, BIND_MW) or a SEND_WITH_INV on `qp`, mostly
/// well-formed and naming the input's keys. A registration or binding it asks for joins
/// the MRs, so later SGEs and RDMA name it (whether or not the device accepted it).
fn post_memory_op(inp: &mut Input, c: &mut Ctx, qp: usize) {
    let op = inp.pick(&[
        WrOpcode::RegMr,
        WrOpcode::LocalInv,
        WrOpcode::BindMw,
        WrOpcode::SendWithInv,
    ]);
    let wr_id = new_wr_id(c);
    let mut header = SendWqeHeader {
        opcode: op.into(),
        flags: u8::from(SendFlags::Signaled) * u8::from(inp.chance(80)),
        wr_id: wr_id.into(),
        ..Default::default()
    };
    let mut body = Vec::new();
    match op {
        WrOpcode::RegMr => {
            let (key, max_pages) = match c.frmrs.is_empty() || inp.mutate(10) {
                true => (any_key(inp, c), 1 + inp.below(4) as u32),
                false => c.frmrs[inp.below(c.frmrs.len())],
            };
            let npages = {
                let v = 1 + inp.below(max_pages as usize) as u16;
                inp.mostly_u16(v)
            };
            let n = u64::from(npages.clamp(1, 16));
            // Pages the device may write (fresh, allowed) or outside RAM: never the rings.
            let pages: Vec<u64> = match inp.mutate(10) {
                true => {
                    let base = inp.pick(OUTSIDE_ADDRS);
                    (0..n).map(|i| base.wrapping_add(i * PAGE)).collect()
                }
                false => buffer(c.ram, &mut c.heap, n * PAGE, 12, Layout::Scattered).1,
            };
            for &p in &pages {
                c.ram.allow(p, PAGE);
            }
            let list = describe(c.ram, &mut c.heap, &pages, 12, Layout::Scattered);
            let first = if inp.chance(30) {
                u64::from(inp.u16()) % PAGE
            } else {
                0
            };
            let len = inp.len_up_to(n * PAGE - first);
            c.next_wr += 1;
            let iova = 0x7e00_0000_0000u64 + (c.next_wr << 30) + first;
            let new_key = new_variant(inp, key);
            header.rkey = inp.mostly_u32(new_key).into();
            let seg = RegMrSeg {
                iova: inp.mostly_u64(iova).into(),
                length: inp.mostly_u64(len).into(),
                page_list: inp.mostly_u64(list.addr.to_native()).into(),
                npages: npages.into(),
                page_shift: inp.mostly_u8(12),
                access: inp
                    .mostly_u32(ACCESS_ALL & !u32::from(Access::MwBind))
                    .into(),
                ..Default::default()
            };
            body.extend_from_slice(seg.as_slice());
            if !pages.is_empty() {
                c.mrs.push(Mr {
                    key: new_key,
                    iova,
                    len,
                    pages,
                    first,
                });
            }
        }
        WrOpcode::LocalInv => {
            // Mostly the latest registration or binding, which may just have become valid.
            let latest = c.mrs.last().map(|m| m.key).filter(|_| inp.chance(50));
            header.rkey = latest.unwrap_or_else(|| any_key(inp, c)).into();
        }
        WrOpcode::BindMw => {
            let rkey = match c.mws.is_empty() || inp.mutate(10) {
                true => any_key(inp, c),
                false => c.mws[inp.below(c.mws.len())],
            };
            let new_rkey = new_variant(inp, rkey);
            header.rkey = new_rkey.into();
            if let Some(mr) = (!c.mrs.is_empty()).then(|| c.mrs[inp.below(c.mrs.len())].clone()) {
                let offset = inp.len_up_to(mr.len);
                let len = inp.len_up_to(mr.len - offset);
                let remote = u32::from(Access::RemoteWrite)
                    | u32::from(Access::RemoteRead)
                    | u32::from(Access::RemoteAtomic);
                let access = u32::from(inp.u8()) & remote;
                let seg = BindMwSeg {
                    addr: inp.mostly_u64(mr.iova + offset).into(),
                    length: inp.mostly_u64(len).into(),
                    mr_lkey: inp.mostly_u32(mr.key).into(),
                    access: inp.mostly_u32(access).into(),
                    ..Default::default()
                };
                body.extend_from_slice(seg.as_slice());
                // The window as a peer names it: part of the MR's pages.
                let first = mr.first + offset;
                c.mrs.push(Mr {
                    key: new_rkey,
                    iova: mr.iova + offset,
                    len,
                    first,
                    ..mr
                });
            } else {
                body.extend_from_slice(BindMwSeg::default().as_slice());
            }
        }
        _ => {
            let sge = sge(inp, c);
            header.num_sge = 1;
            body.extend_from_slice(sge.as_slice());
            let remote = c.remote.as_ref().unwrap_or(&c.mrs);
            header.rkey = match remote.is_empty() || inp.mutate(5) {
                true => any_key(inp, c),
                false => remote[inp.below(remote.len())].key,
            }
            .into();
        }
    }
    let mut wqe = header.as_slice().to_vec();
    wqe.extend_from_slice(&body);
    if inp.mutate(8) {
        let at = inp.below(wqe.len());
        wqe[at] = inp.u8();
        // The byte may be one of the wr_id's: its CQE carries what was written.
        let id = &wqe[SendWqeHeader::WR_ID_OFF..SendWqeHeader::WR_ID_OFF + 8];
        c.wr_ids
            .insert(u64::from_le_bytes(id.try_into().unwrap_or_default()));
    }
    if super::admin::trace() {
        eprintln!("wqe: memory op on QP {}: {wqe:02x?}", c.qps[qp].qpn);
    }
    write_sq(c, qp, &wqe);
}

/// A sentinel QP pair in a context of its own on this device.
fn setup_sentinel(c: &mut Ctx) -> Sentinel {
    let s_uctx = admin_ok(
        c,
        &handle_cmd(AqOpcode::AllocUctx, 0, KERNEL_UCTX),
        "ALLOC_UCTX",
    )[0];
    let s_pd = admin_ok(
        c,
        &handle_cmd(AqOpcode::AllocPd, s_uctx, s_uctx),
        "ALLOC_PD",
    )[0];
    let s_cq = create_cq(c, s_uctx, 4, Layout::Contiguous);
    let s_caps = Caps {
        sq_depth_log2: 4,
        rq_depth_log2: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline: 0,
        layout: Layout::Contiguous,
        kind: QpType::Rc,
    };
    let s1 = create_qp(c, s_uctx, s_pd, s_cq, s_cq, s_caps);
    let s2 = create_qp(c, s_uctx, s_pd, s_cq, s_cq, s_caps);
    let (q1, q2) = (c.qps[s1].qpn, c.qps[s2].qpn);
    assert!(connect(c, s1, q2, Conn::sentinel()), "sentinel QP connect");
    assert!(connect(c, s2, q1, Conn::sentinel()), "sentinel QP connect");
    let req = MrReq {
        uctx: s_uctx,
        pd: s_pd,
        len: 2 * PAGE,
        access: ACCESS_ALL,
        pages: None,
        layout: Layout::Contiguous,
        first: 0,
    };
    let mr = reg_mr(c, req).expect("sentinel MR");
    Sentinel {
        qp: s1,
        cq: s_cq,
        mr,
    }
}

/// The final well-formed request on the data path: an RDMA WRITE between the sentinel QPs
/// completes successfully and moves the right bytes.
fn check_sentinel(c: &mut Ctx, s: &Sentinel) {
    let (s1, s_cq, mr) = (s.qp, s.cq, &s.mr);
    let data: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    for (gpa, n) in mr.pieces(0, 256) {
        let off = (gpa - mr.pages[0]) as usize;
        c.ram.write(gpa, &data[off..off + n as usize]);
    }
    let wr_id = new_wr_id(c);
    let header = SendWqeHeader {
        opcode: WrOpcode::RdmaWrite.into(),
        flags: SendFlags::Signaled.into(),
        num_sge: 1,
        wr_id: wr_id.into(),
        remote_addr: (mr.iova + PAGE).into(),
        rkey: mr.key.into(),
        ..Default::default()
    };
    let sg = Sge {
        addr: mr.iova.into(),
        length: 256u32.into(),
        lkey: mr.key.into(),
    };
    let mut wqe = header.as_slice().to_vec();
    wqe.extend_from_slice(sg.as_slice());
    write_sq(c, s1, &wqe);
    let pi = c.qps[s1].sq_pi;
    ring_sq(c, s1, pi);
    let deadline = Instant::now() + TIMEOUT;
    let cqe = loop {
        if let Some(cqe) = poll_cq(c, s_cq).pop() {
            break cqe;
        }
        assert!(
            Instant::now() < deadline,
            "the sentinel RDMA WRITE did not complete within {TIMEOUT:?}"
        );
        std::thread::yield_now();
    };
    assert_eq!(
        (
            WcStatus::try_from(cqe.status),
            cqe.wr_id.to_native(),
            WcOpcode::try_from(cqe.opcode)
        ),
        (Ok(WcStatus::Success), wr_id, Ok(WcOpcode::RdmaWrite)),
        "sentinel CQE {cqe:?}"
    );
    let mut got = vec![0u8; 256];
    for (gpa, n) in mr.pieces(PAGE, 256) {
        let off = (gpa - mr.pages[1]) as usize;
        assert!(c.ram.read(gpa, &mut got[off..off + n as usize]));
    }
    assert_eq!(got, data, "bytes the sentinel RDMA WRITE moved");
}

/// One operation of the input on one side.
fn op(inp: &mut Input, c: &mut Ctx, side: &Side) {
    let pick = inp.below(side.qps.len());
    let qp = side.qps[pick];
    let s = side;
    match inp.u8() % 32 {
        26 => {
            let q = &c.qps[qp];
            let full = q.sq_pi.wrapping_sub(q.sq_done) >= q.sq.depth();
            if full && !inp.mutate(5) {
                return;
            }
            post_memory_op(inp, c, qp);
            if inp.chance(75) {
                let pi = c.qps[qp].sq_pi;
                ring_sq(c, qp, pi);
            }
        }
        0..=9 => {
            let q = &c.qps[qp];
            let full = q.sq_pi.wrapping_sub(q.sq_done) >= q.sq.depth();
            if full && !inp.mutate(5) {
                return;
            }
            post_send(inp, c, qp);
            if inp.chance(75) {
                let pi = c.qps[qp].sq_pi;
                ring_sq(c, qp, pi);
            }
        }
        10..=14 => {
            let (pi, depth, done) = recv_ring(c, qp);
            let full = pi.wrapping_sub(done) >= depth;
            if full && !inp.mutate(5) {
                return;
            }
            post_recv(inp, c, qp);
            if inp.chance(75) {
                let (pi, _, _) = recv_ring(c, qp);
                ring_rq(c, qp, pi);
            }
        }
        15 | 16 => {
            let v = near(inp, c.qps[qp].sq_pi, c.qps[qp].sq.depth());
            let (page, slot) = (c.qps[qp].page, c.qps[qp].slot);
            let flags = !inp.mutate(20);
            qp_doorbell(c.dev, page, slot, 0, v, flags);
        }
        17 | 18 => {
            let (pi, depth, _) = recv_ring(c, qp);
            let v = near(inp, pi, depth);
            if c.qps[qp].on_srq && !inp.mutate(10) {
                // The SRQ's producer index (past the depth: SRQ_ERR).
                ring_rq(c, qp, v);
                return;
            }
            let (page, slot) = (c.qps[qp].page, c.qps[qp].slot);
            let flags = !inp.mutate(20);
            qp_doorbell(c.dev, page, slot, 1, v, flags);
        }
        19..=22 => {
            for i in s.cqs {
                poll_cq(c, i);
            }
            poll_eqs(c);
        }
        23 | 24 => {
            let i = s.cqs[inp.below(2)];
            let cmd: u32 = if inp.chance(80) {
                inp.pick(&[CqArm::Next, CqArm::Solicited]).into()
            } else {
                inp.u8().into()
            };
            let cq = &mut c.cqs[i];
            cq.arm_seq = cq.arm_seq.wrapping_add(1);
            let arm = (cq.arm_seq << CQ_ARM_SEQ_SHIFT) | (cmd & CQ_ARM_CMD_MASK);
            let (page, slot) = (cq.page, cq.slot);
            doorbell(c.dev, page, slot, 1, inp.mostly_u32(arm));
        }
        25 if inp.mutate(50) => {
            let state = inp.pick(&[QpState::Err, QpState::Reset, QpState::Sqd, QpState::Rts]);
            let attr = QpAttr {
                qp_state: state.into(),
                ..Default::default()
            };
            let done = modify(c, qp, QpAttrMask::State as u32, attr);
            if state == QpState::Reset && done.status == AqStatus::Success {
                let q = &mut c.qps[qp];
                (q.sq_pi, q.rq_pi, q.sq_done, q.rq_done) = (0, 0, 0, 0);
                if inp.chance(70) {
                    let (lid, dest) = s.peers[pick];
                    let conn = Conn::from_input(inp, lid);
                    connect(c, qp, dest, conn);
                }
            }
        }
        27 if !c.mrs.is_empty() => {
            let i = inp.below(c.mrs.len());
            let mr = c.mrs.remove(i);
            let done = c.aq.run(
                c.dev,
                c.aqram,
                &handle_cmd(AqOpcode::DeregMr, mr.key, c.qps[qp].uctx),
            );
            if done.status == AqStatus::Success {
                c.stale_keys.push(mr.key);
            } else {
                c.mrs.push(mr);
            }
        }
        28 if inp.mutate(50) => {
            let stride = 1usize << c.qps[qp].sq.entry_shift;
            let n = inp.below(stride + 1);
            let raw = inp.bytes(n).to_vec();
            let mut id = [0u8; 8];
            for (i, b) in raw
                .iter()
                .skip(SendWqeHeader::WR_ID_OFF)
                .take(8)
                .enumerate()
            {
                id[i] = *b;
            }
            c.wr_ids.insert(u64::from_le_bytes(id));
            write_sq(c, qp, &raw);
            let pi = c.qps[qp].sq_pi;
            ring_sq(c, qp, pi);
        }
        29 if c.srq.is_some() && inp.chance(30) => {
            // Arm the SRQ's limit (SRQ_LIMIT_REACHED when the QPs take it below).
            let s = c.srq.as_ref().expect("checked");
            let limit = inp.below(s.ring.depth() as usize + 2) as u32;
            let cmd = CmdModifySrq {
                hdr: hdr(AqOpcode::ModifySrq),
                srqn: s.srqn.into(),
                attr_mask: inp.mostly_u32(srq_attr_mask::LIMIT).into(),
                attr: SrqAttr {
                    srq_limit: limit.into(),
                    ..Default::default()
                },
                uctx: s.uctx.into(),
                ..Default::default()
            };
            let done = c.aq.run(c.dev, c.aqram, &cmd);
            stats::count("wqe", format_args!("MODIFY_SRQ {:?}", done.status));
        }
        29 | 30 => {
            // Give the poller a moment with the work posted so far.
            for _ in 0..(1 + inp.below(50)) {
                std::thread::yield_now();
            }
        }
        _ => {
            if let Some(mr) = {
                let len = 1 + inp.len_up_to(16 << 10);
                let uctx = c.qps[qp].uctx;
                let pd = c.pds[usize::from(inp.mutate(15))];
                let layout = inp.pick(LAYOUTS);
                reg_mr(
                    c,
                    MrReq {
                        uctx,
                        pd,
                        len,
                        access: ACCESS_ALL,
                        pages: None,
                        layout,
                        first: 0,
                    },
                )
            } {
                c.mrs.push(mr);
            }
        }
    }
}

/// The input's world on device number `n` (1 or 2); a RoCE device gets its GID 0.
fn new_ctx<'r>(
    dev: &'r mut Dev,
    ram: &'r mut CanaryRam,
    aqram: &'r mut CanaryRam,
    roce: bool,
    n: u16,
) -> Ctx<'r> {
    let aq = aq::enable(dev, aqram, AQ_ADDR, ACQ_ADDR, 4)
        .expect("the device refused a valid admin queue");
    let mut c = Ctx {
        dev,
        ram,
        aqram,
        heap: Rig::heap(2),
        aq,
        eqs: Vec::new(),
        cqs: Vec::new(),
        qps: Vec::new(),
        mrs: Vec::new(),
        pds: [0; 2],
        remote: None,
        stale_keys: Vec::new(),
        frmrs: Vec::new(),
        mws: Vec::new(),
        wr_ids: HashSet::from([0]),
        next_wr: 0,
        cqes: 0,
        roce,
        srq: None,
        xrc_tgt: None,
    };
    if roce {
        let cmd = CmdSetGid {
            hdr: hdr(AqOpcode::SetGid),
            port: PORT_NUM as u8,
            index: 0,
            gid_type: GidType::RoceV2.into(),
            valid: 1,
            uctx: KERNEL_UCTX.into(),
            gid: gid_of(n),
            ..Default::default()
        };
        admin_ok(&mut c, &cmd, "SET_GID");
    }
    c
}

/// Now and then a GSI QP of the kernel context on a RoCE device (on the side's PD and
/// CQs, which the kernel may use), sending to the peer device's QPN 1.
fn maybe_add_gsi(inp: &mut Input, c: &mut Ctx, side: &mut Side, peer: u16) {
    if !c.roce || !inp.chance(50) {
        return;
    }
    let caps = Caps::from_input(inp, QpType::Gsi);
    let gsi = create_qp(c, KERNEL_UCTX, c.pds[0], side.cqs[0], side.cqs[1], caps);
    let conn = Conn {
        qkey: GSI_QKEY,
        ..Conn::from_input(inp, peer)
    };
    connect(c, gsi, GSI_QPN, conn);
    side.qps.push(gsi);
    side.peers.push((peer, GSI_QPN));
}

fn finish_side(c: Ctx, side: &Side, lid: u16) {
    let mut c = c;
    let lid = if c.roce { 0 } else { lid };
    for &i in &side.cqs {
        poll_cq(&mut c, i);
    }
    poll_eqs(&mut c);
    let Ctx {
        mut aq,
        dev,
        ram,
        aqram,
        mut heap,
        ..
    } = c;
    check_alive(&mut aq, dev, aqram, ram, &mut heap, lid);
}

fn run(rig: &mut Rig, input: &[u8], roce: bool) {
    let mut inp = Input::new(input);
    rig.begin();
    // Mostly two QPs on one device (loopback); otherwise one QP on each of two devices.
    // RC QPs mostly; otherwise UC QPs, or UD QPs sending each other datagrams.
    let mut two = inp.chance(35);
    let kind = if inp.chance(25) {
        QpType::Ud
    } else if inp.chance(20) {
        QpType::Uc
    } else if inp.chance(15) {
        QpType::XrcIni
    } else {
        QpType::Rc
    };
    // XRC runs in loopback: the INI QP's receive operations feed the SRQ of its TGT QP.
    two &= kind != QpType::XrcIni;
    let mut parts = rig
        .world
        .devs
        .iter_mut()
        .zip(rig.rams.iter_mut())
        .zip(rig.aqs.iter_mut());
    let ((dev0, ram0), aq0) = parts.next().expect("device 0");
    let ((dev1, ram1), aq1) = parts.next().expect("device 1");
    let mut c0 = new_ctx(dev0, ram0, aq0, roce, 1);
    let mut sides = Vec::new();
    let mut c1 = None;
    if two {
        let mut c = new_ctx(dev1, ram1, aq1, roce, 2);
        let mut a = setup_side(&mut inp, &mut c0, 1, kind);
        let mut b = setup_side(&mut inp, &mut c, 1, kind);
        let (qa, qb) = (c0.qps[a.qps[0]].qpn, c.qps[b.qps[0]].qpn);
        a.peers.push((2, qb));
        b.peers.push((1, qa));
        let (ca, cb) = (Conn::from_input(&mut inp, 2), Conn::from_input(&mut inp, 1));
        connect(&mut c0, a.qps[0], qb, ca);
        connect(&mut c, b.qps[0], qa, cb);
        if kind == QpType::Ud {
            maybe_add_gsi(&mut inp, &mut c0, &mut a, 2);
            maybe_add_gsi(&mut inp, &mut c, &mut b, 1);
        }
        c0.remote = Some(c.mrs.clone());
        c.remote = Some(c0.mrs.clone());
        sides.push(a);
        sides.push(b);
        c1 = Some(c);
    } else if kind == QpType::XrcIni {
        let mut a = setup_side(&mut inp, &mut c0, 1, kind);
        let ini = c0.qps[a.qps[0]].qpn;
        let tgt = c0.xrc_tgt.expect("XRC set up").qpn;
        a.peers = vec![(1, tgt)];
        let (ca, cb) = (Conn::from_input(&mut inp, 1), Conn::from_input(&mut inp, 1));
        connect(&mut c0, a.qps[0], tgt, ca);
        connect_steps(&mut c0, (tgt, KERNEL_UCTX), QpType::XrcTgt, ini, cb);
        sides.push(a);
    } else {
        let mut a = setup_side(&mut inp, &mut c0, 2, kind);
        let (qa, qb) = (c0.qps[a.qps[0]].qpn, c0.qps[a.qps[1]].qpn);
        a.peers = vec![(1, qb), (1, qa)];
        let (ca, cb) = (Conn::from_input(&mut inp, 1), Conn::from_input(&mut inp, 1));
        connect(&mut c0, a.qps[0], qb, ca);
        connect(&mut c0, a.qps[1], qa, cb);
        if kind == QpType::Ud {
            maybe_add_gsi(&mut inp, &mut c0, &mut a, 1);
        }
        sides.push(a);
    }
    let sentinel = setup_sentinel(&mut c0);
    let mut ops = 0;
    while !inp.is_empty() && ops < 96 {
        ops += 1;
        match c1.as_mut() {
            Some(c) if inp.bool() => op(&mut inp, c, &sides[1]),
            _ => op(&mut inp, &mut c0, &sides[0]),
        }
    }
    check_sentinel(&mut c0, &sentinel);
    // The poller has been over the user QPs meanwhile: check what they completed.
    finish_side(c0, &sides[0], 1);
    if let Some(c) = c1 {
        finish_side(c, &sides[1], 2);
    }
    rig.finish("wqe");
}
