//! The data path as a driver sees it: rings, work requests, posting with the doorbell
//! protocol, polling CQs and EQs by phase bit, and arming CQs (SPEC section 5).

use std::sync::atomic::Ordering;

use vm_memory::ByteValued;
use vrnic_hw::*;

use super::commands::Layout;
use super::driver::FakeDriver;
use super::memory::{GuestMemory, PAGE};
use super::wait_for;

/// A ring of 2^depth_log2 entries of 2^entry_shift bytes in 4 KiB guest pages.
#[derive(Debug, Clone)]
pub struct Ring {
    pub pages: Vec<u64>,
    pub depth_log2: u32,
    pub entry_shift: u32,
    /// How the pages were described to the device.
    pub page_list: PageList,
}

impl Ring {
    pub fn depth(&self) -> u32 {
        1 << self.depth_log2
    }

    /// Guest address of the entry of free-running index `index`.
    pub fn entry(&self, index: u32) -> u64 {
        let off = u64::from(index & (self.depth() - 1)) << self.entry_shift;
        self.pages[(off / PAGE) as usize] + off % PAGE
    }

    /// Phase of a valid entry at free-running consumer index `ci`: 1 on the first pass.
    pub fn phase(&self, ci: u32) -> u8 {
        (((ci >> self.depth_log2) & 1) ^ 1) as u8
    }
}

/// An event queue (its doorbell slot is in a page of the kernel context).
#[derive(Debug)]
pub struct Eq {
    pub eqn: u32,
    /// Doorbell page and slot, as CREATE_EQ returned them.
    pub page: u32,
    pub slot: u32,
    pub ring: Ring,
    pub vector: u16,
    pub ci: u32,
}

/// A completion queue of context `uctx`.
#[derive(Debug)]
pub struct Cq {
    pub cqn: u32,
    pub uctx: u32,
    /// Doorbell page (of `uctx`) and slot, as CREATE_CQ returned them.
    pub page: u32,
    pub slot: u32,
    pub ring: Ring,
    pub ci: u32,
    pub arm_seq: u32,
}

impl Cq {
    /// The CQ of context `uctx` on `ring` that CREATE_CQ made, named by its results
    /// (`[cqn, slot, page, _]`), with nothing consumed yet.
    pub fn created(uctx: u32, ring: Ring, [cqn, slot, page, _]: [u32; 4]) -> Self {
        Cq {
            cqn,
            uctx,
            page,
            slot,
            ring,
            ci: 0,
            arm_seq: 0,
        }
    }
}

/// Queue sizes of a QP.
#[derive(Debug, Clone, Copy)]
pub struct QpCaps {
    pub sq_depth_log2: u32,
    pub rq_depth_log2: u32,
    pub max_send_sge: u8,
    pub max_recv_sge: u8,
    pub max_inline: u32,
    pub layout: Layout,
    pub qp_type: QpType,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            sq_depth_log2: 6,
            rq_depth_log2: 6,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline: 64,
            layout: Layout::Scattered,
            qp_type: QpType::Rc,
        }
    }
}

impl QpCaps {
    /// The default sizes for a QP of `qp_type`.
    pub fn of(qp_type: QpType) -> Self {
        QpCaps {
            qp_type,
            ..QpCaps::default()
        }
    }

    pub fn is_datagram(&self) -> bool {
        matches!(self.qp_type, QpType::Ud | QpType::Gsi)
    }

    /// Where a send WQE's SGEs or inline data start.
    pub fn payload_offset(&self) -> usize {
        if self.is_datagram() {
            UD_PAYLOAD_OFFSET as usize
        } else if self.qp_type == QpType::XrcIni {
            XRC_PAYLOAD_OFFSET as usize
        } else {
            SendWqeHeader::SIZE
        }
    }

    /// The smallest send WQE holding the header (and ud_av or xrc_seg) and max(SGEs,
    /// inline data).
    pub fn sq_wqe_shift(&self) -> u32 {
        let need = self.payload_offset()
            + (Sge::SIZE * usize::from(self.max_send_sge)).max(self.max_inline as usize);
        let min = match self.qp_type {
            QpType::XrcIni => XRC_SEND_WQE_SHIFT_MIN,
            _ => SEND_WQE_SHIFT_MIN,
        };
        (min..=SEND_WQE_SHIFT_MAX)
            .find(|s| need <= 1 << s)
            .expect("send WQE too large")
    }

    /// The smallest receive WQE holding the header and the SGEs.
    pub fn rq_wqe_shift(&self) -> u32 {
        let need = RecvWqeHeader::SIZE + Sge::SIZE * usize::from(self.max_recv_sge);
        (RECV_WQE_SHIFT_MIN..=RECV_WQE_SHIFT_MAX)
            .find(|s| need <= 1 << s)
            .expect("receive WQE too large")
    }
}

/// An RC queue pair of context `uctx`.
#[derive(Debug)]
pub struct Qp {
    pub qpn: u32,
    pub uctx: u32,
    pub pd: u32,
    /// Doorbell page (of `uctx`) and slot, as CREATE_QP returned them.
    pub page: u32,
    pub slot: u32,
    pub sq: Ring,
    pub rq: Ring,
    /// Free-running producer indices.
    pub sq_pi: u32,
    pub rq_pi: u32,
    pub caps: QpCaps,
    pub send_cqn: u32,
    pub recv_cqn: u32,
}

/// How admin commands name a QP: its number and context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpId {
    pub qpn: u32,
    pub uctx: u32,
}

impl Qp {
    pub fn id(&self) -> QpId {
        QpId {
            qpn: self.qpn,
            uctx: self.uctx,
        }
    }
}

/// A registered memory region and where its bytes live in guest memory.
#[derive(Debug, Clone)]
pub struct Mr {
    pub key: u32,
    pub uctx: u32,
    pub pd: u32,
    pub iova: u64,
    pub len: u64,
    pub access: u32,
    pub pages: Vec<u64>,
    pub page_shift: u32,
    pub first_offset: u64,
}

impl Mr {
    /// The MR address (iova) of byte `offset`.
    pub fn addr(&self, offset: u64) -> u64 {
        self.iova + offset
    }

    /// An SGE for `[offset, offset + len)` of the MR.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: self.addr(offset).into(),
            length: len.into(),
            lkey: self.key.into(),
        }
    }

    /// The guest-physical pieces of `[offset, offset + len)`.
    pub fn pieces(&self, offset: u64, len: u64) -> Vec<(u64, u64)> {
        assert!(offset + len <= self.len, "outside the MR");
        let page = 1u64 << self.page_shift;
        let mut out = Vec::new();
        let mut at = self.first_offset + offset;
        let end = at + len;
        while at < end {
            let n = (page - at % page).min(end - at);
            out.push((self.pages[(at / page) as usize] + at % page, n));
            at += n;
        }
        out
    }
}

/// A send work request.
#[derive(Debug, Clone)]
pub struct SendWr {
    pub wr_id: u64,
    /// A `wr_opcode` (raw, so tests can send unknown ones).
    pub opcode: u8,
    pub flags: u8,
    pub sges: Vec<Sge>,
    /// With Some, the payload travels inline (and INLINE is set).
    pub inline: Option<Vec<u8>>,
    pub remote_addr: u64,
    pub rkey: u32,
    pub imm: [u8; 4],
    /// UD and GSI: the address vector (then the payload starts at UD_PAYLOAD_OFFSET).
    pub av: Option<UdAv>,
    /// Atomics: the operands (an atomic_seg between the header and the SGE).
    pub atomic: Option<AtomicSeg>,
    /// XRC_INI: the target's SRQ (an xrc_seg after the header).
    pub xrc_srqn: Option<u32>,
}

impl SendWr {
    fn new(wr_id: u64, opcode: WrOpcode, sges: Vec<Sge>) -> Self {
        SendWr {
            wr_id,
            opcode: opcode.into(),
            flags: 0,
            sges,
            inline: None,
            remote_addr: 0,
            rkey: 0,
            imm: [0; 4],
            av: None,
            atomic: None,
            xrc_srqn: None,
        }
    }

    /// For an XRC_INI QP: the request is for XRC SRQ `srqn` of the target.
    pub fn for_srq(mut self, srqn: u32) -> Self {
        self.xrc_srqn = Some(srqn);
        self
    }

    /// ATOMIC_CMP_AND_SWP of the word at `remote`'s byte `remote_offset`: stores `swap` if
    /// it equals `compare`; the original value lands in `result`.
    pub fn cmp_and_swp(
        wr_id: u64,
        result: Sge,
        remote: &Mr,
        remote_offset: u64,
        compare: u64,
        swap: u64,
    ) -> Self {
        Self::new(wr_id, WrOpcode::AtomicCmpAndSwp, vec![result])
            .remote(remote.addr(remote_offset), remote.key)
            .operands(compare, swap)
    }

    /// ATOMIC_FETCH_AND_ADD of `add` to the word at `remote`'s byte `remote_offset`.
    pub fn fetch_and_add(
        wr_id: u64,
        result: Sge,
        remote: &Mr,
        remote_offset: u64,
        add: u64,
    ) -> Self {
        Self::new(wr_id, WrOpcode::AtomicFetchAndAdd, vec![result])
            .remote(remote.addr(remote_offset), remote.key)
            .operands(add, 0)
    }

    pub fn operands(mut self, compare_add: u64, swap: u64) -> Self {
        self.atomic = Some(AtomicSeg {
            compare_add: compare_add.into(),
            swap: swap.into(),
        });
        self
    }

    /// A datagram SEND of `sges` with address vector `av`.
    pub fn datagram(wr_id: u64, sges: Vec<Sge>, av: UdAv) -> Self {
        SendWr {
            av: Some(av),
            ..Self::new(wr_id, WrOpcode::Send, sges)
        }
    }

    pub fn send(wr_id: u64, sges: Vec<Sge>) -> Self {
        Self::new(wr_id, WrOpcode::Send, sges)
    }

    pub fn send_imm(wr_id: u64, sges: Vec<Sge>, imm: [u8; 4]) -> Self {
        Self::new(wr_id, WrOpcode::SendWithImm, sges).imm(imm)
    }

    /// RDMA WRITE of `sges` to `remote`'s MR at `remote_offset`.
    pub fn write(wr_id: u64, sges: Vec<Sge>, remote: &Mr, remote_offset: u64) -> Self {
        Self::new(wr_id, WrOpcode::RdmaWrite, sges).remote(remote.addr(remote_offset), remote.key)
    }

    pub fn write_imm(
        wr_id: u64,
        sges: Vec<Sge>,
        remote: &Mr,
        remote_offset: u64,
        imm: [u8; 4],
    ) -> Self {
        Self::new(wr_id, WrOpcode::RdmaWriteWithImm, sges)
            .remote(remote.addr(remote_offset), remote.key)
            .imm(imm)
    }

    /// RDMA READ from `remote`'s MR at `remote_offset` into `sges`.
    pub fn read(wr_id: u64, sges: Vec<Sge>, remote: &Mr, remote_offset: u64) -> Self {
        Self::new(wr_id, WrOpcode::RdmaRead, sges).remote(remote.addr(remote_offset), remote.key)
    }

    pub fn remote(mut self, addr: u64, rkey: u32) -> Self {
        self.remote_addr = addr;
        self.rkey = rkey;
        self
    }

    pub fn imm(mut self, imm: [u8; 4]) -> Self {
        self.imm = imm;
        self
    }

    pub fn signaled(mut self) -> Self {
        self.flags |= u8::from(SendFlags::Signaled);
        self
    }

    pub fn solicited(mut self) -> Self {
        self.flags |= u8::from(SendFlags::Solicited);
        self
    }

    pub fn fenced(mut self) -> Self {
        self.flags |= u8::from(SendFlags::Fence);
        self
    }

    /// Carries `data` inline instead of SGEs.
    pub fn inline(mut self, data: Vec<u8>) -> Self {
        self.flags |= u8::from(SendFlags::Inline);
        self.sges.clear();
        self.inline = Some(data);
        self
    }

    /// The WQE bytes: send_wqe_header, then SGEs or inline data.
    pub fn encode(&self) -> Vec<u8> {
        let (num_sge, inline_len) = match &self.inline {
            Some(d) => (0, d.len() as u32),
            None => (self.sges.len() as u8, 0),
        };
        let hdr = SendWqeHeader {
            opcode: self.opcode,
            flags: self.flags,
            num_sge,
            imm_data: self.imm,
            wr_id: self.wr_id.into(),
            remote_addr: self.remote_addr.into(),
            rkey: self.rkey.into(),
            inline_len: inline_len.into(),
            ..Default::default()
        };
        let mut out = hdr.as_slice().to_vec();
        if let Some(av) = &self.av {
            out.extend_from_slice(av.as_slice());
        }
        if let Some(srqn) = self.xrc_srqn {
            let seg = XrcSeg {
                remote_srqn: srqn.into(),
                ..Default::default()
            };
            out.extend_from_slice(seg.as_slice());
        }
        if let Some(seg) = &self.atomic {
            out.extend_from_slice(seg.as_slice());
        }
        match &self.inline {
            Some(d) => out.extend_from_slice(d),
            None => self
                .sges
                .iter()
                .for_each(|s| out.extend_from_slice(s.as_slice())),
        }
        out
    }
}

/// A receive work request.
#[derive(Debug, Clone)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

impl RecvWr {
    pub fn new(wr_id: u64, sges: Vec<Sge>) -> Self {
        RecvWr { wr_id, sges }
    }

    pub fn encode(&self) -> Vec<u8> {
        let hdr = RecvWqeHeader {
            wr_id: self.wr_id.into(),
            num_sge: self.sges.len() as u8,
            ..Default::default()
        };
        let mut out = hdr.as_slice().to_vec();
        self.sges
            .iter()
            .for_each(|s| out.extend_from_slice(s.as_slice()));
        out
    }
}

/// The status of a CQE as an enum (panics on values outside wc_status).
pub fn status_of(cqe: &Cqe) -> WcStatus {
    WcStatus::try_from(cqe.status).expect("a known wc_status")
}

pub fn vendor_err_of(cqe: &Cqe) -> VendorErr {
    VendorErr::try_from(cqe.vendor_err).expect("a known vendor_err")
}

/// Asserts a CQE's outcome: (status, vendor_err).
#[track_caller]
pub fn assert_cqe_status(cqe: &Cqe, status: WcStatus, vendor: VendorErr) {
    assert_eq!(
        (status_of(cqe), vendor_err_of(cqe)),
        (status, vendor),
        "CQE for wr_id {:#x}",
        cqe.wr_id.to_native()
    );
}

/// Asserts a successful CQE for `wr_id` with `opcode`.
#[track_caller]
pub fn assert_cqe_ok(cqe: &Cqe, wr_id: u64, opcode: WcOpcode) {
    assert_eq!(
        (
            status_of(cqe),
            cqe.wr_id.to_native(),
            WcOpcode::try_from(cqe.opcode)
        ),
        (WcStatus::Success, wr_id, Ok(opcode)),
        "CQE (vendor_err {})",
        cqe.vendor_err
    );
    assert_eq!(cqe.vendor_err, u8::from(VendorErr::None));
}

fn poll_ring<T: ByteValued>(
    mem: &GuestMemory,
    ring: &Ring,
    ci: u32,
    owner_off: usize,
) -> Option<T> {
    let addr = ring.entry(ci);
    let owner: u8 = mem.load(addr + owner_off as u64, Ordering::Acquire);
    (owner & 1 == ring.phase(ci)).then(|| mem.read_obj(addr))
}

fn poll_eq_in(drv_mem: &GuestMemory, eq: &mut Eq) -> Option<Eqe> {
    let eqe: Eqe = poll_ring(drv_mem, &eq.ring, eq.ci, Eqe::OWNER_OFF)?;
    eq.ci = eq.ci.wrapping_add(1);
    Some(eqe)
}

impl FakeDriver {
    // ------------------------------------------------------------------ posting

    /// Writes one send WQE (raw bytes, zero-padded to the WQE size) at the producer index
    /// without ringing the doorbell.
    pub fn write_send_wqe(&mut self, qp: &mut Qp, bytes: &[u8]) {
        let stride = 1usize << qp.sq.entry_shift;
        assert!(bytes.len() <= stride, "WQE larger than the send WQE size");
        let mut wqe = bytes.to_vec();
        wqe.resize(stride, 0);
        self.mem.write(qp.sq.entry(qp.sq_pi), &wqe);
        qp.sq_pi = qp.sq_pi.wrapping_add(1);
    }

    /// Publishes the send producer index (doorbell protocol).
    pub fn ring_sq(&mut self, qp: &Qp) {
        self.ring_doorbell(qp.page, qp.slot, 0, qp.sq_pi);
    }

    pub fn ring_rq(&mut self, qp: &Qp) {
        self.ring_doorbell(qp.page, qp.slot, 1, qp.rq_pi);
    }

    pub fn post_send(&mut self, qp: &mut Qp, wr: &SendWr) {
        self.post_sends(qp, std::slice::from_ref(wr));
    }

    /// Writes every WQE, then rings the doorbell once.
    pub fn post_sends(&mut self, qp: &mut Qp, wrs: &[SendWr]) {
        for wr in wrs {
            self.write_send_wqe(qp, &wr.encode());
        }
        self.ring_sq(qp);
    }

    /// Posts one send WQE given as raw bytes (malformed WQEs).
    pub fn post_send_raw(&mut self, qp: &mut Qp, bytes: &[u8]) {
        self.write_send_wqe(qp, bytes);
        self.ring_sq(qp);
    }

    pub fn write_recv_wqe(&mut self, qp: &mut Qp, bytes: &[u8]) {
        let stride = 1usize << qp.rq.entry_shift;
        assert!(
            bytes.len() <= stride,
            "WQE larger than the receive WQE size"
        );
        let mut wqe = bytes.to_vec();
        wqe.resize(stride, 0);
        self.mem.write(qp.rq.entry(qp.rq_pi), &wqe);
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
    }

    pub fn post_recv(&mut self, qp: &mut Qp, wr: &RecvWr) {
        self.post_recvs(qp, std::slice::from_ref(wr));
    }

    pub fn post_recvs(&mut self, qp: &mut Qp, wrs: &[RecvWr]) {
        for wr in wrs {
            self.write_recv_wqe(qp, &wr.encode());
        }
        self.ring_rq(qp);
    }

    pub fn post_recv_raw(&mut self, qp: &mut Qp, bytes: &[u8]) {
        self.write_recv_wqe(qp, bytes);
        self.ring_rq(qp);
    }

    // ------------------------------------------------------------------ CQs

    /// Consumes the next CQE if the device wrote it (phase bit), and publishes the new
    /// consumer index.
    pub fn poll_cq(&mut self, cq: &mut Cq) -> Option<Cqe> {
        let cqe: Cqe = poll_ring(&self.mem, &cq.ring, cq.ci, Cqe::OWNER_OFF)?;
        cq.ci = cq.ci.wrapping_add(1);
        self.db_store(cq.page, cq.slot, 0, cq.ci);
        Some(cqe)
    }

    pub fn wait_cqe(&mut self, cq: &mut Cq) -> Cqe {
        let what = format!("a CQE on CQ {}", cq.cqn);
        wait_for(&what, || self.poll_cq(cq))
    }

    pub fn wait_cqes(&mut self, cq: &mut Cq, n: usize) -> Vec<Cqe> {
        (0..n).map(|_| self.wait_cqe(cq)).collect()
    }

    /// Requests a completion event (SPEC "Completion events"): a new sequence number and
    /// the command in `arm`, then a full barrier. The caller polls the CQ once more.
    pub fn arm_cq(&mut self, cq: &mut Cq, cmd: CqArm) {
        cq.arm_seq = cq.arm_seq.wrapping_add(1);
        let arm = (cq.arm_seq << CQ_ARM_SEQ_SHIFT) | u32::from(cmd);
        self.db_store(cq.page, cq.slot, 1, arm);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    // ------------------------------------------------------------------ EQs

    /// Consumes the next EQE of `eq` (publishing the consumer index).
    pub fn poll_eq(&mut self, eq: &mut Eq) -> Option<Eqe> {
        let eqe = poll_eq_in(&self.mem, eq)?;
        self.db_store(eq.page, eq.slot, 0, eq.ci);
        Some(eqe)
    }

    /// Waits until the EQE at free-running index `index` of `eq` is there, without
    /// consuming it (the EQ's consumer index stays where it is).
    pub fn wait_eqe_at(&self, eq: &Eq, index: u32) -> Eqe {
        let what = format!("EQE {index} on EQ {}", eq.eqn);
        wait_for(&what, || {
            poll_ring(&self.mem, &eq.ring, index, Eqe::OWNER_OFF)
        })
    }

    pub fn wait_eqe(&mut self, eq: &mut Eq) -> Eqe {
        let what = format!("an EQE on EQ {}", eq.eqn);
        wait_for(&what, || self.poll_eq(eq))
    }

    fn poll_own_eq(&mut self, completion: bool) -> Option<Eqe> {
        let eq = if completion {
            self.comp_eq.as_mut()
        } else {
            self.async_eq.as_mut()
        }
        .expect("brought up");
        let eqe = poll_eq_in(&self.mem, eq)?;
        let (page, slot, ci) = (eq.page, eq.slot, eq.ci);
        self.db_store(page, slot, 0, ci);
        Some(eqe)
    }

    pub fn poll_async_event(&mut self) -> Option<Eqe> {
        self.poll_own_eq(false)
    }

    pub fn wait_async_event(&mut self) -> Eqe {
        wait_for("an async event", || self.poll_own_eq(false))
    }

    pub fn poll_comp_event(&mut self) -> Option<Eqe> {
        self.poll_own_eq(true)
    }

    pub fn wait_comp_event(&mut self) -> Eqe {
        wait_for("a completion event", || self.poll_own_eq(true))
    }

    /// Waits for an async event of type `event` for object `obj`, skipping others
    /// (e.g. COMM_EST); returns its `data`.
    pub fn wait_async_event_for(&mut self, event: EventType, obj: u32) -> u32 {
        loop {
            let e = self.wait_async_event();
            if e.event_type == u8::from(event) && e.obj.to_native() == obj {
                return e.data.to_native();
            }
        }
    }

    // ------------------------------------------------------------------ MR data

    pub fn mr_write(&self, mr: &Mr, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        for (gpa, n) in mr.pieces(offset, data.len() as u64) {
            self.mem.write(gpa, &data[done..done + n as usize]);
            done += n as usize;
        }
    }

    pub fn mr_read(&self, mr: &Mr, offset: u64, len: u64) -> Vec<u8> {
        let mut out = vec![0u8; len as usize];
        let mut done = 0usize;
        for (gpa, n) in mr.pieces(offset, len) {
            self.mem.read(gpa, &mut out[done..done + n as usize]);
            done += n as usize;
        }
        out
    }

    pub fn mr_fill(&self, mr: &Mr, byte: u8) {
        for (gpa, n) in mr.pieces(0, mr.len) {
            self.mem.fill(gpa, n as usize, byte);
        }
    }
}
