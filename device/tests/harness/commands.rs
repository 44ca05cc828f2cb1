//! Admin commands: builders for every command struct (so tests can spoil one field) and
//! typed wrappers that create objects and return their handles.

use vm_memory::ByteValued;
use vrnic_hw::*;

use super::driver::{AdminResult, FakeDriver};
use super::memory::PAGE;
use super::queues::{Cq, Eq, Mr, Qp, QpCaps, QpId, Ring};

/// How the pages of a ring or MR are laid out in guest memory and described to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Physically contiguous pages, described as CONTIGUOUS.
    Contiguous,
    /// Scattered pages, described as DIRECT (at most 512 pages).
    Direct,
    /// Scattered pages, described as INDIRECT.
    Indirect,
    /// Scattered pages, DIRECT when they fit, else INDIRECT.
    Scattered,
}

/// The aq_header of a command.
pub fn header(opcode: AqOpcode) -> AqHeader {
    AqHeader {
        opcode: opcode.into(),
        ..Default::default()
    }
}

pub fn cmd_query(opcode: AqOpcode, out_addr: u64, out_len: u32, port: u8) -> CmdQuery {
    CmdQuery {
        hdr: header(opcode),
        out_addr: out_addr.into(),
        out_len: out_len.into(),
        port,
        ..Default::default()
    }
}

pub fn cmd_handle(opcode: AqOpcode, handle: u32, uctx: u32) -> CmdHandle {
    CmdHandle {
        hdr: header(opcode),
        handle: handle.into(),
        uctx: uctx.into(),
        ..Default::default()
    }
}

/// A 128-byte command from any command struct, to poke at individual bytes.
pub fn bytes_of<T: ByteValued>(cmd: &T) -> Vec<u8> {
    cmd.as_slice().to_vec()
}

/// A memory region to register.
#[derive(Debug, Clone, Copy)]
pub struct MrSpec {
    pub uctx: u32,
    pub pd: u32,
    pub len: u64,
    pub access: u32,
    pub layout: Layout,
    pub page_shift: u32,
    /// Offset of the MR's first byte in its first page.
    pub first_offset: u64,
}

impl MrSpec {
    pub fn new(uctx: u32, pd: u32, len: u64, access: u32) -> Self {
        MrSpec {
            uctx,
            pd,
            len,
            access,
            layout: Layout::Scattered,
            page_shift: 12,
            first_offset: 0,
        }
    }

    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    pub fn page_shift(mut self, shift: u32) -> Self {
        self.page_shift = shift;
        self
    }

    pub fn first_offset(mut self, offset: u64) -> Self {
        self.first_offset = offset;
        self
    }
}

/// Every access right the device understands (but atomics).
pub const ACCESS_ALL: u32 = 1 | 2 | 4;
pub const LOCAL_WRITE: u32 = 1;
pub const REMOTE_WRITE: u32 = 2;
pub const REMOTE_READ: u32 = 4;
pub const REMOTE_ATOMIC: u32 = 8;

/// Bits of qp_attr_mask.
pub fn mask(bits: &[QpAttrMask]) -> u32 {
    bits.iter().fold(0, |m, b| m | u32::from(*b))
}

/// How a QP names its peer: by LID (IB mode) or by GID (RoCE mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAddr {
    Lid(u16),
    /// The peer's GID and MAC, and the local source GID index.
    Gid {
        dgid: [u8; 16],
        sgid_index: u8,
        dmac: [u8; 6],
    },
}

/// The IPv4-mapped GID ::ffff:a.b.c.d.
pub fn ipv4_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// A link-local IPv6 GID fe80::`last`.
pub fn ipv6_gid(last: u16) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[14..].copy_from_slice(&last.to_be_bytes());
    g
}

pub fn cmd_set_gid(index: u8, gid: Option<[u8; 16]>) -> CmdSetGid {
    CmdSetGid {
        hdr: header(AqOpcode::SetGid),
        port: PORT_NUM as u8,
        index,
        gid_type: if gid.is_some() {
            GidType::RoceV2.into()
        } else {
            0
        },
        valid: u8::from(gid.is_some()),
        uctx: KERNEL_UCTX.into(),
        gid: gid.unwrap_or_default(),
        ..Default::default()
    }
}

/// The non-zero values of a QUERY_COUNTERS answer by counter name, in index order (what a
/// test compares, so a failure names the counters).
pub fn nonzero_counters(values: &[u64]) -> Vec<(&'static str, u64)> {
    Counter::ALL
        .iter()
        .zip(values)
        .filter(|(_, &n)| n != 0)
        .map(|(c, &n)| (c.name(), n))
        .collect()
}

/// The answer `pairs` describe (summed per counter; every other counter 0), as
/// `nonzero_counters` shows it.
pub fn counters_of(pairs: &[(Counter, u64)]) -> Vec<(&'static str, u64)> {
    let mut values = vec![0u64; COUNTER_COUNT as usize];
    for &(c, n) in pairs {
        values[c as usize] += n;
    }
    nonzero_counters(&values)
}

/// Attributes for connecting an RC QP (INIT -> RTR -> RTS).
#[derive(Debug, Clone, Copy)]
pub struct ConnectOpts {
    pub access: u32,
    pub path_mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub sq_psn: u32,
    pub rq_psn: u32,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            access: ACCESS_ALL,
            path_mtu: Mtu::Size4096,
            timeout: 12,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            // Both ends use the defaults, so each end's rq_psn is its peer's sq_psn, as
            // connection managers arrange it.
            sq_psn: 0x100,
            rq_psn: 0x100,
        }
    }
}

impl FakeDriver {
    // ------------------------------------------------------------------ page lists

    /// `n` pages of `1 << shift` bytes laid out per `layout`.
    pub fn alloc_pages_for(&mut self, n: u64, shift: u32, layout: Layout) -> Vec<u64> {
        match layout {
            Layout::Contiguous => self.mem.alloc_pages(n, shift),
            _ => self.mem.alloc_scattered_pages(n, shift),
        }
    }

    /// Describes `pages` to the device, writing DIRECT or INDIRECT arrays to guest memory.
    pub fn page_list(&mut self, pages: &[u64], shift: u32, layout: Layout) -> PageList {
        let n = pages.len() as u64;
        let mode = match layout {
            Layout::Contiguous => PageListMode::Contiguous,
            Layout::Direct => PageListMode::Direct,
            Layout::Indirect => PageListMode::Indirect,
            Layout::Scattered if n <= u64::from(PAGE_LIST_DIRECT_MAX) => PageListMode::Direct,
            Layout::Scattered => PageListMode::Indirect,
        };
        let addr = match mode {
            PageListMode::Contiguous => {
                let size = 1u64 << shift;
                assert!(
                    pages.windows(2).all(|w| w[1] == w[0] + size),
                    "CONTIGUOUS needs contiguous pages"
                );
                pages[0]
            }
            PageListMode::Direct => self.write_u64s(pages),
            PageListMode::Indirect => {
                let leaves: Vec<u64> = pages
                    .chunks(512)
                    .map(|chunk| {
                        let leaf = self.mem.alloc_scattered_pages(1, 12)[0];
                        self.write_u64s_at(leaf, chunk);
                        leaf
                    })
                    .collect();
                self.write_u64s(&leaves)
            }
        };
        PageList {
            addr: addr.into(),
            npages: u32::try_from(n).expect("npages").into(),
            page_shift: shift as u8,
            mode: mode.into(),
            ..Default::default()
        }
    }

    fn write_u64s(&mut self, values: &[u64]) -> u64 {
        let addr = self.mem.alloc(values.len() as u64 * 8, PAGE);
        self.write_u64s_at(addr, values);
        addr
    }

    fn write_u64s_at(&mut self, addr: u64, values: &[u64]) {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.mem.write(addr, &bytes);
    }

    /// A zeroed ring of 2^depth_log2 entries of 2^entry_shift bytes in 4 KiB pages.
    pub fn alloc_ring(&mut self, depth_log2: u32, entry_shift: u32, layout: Layout) -> Ring {
        let bytes = 1u64 << (depth_log2 + entry_shift);
        let n = bytes.div_ceil(PAGE);
        let pages = self.alloc_pages_for(n, 12, layout);
        let page_list = self.page_list(&pages, 12, layout);
        Ring {
            pages,
            depth_log2,
            entry_shift,
            page_list,
        }
    }

    // ------------------------------------------------------------------ queries

    pub fn query_device(&mut self) -> DeviceAttr {
        let out = self.mem.alloc(DeviceAttr::SIZE as u64, 8);
        let cmd = cmd_query(AqOpcode::QueryDevice, out, DeviceAttr::SIZE as u32, 0);
        self.admin(&cmd).ok();
        self.mem.read_obj(out)
    }

    pub fn query_port(&mut self) -> PortAttr {
        let out = self.mem.alloc(PortAttr::SIZE as u64, 8);
        let cmd = cmd_query(
            AqOpcode::QueryPort,
            out,
            PortAttr::SIZE as u32,
            PORT_NUM as u8,
        );
        self.admin(&cmd).ok();
        self.mem.read_obj(out)
    }

    /// QUERY_COUNTERS of the port (scope PORT, port 1, the kernel context) or of `qp`
    /// (scope QP, its own context) into `out_len` bytes at `out`.
    pub fn query_counters_cmd(qp: Option<QpId>, out: u64, out_len: u32) -> CmdQueryCounters {
        let (scope, port, qpn, uctx) = match qp {
            None => (CounterScope::Port, PORT_NUM as u8, 0, KERNEL_UCTX),
            Some(qp) => (CounterScope::Qp, 0, qp.qpn, qp.uctx),
        };
        CmdQueryCounters {
            hdr: header(AqOpcode::QueryCounters),
            out_addr: out.into(),
            out_len: out_len.into(),
            scope: scope.into(),
            port,
            qpn: qpn.into(),
            uctx: uctx.into(),
            ..Default::default()
        }
    }

    /// Every counter of the port (None) or of a QP, value i being counter i.
    pub fn counters(&mut self, qp: Option<QpId>) -> Vec<u64> {
        let len = 8 * COUNTER_COUNT;
        let out = self.mem.alloc(u64::from(len), 8);
        let n = self.admin(&Self::query_counters_cmd(qp, out, len)).ok()[0];
        assert_eq!(n, COUNTER_COUNT, "QUERY_COUNTERS result0");
        let bytes = self.mem.read_vec(out, len as usize);
        bytes
            .chunks(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect()
    }

    // ------------------------------------------------------------------ GIDs (RoCE mode)

    /// SET_GID of entry `index` (None clears it).
    pub fn set_gid(&mut self, index: u8, gid: Option<[u8; 16]>) -> AdminResult {
        self.admin(&cmd_set_gid(index, gid))
    }

    /// RoCE mode: learns the port's MAC and sets GID 0 to `gid`; the driver's QPs then name
    /// it as their source and peers reach it by `gid` (`addr`).
    pub fn roce_up(&mut self, gid: [u8; 16]) {
        self.mac = Some(self.query_port().mac);
        self.set_gid(0, Some(gid)).ok();
        self.gid0 = Some(gid);
    }

    /// How peers name this device: its GID 0 after `roce_up`, else its LID.
    pub fn addr(&self) -> PeerAddr {
        match (self.gid0, self.mac) {
            (Some(dgid), Some(dmac)) => PeerAddr::Gid {
                dgid,
                sgid_index: 0,
                dmac,
            },
            _ => PeerAddr::Lid(self.lid),
        }
    }

    // ------------------------------------------------------------------ contexts, PDs

    pub fn alloc_uctx(&mut self) -> u32 {
        self.alloc_uctx_page().0
    }

    /// ALLOC_UCTX: (uctx, its first doorbell page).
    pub fn alloc_uctx_page(&mut self) -> (u32, u32) {
        let [uctx, page, ..] = self
            .admin(&cmd_handle(AqOpcode::AllocUctx, 0, KERNEL_UCTX))
            .ok();
        (uctx, page)
    }

    pub fn dealloc_uctx(&mut self, uctx: u32) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DeallocUctx, uctx, uctx))
    }

    pub fn alloc_pd(&mut self, uctx: u32) -> u32 {
        self.admin(&cmd_handle(AqOpcode::AllocPd, uctx, uctx)).ok()[0]
    }

    pub fn dealloc_pd(&mut self, uctx: u32, pd: u32) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DeallocPd, pd, uctx))
    }

    // ------------------------------------------------------------------ MRs

    /// Allocates the MR's pages, writes its page list and builds the REG_MR command.
    pub fn reg_mr_cmd(&mut self, spec: MrSpec) -> (CmdRegMr, Mr) {
        let page_size = 1u64 << spec.page_shift;
        assert!(spec.first_offset < page_size);
        let n = (spec.first_offset + spec.len.max(1)).div_ceil(page_size);
        let pages = self.alloc_pages_for(n, spec.page_shift, spec.layout);
        let page_list = self.page_list(&pages, spec.page_shift, spec.layout);
        let iova = self.next_iova + spec.first_offset;
        self.next_iova += (spec.first_offset + spec.len).next_multiple_of(1 << 30);
        let cmd = CmdRegMr {
            hdr: header(AqOpcode::RegMr),
            pdn: spec.pd.into(),
            access: spec.access.into(),
            iova: iova.into(),
            length: spec.len.into(),
            pages: page_list,
            uctx: spec.uctx.into(),
            ..Default::default()
        };
        let mr = Mr {
            key: 0,
            uctx: spec.uctx,
            pd: spec.pd,
            iova,
            len: spec.len,
            access: spec.access,
            pages,
            page_shift: spec.page_shift,
            first_offset: spec.first_offset,
        };
        (cmd, mr)
    }

    /// REREG_MR of `mr` with `flags`: CHANGE_PD to `pd`, CHANGE_ACCESS to `access`,
    /// CHANGE_TRANSLATION onto new pages of `len` bytes (allocated here). Returns the
    /// command and the MR as it will be once the command succeeds (same key).
    pub fn rereg_mr_cmd(
        &mut self,
        mr: &Mr,
        flags: u32,
        pd: u32,
        access: u32,
        len: u64,
    ) -> (CmdReregMr, Mr) {
        let mut cmd = CmdReregMr {
            hdr: header(AqOpcode::ReregMr),
            mkey: mr.key.into(),
            flags: flags.into(),
            uctx: mr.uctx.into(),
            ..Default::default()
        };
        let mut new = mr.clone();
        if flags & rereg_flags::CHANGE_PD != 0 {
            cmd.pdn = pd.into();
            new.pd = pd;
        }
        if flags & rereg_flags::CHANGE_ACCESS != 0 {
            cmd.access = access.into();
            new.access = access;
        }
        if flags & rereg_flags::CHANGE_TRANSLATION != 0 {
            let (reg, fresh) = self.reg_mr_cmd(MrSpec::new(mr.uctx, new.pd, len, new.access));
            (cmd.iova, cmd.length, cmd.pages) = (reg.iova, reg.length, reg.pages);
            new = Mr {
                key: mr.key,
                ..fresh
            };
        }
        (cmd, new)
    }

    pub fn reg_mr_with(&mut self, spec: MrSpec) -> Mr {
        let (cmd, mut mr) = self.reg_mr_cmd(spec);
        mr.key = self.admin(&cmd).ok()[0];
        mr
    }

    /// An MR of `len` bytes on scattered 4 KiB pages.
    pub fn reg_mr(&mut self, uctx: u32, pd: u32, len: u64, access: u32) -> Mr {
        self.reg_mr_with(MrSpec::new(uctx, pd, len, access))
    }

    /// An MR per `spec` on physically contiguous pages starting at `gpa` (anywhere in
    /// guest-physical space, mapped or not), described CONTIGUOUS.
    pub fn reg_mr_at(&mut self, spec: MrSpec, gpa: u64) -> Mr {
        let page_size = 1u64 << spec.page_shift;
        let n = (spec.first_offset + spec.len).div_ceil(page_size);
        let pages: Vec<u64> = (0..n).map(|i| gpa + i * page_size).collect();
        let page_list = self.page_list(&pages, spec.page_shift, Layout::Contiguous);
        let iova = self.next_iova + spec.first_offset;
        self.next_iova += (spec.first_offset + spec.len).next_multiple_of(1 << 30);
        let cmd = CmdRegMr {
            hdr: header(AqOpcode::RegMr),
            pdn: spec.pd.into(),
            access: spec.access.into(),
            iova: iova.into(),
            length: spec.len.into(),
            pages: page_list,
            uctx: spec.uctx.into(),
            ..Default::default()
        };
        let key = self.admin(&cmd).ok()[0];
        Mr {
            key,
            uctx: spec.uctx,
            pd: spec.pd,
            iova,
            len: spec.len,
            access: spec.access,
            pages,
            page_shift: spec.page_shift,
            first_offset: spec.first_offset,
        }
    }

    /// An MR of `len` bytes on the given 4 KiB pages (anywhere in guest-physical space,
    /// mapped or not: REG_MR only reads the page list), described DIRECT, or INDIRECT past
    /// what a direct list holds.
    pub fn reg_mr_on_pages(&mut self, uctx: u32, pd: u32, pages: Vec<u64>, access: u32) -> Mr {
        let len = pages.len() as u64 * PAGE;
        let page_list = self.page_list(&pages, 12, Layout::Scattered);
        let iova = self.next_iova;
        self.next_iova += len.next_multiple_of(1 << 30);
        let cmd = CmdRegMr {
            hdr: header(AqOpcode::RegMr),
            pdn: pd.into(),
            access: access.into(),
            iova: iova.into(),
            length: len.into(),
            pages: page_list,
            uctx: uctx.into(),
            ..Default::default()
        };
        let key = self.admin(&cmd).ok()[0];
        Mr {
            key,
            uctx,
            pd,
            iova,
            len,
            access,
            pages,
            page_shift: 12,
            first_offset: 0,
        }
    }

    pub fn dereg_mr(&mut self, mr: &Mr) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DeregMr, mr.key, mr.uctx))
    }

    // ------------------------------------------------------------------ EQs, CQs

    pub fn create_eq_cmd(
        &mut self,
        depth_log2: u32,
        is_async: bool,
        vector: u16,
    ) -> (CmdCreateEq, Ring) {
        let ring = self.alloc_ring(depth_log2, 4, Layout::Contiguous);
        let cmd = CmdCreateEq {
            hdr: header(AqOpcode::CreateEq),
            depth_log2: depth_log2 as u8,
            flags: if is_async { EQ_FLAG_ASYNC as u8 } else { 0 },
            msix_vector: vector.into(),
            ring: ring.page_list,
            ..Default::default()
        };
        (cmd, ring)
    }

    pub fn create_eq(&mut self, depth_log2: u32, is_async: bool, vector: u16) -> Eq {
        let (cmd, ring) = self.create_eq_cmd(depth_log2, is_async, vector);
        let [eqn, slot, page, _] = self.admin(&cmd).ok();
        Eq {
            eqn,
            page,
            slot,
            ring,
            vector,
            ci: 0,
        }
    }

    pub fn destroy_eq(&mut self, eqn: u32) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DestroyEq, eqn, KERNEL_UCTX))
    }

    /// The completion EQ made by `bring_up`.
    pub fn comp_eqn(&self) -> u32 {
        self.comp_eq.as_ref().expect("brought up").eqn
    }

    pub fn create_cq_cmd(
        &mut self,
        uctx: u32,
        depth_log2: u32,
        layout: Layout,
        eqn: u32,
    ) -> (CmdCreateCq, Ring) {
        let ring = self.alloc_ring(depth_log2, Cqe::SIZE.trailing_zeros(), layout);
        let cmd = CmdCreateCq {
            hdr: header(AqOpcode::CreateCq),
            uctx: uctx.into(),
            eqn: eqn.into(),
            depth_log2: depth_log2 as u8,
            ring: ring.page_list,
            ..Default::default()
        };
        (cmd, ring)
    }

    pub fn create_cq_with(&mut self, uctx: u32, depth_log2: u32, layout: Layout) -> Cq {
        let eqn = self.comp_eqn();
        self.create_cq_on(uctx, depth_log2, layout, eqn)
    }

    /// A CQ whose completion events go to EQ `eqn`.
    pub fn create_cq_on(&mut self, uctx: u32, depth_log2: u32, layout: Layout, eqn: u32) -> Cq {
        let (cmd, ring) = self.create_cq_cmd(uctx, depth_log2, layout, eqn);
        Cq::created(uctx, ring, self.admin(&cmd).ok())
    }

    pub fn create_cq(&mut self, uctx: u32, depth_log2: u32) -> Cq {
        self.create_cq_with(uctx, depth_log2, Layout::Contiguous)
    }

    /// RESIZE_CQ of `cq` to a new ring of 2^depth_log2 entries, from the driver's ci.
    pub fn resize_cq_cmd(&mut self, cq: &Cq, depth_log2: u32) -> (CmdResizeCq, Ring) {
        let ring = self.alloc_ring(depth_log2, Cqe::SIZE.trailing_zeros(), Layout::Scattered);
        let cmd = CmdResizeCq {
            hdr: header(AqOpcode::ResizeCq),
            cqn: cq.cqn.into(),
            uctx: cq.uctx.into(),
            depth_log2: depth_log2 as u8,
            ci: cq.ci.into(),
            ring: ring.page_list,
            ..Default::default()
        };
        (cmd, ring)
    }

    /// Resizes `cq` as a driver does (SPEC "Resizing a CQ"): on success it continues at
    /// ci 0 in the new ring. Returns the number of CQEs the device moved.
    pub fn resize_cq(&mut self, cq: &mut Cq, depth_log2: u32) -> u32 {
        let (cmd, ring) = self.resize_cq_cmd(cq, depth_log2);
        let moved = self.admin(&cmd).ok()[0];
        cq.ring = ring;
        cq.ci = 0;
        moved
    }

    pub fn destroy_cq(&mut self, cq: &Cq) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DestroyCq, cq.cqn, cq.uctx))
    }

    // ------------------------------------------------------------------ QPs

    pub fn create_qp_cmd(
        &mut self,
        uctx: u32,
        pd: u32,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> (CmdCreateQp, Qp) {
        let sq_shift = caps.sq_wqe_shift();
        let rq_shift = caps.rq_wqe_shift();
        let sq = self.alloc_ring(caps.sq_depth_log2, sq_shift, caps.layout);
        let rq = self.alloc_ring(caps.rq_depth_log2, rq_shift, caps.layout);
        let cmd = CmdCreateQp {
            hdr: header(AqOpcode::CreateQp),
            uctx: uctx.into(),
            pdn: pd.into(),
            send_cqn: send_cq.cqn.into(),
            recv_cqn: recv_cq.cqn.into(),
            qp_type: caps.qp_type.into(),
            sq_depth_log2: caps.sq_depth_log2 as u8,
            rq_depth_log2: caps.rq_depth_log2 as u8,
            sq_wqe_shift: sq_shift as u8,
            rq_wqe_shift: rq_shift as u8,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline: caps.max_inline.into(),
            sq_ring: sq.page_list,
            rq_ring: rq.page_list,
            ..Default::default()
        };
        let qp = Qp {
            qpn: 0,
            uctx,
            pd,
            page: 0,
            slot: 0,
            sq,
            rq,
            sq_pi: 0,
            rq_pi: 0,
            caps,
            send_cqn: send_cq.cqn,
            recv_cqn: recv_cq.cqn,
        };
        (cmd, qp)
    }

    pub fn create_qp(
        &mut self,
        uctx: u32,
        pd: u32,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> Qp {
        let (cmd, mut qp) = self.create_qp_cmd(uctx, pd, send_cq, recv_cq, caps);
        let [qpn, slot, page, _] = self.admin(&cmd).ok();
        qp.qpn = qpn;
        qp.page = page;
        qp.slot = slot;
        qp
    }

    pub fn modify_qp_cmd(qp: &Qp, attr_mask: u32, attr: QpAttr) -> CmdModifyQp {
        CmdModifyQp {
            hdr: header(AqOpcode::ModifyQp),
            qpn: qp.qpn.into(),
            attr_mask: attr_mask.into(),
            attr,
            uctx: qp.uctx.into(),
            ..Default::default()
        }
    }

    pub fn modify_qp(&mut self, qp: &Qp, attr_mask: u32, attr: QpAttr) -> AdminResult {
        self.admin(&Self::modify_qp_cmd(qp, attr_mask, attr))
    }

    /// MODIFY_QP with a destination MAC (RoCE mode with AV).
    pub fn modify_qp_dmac(
        &mut self,
        qp: &Qp,
        attr_mask: u32,
        attr: QpAttr,
        dmac: [u8; 6],
    ) -> AdminResult {
        let mut cmd = Self::modify_qp_cmd(qp, attr_mask, attr);
        cmd.dmac = dmac;
        self.admin(&cmd)
    }

    /// MODIFY_QP to `state` with no other attribute (e.g. ERR, RESET, SQD).
    pub fn set_qp_state(&mut self, qp: &mut Qp, state: QpState) -> AdminResult {
        let attr = QpAttr {
            qp_state: state.into(),
            ..Default::default()
        };
        let r = self.modify_qp(qp, mask(&[QpAttrMask::State]), attr);
        if state == QpState::Reset && r.status == 0 {
            // The device zeroed the doorbell slot; the driver restarts its indices.
            qp.sq_pi = 0;
            qp.rq_pi = 0;
        }
        r
    }

    pub fn query_qp_cmd(qp: &Qp, out: u64, out_len: u32) -> CmdModifyQp {
        CmdModifyQp {
            hdr: header(AqOpcode::QueryQp),
            qpn: qp.qpn.into(),
            out_addr: out.into(),
            out_len: out_len.into(),
            uctx: qp.uctx.into(),
            ..Default::default()
        }
    }

    pub fn query_qp(&mut self, qp: &Qp) -> QpAttr {
        let out = self.mem.alloc(QpAttr::SIZE as u64, 8);
        self.admin(&Self::query_qp_cmd(qp, out, QpAttr::SIZE as u32))
            .ok();
        self.mem.read_obj(out)
    }

    pub fn qp_state(&mut self, qp: &Qp) -> QpState {
        QpState::try_from(self.query_qp(qp).qp_state).expect("valid QP state")
    }

    pub fn destroy_qp(&mut self, qp: &Qp) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DestroyQp, qp.qpn, qp.uctx))
    }

    /// RESET -> INIT with the port, P_Key index 0 and `access`.
    pub fn qp_to_init(&mut self, qp: &Qp, access: u32) -> AdminResult {
        let attr = QpAttr {
            qp_state: QpState::Init.into(),
            port_num: PORT_NUM as u8,
            qp_access_flags: access.into(),
            ..Default::default()
        };
        use QpAttrMask::*;
        self.modify_qp(qp, mask(&[State, PkeyIndex, Port, AccessFlags]), attr)
    }

    /// The RTR attributes and mask for a connection to (`peer`, `dest_qpn`), and the dmac
    /// of the command.
    pub fn rtr_attr_to(peer: PeerAddr, dest_qpn: u32, o: &ConnectOpts) -> (u32, QpAttr, [u8; 6]) {
        match peer {
            PeerAddr::Lid(lid) => {
                let (m, a) = Self::rtr_attr(lid, dest_qpn, o);
                (m, a, [0; 6])
            }
            PeerAddr::Gid {
                dgid,
                sgid_index,
                dmac,
            } => {
                let (m, mut a) = Self::rtr_attr(0, dest_qpn, o);
                a.is_global = 1;
                a.sgid_index = sgid_index;
                a.dgid = dgid;
                a.hop_limit = 64;
                (m, a, dmac)
            }
        }
    }

    /// The RTR attributes and mask for a connection to (`dlid`, `dest_qpn`).
    pub fn rtr_attr(dlid: u16, dest_qpn: u32, o: &ConnectOpts) -> (u32, QpAttr) {
        use QpAttrMask::*;
        let attr = QpAttr {
            qp_state: QpState::Rtr.into(),
            path_mtu: o.path_mtu.into(),
            dest_qp_num: dest_qpn.into(),
            rq_psn: o.rq_psn.into(),
            max_dest_rd_atomic: o.max_dest_rd_atomic,
            min_rnr_timer: o.min_rnr_timer,
            dlid: dlid.into(),
            ..Default::default()
        };
        let m = mask(&[
            State,
            Av,
            PathMtu,
            DestQpn,
            RqPsn,
            MaxDestRdAtomic,
            MinRnrTimer,
        ]);
        (m, attr)
    }

    /// The RTS attributes and mask.
    pub fn rts_attr(o: &ConnectOpts) -> (u32, QpAttr) {
        use QpAttrMask::*;
        let attr = QpAttr {
            qp_state: QpState::Rts.into(),
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            sq_psn: o.sq_psn.into(),
            max_rd_atomic: o.max_rd_atomic,
            ..Default::default()
        };
        let m = mask(&[State, Timeout, RetryCnt, RnrRetry, SqPsn, MaxQpRdAtomic]);
        (m, attr)
    }

    /// INIT -> RTR -> RTS towards (`dlid`, `dest_qpn`); the QP must be in RESET.
    pub fn connect_qp(&mut self, qp: &Qp, dlid: u16, dest_qpn: u32, o: &ConnectOpts) {
        self.connect_qp_to(qp, PeerAddr::Lid(dlid), dest_qpn, o);
    }

    /// INIT -> RTR -> RTS towards (`peer`, `dest_qpn`); the QP must be in RESET. A UC QP
    /// gets only the attributes UC has (no READ, atomic, RNR or retry attributes).
    pub fn connect_qp_to(&mut self, qp: &Qp, peer: PeerAddr, dest_qpn: u32, o: &ConnectOpts) {
        use QpAttrMask::*;
        let keep = match qp.caps.qp_type {
            QpType::Uc => !mask(&[
                MaxDestRdAtomic,
                MinRnrTimer,
                Timeout,
                RetryCnt,
                RnrRetry,
                MaxQpRdAtomic,
            ]),
            // XRC (ib_modify_qp_is_ok's XRC columns): an initiator has no responder
            // attributes, a target no requester ones.
            QpType::XrcIni => !mask(&[MaxDestRdAtomic, MinRnrTimer]),
            QpType::XrcTgt => !mask(&[RetryCnt, RnrRetry, MaxQpRdAtomic]),
            _ => u32::MAX,
        };
        self.qp_to_init(qp, o.access).ok();
        let (m, attr, dmac) = Self::rtr_attr_to(peer, dest_qpn, o);
        self.modify_qp_dmac(qp, m & keep, attr, dmac).ok();
        let (m, attr) = Self::rts_attr(o);
        self.modify_qp(qp, m & keep, attr).ok();
    }
}
