//! Memory keys beyond REG_MR, as a driver uses them (SPEC "Memory keys", "Memory
//! operations"): fast-registration MRs (ALLOC_MR, the REG_MR work request), LOCAL_INV,
//! SEND_WITH_INV, and memory windows (ALLOC_MW, BIND_MW, DEALLOC_MW).

use vm_memory::ByteValued;
use vrnic_hw::*;

use super::commands::{cmd_handle, header, ConnectOpts};
use super::devices::TestDevices;
use super::driver::{AdminResult, FakeDriver};
use super::pair::{Pair, Side, Topology};
use super::queues::{Mr, QpCaps, SendWr};

pub fn cmd_alloc_mr(pd: u32, uctx: u32, max_pages: u32) -> CmdAllocMr {
    CmdAllocMr {
        hdr: header(AqOpcode::AllocMr),
        pdn: pd.into(),
        uctx: uctx.into(),
        max_pages: max_pages.into(),
        ..Default::default()
    }
}

pub fn cmd_alloc_mw(pd: u32, uctx: u32, mw_type: u8) -> CmdAllocMw {
    CmdAllocMw {
        hdr: header(AqOpcode::AllocMw),
        pdn: pd.into(),
        uctx: uctx.into(),
        mw_type,
        ..Default::default()
    }
}

/// A fast registration about to be posted: the MR as it will be once VALID (its pages,
/// range and new key), and where its page list is in guest memory.
#[derive(Debug, Clone)]
pub struct FastReg {
    pub mr: Mr,
    pub list: u64,
    pub npages: u16,
}

/// The key `key` with variant byte `variant` (as ib_update_fast_reg_key / ib_inc_rkey).
pub fn with_variant(key: u32, variant: u8) -> u32 {
    (key & !0xFF) | u32::from(variant)
}

/// A REG_MR work request: send_wqe_header (rkey = the new key) and reg_mr_seg.
pub fn reg_mr_wqe(wr_id: u64, fr: &FastReg) -> Vec<u8> {
    let hdr = SendWqeHeader {
        opcode: WrOpcode::RegMr.into(),
        flags: SendFlags::Signaled.into(),
        wr_id: wr_id.into(),
        rkey: fr.mr.key.into(),
        ..Default::default()
    };
    let seg = RegMrSeg {
        iova: fr.mr.iova.into(),
        length: fr.mr.len.into(),
        page_list: fr.list.into(),
        npages: fr.npages.into(),
        page_shift: fr.mr.page_shift as u8,
        access: fr.mr.access.into(),
        ..Default::default()
    };
    [hdr.as_slice(), seg.as_slice()].concat()
}

/// A signalled LOCAL_INV of `key`.
pub fn local_inv_wr(wr_id: u64, key: u32) -> SendWr {
    SendWr {
        opcode: WrOpcode::LocalInv.into(),
        ..SendWr::send(wr_id, vec![])
    }
    .remote(0, key)
    .signaled()
}

/// A signalled SEND_WITH_INV of `sges` asking the target to invalidate `key`.
pub fn send_inv_wr(wr_id: u64, sges: Vec<Sge>, key: u32) -> SendWr {
    SendWr {
        opcode: WrOpcode::SendWithInv.into(),
        ..SendWr::send(wr_id, sges)
    }
    .remote(0, key)
    .signaled()
}

/// A window as a remote peer sees it: `len` bytes of `mr` from `offset`, under `rkey`
/// (usable with `SendWr::write`/`read` and `FakeDriver::mr_read` of the MR's owner).
pub fn window_of(mr: &Mr, rkey: u32, offset: u64, len: u64) -> Mr {
    Mr {
        key: rkey,
        iova: mr.iova + offset,
        len,
        first_offset: mr.first_offset + offset,
        ..mr.clone()
    }
}

/// A signalled BIND_MW work request: the window `rkey` (its new rkey) onto `len` bytes of
/// `mr` from `offset` with `access`.
pub fn bind_mw_wqe(wr_id: u64, rkey: u32, mr: &Mr, offset: u64, len: u64, access: u32) -> Vec<u8> {
    let hdr = SendWqeHeader {
        opcode: WrOpcode::BindMw.into(),
        flags: SendFlags::Signaled.into(),
        wr_id: wr_id.into(),
        rkey: rkey.into(),
        ..Default::default()
    };
    let seg = BindMwSeg {
        addr: (mr.iova + offset).into(),
        length: len.into(),
        mr_lkey: mr.key.into(),
        access: access.into(),
        ..Default::default()
    };
    [hdr.as_slice(), seg.as_slice()].concat()
}

/// A side of the kernel context: PD, CQs and a QP of KERNEL_UCTX.
pub fn kernel_side(d: &mut FakeDriver, index: usize, caps: QpCaps) -> Side {
    let pd = d.alloc_pd(KERNEL_UCTX);
    let send_cq = d.create_cq(KERNEL_UCTX, 6);
    let recv_cq = d.create_cq(KERNEL_UCTX, 6);
    let qp = d.create_qp(KERNEL_UCTX, pd, &send_cq, &recv_cq, caps);
    Side {
        drv: index,
        uctx: KERNEL_UCTX,
        pd,
        send_cq,
        recv_cq,
        qp,
    }
}

/// A connected pair of kernel-context QPs (what fast registration needs), on two devices
/// or on one.
pub fn kernel_pair(topology: Topology) -> Pair {
    kernel_pair_with(topology, QpCaps::default(), ConnectOpts::default())
}

pub fn kernel_pair_with(topology: Topology, caps: QpCaps, opts: ConnectOpts) -> Pair {
    let n = match topology {
        Topology::TwoDevices => 2,
        Topology::Loopback => 1,
    };
    let devices = TestDevices::start(n);
    let mut drivers: Vec<FakeDriver> = (0..n).map(|i| devices.addressed_driver(i)).collect();
    let a = kernel_side(&mut drivers[0], 0, caps);
    let b = kernel_side(&mut drivers[n - 1], n - 1, caps);
    let mut pair = Pair {
        drivers,
        a,
        b,
        topology,
        devices,
    };
    pair.connect(opts);
    pair
}

impl FakeDriver {
    /// ALLOC_MR of the kernel context; returns its (FREE) key.
    pub fn alloc_mr(&mut self, pd: u32, max_pages: u32) -> u32 {
        self.admin(&cmd_alloc_mr(pd, KERNEL_UCTX, max_pages)).ok()[0]
    }

    pub fn alloc_mw(&mut self, uctx: u32, pd: u32, kind: MwType) -> u32 {
        self.admin(&cmd_alloc_mw(pd, uctx, kind.into())).ok()[0]
    }

    pub fn dealloc_mw(&mut self, uctx: u32, rkey: u32) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DeallocMw, rkey, uctx))
    }

    pub fn dereg_key(&mut self, uctx: u32, key: u32) -> AdminResult {
        self.admin(&cmd_handle(AqOpcode::DeregMr, key, uctx))
    }

    /// A fast registration of `len` bytes for the FRMR `key` (of PD `pd`), on scattered
    /// pages of `1 << shift` bytes, starting `first_offset` into the first one, under the
    /// key's next variant; its page list written to guest memory.
    pub fn fast_reg(
        &mut self,
        key: u32,
        pd: u32,
        len: u64,
        first_offset: u64,
        shift: u32,
        access: u32,
    ) -> FastReg {
        let page = 1u64 << shift;
        let npages = (first_offset + len).div_ceil(page).max(1);
        let pages = self.mem.alloc_scattered_pages(npages, shift);
        let list = self.mem.alloc(npages * 8, 4096);
        let bytes: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
        self.mem.write(list, &bytes);
        let iova = self.next_iova + first_offset;
        self.next_iova += (first_offset + len).next_multiple_of(1 << 30);
        FastReg {
            mr: Mr {
                key: with_variant(key, (key as u8).wrapping_add(1)),
                uctx: KERNEL_UCTX,
                pd,
                iova,
                len,
                access,
                pages,
                page_shift: shift,
                first_offset,
            },
            list,
            npages: npages as u16,
        }
    }
}
