//! Every admin command, succeeding and failing: bad sizes, unknown handles, wrong states,
//! exhausted resources, non-zero reserved fields (err_offset names the field), PERMISSION
//! across contexts, BUSY while in use, and the contents of QUERY_DEVICE/PORT/QP.

mod harness;

use harness::*;
use vrnic_hw::*;

/// A device brought up by a driver.
fn device() -> (TestDevices, FakeDriver) {
    let devices = TestDevices::start(1);
    let d = devices.driver(0);
    (devices, d)
}

/// A user context with a PD, two CQs and a QP in RESET.
struct World {
    uctx: u32,
    pd: u32,
    cq: Cq,
    cq2: Cq,
    qp: Qp,
}

fn world(d: &mut FakeDriver) -> World {
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let cq = d.create_cq(uctx, 4);
    let cq2 = d.create_cq(uctx, 4);
    let qp = d.create_qp(uctx, pd, &cq, &cq2, QpCaps::default());
    World {
        uctx,
        pd,
        cq,
        cq2,
        qp,
    }
}

// ---------------------------------------------------------------------- header

#[test]
fn unknown_opcodes_are_bad_opcode_at_offset_0() {
    let (_devices, mut d) = device();

    let results: Vec<AdminResult> = [0u8, 0x1e, 0x7f, 0xff]
        .iter()
        .map(|op| {
            let mut cmd = vec![0u8; 128];
            cmd[0] = *op;
            d.admin_bytes(&cmd)
        })
        .collect();

    for r in results {
        r.expect_err(AqStatus::BadOpcode, AqHeader::OPCODE_OFF);
    }
}

#[test]
fn nonzero_reserved_header_fields_are_bad_field_at_their_offset() {
    let (_devices, mut d) = device();
    let mut cmd = cmd_handle(AqOpcode::AllocUctx, 0, 0);
    cmd.hdr.reserved0 = 1;
    let first = d.admin(&cmd);
    cmd.hdr.reserved0 = 0;
    cmd.hdr.reserved1 = 0x100.into();
    let second = d.admin(&cmd);

    first.expect_err(AqStatus::BadField, AqHeader::RESERVED0_OFF);
    second.expect_err(AqStatus::BadField, AqHeader::RESERVED1_OFF);
}

#[test]
fn nonzero_reserved_fields_of_every_command_are_bad_field_at_the_field() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let out = d.mem.alloc(256, 8);
    let eqn = d.comp_eqn();
    let (reg_mr, _) = d.reg_mr_cmd(MrSpec::new(w.uctx, w.pd, 4096, ACCESS_ALL));
    let (create_cq, _) = d.create_cq_cmd(w.uctx, 2, Layout::Contiguous, eqn);
    let (create_eq, _) = d.create_eq_cmd(2, false, 2);
    let (create_qp, _) = d.create_qp_cmd(w.uctx, w.pd, &w.cq, &w.cq, QpCaps::default());
    let modify = FakeDriver::modify_qp_cmd(&w.qp, mask(&[QpAttrMask::State]), QpAttr::default());
    let query_qp = FakeDriver::query_qp_cmd(&w.qp, out, 64);
    // (command, offset of a reserved byte to spoil, err_offset expected)
    let cases: Vec<(Vec<u8>, usize, usize)> = vec![
        (
            bytes_of(&cmd_query(AqOpcode::QueryDevice, out, 128, 0)),
            127,
            CmdQuery::RESERVED0_OFF,
        ),
        (
            bytes_of(&cmd_query(AqOpcode::QueryPort, out, 64, 1)),
            CmdQuery::RESERVED0_OFF,
            CmdQuery::RESERVED0_OFF,
        ),
        (
            bytes_of(&cmd_handle(AqOpcode::AllocPd, w.uctx, w.uctx)),
            127,
            CmdHandle::RESERVED0_OFF,
        ),
        (bytes_of(&reg_mr), 127, CmdRegMr::RESERVED0_OFF),
        (
            bytes_of(&reg_mr),
            CmdRegMr::PAGES_OFF + PageList::RESERVED0_OFF + 1,
            CmdRegMr::PAGES_OFF + PageList::RESERVED0_OFF,
        ),
        (bytes_of(&create_cq), 23, CmdCreateCq::RESERVED0_OFF),
        (bytes_of(&create_cq), 127, CmdCreateCq::RESERVED1_OFF),
        (bytes_of(&create_eq), 15, CmdCreateEq::RESERVED0_OFF),
        (bytes_of(&create_eq), 127, CmdCreateEq::RESERVED1_OFF),
        // Unknown flags, and an srqn without QP_FLAG_SRQ.
        (bytes_of(&create_qp), 31, CmdCreateQp::FLAGS_OFF),
        (bytes_of(&create_qp), 39, CmdCreateQp::SRQN_OFF),
        (bytes_of(&create_qp), 127, CmdCreateQp::RESERVED2_OFF),
        (
            bytes_of(&modify),
            CmdModifyQp::ATTR_OFF + QpAttr::RESERVED0_OFF,
            CmdModifyQp::ATTR_OFF + QpAttr::RESERVED0_OFF,
        ),
        (bytes_of(&modify), 127, CmdModifyQp::RESERVED0_OFF),
        (bytes_of(&query_qp), 110, CmdModifyQp::RESERVED0_OFF),
        (
            bytes_of(&cmd_handle(AqOpcode::DestroyQp, w.qp.qpn, w.uctx)),
            16,
            CmdHandle::RESERVED0_OFF,
        ),
    ];

    for (mut cmd, spoil, want) in cases {
        cmd[spoil] = 0x5a;
        let r = d.admin_bytes(&cmd);
        r.expect_err(AqStatus::BadField, want);
    }
    // Nothing was created or destroyed by the failed commands.
    assert_eq!(d.qp_state(&w.qp), QpState::Reset);
}

// ---------------------------------------------------------------------- queue engine

#[test]
fn admin_completions_signal_msix_vector_0() {
    let (_devices, mut d) = device();
    d.take_irqs(0);

    d.alloc_uctx();

    assert!(d.wait_irq(0) >= 1);
}

#[test]
fn a_batch_of_commands_completes_in_order_with_its_own_statuses() {
    let (_devices, mut d) = device();
    let alloc = bytes_of(&cmd_handle(AqOpcode::AllocUctx, 0, 0));
    let bad = bytes_of(&cmd_handle(AqOpcode::DeallocPd, 999, 0));
    let cmds: Vec<&[u8]> = vec![&alloc, &bad, &alloc, &bad, &alloc, &alloc, &bad, &alloc];

    let results = d.admin_batch(&cmds);

    let got: Vec<(u8, u32)> = results.iter().map(|r| (r.status, r.results[0])).collect();
    let ok = u8::from(AqStatus::Success);
    let bh = u8::from(AqStatus::BadHandle);
    assert_eq!(
        got,
        vec![
            (ok, 1),
            (bh, 0),
            (ok, 2),
            (bh, 0),
            (ok, 3),
            (ok, 4),
            (bh, 0),
            (ok, 5)
        ]
    );
}

#[test]
fn an_admin_queue_of_two_entries_wraps_its_phase_many_times() {
    let devices = TestDevices::start(1);
    let mut d = devices.connect(0);
    d.enable(1);

    let uctxs: Vec<u32> = (0..21).map(|_| d.alloc_uctx()).collect();

    assert_eq!(uctxs, (1..=21).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------- queries

#[test]
fn query_device_reports_limits_identity_and_capabilities() {
    let (_devices, mut d) = device();

    let a = d.query_device();

    let reg = |d: &mut FakeDriver, off| d.read_reg(off);
    assert_eq!(a.max_qp.to_native(), reg(&mut d, bar0::MAX_QP));
    assert_eq!(a.max_cq.to_native(), reg(&mut d, bar0::MAX_CQ));
    assert_eq!(a.max_mr.to_native(), reg(&mut d, bar0::MAX_MR));
    assert_eq!(a.max_pd.to_native(), reg(&mut d, bar0::MAX_PD));
    assert_eq!(a.max_qp_wr.to_native(), reg(&mut d, bar0::MAX_QP_WR));
    assert_eq!(a.max_cqe.to_native(), reg(&mut d, bar0::MAX_CQE));
    assert_eq!(a.max_sge.to_native(), reg(&mut d, bar0::MAX_SGE));
    assert_eq!(a.max_inline.to_native(), reg(&mut d, bar0::MAX_INLINE));
    assert_eq!(a.max_msg_size.to_native(), reg(&mut d, bar0::MAX_MSG_SIZE));
    assert_eq!(
        a.max_qp_rd_atom.to_native(),
        reg(&mut d, bar0::MAX_QP_RD_ATOM)
    );
    assert_eq!(
        a.max_qp_init_rd_atom.to_native(),
        reg(&mut d, bar0::MAX_QP_RD_ATOM)
    );
    assert_eq!(a.max_eq.to_native(), reg(&mut d, bar0::MAX_EQ));
    assert_eq!(a.max_uctx.to_native(), reg(&mut d, bar0::MAX_UCTX));
    assert_eq!(
        a.page_size_cap.to_native(),
        u64::from(reg(&mut d, bar0::PAGE_SIZE_CAP))
    );
    let max_mr = u64::from(reg(&mut d, bar0::MAX_MR_SIZE_HI)) << 32
        | u64::from(reg(&mut d, bar0::MAX_MR_SIZE_LO));
    assert_eq!(a.max_mr_size.to_native(), max_mr);
    assert_eq!(a.vendor_id.to_native(), PCI_VENDOR_ID);
    assert_eq!(a.vendor_part_id.to_native(), PCI_DEVICE_ID);
    assert_eq!(a.hw_ver.to_native(), PCI_REVISION);
    assert_eq!(a.num_comp_vectors.to_native(), MSIX_VECTORS - 1);
    assert_eq!(a.phys_port_cnt, 1);
    assert_ne!(a.node_guid.to_native(), 0);
    assert_eq!(a.sys_image_guid, a.node_guid);
    assert_eq!(a.atomic_cap, u8::from(AtomicCap::Hca));
    assert_eq!(a.max_srq.to_native(), MAX_SRQ);
    assert_eq!(a.max_fast_reg_pages.to_native(), MAX_FAST_REG_PAGES);
    assert_eq!(a.max_mw.to_native(), MAX_MW);
    assert_eq!(a.max_xrcd.to_native(), MAX_XRCD);
    assert_eq!(a.reserved0, [0; 2]);
}

#[test]
fn query_port_reports_an_active_port_with_the_configured_lid() {
    let devices = TestDevices::start(3);
    let mut d = devices.driver(2);
    let guid = d.query_device().node_guid.to_native();

    let p = d.query_port();

    assert_eq!(p.state, u8::from(PortState::Active));
    assert_eq!(p.lid.to_native(), devices.lid(2));
    assert_eq!(
        (p.max_mtu, p.active_mtu),
        (u8::from(Mtu::Size4096), u8::from(Mtu::Size4096))
    );
    assert_eq!(p.phys_state, 5);
    assert_eq!((p.sm_lid.to_native(), p.lmc), (0, 0));
    assert_eq!(p.max_msg_sz.to_native(), bar0::MAX_MSG_SIZE_RESET);
    assert_eq!(
        (p.gid_tbl_len.to_native(), p.pkey_tbl_len.to_native()),
        (1, 1)
    );
    assert_eq!(p.link_layer, 1);
    assert_eq!(&p.gid[..8], &[0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        &p.gid[8..],
        &guid.to_le_bytes(),
        "GID 0 ends with the node GUID"
    );
    let port_info = d.read_reg(bar0::PORT_INFO);
    assert_eq!(
        port_info & bar0::PORT_INFO_LID_MASK,
        u32::from(devices.lid(2))
    );
}

#[test]
fn queries_with_a_short_buffer_are_bad_size_at_out_len() {
    let (_devices, mut d) = device();
    let out = d.mem.alloc(256, 8);

    let dev = d.admin(&cmd_query(AqOpcode::QueryDevice, out, 127, 0));
    let port = d.admin(&cmd_query(AqOpcode::QueryPort, out, 63, 1));

    dev.expect_err(AqStatus::BadSize, CmdQuery::OUT_LEN_OFF);
    port.expect_err(AqStatus::BadSize, CmdQuery::OUT_LEN_OFF);
}

#[test]
fn queries_naming_a_wrong_port_are_bad_field_at_port() {
    let (_devices, mut d) = device();
    let out = d.mem.alloc(256, 8);

    let dev = d.admin(&cmd_query(AqOpcode::QueryDevice, out, 128, 1));
    let port0 = d.admin(&cmd_query(AqOpcode::QueryPort, out, 64, 0));
    let port2 = d.admin(&cmd_query(AqOpcode::QueryPort, out, 64, 2));

    dev.expect_err(AqStatus::BadField, CmdQuery::PORT_OFF);
    port0.expect_err(AqStatus::BadField, CmdQuery::PORT_OFF);
    port2.expect_err(AqStatus::BadField, CmdQuery::PORT_OFF);
}

#[test]
fn queries_into_unmapped_or_read_only_memory_are_bad_address_at_out_addr() {
    let (_devices, mut d) = device();
    let ro = 0x40_0000_0000;
    d.map_read_only_range(ro, 0x10000);

    let unmapped = d.admin(&cmd_query(AqOpcode::QueryDevice, 0x8000_0000, 128, 0));
    let read_only = d.admin(&cmd_query(AqOpcode::QueryPort, ro, 64, 1));

    unmapped.expect_err(AqStatus::BadAddress, CmdQuery::OUT_ADDR_OFF);
    read_only.expect_err(AqStatus::BadAddress, CmdQuery::OUT_ADDR_OFF);
}

// ---------------------------------------------------------------------- contexts

#[test]
fn alloc_uctx_hands_out_contexts_from_1_and_reuses_freed_ones() {
    let (_devices, mut d) = device();

    let (a, b) = (d.alloc_uctx(), d.alloc_uctx());
    d.dealloc_uctx(a).ok();
    let c = d.alloc_uctx();

    assert_eq!((a, b, c), (1, 2, 1));
}

#[test]
fn alloc_uctx_beyond_max_uctx_is_no_resources() {
    let (_devices, mut d) = device();
    let max = d.read_reg(bar0::MAX_UCTX);
    let alloc = bytes_of(&cmd_handle(AqOpcode::AllocUctx, 0, 0));
    let mut got = Vec::new();
    while got.len() < max as usize {
        let n = (max as usize - got.len()).min(8);
        let batch: Vec<&[u8]> = vec![&alloc; n];
        got.extend(d.admin_batch(&batch).iter().map(|r| r.ok()[0]));
    }

    let over = d.admin_bytes(&alloc);

    assert_eq!(got, (1..=max).collect::<Vec<_>>());
    over.expect_general_err(AqStatus::NoResources);
}

#[test]
fn alloc_uctx_is_for_the_kernel_only_and_takes_no_handle() {
    let (_devices, mut d) = device();
    let uctx = d.alloc_uctx();

    let by_user = d.admin(&cmd_handle(AqOpcode::AllocUctx, 0, uctx));
    let with_handle = d.admin(&cmd_handle(AqOpcode::AllocUctx, 5, 0));

    by_user.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    with_handle.expect_err(AqStatus::BadField, CmdHandle::HANDLE_OFF);
}

#[test]
fn dealloc_uctx_fails_for_unknown_kernel_foreign_and_busy_contexts() {
    let (_devices, mut d) = device();
    let a = d.alloc_uctx();
    let b = d.alloc_uctx();
    let pd = d.alloc_pd(a);

    let unknown = d.admin(&cmd_handle(AqOpcode::DeallocUctx, 77, 0));
    let kernel = d.admin(&cmd_handle(AqOpcode::DeallocUctx, 0, 0));
    let foreign = d.admin(&cmd_handle(AqOpcode::DeallocUctx, a, b));
    let busy_pd = d.dealloc_uctx(a);
    d.dealloc_pd(a, pd).ok();
    let cq = d.create_cq(a, 2);
    let busy_cq = d.dealloc_uctx(a);
    d.destroy_cq(&cq).ok();
    let ok = d.dealloc_uctx(a);
    let again = d.dealloc_uctx(a);

    unknown.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    kernel.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    foreign.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    busy_pd.expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    busy_cq.expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    ok.ok();
    again.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}

// ---------------------------------------------------------------------- PDs

#[test]
fn alloc_pd_gives_distinct_pds_to_own_and_kernel_callers_only() {
    let (_devices, mut d) = device();
    let a = d.alloc_uctx();
    let b = d.alloc_uctx();

    let p1 = d.alloc_pd(a);
    let p2 = d.admin(&cmd_handle(AqOpcode::AllocPd, a, KERNEL_UCTX)).ok()[0];
    let foreign = d.admin(&cmd_handle(AqOpcode::AllocPd, a, b));
    let unknown = d.admin(&cmd_handle(AqOpcode::AllocPd, 200, 200));

    assert_ne!(p1, p2);
    foreign.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    unknown.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}

#[test]
fn alloc_pd_beyond_max_pd_is_no_resources() {
    let (_devices, mut d) = device();
    let uctx = d.alloc_uctx();
    let max = d.read_reg(bar0::MAX_PD) as usize;
    let alloc = bytes_of(&cmd_handle(AqOpcode::AllocPd, uctx, uctx));
    let mut pds = Vec::new();
    while pds.len() < max {
        let batch: Vec<&[u8]> = vec![&alloc; (max - pds.len()).min(8)];
        pds.extend(d.admin_batch(&batch).iter().map(|r| r.ok()[0]));
    }

    let over = d.admin_bytes(&alloc);
    d.dealloc_pd(uctx, pds[17]).ok();
    let again = d.alloc_pd(uctx);

    over.expect_general_err(AqStatus::NoResources);
    assert_eq!(again, pds[17], "a freed PD number is reused");
}

#[test]
fn dealloc_pd_fails_while_an_mr_or_qp_uses_it() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let pd2 = d.alloc_pd(w.uctx);
    let mr = d.reg_mr(w.uctx, pd2, 4096, ACCESS_ALL);

    let busy_qp = d.dealloc_pd(w.uctx, w.pd);
    let busy_mr = d.dealloc_pd(w.uctx, pd2);
    d.destroy_qp(&w.qp).ok();
    d.dereg_mr(&mr).ok();
    let ok1 = d.dealloc_pd(w.uctx, w.pd);
    let ok2 = d.dealloc_pd(w.uctx, pd2);

    busy_qp.expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    busy_mr.expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    ok1.ok();
    ok2.ok();
}

#[test]
fn dealloc_pd_fails_for_unknown_and_foreign_pds() {
    let (_devices, mut d) = device();
    let a = d.alloc_uctx();
    let b = d.alloc_uctx();
    let pd = d.alloc_pd(a);

    let unknown = d.dealloc_pd(a, pd + 1);
    let foreign = d.dealloc_pd(b, pd);
    let by_kernel = d.dealloc_pd(KERNEL_UCTX, pd);
    let twice = d.dealloc_pd(a, pd);

    unknown.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    foreign.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    by_kernel.ok();
    twice.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}

// ---------------------------------------------------------------------- MRs

#[test]
fn reg_mr_returns_distinct_nonzero_keys_in_every_page_list_mode() {
    let (_devices, mut d) = device();
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);

    let keys: Vec<u32> = [Layout::Contiguous, Layout::Direct, Layout::Indirect]
        .into_iter()
        .map(|l| {
            d.reg_mr_with(MrSpec::new(uctx, pd, 500 * 4096, ACCESS_ALL).layout(l))
                .key
        })
        .collect();

    assert!(keys.iter().all(|k| *k != 0));
    assert!(keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2]);
}

#[test]
fn reg_mr_checks_pd_context_and_access() {
    let (_devices, mut d) = device();
    let a = d.alloc_uctx();
    let b = d.alloc_uctx();
    let pd = d.alloc_pd(a);
    let spec = MrSpec::new(a, pd, 4096, ACCESS_ALL);
    let (base, _) = d.reg_mr_cmd(spec);
    let with = |f: &dyn Fn(&mut CmdRegMr)| {
        let mut c = base;
        f(&mut c);
        c
    };

    let bad_pd = d.admin(&with(&|c| c.pdn = (pd + 9).into()));
    let foreign = d.admin(&with(&|c| c.uctx = b.into()));
    let remote_write_alone = d.admin(&with(&|c| c.access = REMOTE_WRITE.into()));
    let unknown_bit = d.admin(&with(&|c| c.access = (LOCAL_WRITE | 0x20).into()));
    let kernel = d.admin(&with(&|c| c.uctx = KERNEL_UCTX.into()));

    bad_pd.expect_err(AqStatus::BadHandle, CmdRegMr::PDN_OFF);
    foreign.expect_err(AqStatus::Permission, CmdRegMr::UCTX_OFF);
    remote_write_alone.expect_err(AqStatus::BadField, CmdRegMr::ACCESS_OFF);
    unknown_bit.expect_err(AqStatus::BadField, CmdRegMr::ACCESS_OFF);
    kernel.ok();
}

#[test]
fn reg_mr_checks_lengths_and_page_lists() {
    let (_devices, mut d) = device();
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    let (base, mr) =
        d.reg_mr_cmd(MrSpec::new(uctx, pd, 3 * 4096, ACCESS_ALL).layout(Layout::Direct));
    let (contig, _) =
        d.reg_mr_cmd(MrSpec::new(uctx, pd, 3 * 4096, ACCESS_ALL).layout(Layout::Contiguous));
    let pl = |f: usize| CmdRegMr::PAGES_OFF + f;
    let with = |c0: &CmdRegMr, f: &dyn Fn(&mut CmdRegMr)| {
        let mut c = *c0;
        f(&mut c);
        c
    };
    // A DIRECT list of 513 entries, and one crossing a 4 KiB boundary.
    let big = d.mem.alloc(8 * 4096, 4096);
    let crossing = d.mem.alloc(8192, 4096) + 4096 - 8;
    d.mem.write(crossing, &mr.pages[0].to_le_bytes());
    d.mem.write(crossing + 8, &mr.pages[1].to_le_bytes());
    d.mem.write(crossing + 16, &mr.pages[2].to_le_bytes());
    // A DIRECT list whose second page is not page-aligned.
    let misaligned = d.mem.alloc(4096, 4096);
    d.mem.write(misaligned, &mr.pages[0].to_le_bytes());
    d.mem
        .write(misaligned + 8, &(mr.pages[1] + 8).to_le_bytes());
    d.mem.write(misaligned + 16, &mr.pages[2].to_le_bytes());

    let cases: Vec<(CmdRegMr, AqStatus, usize)> = vec![
        (
            with(&base, &|c| c.length = 0.into()),
            AqStatus::BadSize,
            CmdRegMr::LENGTH_OFF,
        ),
        (
            with(&base, &|c| c.length = ((4u64 << 30) + 1).into()),
            AqStatus::BadSize,
            CmdRegMr::LENGTH_OFF,
        ),
        (
            with(&base, &|c| c.iova = (u64::MAX - 100).into()),
            AqStatus::BadField,
            CmdRegMr::IOVA_OFF,
        ),
        (
            with(&base, &|c| c.pages.npages = 4.into()),
            AqStatus::BadSize,
            pl(PageList::NPAGES_OFF),
        ),
        (
            with(&base, &|c| c.pages.npages = 2.into()),
            AqStatus::BadSize,
            pl(PageList::NPAGES_OFF),
        ),
        (
            with(&base, &|c| c.pages.page_shift = 11),
            AqStatus::BadField,
            pl(PageList::PAGE_SHIFT_OFF),
        ),
        (
            with(&base, &|c| c.pages.page_shift = 31),
            AqStatus::BadField,
            pl(PageList::PAGE_SHIFT_OFF),
        ),
        (
            with(&base, &|c| c.pages.mode = 3),
            AqStatus::BadField,
            pl(PageList::MODE_OFF),
        ),
        (
            with(&contig, &|c| {
                c.pages.addr = (c.pages.addr.to_native() + 512).into()
            }),
            AqStatus::BadField,
            pl(PageList::ADDR_OFF),
        ),
        (
            with(&base, &|c| {
                c.pages.addr = big.into();
                c.length = (513 * 4096).into();
                c.pages.npages = 513.into();
            }),
            AqStatus::BadField,
            pl(PageList::ADDR_OFF),
        ),
        (
            with(&base, &|c| c.pages.addr = crossing.into()),
            AqStatus::BadField,
            pl(PageList::ADDR_OFF),
        ),
        (
            with(&base, &|c| c.pages.addr = misaligned.into()),
            AqStatus::BadField,
            pl(PageList::ADDR_OFF),
        ),
        (
            with(&base, &|c| c.pages.addr = 0x50_0000_0000u64.into()),
            AqStatus::BadAddress,
            pl(PageList::ADDR_OFF),
        ),
    ];

    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }
    d.admin(&base).ok();
}

#[test]
fn dereg_mr_kills_the_key_and_a_reused_index_gets_a_new_key() {
    let (_devices, mut d) = device();
    let a = d.alloc_uctx();
    let b = d.alloc_uctx();
    let pd = d.alloc_pd(a);
    let mr = d.reg_mr(a, pd, 4096, ACCESS_ALL);

    let foreign = d.admin(&cmd_handle(AqOpcode::DeregMr, mr.key, b));
    let ok = d.dereg_mr(&mr);
    let stale = d.dereg_mr(&mr);
    let again = d.reg_mr(a, pd, 4096, ACCESS_ALL);
    let zero = d.admin(&cmd_handle(AqOpcode::DeregMr, 0, a));

    foreign.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    ok.ok();
    stale.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    assert_eq!(again.key >> 8, mr.key >> 8, "the index is reused");
    assert_ne!(again.key, mr.key, "with a new variant");
    zero.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}

// ---------------------------------------------------------------------- EQs

#[test]
fn create_eq_checks_flags_vector_depth_and_ring() {
    let (_devices, mut d) = device();
    let (base, _) = d.create_eq_cmd(2, false, 3);
    let with = |f: &dyn Fn(&mut CmdCreateEq)| {
        let mut c = base;
        f(&mut c);
        c
    };
    let ring = CmdCreateEq::RING_OFF;

    let second_async = d.admin(&with(&|c| c.flags = EQ_FLAG_ASYNC as u8));
    let unknown_flag = d.admin(&with(&|c| c.flags = 2));
    let vector = d.admin(&with(&|c| c.msix_vector = (MSIX_VECTORS as u16).into()));
    let depth0 = d.admin(&with(&|c| c.depth_log2 = 0));
    let depth17 = d.admin(&with(&|c| c.depth_log2 = 17));
    let npages = d.admin(&with(&|c| c.ring.npages = 2.into()));
    let unmapped = d.admin(&with(&|c| {
        c.ring.mode = PageListMode::Direct.into();
        c.ring.addr = 0x50_0000_0000u64.into();
    }));
    let ok = d.admin(&base);

    second_async.expect_err(AqStatus::Busy, CmdCreateEq::FLAGS_OFF);
    unknown_flag.expect_err(AqStatus::BadField, CmdCreateEq::FLAGS_OFF);
    vector.expect_err(AqStatus::BadField, CmdCreateEq::MSIX_VECTOR_OFF);
    depth0.expect_err(AqStatus::BadSize, CmdCreateEq::DEPTH_LOG2_OFF);
    depth17.expect_err(AqStatus::BadSize, CmdCreateEq::DEPTH_LOG2_OFF);
    npages.expect_err(AqStatus::BadSize, ring + PageList::NPAGES_OFF);
    unmapped.expect_err(AqStatus::BadAddress, ring + PageList::ADDR_OFF);
    let [eqn, slot, ..] = ok.ok();
    assert!(eqn != d.comp_eqn() && slot != d.comp_eq.as_ref().expect("EQ").slot);
}

#[test]
fn create_eq_beyond_max_eq_is_no_resources() {
    let (_devices, mut d) = device();
    let max = d.read_reg(bar0::MAX_EQ);
    for _ in 2..max {
        d.create_eq(1, false, 2);
    }

    let (cmd, _) = d.create_eq_cmd(1, false, 2);

    d.admin(&cmd).expect_general_err(AqStatus::NoResources);
}

#[test]
fn destroy_eq_fails_while_a_cq_uses_it_and_for_users() {
    let (_devices, mut d) = device();
    let uctx = d.alloc_uctx();
    let eq = d.create_eq(2, false, 4);
    let (cmd, _) = d.create_cq_cmd(uctx, 2, Layout::Contiguous, eq.eqn);
    let cqn = d.admin(&cmd).ok()[0];

    let busy = d.destroy_eq(eq.eqn);
    let by_user = d.admin(&cmd_handle(AqOpcode::DestroyEq, eq.eqn, uctx));
    d.admin(&cmd_handle(AqOpcode::DestroyCq, cqn, uctx)).ok();
    let ok = d.destroy_eq(eq.eqn);
    let unknown = d.destroy_eq(eq.eqn);

    busy.expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    by_user.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    ok.ok();
    unknown.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}

// ---------------------------------------------------------------------- CQs

#[test]
fn create_cq_checks_context_eq_depth_and_ring() {
    let (_devices, mut d) = device();
    let uctx = d.alloc_uctx();
    let eqn = d.comp_eqn();
    let (base, _) = d.create_cq_cmd(uctx, 3, Layout::Contiguous, eqn);
    let with = |f: &dyn Fn(&mut CmdCreateCq)| {
        let mut c = base;
        f(&mut c);
        c
    };
    let ring = CmdCreateCq::RING_OFF;

    let no_uctx = d.admin(&with(&|c| c.uctx = 99.into()));
    let no_eq = d.admin(&with(&|c| c.eqn = 63.into()));
    let depth0 = d.admin(&with(&|c| c.depth_log2 = 0));
    let depth17 = d.admin(&with(&|c| c.depth_log2 = 17));
    let npages = d.admin(&with(&|c| c.ring.npages = 2.into()));
    let shift = d.admin(&with(&|c| c.ring.page_shift = 40));
    let ok1 = d.admin(&base).ok();
    let (second, _) = d.create_cq_cmd(uctx, 3, Layout::Contiguous, eqn);
    let ok2 = d.admin(&second).ok();

    no_uctx.expect_err(AqStatus::BadHandle, CmdCreateCq::UCTX_OFF);
    no_eq.expect_err(AqStatus::BadHandle, CmdCreateCq::EQN_OFF);
    depth0.expect_err(AqStatus::BadSize, CmdCreateCq::DEPTH_LOG2_OFF);
    depth17.expect_err(AqStatus::BadSize, CmdCreateCq::DEPTH_LOG2_OFF);
    npages.expect_err(AqStatus::BadSize, ring + PageList::NPAGES_OFF);
    shift.expect_err(AqStatus::BadField, ring + PageList::PAGE_SHIFT_OFF);
    assert_ne!(ok1[0], ok2[0], "distinct CQs");
    assert_ne!(ok1[1], ok2[1], "distinct doorbell slots");
    assert_eq!(ok1[0], 0, "failed commands consumed no CQ number");
}

#[test]
fn destroy_cq_fails_while_a_qp_uses_it_and_for_other_contexts() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let other = d.alloc_uctx();

    let busy_send = d.destroy_cq(&w.cq);
    let busy_recv = d.destroy_cq(&w.cq2);
    let foreign = d.admin(&cmd_handle(AqOpcode::DestroyCq, w.cq.cqn, other));
    d.destroy_qp(&w.qp).ok();
    let ok = d.destroy_cq(&w.cq);
    let unknown = d.destroy_cq(&w.cq);

    busy_send.expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    busy_recv.expect_err(AqStatus::Busy, CmdHandle::HANDLE_OFF);
    foreign.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    ok.ok();
    unknown.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
}

// ---------------------------------------------------------------------- QPs

#[test]
fn create_qp_checks_handles_contexts_and_type() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let other = d.alloc_uctx();
    let other_pd = d.alloc_pd(other);
    let other_cq = d.create_cq(other, 2);
    let (base, _) = d.create_qp_cmd(w.uctx, w.pd, &w.cq, &w.cq2, QpCaps::default());
    let with = |f: &dyn Fn(&mut CmdCreateQp)| {
        let mut c = base;
        f(&mut c);
        c
    };

    let cases: Vec<(CmdCreateQp, AqStatus, usize)> = vec![
        (
            with(&|c| c.uctx = 99.into()),
            AqStatus::BadHandle,
            CmdCreateQp::UCTX_OFF,
        ),
        (
            with(&|c| c.pdn = 999.into()),
            AqStatus::BadHandle,
            CmdCreateQp::PDN_OFF,
        ),
        (
            with(&|c| c.pdn = other_pd.into()),
            AqStatus::Permission,
            CmdCreateQp::PDN_OFF,
        ),
        (
            with(&|c| c.send_cqn = 999.into()),
            AqStatus::BadHandle,
            CmdCreateQp::SEND_CQN_OFF,
        ),
        (
            with(&|c| c.recv_cqn = 999.into()),
            AqStatus::BadHandle,
            CmdCreateQp::RECV_CQN_OFF,
        ),
        (
            with(&|c| c.send_cqn = other_cq.cqn.into()),
            AqStatus::Permission,
            CmdCreateQp::SEND_CQN_OFF,
        ),
        (
            with(&|c| c.recv_cqn = other_cq.cqn.into()),
            AqStatus::Permission,
            CmdCreateQp::RECV_CQN_OFF,
        ),
        (
            with(&|c| c.qp_type = QpType::Gsi.into()),
            AqStatus::Permission,
            CmdCreateQp::UCTX_OFF,
        ),
        (
            with(&|c| c.qp_type = 8),
            AqStatus::BadField,
            CmdCreateQp::QP_TYPE_OFF,
        ),
    ];

    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }
    let [qpn, slot, ..] = d.admin(&base).ok();
    assert!((QPN_MIN..=QPN_MAX).contains(&qpn));
    assert_ne!(slot, w.qp.slot);
    assert_ne!(qpn, w.qp.qpn);
}

#[test]
fn create_qp_checks_depths_sges_inline_and_wqe_sizes() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let (base, _) = d.create_qp_cmd(w.uctx, w.pd, &w.cq, &w.cq2, QpCaps::default());
    let with = |f: &dyn Fn(&mut CmdCreateQp)| {
        let mut c = base;
        f(&mut c);
        c
    };
    let max_wr_log2 = bar0::MAX_QP_WR_RESET.trailing_zeros() as u8;

    let cases: Vec<(CmdCreateQp, AqStatus, usize)> = vec![
        (
            with(&|c| c.sq_depth_log2 = 0),
            AqStatus::BadSize,
            CmdCreateQp::SQ_DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.sq_depth_log2 = max_wr_log2 + 1),
            AqStatus::BadSize,
            CmdCreateQp::SQ_DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.rq_depth_log2 = 0),
            AqStatus::BadSize,
            CmdCreateQp::RQ_DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.max_send_sge = 17),
            AqStatus::BadSize,
            CmdCreateQp::MAX_SEND_SGE_OFF,
        ),
        (
            with(&|c| c.max_recv_sge = 17),
            AqStatus::BadSize,
            CmdCreateQp::MAX_RECV_SGE_OFF,
        ),
        (
            with(&|c| c.max_inline = (bar0::MAX_INLINE_RESET + 1).into()),
            AqStatus::BadSize,
            CmdCreateQp::MAX_INLINE_OFF,
        ),
        (
            with(&|c| c.max_send_sge = 16),
            AqStatus::BadSize,
            CmdCreateQp::SQ_WQE_SHIFT_OFF,
        ),
        (
            with(&|c| c.max_inline = 200.into()),
            AqStatus::BadSize,
            CmdCreateQp::SQ_WQE_SHIFT_OFF,
        ),
        (
            with(&|c| c.sq_wqe_shift = 11),
            AqStatus::BadSize,
            CmdCreateQp::SQ_WQE_SHIFT_OFF,
        ),
        (
            with(&|c| c.max_recv_sge = 16),
            AqStatus::BadSize,
            CmdCreateQp::RQ_WQE_SHIFT_OFF,
        ),
        (
            with(&|c| c.rq_wqe_shift = 4),
            AqStatus::BadSize,
            CmdCreateQp::RQ_WQE_SHIFT_OFF,
        ),
        (
            with(&|c| c.sq_depth_log2 = 7),
            AqStatus::BadSize,
            CmdCreateQp::SQ_RING_OFF + PageList::NPAGES_OFF,
        ),
        (
            with(&|c| c.rq_ring.npages = 9.into()),
            AqStatus::BadSize,
            CmdCreateQp::RQ_RING_OFF + PageList::NPAGES_OFF,
        ),
    ];

    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }
}

#[test]
fn modify_qp_walks_reset_init_rtr_rts_sqd_rts_err_reset() {
    let (_devices, mut d) = device();
    let mut w = world(&mut d);
    let o = ConnectOpts::default();
    let mut states = vec![d.qp_state(&w.qp)];

    d.qp_to_init(&w.qp, ACCESS_ALL).ok();
    states.push(d.qp_state(&w.qp));
    let (m, a) = FakeDriver::rtr_attr(d.lid, 0x1234, &o);
    d.modify_qp(&w.qp, m, a).ok();
    states.push(d.qp_state(&w.qp));
    let (m, a) = FakeDriver::rts_attr(&o);
    d.modify_qp(&w.qp, m, a).ok();
    states.push(d.qp_state(&w.qp));
    d.set_qp_state(&mut w.qp, QpState::Sqd).ok();
    states.push(d.qp_state(&w.qp));
    d.set_qp_state(&mut w.qp, QpState::Rts).ok();
    states.push(d.qp_state(&w.qp));
    d.set_qp_state(&mut w.qp, QpState::Err).ok();
    states.push(d.qp_state(&w.qp));
    d.set_qp_state(&mut w.qp, QpState::Reset).ok();
    states.push(d.qp_state(&w.qp));
    d.qp_to_init(&w.qp, ACCESS_ALL).ok();
    states.push(d.qp_state(&w.qp));

    use QpState::*;
    assert_eq!(
        states,
        vec![Reset, Init, Rtr, Rts, Sqd, Rts, Err, Reset, Init]
    );
}

#[test]
fn modify_qp_refuses_invalid_transitions_with_bad_state_and_changes_nothing() {
    let (_devices, mut d) = device();
    let mut w = world(&mut d);
    let o = ConnectOpts::default();
    let state_off = CmdModifyQp::ATTR_OFF + QpAttr::QP_STATE_OFF;

    let (m, a) = FakeDriver::rtr_attr(d.lid, 5, &o);
    let reset_to_rtr = d.modify_qp(&w.qp, m, a);
    let (m, a) = FakeDriver::rts_attr(&o);
    let reset_to_rts = d.modify_qp(&w.qp, m, a);
    let reset_to_sqd = d.set_qp_state(&mut w.qp, QpState::Sqd);
    d.qp_to_init(&w.qp, ACCESS_ALL).ok();
    let init_to_rts = d.modify_qp(&w.qp, m, a);
    d.set_qp_state(&mut w.qp, QpState::Err).ok();
    let err_to_rts = d.modify_qp(&w.qp, m, a);
    let err_to_init = d.qp_to_init(&w.qp, ACCESS_ALL);

    reset_to_rtr.expect_err(AqStatus::BadState, state_off);
    reset_to_rts.expect_err(AqStatus::BadState, state_off);
    reset_to_sqd.expect_err(AqStatus::BadState, state_off);
    init_to_rts.expect_err(AqStatus::BadState, state_off);
    err_to_rts.expect_err(AqStatus::BadState, state_off);
    err_to_init.expect_err(AqStatus::BadState, state_off);
    assert_eq!(d.qp_state(&w.qp), QpState::Err);
}

#[test]
fn modify_qp_requires_the_transitions_attributes_and_refuses_extra_ones() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let o = ConnectOpts::default();
    use QpAttrMask::*;
    let init_attr = QpAttr {
        qp_state: QpState::Init.into(),
        port_num: 1,
        ..Default::default()
    };

    let missing_port = d.modify_qp(&w.qp, mask(&[State, PkeyIndex, AccessFlags]), init_attr);
    let extra_sq_psn = d.modify_qp(
        &w.qp,
        mask(&[State, PkeyIndex, Port, AccessFlags, SqPsn]),
        init_attr,
    );
    d.qp_to_init(&w.qp, ACCESS_ALL).ok();
    let (m, a) = FakeDriver::rtr_attr(d.lid, 5, &o);
    let missing_dest_qpn = d.modify_qp(&w.qp, m & !u32::from(DestQpn), a);
    let missing_av = d.modify_qp(&w.qp, m & !u32::from(Av), a);
    d.modify_qp(&w.qp, m, a).ok();
    let (m, a) = FakeDriver::rts_attr(&o);
    let missing_retry = d.modify_qp(&w.qp, m & !u32::from(RetryCnt), a);

    let mask_off = CmdModifyQp::ATTR_MASK_OFF;
    missing_port.expect_err(AqStatus::BadField, mask_off);
    extra_sq_psn.expect_err(AqStatus::BadField, mask_off);
    missing_dest_qpn.expect_err(AqStatus::BadField, mask_off);
    missing_av.expect_err(AqStatus::BadField, mask_off);
    missing_retry.expect_err(AqStatus::BadField, mask_off);
    assert_eq!(d.qp_state(&w.qp), QpState::Rtr);
}

#[test]
fn modify_qp_checks_attribute_values_and_unsupported_mask_bits() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let o = ConnectOpts::default();
    d.qp_to_init(&w.qp, ACCESS_ALL).ok();
    let (m, base) = FakeDriver::rtr_attr(d.lid, 5, &o);
    let with = |f: &dyn Fn(&mut QpAttr)| {
        let mut a = base;
        f(&mut a);
        a
    };
    let at = |f: usize| CmdModifyQp::ATTR_OFF + f;
    use QpAttrMask::*;

    let cases: Vec<(u32, QpAttr, AqStatus, usize)> = vec![
        (
            m,
            with(&|a| a.path_mtu = 6),
            AqStatus::BadField,
            at(QpAttr::PATH_MTU_OFF),
        ),
        (
            m,
            with(&|a| a.path_mtu = 0),
            AqStatus::BadField,
            at(QpAttr::PATH_MTU_OFF),
        ),
        (
            m,
            with(&|a| a.max_dest_rd_atomic = 17),
            AqStatus::BadField,
            at(QpAttr::MAX_DEST_RD_ATOMIC_OFF),
        ),
        (
            m,
            with(&|a| a.min_rnr_timer = 32),
            AqStatus::BadField,
            at(QpAttr::MIN_RNR_TIMER_OFF),
        ),
        (
            m,
            with(&|a| a.dest_qp_num = (QPN_MAX + 1).into()),
            AqStatus::BadField,
            at(QpAttr::DEST_QP_NUM_OFF),
        ),
        (
            m,
            with(&|a| a.rq_psn = 0x100_0000.into()),
            AqStatus::BadField,
            at(QpAttr::RQ_PSN_OFF),
        ),
        (
            m,
            with(&|a| a.sl = 16),
            AqStatus::BadField,
            at(QpAttr::SL_OFF),
        ),
        (
            m | u32::from(AccessFlags),
            with(&|a| a.qp_access_flags = 0x20.into()),
            AqStatus::BadField,
            at(QpAttr::QP_ACCESS_FLAGS_OFF),
        ),
        (
            m | u32::from(CurState),
            with(&|a| a.cur_qp_state = QpState::Rts.into()),
            AqStatus::BadState,
            at(QpAttr::CUR_QP_STATE_OFF),
        ),
        (
            m,
            with(&|a| a.qp_state = 7),
            AqStatus::BadField,
            at(QpAttr::QP_STATE_OFF),
        ),
        (
            m | u32::from(AltPath),
            base,
            AqStatus::BadField,
            CmdModifyQp::ATTR_MASK_OFF,
        ),
        (
            m | u32::from(PathMigState),
            base,
            AqStatus::BadField,
            CmdModifyQp::ATTR_MASK_OFF,
        ),
        (
            m | u32::from(Cap),
            base,
            AqStatus::BadField,
            CmdModifyQp::ATTR_MASK_OFF,
        ),
        (
            m | 1 << 21,
            base,
            AqStatus::BadField,
            CmdModifyQp::ATTR_MASK_OFF,
        ),
    ];

    for (m, a, status, off) in cases {
        d.modify_qp(&w.qp, m, a).expect_err(status, off);
    }
    assert_eq!(
        d.qp_state(&w.qp),
        QpState::Init,
        "failed commands changed nothing"
    );
    d.modify_qp(&w.qp, m, base).ok();
}

#[test]
fn modify_and_query_qp_check_the_qp_the_context_and_out_fields() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let other = d.alloc_uctx();
    let out = d.mem.alloc(64, 8);
    let mut cmd = FakeDriver::modify_qp_cmd(&w.qp, mask(&[QpAttrMask::State]), QpAttr::default());

    cmd.qpn = 9999.into();
    let unknown = d.admin(&cmd);
    cmd.qpn = w.qp.qpn.into();
    cmd.uctx = other.into();
    let foreign = d.admin(&cmd);
    cmd.uctx = w.uctx.into();
    cmd.out_addr = out.into();
    let out_in_modify = d.admin(&cmd);
    let mut q = FakeDriver::query_qp_cmd(&w.qp, out, 63);
    let short = d.admin(&q);
    q.out_len = 64.into();
    q.attr_mask = 1.into();
    let masked = d.admin(&q);
    q.attr_mask = 0.into();
    q.uctx = other.into();
    let foreign_query = d.admin(&q);
    q.uctx = KERNEL_UCTX.into();
    let kernel_query = d.admin(&q);

    unknown.expect_err(AqStatus::BadHandle, CmdModifyQp::QPN_OFF);
    foreign.expect_err(AqStatus::Permission, CmdModifyQp::UCTX_OFF);
    out_in_modify.expect_err(AqStatus::BadField, CmdModifyQp::OUT_ADDR_OFF);
    short.expect_err(AqStatus::BadSize, CmdModifyQp::OUT_LEN_OFF);
    masked.expect_err(AqStatus::BadField, CmdModifyQp::ATTR_MASK_OFF);
    foreign_query.expect_err(AqStatus::Permission, CmdModifyQp::UCTX_OFF);
    kernel_query.ok();
}

#[test]
fn query_qp_reports_the_attributes_set_by_modify_qp() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let o = ConnectOpts {
        access: LOCAL_WRITE | REMOTE_READ,
        path_mtu: Mtu::Size1024,
        timeout: 14,
        retry_cnt: 5,
        rnr_retry: 6,
        min_rnr_timer: 12,
        max_rd_atomic: 3,
        max_dest_rd_atomic: 4,
        sq_psn: 0xabcdef,
        rq_psn: 0x123456,
    };

    d.connect_qp(&w.qp, 0x42, 0x777, &o);
    let a = d.query_qp(&w.qp);

    assert_eq!(a.qp_state, u8::from(QpState::Rts));
    assert_eq!(a.cur_qp_state, u8::from(QpState::Rts));
    assert_eq!(a.path_mtu, u8::from(Mtu::Size1024));
    assert_eq!(
        (a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer),
        (14, 5, 6, 12)
    );
    assert_eq!((a.max_rd_atomic, a.max_dest_rd_atomic), (3, 4));
    assert_eq!(a.qp_access_flags.to_native(), LOCAL_WRITE | REMOTE_READ);
    assert_eq!(a.dest_qp_num.to_native(), 0x777);
    assert_eq!(a.dlid.to_native(), 0x42);
    assert_eq!(
        (a.sq_psn.to_native(), a.rq_psn.to_native()),
        (0xabcdef, 0x123456)
    );
    assert_eq!((a.port_num, a.pkey_index.to_native()), (1, 0));
    assert_eq!((a.sq_draining, a.reserved0), (0, 0));
}

#[test]
fn sqd_with_notify_posts_sq_drained() {
    let (_devices, mut d) = device();
    let mut w = world(&mut d);
    d.connect_qp(&w.qp, d.lid, 5, &ConnectOpts::default());
    let attr = QpAttr {
        qp_state: QpState::Sqd.into(),
        en_sqd_async_notify: 1,
        ..Default::default()
    };

    d.modify_qp(
        &w.qp,
        mask(&[QpAttrMask::State, QpAttrMask::EnSqdAsyncNotify]),
        attr,
    )
    .ok();

    let e = d.wait_async_event();
    assert_eq!(
        (EventType::try_from(e.event_type), e.obj.to_native()),
        (Ok(EventType::SqDrained), w.qp.qpn)
    );
    d.set_qp_state(&mut w.qp, QpState::Rts).ok();
}

#[test]
fn destroy_qp_works_in_any_state_and_frees_its_pd_cqs_and_slot() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let other = d.alloc_uctx();
    d.connect_qp(&w.qp, d.lid, 5, &ConnectOpts::default());

    let foreign = d.admin(&cmd_handle(AqOpcode::DestroyQp, w.qp.qpn, other));
    let ok = d.destroy_qp(&w.qp);
    let again = d.destroy_qp(&w.qp);
    let qp2 = d.create_qp(w.uctx, w.pd, &w.cq, &w.cq2, QpCaps::default());
    d.destroy_qp(&qp2).ok();

    foreign.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
    ok.ok();
    again.expect_err(AqStatus::BadHandle, CmdHandle::HANDLE_OFF);
    assert_eq!(qp2.slot, w.qp.slot, "the doorbell slot was freed");
    d.destroy_cq(&w.cq).ok();
    d.destroy_cq(&w.cq2).ok();
    d.dealloc_pd(w.uctx, w.pd).ok();
    d.dealloc_uctx(w.uctx).ok();
}

#[test]
fn qpns_are_24_bit_and_never_0_or_1() {
    let (_devices, mut d) = device();
    let w = world(&mut d);
    let more: Vec<Qp> = (0..5)
        .map(|_| d.create_qp(w.uctx, w.pd, &w.cq, &w.cq2, QpCaps::default()))
        .collect();

    for qp in more.iter().chain([&w.qp]) {
        assert!((QPN_MIN..=QPN_MAX).contains(&qp.qpn), "QPN {}", qp.qpn);
    }
}

#[test]
fn reg_mr_beyond_the_device_page_list_budget_is_no_resources() {
    let (_devices, mut d) = device();
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    // 4 GiB of 4 KiB pages as an INDIRECT list: 1 Mi entries the device copies and holds.
    // Every top-level entry names the same page of entries (all naming one page), so the
    // guest spends 12 KiB on it. 16 of them fill the 16 Mi-entry budget.
    let page = d.mem.alloc(4096, 4096);
    let entries = d.mem.alloc(4096, 4096);
    let top = d.mem.alloc(2048 * 8, 4096);
    for i in 0..512u64 {
        d.mem.write_obj(entries + i * 8, &page.to_le());
    }
    for i in 0..2048u64 {
        d.mem.write_obj(top + i * 8, &entries.to_le());
    }
    let listed = |iova: u64| reg_4gib(uctx, pd, iova, top, PageListMode::Indirect);
    let keys: Vec<u32> = (0..16u64)
        .map(|i| d.admin(&listed(i << 32)).ok()[0])
        .collect();

    let over = d.admin(&listed(16 << 32));

    over.expect_general_err(AqStatus::NoResources);
    d.admin(&cmd_handle(AqOpcode::DeregMr, keys[0], uctx)).ok();
    d.admin(&listed(16 << 32)).ok();
}

#[test]
fn contiguous_mrs_hold_no_page_list_and_register_in_constant_time() {
    let (_devices, mut d) = device();
    let uctx = d.alloc_uctx();
    let pd = d.alloc_pd(uctx);
    // 4 GiB of 4 KiB pages described as CONTIGUOUS: the device keeps the run, not 1 Mi
    // entries, so far more than the page-list budget's worth registers, and every one of
    // 2048 REG_MR/DEREG_MR pairs on one doorbell completes.
    let huge = |iova: u64| reg_4gib(uctx, pd, iova, 1 << 40, PageListMode::Contiguous);
    let kept: Vec<u32> = (0..64u64)
        .map(|i| d.admin(&huge(i << 32)).ok()[0])
        .collect();
    for _ in 0..2048 {
        let key = d.admin(&huge(1 << 50)).ok()[0];
        d.admin(&cmd_handle(AqOpcode::DeregMr, key, uctx)).ok();
    }

    assert_eq!(kept.len(), 64);
}

/// REG_MR of 4 GiB at `iova` in 4 KiB pages, its page list at `addr` in `mode`.
fn reg_4gib(uctx: u32, pd: u32, iova: u64, addr: u64, mode: PageListMode) -> CmdRegMr {
    CmdRegMr {
        hdr: header(AqOpcode::RegMr),
        pdn: pd.into(),
        access: u32::from(Access::LocalWrite).into(),
        iova: iova.into(),
        length: (4u64 << 30).into(),
        pages: PageList {
            addr: addr.into(),
            npages: (1u32 << 20).into(),
            page_shift: 12,
            mode: mode.into(),
            ..Default::default()
        },
        uctx: uctx.into(),
        ..Default::default()
    }
}
