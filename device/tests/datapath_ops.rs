//! Every data-path operation, between two devices and on one device (loopback), with the
//! data verified byte for byte: SEND/RECV, SEND_WITH_IMM, RDMA WRITE (with immediate),
//! RDMA READ, SGE lists, inline data, many outstanding READs, selective signalling, queue
//! wrap-around, page-list modes, RNR waiting and the order in which a WRITE's bytes land.

mod harness;

use std::time::Duration;

use harness::memory::MemView;
use harness::*;
use vrnic_hw::*;
use Which::{A, B};

on_both_topologies!(
    send_of_1_byte_arrives,
    send_across_scattered_pages_arrives_byte_for_byte,
    send_of_8_mib_arrives_byte_for_byte,
    send_of_zero_bytes_completes_with_byte_len_0,
    send_with_imm_carries_the_immediate_to_the_receive_cqe,
    rdma_write_of_1_byte_lands,
    rdma_write_at_unaligned_offsets_lands_byte_for_byte,
    rdma_write_of_8_mib_lands_byte_for_byte,
    rdma_write_with_imm_consumes_a_receive_and_carries_the_immediate,
    zero_length_write_with_imm_needs_no_rkey_or_address,
    zero_length_read_needs_no_rkey_or_address,
    rdma_read_of_1_byte_reads,
    rdma_read_of_8_mib_reads_byte_for_byte,
    sixteen_sges_gather_and_scatter_in_order,
    inline_send_and_write_of_max_inline_bytes_arrive,
    many_outstanding_reads_complete_in_order_with_their_data,
    only_signaled_wqes_complete_and_wqe_index_names_them,
    queues_wrap_around_many_times,
    mrs_of_every_page_list_mode_and_page_size_move_data,
    rings_on_indirect_page_lists_work,
    send_with_rnr_retry_7_waits_for_a_receive_then_completes,
    send_without_receive_and_rnr_retry_0_fails_with_rnr_retry_exc_err,
    send_without_receive_and_small_rnr_retry_fails_with_rnr_retry_exc_err,
    write_with_imm_without_receive_waits_for_one,
    last_byte_of_a_write_becomes_visible_only_with_the_rest,
    armed_cq_posts_one_eqe_and_signals_its_vector,
    unarmed_cq_posts_no_event,
    solicited_arm_fires_only_for_solicited_completions,
    first_message_received_in_rtr_posts_comm_est,
    completion_and_event_queues_wrap_their_phase,
);

const MIB: u64 = 1 << 20;

/// SEND of `len` bytes from A to B; checks both CQEs and the data.
fn send_roundtrip(t: Topology, len: u64, seed: u64) {
    let mut p = Pair::new(t);
    let src = p.mr(A, len.max(1), ACCESS_ALL);
    let dst = p.mr(B, len.max(1), ACCESS_ALL);
    let data = pattern(seed, len as usize);
    p.write(A, &src, 0, &data);
    let sges = |mr: &Mr| {
        if len == 0 {
            vec![]
        } else {
            vec![mr.sge(0, len as u32)]
        }
    };

    p.post_recv(B, &RecvWr::new(0xb0b, sges(&dst)));
    p.post_send(A, &SendWr::send(0xa11ce, sges(&src)).signaled());

    let s = p.send_cqe(A);
    assert_cqe_ok(&s, 0xa11ce, WcOpcode::Send);
    assert_eq!(
        (
            s.qpn.to_native(),
            s.byte_len.to_native(),
            s.flags,
            s.wqe_index.to_native()
        ),
        (p.qpn(A), len as u32, 0, 0)
    );
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 0xb0b, WcOpcode::Recv);
    assert_eq!(
        (
            r.qpn.to_native(),
            r.src_qp.to_native(),
            r.byte_len.to_native(),
            r.flags,
            r.wc_flags
        ),
        (p.qpn(B), p.qpn(A), len as u32, CQE_FLAG_RECV as u8, 0)
    );
    assert_same_bytes(&p.read(B, &dst, 0, len), &data, "received data");
}

fn send_of_1_byte_arrives(t: Topology) {
    send_roundtrip(t, 1, 1);
}

fn send_across_scattered_pages_arrives_byte_for_byte(t: Topology) {
    send_roundtrip(t, 3 * 4096 + 1234, 2);
}

fn send_of_8_mib_arrives_byte_for_byte(t: Topology) {
    send_roundtrip(t, 8 * MIB, 3);
}

fn send_of_zero_bytes_completes_with_byte_len_0(t: Topology) {
    send_roundtrip(t, 0, 4);
}

fn send_with_imm_carries_the_immediate_to_the_receive_cqe(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 100, ACCESS_ALL);
    let dst = p.mr(B, 100, ACCESS_ALL);
    let data = pattern(5, 100);
    p.write(A, &src, 0, &data);

    p.post_recv(B, &RecvWr::new(9, vec![dst.sge(0, 100)]));
    p.post_send(
        A,
        &SendWr::send_imm(8, vec![src.sge(0, 100)], [0xde, 0xad, 0xbe, 0xef]).signaled(),
    );

    assert_cqe_ok(&p.send_cqe(A), 8, WcOpcode::Send);
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 9, WcOpcode::Recv);
    assert_eq!(
        r.imm_data,
        [0xde, 0xad, 0xbe, 0xef],
        "network order, unchanged"
    );
    assert_eq!(r.wc_flags, u8::from(WcFlags::WithImm));
    assert_eq!(r.byte_len.to_native(), 100);
    assert_same_bytes(&p.read(B, &dst, 0, 100), &data, "received data");
}

/// RDMA WRITE of `len` bytes from A's MR at `src_off` into B's MR at `dst_off`.
fn write_roundtrip(t: Topology, len: u64, src_off: u64, dst_off: u64, seed: u64) {
    let mut p = Pair::new(t);
    let src = p.mr(A, src_off + len, ACCESS_ALL);
    let dst = p.mr(B, dst_off + len + 64, ACCESS_ALL);
    let data = pattern(seed, len as usize);
    p.write(A, &src, src_off, &data);

    p.post_send(
        A,
        &SendWr::write(0x77, vec![src.sge(src_off, len as u32)], &dst, dst_off).signaled(),
    );

    let s = p.send_cqe(A);
    assert_cqe_ok(&s, 0x77, WcOpcode::RdmaWrite);
    assert_eq!(s.byte_len.to_native(), len as u32);
    assert_same_bytes(&p.read(B, &dst, dst_off, len), &data, "written data");
    assert!(
        p.read(B, &dst, 0, dst_off).iter().all(|b| *b == 0)
            && p.read(B, &dst, dst_off + len, 64).iter().all(|b| *b == 0),
        "bytes around the target range are untouched"
    );
    assert_eq!(p.poll_recv_cq(B), None, "a WRITE consumes no receive");
}

fn rdma_write_of_1_byte_lands(t: Topology) {
    write_roundtrip(t, 1, 0, 0, 6);
}

fn rdma_write_at_unaligned_offsets_lands_byte_for_byte(t: Topology) {
    write_roundtrip(t, 64 * 1024 + 3, 4095, 17, 7);
}

fn rdma_write_of_8_mib_lands_byte_for_byte(t: Topology) {
    write_roundtrip(t, 8 * MIB, 0, 0, 8);
}

fn rdma_write_with_imm_consumes_a_receive_and_carries_the_immediate(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 5000, ACCESS_ALL);
    let dst = p.mr(B, 5000, ACCESS_ALL);
    let data = pattern(9, 5000);
    p.write(A, &src, 0, &data);

    p.post_recv(B, &RecvWr::new(0x10, vec![]));
    p.post_send(
        A,
        &SendWr::write_imm(0x11, vec![src.sge(0, 5000)], &dst, 0, [1, 2, 3, 4]).signaled(),
    );

    assert_cqe_ok(&p.send_cqe(A), 0x11, WcOpcode::RdmaWrite);
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 0x10, WcOpcode::RecvRdmaWithImm);
    assert_eq!(
        (
            r.imm_data,
            r.wc_flags,
            r.src_qp.to_native(),
            r.byte_len.to_native()
        ),
        ([1, 2, 3, 4], u8::from(WcFlags::WithImm), p.qpn(A), 5000)
    );
    assert_same_bytes(&p.read(B, &dst, 0, 5000), &data, "written data");
}

fn zero_length_write_with_imm_needs_no_rkey_or_address(t: Topology) {
    let mut p = Pair::new(t);
    let dst = p.mr(B, 64, ACCESS_ALL);
    // IBTA C9-88: no memory is touched, so neither rkey nor address is checked.
    let wr = SendWr::write_imm(0x21, vec![], &dst, 0, [5, 6, 7, 8])
        .remote(0xdead_0000, dst.key ^ 0x5a5a_0000)
        .signaled();
    p.post_recv(B, &RecvWr::new(0x20, vec![]));
    p.post_send(A, &wr);

    assert_cqe_ok(&p.send_cqe(A), 0x21, WcOpcode::RdmaWrite);
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 0x20, WcOpcode::RecvRdmaWithImm);
    assert_eq!((r.imm_data, r.byte_len.to_native()), ([5, 6, 7, 8], 0));
}

fn zero_length_read_needs_no_rkey_or_address(t: Topology) {
    let mut p = Pair::new(t);
    let remote = p.mr(B, 64, ACCESS_ALL);
    let wr = SendWr::read(0x22, vec![], &remote, 0)
        .remote(0, 0)
        .signaled();
    p.post_send(A, &wr);

    assert_cqe_ok(&p.send_cqe(A), 0x22, WcOpcode::RdmaRead);
}

/// RDMA READ of `len` bytes of B's MR into A's MR.
fn read_roundtrip(t: Topology, len: u64, seed: u64) {
    let mut p = Pair::new(t);
    let local = p.mr(A, len, ACCESS_ALL);
    let remote = p.mr(B, len, ACCESS_ALL);
    let data = pattern(seed, len as usize);
    p.write(B, &remote, 0, &data);

    p.post_send(
        A,
        &SendWr::read(0x99, vec![local.sge(0, len as u32)], &remote, 0).signaled(),
    );

    let s = p.send_cqe(A);
    assert_cqe_ok(&s, 0x99, WcOpcode::RdmaRead);
    assert_eq!(s.byte_len.to_native(), len as u32);
    assert_same_bytes(&p.read(A, &local, 0, len), &data, "read data");
}

fn rdma_read_of_1_byte_reads(t: Topology) {
    read_roundtrip(t, 1, 10);
}

fn rdma_read_of_8_mib_reads_byte_for_byte(t: Topology) {
    read_roundtrip(t, 8 * MIB, 11);
}

fn sixteen_sges_gather_and_scatter_in_order(t: Topology) {
    let caps = QpCaps {
        max_send_sge: 16,
        max_recv_sge: 16,
        ..QpCaps::default()
    };
    let mut p = Pair::with(t, caps, ConnectOpts::default());
    // Sources: 16 pieces of odd sizes from two MRs; destinations: 16 other pieces.
    let src_sizes: Vec<u32> = (0..16).map(|i| 1 + i * 701 % 5003).collect();
    let total: u32 = src_sizes.iter().sum();
    let src1 = p.mr(A, u64::from(total) + 4096, ACCESS_ALL);
    let src2 = p.mr(A, u64::from(total) + 4096, ACCESS_ALL);
    let data = pattern(12, total as usize);
    let mut send_sges = Vec::new();
    let (mut at, mut off) = (0usize, 3u64);
    for (i, n) in src_sizes.iter().enumerate() {
        let mr = if i % 2 == 0 { &src1 } else { &src2 };
        p.write(A, mr, off, &data[at..at + *n as usize]);
        send_sges.push(mr.sge(off, *n));
        at += *n as usize;
        off += u64::from(*n) + 5;
    }
    let dst = p.mr(B, 2 * u64::from(total), ACCESS_ALL);
    let dst_sizes: Vec<u32> = (0..15).map(|_| total / 16).chain([total]).collect();
    // Fifteen equal pieces, spaced apart, then a last piece with room to spare.
    let mut recv_sges = Vec::new();
    let mut dst_offsets = Vec::new();
    let mut doff = 0u64;
    for n in &dst_sizes[..15] {
        recv_sges.push(dst.sge(doff, *n));
        dst_offsets.push(doff);
        doff += u64::from(*n) + 11;
    }
    let last = total - dst_sizes[..15].iter().sum::<u32>();
    recv_sges.push(dst.sge(doff, last + 100));
    dst_offsets.push(doff);

    p.post_recv(B, &RecvWr::new(1, recv_sges.clone()));
    p.post_send(A, &SendWr::send(2, send_sges).signaled());

    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::Send);
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len.to_native(), total);
    let mut got = Vec::new();
    for (i, off) in dst_offsets.iter().enumerate() {
        let n = if i < 15 { dst_sizes[i] } else { last };
        got.extend(p.read(B, &dst, *off, u64::from(n)));
    }
    assert_same_bytes(&got, &data, "scattered receive");
}

fn inline_send_and_write_of_max_inline_bytes_arrive(t: Topology) {
    let caps = QpCaps {
        max_inline: MAX_INLINE_BYTES,
        ..QpCaps::default()
    };
    let mut p = Pair::with(t, caps, ConnectOpts::default());
    let dst = p.mr(B, 1024, ACCESS_ALL);
    let data = pattern(13, MAX_INLINE_BYTES as usize);

    p.post_recv(B, &RecvWr::new(1, vec![dst.sge(0, 512)]));
    p.post_sends(
        A,
        &[
            SendWr::send(2, vec![]).inline(data.clone()).signaled(),
            SendWr::write(3, vec![], &dst, 512)
                .inline(data[..7].to_vec())
                .signaled(),
        ],
    );

    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::Send);
    assert_cqe_ok(&p.send_cqe(A), 3, WcOpcode::RdmaWrite);
    let r = p.recv_cqe(B);
    assert_cqe_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len.to_native(), MAX_INLINE_BYTES);
    assert_same_bytes(
        &p.read(B, &dst, 0, u64::from(MAX_INLINE_BYTES)),
        &data,
        "inline SEND",
    );
    assert_same_bytes(&p.read(B, &dst, 512, 7), &data[..7], "inline WRITE");
}

const MAX_INLINE_BYTES: u32 = bar0::MAX_INLINE_RESET;

fn many_outstanding_reads_complete_in_order_with_their_data(t: Topology) {
    const N: u64 = 100;
    const LEN: u64 = 3000;
    let caps = QpCaps {
        sq_depth_log2: 7,
        ..QpCaps::default()
    };
    let mut p = Pair::with(t, caps, ConnectOpts::default());
    let local = p.mr(A, N * LEN, ACCESS_ALL);
    let remote = p.mr(B, N * LEN, ACCESS_ALL);
    let data = pattern(14, (N * LEN) as usize);
    p.write(B, &remote, 0, &data);
    let wrs: Vec<SendWr> = (0..N)
        .map(|i| {
            // Read the chunks in reverse order, so a misplaced chunk shows.
            let r = N - 1 - i;
            SendWr::read(i, vec![local.sge(i * LEN, LEN as u32)], &remote, r * LEN).signaled()
        })
        .collect();

    p.post_sends(A, &wrs);

    let cqes = p.send_cqes(A, N as usize);
    for (i, c) in cqes.iter().enumerate() {
        assert_cqe_ok(c, i as u64, WcOpcode::RdmaRead);
        assert_eq!(c.wqe_index.to_native(), i as u16);
    }
    let got = p.read(A, &local, 0, N * LEN);
    for i in 0..N as usize {
        let r = N as usize - 1 - i;
        let l = LEN as usize;
        assert_same_bytes(
            &got[i * l..(i + 1) * l],
            &data[r * l..(r + 1) * l],
            "READ chunk",
        );
    }
}

fn only_signaled_wqes_complete_and_wqe_index_names_them(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 10 * 100, ACCESS_ALL);
    let dst = p.mr(B, 10 * 100, ACCESS_ALL);
    let data = pattern(15, 1000);
    p.write(A, &src, 0, &data);
    let signaled = [3u64, 7, 9];
    let wrs: Vec<SendWr> = (0..10)
        .map(|i| {
            let wr = SendWr::write(i, vec![src.sge(i * 100, 100)], &dst, i * 100);
            if signaled.contains(&i) {
                wr.signaled()
            } else {
                wr
            }
        })
        .collect();

    p.post_sends(A, &wrs);

    let cqes = p.send_cqes(A, 3);
    let got: Vec<(u64, u16)> = cqes
        .iter()
        .map(|c| (c.wr_id.to_native(), c.wqe_index.to_native()))
        .collect();
    assert_eq!(got, vec![(3, 3), (7, 7), (9, 9)]);
    assert_eq!(p.poll_send_cq(A), None, "no CQE for unsignaled WQEs");
    assert_same_bytes(&p.read(B, &dst, 0, 1000), &data, "every WRITE landed");
}

fn queues_wrap_around_many_times(t: Topology) {
    // SQ and RQ of 4 entries, CQs of 8 (created by Pair) wrap many times.
    let caps = QpCaps {
        sq_depth_log2: 2,
        rq_depth_log2: 2,
        ..QpCaps::default()
    };
    let mut p = Pair::with(t, caps, ConnectOpts::default());
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64 * 4, ACCESS_ALL);
    // 300 rounds of 4: the CQs of 256 entries wrap several times too.
    for round in 0..300u64 {
        let data = pattern(round, 64);
        p.write(A, &src, 0, &data);
        let recvs: Vec<RecvWr> = (0..4)
            .map(|i| RecvWr::new(round * 4 + i, vec![dst.sge(i * 64, 64)]))
            .collect();
        p.post_recvs(B, &recvs);
        let sends: Vec<SendWr> = (0..4)
            .map(|i| SendWr::send(round * 4 + i, vec![src.sge(0, 64)]).signaled())
            .collect();
        p.post_sends(A, &sends);
        for (i, c) in p.send_cqes(A, 4).iter().enumerate() {
            assert_cqe_ok(c, round * 4 + i as u64, WcOpcode::Send);
            assert_eq!(c.wqe_index.to_native(), i as u16);
        }
        for (i, c) in p.recv_cqes(B, 4).iter().enumerate() {
            assert_cqe_ok(c, round * 4 + i as u64, WcOpcode::Recv);
            assert_eq!(c.wqe_index.to_native(), i as u16);
        }
        for i in 0..4 {
            assert_same_bytes(&p.read(B, &dst, i * 64, 64), &data, "received data");
        }
    }
}

fn mrs_of_every_page_list_mode_and_page_size_move_data(t: Topology) {
    let mut p = Pair::new(t);
    let len = 3 * MIB + 999;
    let (uctx_a, pd_a) = (p.a.uctx, p.a.pd);
    let (uctx_b, pd_b) = (p.b.uctx, p.b.pd);
    let specs = [
        (
            MrSpec::new(uctx_a, pd_a, len, ACCESS_ALL).layout(Layout::Contiguous),
            "CONTIGUOUS 4K",
        ),
        (
            MrSpec::new(uctx_a, pd_a, len, ACCESS_ALL)
                .layout(Layout::Contiguous)
                .page_shift(21)
                .first_offset(12345),
            "CONTIGUOUS 2M with offset",
        ),
        (
            MrSpec::new(uctx_a, pd_a, len, ACCESS_ALL)
                .layout(Layout::Direct)
                .page_shift(16)
                .first_offset(100),
            "DIRECT 64K with offset",
        ),
        (
            MrSpec::new(uctx_a, pd_a, len, ACCESS_ALL)
                .layout(Layout::Indirect)
                .first_offset(4000),
            "INDIRECT 4K with offset",
        ),
    ];
    let dst_spec = MrSpec::new(uctx_b, pd_b, len, ACCESS_ALL)
        .layout(Layout::Indirect)
        .first_offset(1);
    let dst = p.drv(B).reg_mr_with(dst_spec);
    for (i, (spec, what)) in specs.into_iter().enumerate() {
        let src = p.drv(A).reg_mr_with(spec);
        let data = pattern(20 + i as u64, len as usize);
        p.write(A, &src, 0, &data);

        p.post_send(
            A,
            &SendWr::write(i as u64, vec![src.sge(0, len as u32)], &dst, 0).signaled(),
        );

        assert_cqe_ok(&p.send_cqe(A), i as u64, WcOpcode::RdmaWrite);
        assert_same_bytes(&p.read(B, &dst, 0, len), &data, what);
    }
}

fn rings_on_indirect_page_lists_work(t: Topology) {
    let caps = QpCaps {
        sq_depth_log2: 9,
        rq_depth_log2: 9,
        layout: Layout::Indirect,
        ..QpCaps::default()
    };
    let mut p = Pair::with(t, caps, ConnectOpts::default());
    let (uctx, _) = (p.a.uctx, ());
    let mut cq = p.drv(A).create_cq_with(uctx, 6, Layout::Indirect);
    let src = p.mr(A, 4096, ACCESS_ALL);
    let dst = p.mr(B, 4096, ACCESS_ALL);
    let data = pattern(30, 4096);
    p.write(A, &src, 0, &data);

    p.post_recv(B, &RecvWr::new(1, vec![dst.sge(0, 4096)]));
    p.post_send(A, &SendWr::send(2, vec![src.sge(0, 4096)]).signaled());

    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::Send);
    assert_cqe_ok(&p.recv_cqe(B), 1, WcOpcode::Recv);
    assert_same_bytes(&p.read(B, &dst, 0, 4096), &data, "received data");
    // The indirect CQ works too (an empty one reads as empty; destroy works).
    assert_eq!(p.drv(A).poll_cq(&mut cq), None);
    p.drv(A).destroy_cq(&cq).ok();
}

fn send_with_rnr_retry_7_waits_for_a_receive_then_completes(t: Topology) {
    let mut p = Pair::new(t); // rnr_retry 7 (forever), min_rnr_timer 10 us
    let src = p.mr(A, 256, ACCESS_ALL);
    let dst = p.mr(B, 256, ACCESS_ALL);
    let data = pattern(31, 256);
    p.write(A, &src, 0, &data);

    p.post_send(A, &SendWr::send(1, vec![src.sge(0, 256)]).signaled());
    // Give the requester time for many RNR retries (hundreds of 10 us timers); this sleep
    // is no threshold: the test holds whatever the device's speed.
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(p.poll_send_cq(A), None, "the SEND waits for a receive");
    assert_eq!(p.qp_state(A), QpState::Rts);
    p.post_recv(B, &RecvWr::new(2, vec![dst.sge(0, 256)]));

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::Send);
    assert_cqe_ok(&p.recv_cqe(B), 2, WcOpcode::Recv);
    assert_same_bytes(&p.read(B, &dst, 0, 256), &data, "received data");
}

/// A SEND with no receive posted and `rnr_retry` fails with RNR_RETRY_EXC_ERR, the QP goes
/// to ERR and the WQE behind it is flushed.
fn send_without_receive_fails_after(t: Topology, rnr_retry: u8) {
    let opts = ConnectOpts {
        rnr_retry,
        min_rnr_timer: 1,
        ..ConnectOpts::default()
    };
    let mut p = Pair::with(t, QpCaps::default(), opts);
    let src = p.mr(A, 16, ACCESS_ALL);

    p.post_sends(
        A,
        &[
            SendWr::send(1, vec![src.sge(0, 16)]).signaled(),
            SendWr::send(2, vec![src.sge(0, 16)]),
        ],
    );

    assert_cqe_status(&p.send_cqe(A), WcStatus::RnrRetryExcErr, VendorErr::Rnr);
    let flushed = p.send_cqe(A);
    assert_cqe_status(&flushed, WcStatus::WrFlushErr, VendorErr::Flush);
    assert_eq!(flushed.wr_id.to_native(), 2);
    assert_eq!(p.qp_state(A), QpState::Err);
    assert_eq!(p.qp_state(B), QpState::Rts, "the responder is not at fault");
}

fn send_without_receive_and_rnr_retry_0_fails_with_rnr_retry_exc_err(t: Topology) {
    send_without_receive_fails_after(t, 0);
}

fn send_without_receive_and_small_rnr_retry_fails_with_rnr_retry_exc_err(t: Topology) {
    send_without_receive_fails_after(t, 3);
}

fn write_with_imm_without_receive_waits_for_one(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64, ACCESS_ALL);
    let data = pattern(32, 64);
    p.write(A, &src, 0, &data);

    p.post_send(
        A,
        &SendWr::write_imm(1, vec![src.sge(0, 64)], &dst, 0, [9, 9, 9, 9]).signaled(),
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        p.poll_send_cq(A),
        None,
        "WRITE_WITH_IMM waits for a receive"
    );
    p.post_recv(B, &RecvWr::new(2, vec![]));

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
    assert_cqe_ok(&p.recv_cqe(B), 2, WcOpcode::RecvRdmaWithImm);
    assert_same_bytes(&p.read(B, &dst, 0, 64), &data, "written data");
}

/// Spins on the last byte of `[gpa pieces]` until it reads `last`, then returns everything.
fn watch_last_byte(view: &MemView, pieces: &[(u64, u64)], last: u8) -> Vec<u8> {
    let &(gpa, n) = pieces.last().expect("pieces");
    let last_gpa = gpa + n - 1;
    wait_for("the last byte of the WRITE", || {
        (view.load::<u8>(last_gpa, std::sync::atomic::Ordering::Acquire) == last).then_some(())
    });
    let mut out = Vec::new();
    for &(gpa, n) in pieces {
        let mut buf = vec![0u8; n as usize];
        view.read(gpa, &mut buf);
        out.extend(buf);
    }
    out
}

fn last_byte_of_a_write_becomes_visible_only_with_the_rest(t: Topology) {
    const LEN: u64 = 4 * MIB;
    let mut p = Pair::new(t);
    let src = p.mr(A, LEN, ACCESS_ALL);
    let dst = p.mr(B, LEN, ACCESS_ALL);
    let view = p.drv(B).mem.view();
    let pieces = dst.pieces(0, LEN);
    for round in 0..3u64 {
        let mut data = pattern(40 + round, LEN as usize);
        let last = 0xA0 + round as u8;
        data[LEN as usize - 1] = last;
        p.write(A, &src, 0, &data);
        p.drv(B).mr_fill(&dst, 0);

        let seen = std::thread::scope(|s| {
            let watcher = s.spawn(|| watch_last_byte(&view, &pieces, last));
            p.post_send(
                A,
                &SendWr::write(round, vec![src.sge(0, LEN as u32)], &dst, 0).signaled(),
            );
            watcher.join().expect("watcher")
        });

        assert_same_bytes(&seen, &data, "message seen when its last byte was");
        assert_cqe_ok(&p.send_cqe(A), round, WcOpcode::RdmaWrite);
    }
}

fn armed_cq_posts_one_eqe_and_signals_its_vector(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let cqn = p.a.send_cq.cqn;
    let vector = p.drv(A).comp_eq.as_ref().expect("EQ").vector;
    let (drv, side) = p.side(A);
    drv.arm_cq(&mut side.send_cq, CqArm::Next);

    p.post_sends(
        A,
        &[
            SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
            SendWr::write(2, vec![src.sge(0, 8)], &dst, 0).signaled(),
        ],
    );

    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::RdmaWrite);
    let e = p.drv(A).wait_comp_event();
    assert_eq!(
        (
            EventType::try_from(e.event_type),
            e.obj.to_native(),
            e.data.to_native()
        ),
        (Ok(EventType::Completion), cqn, 0)
    );
    assert!(p.drv(A).wait_irq(vector) >= 1, "MSI-X of the completion EQ");
    assert_eq!(
        p.drv(A).poll_comp_event(),
        None,
        "one arm request, one event"
    );
}

fn unarmed_cq_posts_no_event(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let cqn = p.a.send_cq.cqn;

    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(A), 1, WcOpcode::RdmaWrite);
    // Now arm and complete once more: the EQ must hold exactly that one event.
    let (drv, side) = p.side(A);
    drv.arm_cq(&mut side.send_cq, CqArm::Next);
    p.post_send(
        A,
        &SendWr::write(2, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::RdmaWrite);

    let e = p.drv(A).wait_comp_event();
    assert_eq!(e.obj.to_native(), cqn);
    assert_eq!(
        p.drv(A).poll_comp_event(),
        None,
        "no event for the unarmed CQE"
    );
}

fn solicited_arm_fires_only_for_solicited_completions(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 16, ACCESS_ALL);
    let cqn = p.b.recv_cq.cqn;
    let (drv, side) = p.side(B);
    drv.arm_cq(&mut side.recv_cq, CqArm::Solicited);

    p.post_recvs(
        B,
        &[
            RecvWr::new(1, vec![dst.sge(0, 8)]),
            RecvWr::new(2, vec![dst.sge(8, 8)]),
        ],
    );
    p.post_send(A, &SendWr::send(3, vec![src.sge(0, 8)]).signaled());
    let unsolicited = p.recv_cqe(B);
    p.post_send(
        A,
        &SendWr::send(4, vec![src.sge(0, 8)]).signaled().solicited(),
    );
    let solicited = p.recv_cqe(B);

    assert_eq!(unsolicited.flags, CQE_FLAG_RECV as u8);
    assert_eq!(solicited.flags, (CQE_FLAG_RECV | CQE_FLAG_SOLICITED) as u8);
    let e = p.drv(B).wait_comp_event();
    assert_eq!(e.obj.to_native(), cqn);
    assert_eq!(
        p.drv(B).poll_comp_event(),
        None,
        "only the solicited receive fired the event"
    );
    assert_eq!(p.send_cqes(A, 2).len(), 2);
}

fn first_message_received_in_rtr_posts_comm_est(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 32, ACCESS_ALL);
    let dst = p.mr(B, 32, ACCESS_ALL);
    let (lid_a, qpn_a) = (p.lid(A), p.qpn(A));
    let (drv, side) = p.side(B);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    drv.qp_to_init(&side.qp, ACCESS_ALL).ok();
    let (m, a) = FakeDriver::rtr_attr(lid_a, qpn_a, &ConnectOpts::default());
    drv.modify_qp(&side.qp, m, a).ok();
    let qpn_b = side.qp.qpn;

    p.post_recv(B, &RecvWr::new(1, vec![dst.sge(0, 32)]));
    p.post_send(A, &SendWr::send(2, vec![src.sge(0, 32)]).signaled());

    assert_cqe_ok(&p.send_cqe(A), 2, WcOpcode::Send);
    assert_cqe_ok(&p.recv_cqe(B), 1, WcOpcode::Recv);
    p.drv(B).wait_async_event_for(EventType::CommEst, qpn_b);
    assert_eq!(p.qp_state(B), QpState::Rtr, "RTR receives");
}

fn completion_and_event_queues_wrap_their_phase(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let caps = QpCaps::default();
    let (lid_a, lid_b) = (p.lid(A), p.lid(B));
    // On A: an EQ of 2 entries on vector 2, a CQ of 2 entries on it, and a QP using it.
    let (drv, side) = p.side(A);
    let mut eq = drv.create_eq(1, false, 2);
    let mut cq = drv.create_cq_on(side.uctx, 1, Layout::Scattered, eq.eqn);
    let mut qp = drv.create_qp(side.uctx, side.pd, &cq, &cq, caps);
    let (drv, side) = p.side(B);
    let peer = drv.create_qp(side.uctx, side.pd, &side.send_cq, &side.recv_cq, caps);
    drv.connect_qp(&peer, lid_a, qp.qpn, &ConnectOpts::default());
    p.drv(A)
        .connect_qp(&qp, lid_b, peer.qpn, &ConnectOpts::default());
    let drv = p.drv(A);
    drv.take_irqs(2);

    for i in 0..9u64 {
        drv.arm_cq(&mut cq, CqArm::Next);
        drv.post_send(
            &mut qp,
            &SendWr::write(i, vec![src.sge(0, 8)], &dst, 0).signaled(),
        );
        assert_cqe_ok(&drv.wait_cqe(&mut cq), i, WcOpcode::RdmaWrite);
        let e = drv.wait_eqe(&mut eq);
        assert_eq!(
            (EventType::try_from(e.event_type), e.obj.to_native()),
            (Ok(EventType::Completion), cq.cqn),
            "event {i}"
        );
        assert!(drv.wait_irq(2) >= 1, "MSI-X vector 2 for event {i}");
    }
    assert_eq!(drv.poll_eq(&mut eq), None);
}
