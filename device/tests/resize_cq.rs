//! RESIZE_CQ (SPEC "Resizing a CQ"): the unpolled CQEs move byte-exact to the start of the
//! new ring with its first-pass phase, the slot's ci word becomes 0, later CQEs land in the
//! new ring with the right phases across wraps, the old ring is never written again, the
//! arm request carries over; and every refusal changes nothing.

mod harness;

use harness::*;
use vrnic_hw::*;

on_both_topologies!(
    growing_moves_the_outstanding_cqes_byte_exact_and_traffic_goes_on_in_the_new_ring,
    shrinking_keeps_the_outstanding_cqes_and_wraps_the_small_ring_with_the_right_phases,
    cqes_of_a_later_pass_move_with_the_first_pass_phase_of_the_new_ring,
    an_armed_cq_fires_its_event_from_the_new_ring,
    sends_posted_before_the_command_complete_into_the_old_ring_and_move,
);

/// Posts `n` signaled RDMA WRITEs (wr_id first..first+n) from a to b and waits until the
/// device has written all their CQEs, without consuming them.
fn writes(p: &mut Pair, first: u64, n: u64) {
    let src = p.mr(Which::A, 64, ACCESS_ALL);
    let dst = p.mr(Which::B, 64, ACCESS_ALL);
    let wrs: Vec<SendWr> = (first..first + n)
        .map(|id| SendWr::write(id, vec![src.sge(0, 64)], &dst, 0).signaled())
        .collect();
    p.post_sends(Which::A, &wrs);
    let (drv, side) = p.side(Which::A);
    let last = side.send_cq.ci.wrapping_add(n as u32 - 1);
    let ring = side.send_cq.ring.clone();
    wait_for("the CQEs", || {
        let owner: u8 = drv.mem.read_obj(ring.entry(last) + Cqe::OWNER_OFF as u64);
        (owner & 1 == ring.phase(last)).then_some(())
    });
}

/// The raw bytes of entries `[from, from + n)` of `ring`.
fn entries(d: &FakeDriver, ring: &Ring, from: u32, n: u32) -> Vec<Vec<u8>> {
    (from..from + n)
        .map(|i| d.mem.read_vec(ring.entry(i), Cqe::SIZE))
        .collect()
}

fn wr_ids(cqes: &[Cqe]) -> Vec<u64> {
    cqes.iter().map(|c| c.wr_id.to_native()).collect()
}

fn growing_moves_the_outstanding_cqes_byte_exact_and_traffic_goes_on_in_the_new_ring(t: Topology) {
    let mut p = Pair::new(t);
    writes(&mut p, 1, 5);
    let (d, side) = p.side(Which::A);
    let polled = d.wait_cqes(&mut side.send_cq, 2);
    assert_eq!(wr_ids(&polled), vec![1, 2]);
    let before = entries(d, &side.send_cq.ring, 2, 3);
    let (page, slot) = (side.send_cq.page, side.send_cq.slot);
    d.db_store(page, slot, 1, 0x1234 << 2);

    let moved = d.resize_cq(&mut side.send_cq, 10);

    assert_eq!(moved, 3);
    assert_eq!(
        entries(d, &side.send_cq.ring, 0, 3),
        before,
        "byte-exact, phase 1 kept"
    );
    assert_eq!(d.db_load(page, slot, 0), 0, "the slot's ci word is zeroed");
    assert_eq!(d.db_load(page, slot, 1), 0x1234 << 2, "arm is the driver's");
    let rest = d.wait_cqes(&mut side.send_cq, 3);
    assert_eq!(wr_ids(&rest), vec![3, 4, 5]);
    writes(&mut p, 6, 2);
    let (d, side) = p.side(Which::A);
    let later = d.wait_cqes(&mut side.send_cq, 2);
    assert_eq!(wr_ids(&later), vec![6, 7]);
    assert_eq!(d.poll_cq(&mut side.send_cq), None);
}

fn shrinking_keeps_the_outstanding_cqes_and_wraps_the_small_ring_with_the_right_phases(
    t: Topology,
) {
    let mut p = Pair::new(t);
    writes(&mut p, 1, 3);
    let (d, side) = p.side(Which::A);
    let old = side.send_cq.ring.clone();

    assert_eq!(d.resize_cq(&mut side.send_cq, 2), 3);
    // The driver may free the old ring: poison it to see any write the device makes.
    for i in 0..old.depth() {
        d.mem.fill(old.entry(i), Cqe::SIZE, 0xab);
    }
    let first = d.wait_cqes(&mut side.send_cq, 3);
    assert_eq!(wr_ids(&first), vec![1, 2, 3]);
    // Ten more, two at a time, through a ring of four: passes 1, 2, 3 and 4.
    for k in 0..5 {
        writes(&mut p, 10 + 2 * k, 2);
        let (d, side) = p.side(Which::A);
        let got = d.wait_cqes(&mut side.send_cq, 2);
        assert_eq!(wr_ids(&got), vec![10 + 2 * k, 11 + 2 * k]);
    }

    let (d, side) = p.side(Which::A);
    assert_eq!(side.send_cq.ci, 13);
    let untouched = (0..old.depth()).all(|i| d.mem.read_vec(old.entry(i), Cqe::SIZE) == [0xab; 64]);
    assert!(untouched, "the old ring was written after the resize");
}

fn cqes_of_a_later_pass_move_with_the_first_pass_phase_of_the_new_ring(t: Topology) {
    let mut p = Pair::new(t);
    let (d, side) = p.side(Which::A);
    assert_eq!(d.resize_cq(&mut side.send_cq, 2), 0);
    writes(&mut p, 1, 4);
    let (d, side) = p.side(Which::A);
    d.wait_cqes(&mut side.send_cq, 4);
    writes(&mut p, 5, 2);
    let (d, side) = p.side(Which::A);
    let old = side.send_cq.ring.clone();
    let before = entries(d, &old, 4, 2);
    assert!(
        before.iter().all(|e| e[Cqe::OWNER_OFF] & 1 == 0),
        "second pass: phase 0"
    );

    assert_eq!(d.resize_cq(&mut side.send_cq, 3), 2);

    let after = entries(d, &side.send_cq.ring, 0, 2);
    for (a, b) in after.iter().zip(&before) {
        assert_eq!(a[..Cqe::OWNER_OFF], b[..Cqe::OWNER_OFF], "the CQE itself");
        assert_eq!(a[Cqe::OWNER_OFF] & 1, 1, "the new ring's first pass");
    }
    let got = d.wait_cqes(&mut side.send_cq, 2);
    assert_eq!(wr_ids(&got), vec![5, 6]);
}

fn an_armed_cq_fires_its_event_from_the_new_ring(t: Topology) {
    let mut p = Pair::new(t);
    let (d, side) = p.side(Which::A);
    d.arm_cq(&mut side.send_cq, CqArm::Next);
    assert_eq!(d.resize_cq(&mut side.send_cq, 4), 0);
    assert_eq!(d.poll_comp_event(), None);

    writes(&mut p, 1, 1);

    let (d, side) = p.side(Which::A);
    let e = d.wait_comp_event();
    assert_eq!(
        (e.event_type, e.obj.to_native()),
        (u8::from(EventType::Completion), side.send_cq.cqn)
    );
    assert_eq!(wr_ids(&d.wait_cqes(&mut side.send_cq, 1)), vec![1]);
    // One request, one event: the sequence it fired for carried over.
    writes(&mut p, 2, 1);
    let (d, _) = p.side(Which::A);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(d.poll_comp_event(), None);
}

/// The sends are posted while the poller sleeps, with the producer index stored but no flag
/// and no kick: only RESIZE_CQ's look at the QPs using the CQ finds them, and it waits
/// until their CQEs are written, so they move (pyverbs' test_resize_cq posts and resizes at
/// once; a resize that ran first would shrink the ring under them and overflow it).
fn sends_posted_before_the_command_complete_into_the_old_ring_and_move(t: Topology) {
    let mut p = Pair::new(t);
    let src = p.mr(Which::A, 64, ACCESS_ALL);
    let dst = p.mr(Which::B, 64, ACCESS_ALL);
    let (d, side) = p.side(Which::A);
    d.wait_poller_asleep(side.qp.page);
    for id in 1..=3 {
        let wr = SendWr::write(id, vec![src.sge(0, 64)], &dst, 0).signaled();
        d.write_send_wqe(&mut side.qp, &wr.encode());
    }
    d.db_store(side.qp.page, side.qp.slot, 0, side.qp.sq_pi);

    assert_eq!(d.resize_cq(&mut side.send_cq, 2), 3);

    assert_eq!(wr_ids(&d.wait_cqes(&mut side.send_cq, 3)), vec![1, 2, 3]);
    assert_eq!(d.poll_cq(&mut side.send_cq), None);
}

#[test]
fn every_refusal_leaves_the_cq_as_it_was() {
    let mut p = Pair::new(Topology::Loopback);
    writes(&mut p, 1, 3);
    let other = p.b.uctx;
    let (d, side) = p.side(Which::A);
    let cq = &side.send_cq;
    let (good, _) = d.resize_cq_cmd(cq, 4);
    let with = |f: &dyn Fn(&mut CmdResizeCq)| {
        let mut c = good;
        f(&mut c);
        c
    };
    let cases = [
        (
            with(&|c| c.cqn = 99.into()),
            AqStatus::BadHandle,
            CmdResizeCq::CQN_OFF,
        ),
        (
            with(&|c| c.uctx = other.into()),
            AqStatus::Permission,
            CmdResizeCq::UCTX_OFF,
        ),
        (
            with(&|c| c.depth_log2 = 0),
            AqStatus::BadSize,
            CmdResizeCq::DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.depth_log2 = 17),
            AqStatus::BadSize,
            CmdResizeCq::DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.ci = 4.into()),
            AqStatus::BadField,
            CmdResizeCq::CI_OFF,
        ),
        (
            with(&|c| c.ci = 3u32.wrapping_sub(257).into()),
            AqStatus::BadField,
            CmdResizeCq::CI_OFF,
        ),
        (
            with(&|c| c.depth_log2 = 1),
            AqStatus::BadSize,
            CmdResizeCq::DEPTH_LOG2_OFF,
        ),
        (
            with(&|c| c.reserved0[1] = 1),
            AqStatus::BadField,
            CmdResizeCq::RESERVED0_OFF,
        ),
        (
            with(&|c| c.reserved1[87] = 1),
            AqStatus::BadField,
            CmdResizeCq::RESERVED1_OFF,
        ),
        (
            with(&|c| c.ring.npages = 0.into()),
            AqStatus::BadSize,
            CmdResizeCq::RING_OFF + PageList::NPAGES_OFF,
        ),
        (
            with(&|c| c.ring.addr = 0x60_0000_0000u64.into()),
            AqStatus::BadAddress,
            CmdResizeCq::RING_OFF,
        ),
    ];
    for (cmd, status, off) in cases {
        d.admin(&cmd).expect_err(status, off);
    }

    let got = d.wait_cqes(&mut side.send_cq, 3);
    assert_eq!(wr_ids(&got), vec![1, 2, 3], "still in the old ring");
    writes(&mut p, 4, 1);
    let (d, side) = p.side(Which::A);
    assert_eq!(wr_ids(&d.wait_cqes(&mut side.send_cq, 1)), vec![4]);
}

#[test]
fn a_cq_in_error_cannot_be_resized() {
    let mut p = Pair::new(Topology::Loopback);
    let (d, side) = p.side(Which::A);
    assert_eq!(d.resize_cq(&mut side.send_cq, 1), 0);
    let src = p.mr(Which::A, 8, ACCESS_ALL);
    let dst = p.mr(Which::B, 8, ACCESS_ALL);
    let wrs: Vec<SendWr> = (1..=3)
        .map(|id| SendWr::write(id, vec![src.sge(0, 8)], &dst, 0).signaled())
        .collect();
    p.post_sends(Which::A, &wrs);
    let cqn = p.a.send_cq.cqn;
    p.drv(Which::A).wait_async_event_for(EventType::CqErr, cqn);

    let (d, side) = p.side(Which::A);
    let (cmd, _) = d.resize_cq_cmd(&side.send_cq, 4);
    d.admin(&cmd).expect_general_err(AqStatus::BadState);
}
