//! Doorbell pages on demand (SPEC "Doorbell pages"): a context gets more pages as its objects
//! fill them, every object's doorbell is on the page the device returned, QPs on later pages
//! carry traffic, pages of a destroyed context come back zeroed, and the polling state is
//! announced in every page a context holds.

mod harness;

use harness::pair::{new_side, Ends, Side};
use harness::*;
use std::collections::HashSet;
use std::time::Duration;
use vrnic_hw::*;

/// Small queues, so a thousand QPs fit the harness's guest RAM.
fn tiny_caps() -> QpCaps {
    QpCaps {
        sq_depth_log2: 1,
        rq_depth_log2: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline: 0,
        layout: Layout::Contiguous,
        qp_type: QpType::Rc,
    }
}

/// `n` CQs of context `uctx`, created in admin batches.
fn create_cqs(d: &mut FakeDriver, uctx: u32, n: usize) -> Vec<Cq> {
    let eqn = d.comp_eqn();
    let mut cqs = Vec::new();
    while cqs.len() < n {
        let batch: Vec<_> = (0..(n - cqs.len()).min(8))
            .map(|_| d.create_cq_cmd(uctx, 1, Layout::Contiguous, eqn))
            .collect();
        let bytes: Vec<Vec<u8>> = batch.iter().map(|(cmd, _)| bytes_of(cmd)).collect();
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let results = d.admin_batch(&refs);
        for ((_, ring), r) in batch.into_iter().zip(results) {
            cqs.push(Cq::created(uctx, ring, r.ok()));
        }
    }
    cqs
}

/// `n` QPs of context `uctx` on `cq`, created in admin batches.
fn create_qps(d: &mut FakeDriver, uctx: u32, pd: u32, cq: &Cq, n: usize) -> Vec<Qp> {
    let mut qps = Vec::new();
    while qps.len() < n {
        let batch: Vec<_> = (0..(n - qps.len()).min(8))
            .map(|_| d.create_qp_cmd(uctx, pd, cq, cq, tiny_caps()))
            .collect();
        let bytes: Vec<Vec<u8>> = batch.iter().map(|(cmd, _)| bytes_of(cmd)).collect();
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let results = d.admin_batch(&refs);
        for ((_, mut qp), r) in batch.into_iter().zip(results) {
            let [qpn, slot, page, _] = r.ok();
            (qp.qpn, qp.slot, qp.page) = (qpn, slot, page);
            qps.push(qp);
        }
    }
    qps
}

/// Connects `a` (on `drv`) to a new side `b` of a new context on the same device and moves
/// verified data (WRITE and SEND) from `a` to `b`; returns `b`.
fn assert_carries_traffic(d: &mut FakeDriver, a: &mut Side, seed: u64) -> Side {
    let mut b = new_side(d, 0, QpCaps::default());
    let opts = ConnectOpts::default();
    let lid = d.lid;
    d.connect_qp(&a.qp, lid, b.qp.qpn, &opts);
    d.connect_qp(&b.qp, lid, a.qp.qpn, &opts);
    pair::transfer_and_verify(&mut Ends::One(d), a, &mut b, seed);
    b
}

/// A side whose CQs fill the rest of its context's first page, so its QP lands on a page
/// the device added on demand.
fn side_on_second_page(d: &mut FakeDriver) -> (Side, u32) {
    let (uctx, first_page) = d.alloc_uctx_page();
    let pd = d.alloc_pd(uctx);
    let send_cq = d.create_cq(uctx, 8);
    let recv_cq = d.create_cq(uctx, 8);
    let fill = create_cqs(d, uctx, DB_SLOTS_PER_PAGE as usize - 2);
    assert!(fill.iter().all(|cq| cq.page == first_page));
    let qp = d.create_qp(uctx, pd, &send_cq, &recv_cq, QpCaps::default());
    let side = Side {
        drv: 0,
        uctx,
        pd,
        send_cq,
        recv_cq,
        qp,
    };
    (side, first_page)
}

#[test]
fn alloc_uctx_returns_a_first_page_no_other_context_holds() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);

    let (a, page_a) = d.alloc_uctx_page();
    let (b, page_b) = d.alloc_uctx_page();
    let cq = d.create_cq(a, 1);

    assert_ne!(a, b);
    assert!(
        page_a != 0 && page_b != 0 && page_a != page_b,
        "{page_a} {page_b}"
    );
    assert!(page_a < DB_PAGES && page_b < DB_PAGES);
    assert_eq!(
        (cq.page, cq.slot),
        (page_a, 0),
        "a CQ's slot is on its context's page"
    );
    let eq = d.comp_eq.as_ref().expect("brought up");
    assert_eq!(eq.page, 0, "the kernel context's EQs are on page 0");
}

#[test]
fn a_thousand_qps_of_one_context_get_pages_on_demand_and_the_last_carries_traffic() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let (uctx, first_page) = d.alloc_uctx_page();
    let pd = d.alloc_pd(uctx);
    let cq = d.create_cq(uctx, 4);

    let qps = create_qps(&mut d, uctx, pd, &cq, 1000);

    let slots = DB_SLOTS_PER_PAGE as usize;
    let pages: Vec<u32> = qps.iter().map(|qp| qp.page).collect();
    let (second, third) = (pages[slots - 1], pages[2 * slots - 1]);
    assert!(pages[..slots - 1].iter().all(|&p| p == first_page));
    assert!(pages[slots - 1..2 * slots - 1].iter().all(|&p| p == second));
    assert!(pages[2 * slots - 1..].iter().all(|&p| p == third));
    let distinct: HashSet<u32> = [0, first_page, second, third].into();
    assert_eq!(
        distinct.len(),
        4,
        "three pages of the context, none the kernel's"
    );
    assert_eq!(
        (qps[slots - 1].slot, qps[999].slot),
        (0, (999 + 1 - 2 * slots) as u32)
    );
    let unique: HashSet<(u32, u32)> = qps.iter().map(|qp| (qp.page, qp.slot)).collect();
    assert_eq!(unique.len(), 1000, "every QP has its own doorbell");
    let qpns: HashSet<u32> = qps.iter().map(|qp| qp.qpn).collect();
    assert_eq!(qpns.len(), 1000, "distinct QPNs");

    // A QP on the third page (beyond the 504 slots of the old single page) moves data.
    let send_cq = d.create_cq(uctx, 8);
    let recv_cq = d.create_cq(uctx, 8);
    let qp = d.create_qp(uctx, pd, &send_cq, &recv_cq, QpCaps::default());
    assert_eq!(qp.page, third);
    let mut a = Side {
        drv: 0,
        uctx,
        pd,
        send_cq,
        recv_cq,
        qp,
    };
    assert_carries_traffic(&mut d, &mut a, 1);
}

#[test]
fn a_qp_on_a_context_s_second_page_carries_traffic() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let (mut a, first_page) = side_on_second_page(&mut d);

    assert_ne!(a.qp.page, first_page);
    assert_eq!(a.qp.slot, 0);
    assert_carries_traffic(&mut d, &mut a, 2);
}

#[test]
fn dealloc_uctx_returns_its_pages_zeroed_to_the_next_context() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let (a, first) = d.alloc_uctx_page();
    let cqs = create_cqs(&mut d, a, DB_SLOTS_PER_PAGE as usize + 1);
    let second = cqs.last().expect("CQs").page;
    for page in [first, second] {
        d.db_store(page, 3, 1, 0xdead_beef);
        d.set_slot_flag(page, 3);
        d.set_page_flag(page);
    }
    for cq in &cqs {
        d.destroy_cq(cq).ok();
    }

    d.dealloc_uctx(a).ok();
    let (b, again) = d.alloc_uctx_page();
    let refill = create_cqs(&mut d, b, DB_SLOTS_PER_PAGE as usize + 1);

    assert_eq!(
        again, first,
        "the lowest free page is the one just returned"
    );
    assert_eq!(refill.last().expect("CQs").page, second);
    for page in [first, second] {
        let base = u64::from(page) * u64::from(DB_PAGE_SIZE);
        for off in (4..u64::from(DB_PAGE_SIZE)).step_by(4) {
            assert_eq!(d.db_word(base + off), 0, "page {page} offset {off:#x}");
        }
    }
}

#[test]
fn polling_is_announced_in_every_page_of_a_context_so_its_doorbells_need_no_kick() {
    let devices = TestDevices::start_with_idle(1, Duration::from_secs(60));
    let mut d = devices.driver(0);
    let (mut a, first_page) = side_on_second_page(&mut d);
    let b = assert_carries_traffic(&mut d, &mut a, 3);
    let page = a.qp.page;
    wait_for("POLL_STATE of the second page to announce polling", || {
        (d.poll_state(page) & db_page::POLL_STATE_POLLING_MASK != 0).then_some(())
    });
    let kicks = d.kicks;
    let src = d.reg_mr(a.uctx, a.pd, 8, ACCESS_ALL);
    let dst = d.reg_mr(b.uctx, b.pd, 8, ACCESS_ALL);

    for i in 10..20 {
        d.post_send(
            &mut a.qp,
            &SendWr::write(i, vec![src.sge(0, 8)], &dst, 0).signaled(),
        );
        assert_cqe_ok(&d.wait_cqe(&mut a.send_cq), i, WcOpcode::RdmaWrite);
    }

    assert_eq!(d.kicks, kicks, "POLLING read 1 in page {page}: no kick");
    assert_ne!(
        d.poll_state(first_page) & db_page::POLL_STATE_POLLING_MASK,
        0
    );
}

#[test]
fn a_doorbell_on_a_second_page_written_while_the_device_sleeps_is_seen_after_its_kick() {
    let devices = TestDevices::start_with_idle(1, Duration::from_micros(100));
    let mut d = devices.driver(0);
    let (mut a, _) = side_on_second_page(&mut d);
    let b = assert_carries_traffic(&mut d, &mut a, 4);
    let src = d.reg_mr(a.uctx, a.pd, 8, ACCESS_ALL);
    let dst = d.reg_mr(b.uctx, b.pd, 8, ACCESS_ALL);
    let page = a.qp.page;
    d.wait_poller_asleep(page);
    let kicks = d.kicks;

    d.post_send(
        &mut a.qp,
        &SendWr::write(20, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );

    assert_cqe_ok(&d.wait_cqe(&mut a.send_cq), 20, WcOpcode::RdmaWrite);
    assert!(
        d.kicks > kicks,
        "POLLING read 0 in page {page}, so the driver kicked it"
    );
}
