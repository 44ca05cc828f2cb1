//! The contract checker (SPEC "Contract checking"): every rule of hw-spec broken once by
//! the fake driver, observed exactly through `vrnic ctl contract`. In warn mode the rule's
//! count moves by one and no other does, the device treats the input as it always has,
//! and traffic goes on; in strict mode the device goes FATAL with FATAL_CODE CONTRACT and
//! the rule's number in FATAL_DETAIL, and only a reset recovers; off counts nothing. A
//! driver that follows the spec (the fake driver's own traffic) breaks no rule.

mod harness;

use harness::devices::ib;
use harness::*;
use vrnic::control::Request;
use vrnic::rnic::contract::ContractMode;
use vrnic_hw::*;
use Which::{A, B};

/// A loopback pair on one device that checks the contract in `mode`.
fn checked_pair(mode: ContractMode) -> Pair {
    let devices = TestDevices::start_checked(vec![ib(0)], mode);
    Pair::on(
        devices,
        Topology::Loopback,
        QpCaps::default(),
        ConnectOpts::default(),
    )
}

/// The rules with a nonzero count, as (name, count).
fn violations(p: &Pair) -> Vec<(String, u64)> {
    p.devices
        .contract(0)
        .rules
        .into_iter()
        .filter(|r| r.count != 0)
        .map(|r| (r.rule, r.count))
        .collect()
}

fn once(rule: ContractRule) -> Vec<(String, u64)> {
    vec![(rule.name().to_string(), 1)]
}

fn wait_counted(p: &Pair, rule: ContractRule) {
    wait_for(rule.name(), || {
        p.devices
            .contract(0)
            .rules
            .iter()
            .any(|r| r.rule == rule.name() && r.count > 0)
            .then_some(())
    });
}

/// Breaks `rule` with `break_it` in warn mode: counted once, `effect` (what the device has
/// always done with such input) holds, and the device still moves data.
fn warns(rule: ContractRule, break_it: fn(&mut Pair), effect: fn(&mut Pair)) {
    let mut p = checked_pair(ContractMode::Warn);
    assert_eq!(violations(&p), [], "a compliant driver breaks no rule");
    break_it(&mut p);
    wait_counted(&p, rule);
    effect(&mut p);
    p.assert_still_serving();
    assert_eq!(violations(&p), once(rule));
    let view = p.devices.contract(0);
    assert_eq!((view.mode.as_str(), view.violations), ("warn", 1));
    assert_eq!(view.fatal_rule, None);
    let status = p.drv(A).read_reg(bar0::DEV_STATUS);
    assert_eq!(status, bar0::DEV_STATUS_READY_MASK, "warn mode never fails");
}

/// Breaks `rule` in strict mode: FATAL with CONTRACT and the rule, seen by the driver (the
/// registers, a DEVICE_FATAL event) and the host; a reset recovers.
fn is_fatal_when_strict(rule: ContractRule, break_it: fn(&mut Pair)) {
    let mut p = checked_pair(ContractMode::Strict);
    break_it(&mut p);
    let drv = p.drv(A);
    wait_for("FATAL", || {
        (drv.read_reg(bar0::DEV_STATUS) & bar0::DEV_STATUS_FATAL_MASK != 0).then_some(())
    });
    assert_eq!(
        drv.read_reg(bar0::FATAL_CODE),
        u32::from(FatalCode::Contract)
    );
    assert_eq!(drv.read_reg(bar0::FATAL_DETAIL), u32::from(u16::from(rule)));
    drv.wait_async_event_for(EventType::DeviceFatal, 0);
    assert_eq!(violations(&p), once(rule));
    let view = p.devices.contract(0);
    assert_eq!(view.fatal_rule.as_deref(), Some(rule.name()));
    assert_eq!(view.mode, "strict");
    // Only a reset recovers; the count stays (it is the device's history).
    let drv = p.drv(A);
    drv.write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_ENABLE_MASK);
    assert_ne!(
        drv.read_reg(bar0::DEV_STATUS) & bar0::DEV_STATUS_FATAL_MASK,
        0
    );
    drv.reset_device();
    assert_eq!(drv.read_reg(bar0::FATAL_DETAIL), 0);
    drv.bring_up();
    let uctx = drv.alloc_uctx();
    drv.alloc_pd(uctx);
    assert_eq!(violations(&p), once(rule));
    assert_eq!(p.devices.contract(0).fatal_rule, None);
}

macro_rules! rule_tests {
    ($($rule:ident: $break_it:ident, $effect:ident;)*) => {
        mod warn {
            $( #[test] fn $break_it() { super::warns(vrnic_hw::ContractRule::$rule, super::$break_it, super::$effect) } )*
        }
        mod strict {
            $( #[test] fn $break_it() { super::is_fatal_when_strict(vrnic_hw::ContractRule::$rule, super::$break_it) } )*
        }
    };
}

rule_tests! {
    RegReservedBits: dev_ctrl_written_with_a_reserved_bit, only_enable_is_stored;
    RegNotWritable: a_read_only_register_written, the_register_keeps_its_value;
    AqRegWhileEnabled: aq_depth_written_while_enabled, the_admin_queue_runs_on;
    AqPiBeyondRing: aq_doorbell_beyond_the_queue, the_admin_queue_runs_on;
    CmdReservedField: alloc_pd_with_a_reserved_byte, nothing_more;
    CmdForeignObject: dealloc_pd_of_another_context, nothing_more;
    QpPiBeyondRing: sq_pi_beyond_the_ring, the_qp_is_in_err_after_qp_fatal;
    SrqPiBeyondRing: srq_pi_beyond_the_ring, the_srq_failed;
    CqCiBeyondProducer: cq_ci_ahead_of_the_cqes, the_cq_failed;
    EqCiBeyondProducer: eq_ci_ahead_of_the_eqes, nothing_more;
    WqeReservedField: send_wqe_with_a_reserved_byte, the_wqe_failed_with_bad_wqe;
    ResizeCqCiBeyondProducer: resize_cq_with_a_ci_ahead_of_the_cqes, nothing_more;
}

fn nothing_more(_: &mut Pair) {}

// ---------------------------------------------------------------------- registers

fn dev_ctrl_written_with_a_reserved_bit(p: &mut Pair) {
    p.drv(A)
        .write_reg(bar0::DEV_CTRL, bar0::DEV_CTRL_ENABLE_MASK | 1 << 7);
}

fn only_enable_is_stored(p: &mut Pair) {
    let ctrl = p.drv(A).read_reg(bar0::DEV_CTRL);
    assert_eq!(ctrl, bar0::DEV_CTRL_ENABLE_MASK);
}

fn a_read_only_register_written(p: &mut Pair) {
    p.drv(A).write_reg(bar0::MAX_QP, 7);
}

fn the_register_keeps_its_value(p: &mut Pair) {
    assert_eq!(p.drv(A).read_reg(bar0::MAX_QP), bar0::MAX_QP_RESET);
}

fn aq_depth_written_while_enabled(p: &mut Pair) {
    let drv = p.drv(A);
    let depth = drv.read_reg(bar0::AQ_DEPTH_LOG2);
    drv.write_reg(bar0::AQ_DEPTH_LOG2, depth);
}

fn the_admin_queue_runs_on(p: &mut Pair) {
    let drv = p.drv(A);
    let uctx = drv.alloc_uctx();
    drv.alloc_pd(uctx);
}

fn aq_doorbell_beyond_the_queue(p: &mut Pair) {
    let drv = p.drv(A);
    let (pi, depth) = drv.admin_pi_and_depth();
    drv.write_reg(bar0::AQ_DOORBELL, pi + depth + 1);
}

// ---------------------------------------------------------------------- admin commands

fn alloc_pd_with_a_reserved_byte(p: &mut Pair) {
    let uctx = p.a.uctx;
    let mut cmd = cmd_handle(AqOpcode::AllocPd, uctx, uctx);
    cmd.reserved0[5] = 1;
    let r = p.drv(A).admin(&cmd);
    r.expect_err(AqStatus::BadField, CmdHandle::RESERVED0_OFF);
}

fn dealloc_pd_of_another_context(p: &mut Pair) {
    let (pd, other) = (p.a.pd, p.b.uctx);
    let r = p.drv(A).dealloc_pd(other, pd);
    r.expect_err(AqStatus::Permission, CmdHandle::UCTX_OFF);
}

fn resize_cq_with_a_ci_ahead_of_the_cqes(p: &mut Pair) {
    let uctx = p.a.uctx;
    let drv = p.drv(A);
    let mut cq = drv.create_cq(uctx, 3);
    cq.ci = 5;
    let (cmd, _) = drv.resize_cq_cmd(&cq, 4);
    drv.admin(&cmd)
        .expect_err(AqStatus::BadField, CmdResizeCq::CI_OFF);
}

// ---------------------------------------------------------------------- data path

fn sq_pi_beyond_the_ring(p: &mut Pair) {
    let (drv, side) = p.side(A);
    let depth = side.qp.sq.depth();
    drv.ring_doorbell(side.qp.page, side.qp.slot, 0, depth + 1);
}

fn the_qp_is_in_err_after_qp_fatal(p: &mut Pair) {
    let qpn = p.qpn(A);
    p.drv(A).wait_async_event_for(EventType::QpFatal, qpn);
    assert_eq!(p.qp_state(A), QpState::Err);
}

fn srq_pi_beyond_the_ring(p: &mut Pair) {
    let (uctx, pd) = (p.b.uctx, p.b.pd);
    let opts = ConnectOpts {
        rnr_retry: 0,
        ..ConnectOpts::default()
    };
    let caps = QpCaps::default();
    let addr = p.drv(A).addr();
    let (drv, side) = p.side(B);
    let srq = drv.create_srq(uctx, pd, 2, 1);
    let receiver = drv.create_qp_on_srq(uctx, pd, &side.send_cq, &side.recv_cq, caps, &srq);
    let (drv, side) = p.side(A);
    let mut sender = drv.create_qp(side.uctx, side.pd, &side.send_cq, &side.send_cq, caps);
    drv.connect_qp_to(&sender, addr, receiver.qpn, &opts);
    drv.connect_qp_to(&receiver, addr, sender.qpn, &opts);
    drv.db_store(srq.page, srq.slot, 0, (1 << 2) + 1);
    let src = p.mr(A, 8, ACCESS_ALL);
    p.drv(A).post_send(
        &mut sender,
        &SendWr::send(1, vec![src.sge(0, 8)]).signaled(),
    );
}

fn the_srq_failed(p: &mut Pair) {
    wait_for("SRQ_ERR", || {
        let e = p.drv(B).poll_async_event()?;
        (e.event_type == u8::from(EventType::SrqErr)).then_some(())
    });
}

fn cq_ci_ahead_of_the_cqes(p: &mut Pair) {
    let (drv, side) = p.side(A);
    drv.db_store(side.send_cq.page, side.send_cq.slot, 0, 5);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
}

fn the_cq_failed(p: &mut Pair) {
    let cqn = p.a.send_cq.cqn;
    p.drv(A).wait_async_event_for(EventType::CqErr, cqn);
    assert_eq!(p.qp_state(A), QpState::Err);
}

fn eq_ci_ahead_of_the_eqes(p: &mut Pair) {
    let uctx = p.a.uctx;
    let drv = p.drv(A);
    let eq = drv.create_eq(1, false, 2);
    let mut cq = drv.create_cq_on(uctx, 4, Layout::Scattered, eq.eqn);
    drv.db_store(eq.page, eq.slot, 0, 7);
    drv.arm_cq(&mut cq, CqArm::Next);
    let (drv, side) = p.side(A);
    let caps = QpCaps::default();
    let mut qp = drv.create_qp(side.uctx, side.pd, &cq, &cq, caps);
    let (drv, side) = p.side(B);
    let peer = drv.create_qp(side.uctx, side.pd, &side.send_cq, &side.recv_cq, caps);
    let addr = drv.addr();
    let opts = ConnectOpts::default();
    drv.connect_qp_to(&qp, addr, peer.qpn, &opts);
    drv.connect_qp_to(&peer, addr, qp.qpn, &opts);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    let drv = p.drv(A);
    drv.post_send(
        &mut qp,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    assert_cqe_ok(&drv.wait_cqe(&mut cq), 1, WcOpcode::RdmaWrite);
}

fn send_wqe_with_a_reserved_byte(p: &mut Pair) {
    let mr = p.mr(A, 64, ACCESS_ALL);
    let mut bytes = SendWr::send(1, vec![mr.sge(0, 64)]).signaled().encode();
    bytes[SendWqeHeader::RESERVED0_OFF] = 1;
    p.post_send_raw(A, &bytes);
}

fn the_wqe_failed_with_bad_wqe(p: &mut Pair) {
    let c = p.send_cqe(A);
    assert_cqe_status(&c, WcStatus::LocQpOpErr, VendorErr::BadWqe);
    assert_eq!(p.qp_state(A), QpState::Err);
}

// ---------------------------------------------------------------------- the admin doorbell of a disabled device

#[test]
fn an_admin_doorbell_while_disabled_is_ignored_and_counted_or_fatal_when_strict() {
    for mode in [ContractMode::Warn, ContractMode::Strict] {
        let devices = TestDevices::start_checked(vec![ib(0)], mode);
        let mut drv = devices.connect(0);
        drv.write_reg(bar0::AQ_DOORBELL, 1);
        let status = drv.read_reg(bar0::DEV_STATUS);
        let view = devices.contract(0);
        let counted: Vec<(&str, u64)> = view
            .rules
            .iter()
            .filter(|r| r.count != 0)
            .map(|r| (r.rule.as_str(), r.count))
            .collect();
        assert_eq!(counted, [("AQ_DOORBELL_DISABLED", 1)], "{mode:?}");
        match mode {
            ContractMode::Strict => {
                assert_eq!(status, bar0::DEV_STATUS_FATAL_MASK);
                assert_eq!(
                    drv.read_reg(bar0::FATAL_DETAIL),
                    u32::from(u16::from(ContractRule::AqDoorbellDisabled))
                );
                drv.reset_device();
            }
            _ => assert_eq!(status, 0, "ignored: the device stays disabled"),
        }
        drv.bring_up();
        let uctx = drv.alloc_uctx();
        drv.alloc_pd(uctx);
    }
}

// ---------------------------------------------------------------------- off, and a compliant driver

#[test]
fn with_checking_off_nothing_is_counted_and_the_device_acts_as_before() {
    let mut p = checked_pair(ContractMode::Off);
    sq_pi_beyond_the_ring(&mut p);
    the_qp_is_in_err_after_qp_fatal(&mut p);
    dev_ctrl_written_with_a_reserved_bit(&mut p);
    only_enable_is_stored(&mut p);
    alloc_pd_with_a_reserved_byte(&mut p);
    p.assert_still_serving();
    assert_eq!(violations(&p), []);
    let view = p.devices.contract(0);
    assert_eq!((view.mode.as_str(), view.violations), ("off", 0));
}

#[test]
fn compliant_traffic_of_every_kind_breaks_no_rule_even_when_strict() {
    let mut p = checked_pair(ContractMode::Strict);
    p.assert_still_serving();
    let src = p.mr(A, 4096, ACCESS_ALL);
    let dst = p.mr(B, 4096, ACCESS_ALL);
    for i in 0..200u64 {
        p.post_send(
            A,
            &SendWr::write(i, vec![src.sge(0, 4096)], &dst, 0).signaled(),
        );
        assert_cqe_ok(&p.send_cqe(A), i, WcOpcode::RdmaWrite);
    }
    p.post_send(
        A,
        &SendWr::read(7, vec![src.sge(0, 64)], &dst, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(A), 7, WcOpcode::RdmaRead);
    assert_eq!(violations(&p), []);
    assert_eq!(
        p.drv(A).read_reg(bar0::DEV_STATUS),
        bar0::DEV_STATUS_READY_MASK
    );
}

#[test]
fn the_contract_request_names_an_existing_device() {
    let devices = TestDevices::start_checked(vec![ib(0)], ContractMode::Warn);
    let call = |line: &Request| vrnic::control::client::call(devices.control_socket(), line);
    let e = call(&Request::Contract {
        device: "nosuch".into(),
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unknown device `nosuch`") && e.contains("rnic0"),
        "{e}"
    );
    let view = devices.contract(0);
    assert_eq!(view.rules.len(), ContractRule::COUNT);
    for (r, want) in view.rules.iter().zip(ContractRule::ALL) {
        assert_eq!(
            (r.rule.as_str(), r.number, r.section.as_str(), r.count),
            (want.name(), u16::from(*want), want.section(), 0)
        );
    }
    let parsed = vrnic::control::protocol::parse_request(br#"{"cmd":"contract"}"#);
    assert!(
        matches!(&parsed, Err(vrnic::control::protocol::RequestError::BadRequest(m)) if m.contains("device")),
        "{parsed:?}"
    );
}

/// A violation is also a `contract` trace event naming the rule, its number and section.
#[test]
fn a_violation_is_traced_with_its_rule() {
    use vrnic::trace::{queue, Body, Filter, Kind, KindSet, StreamItem};
    let mut p = checked_pair(ContractMode::Warn);
    let filter = Filter {
        kinds: KindSet::of(&[Kind::Contract]),
        qpn: None,
    };
    let sub = p
        .devices
        .rnic(0)
        .trace
        .subscribe(filter, queue::DEFAULT_CAPACITY);
    sq_pi_beyond_the_ring(&mut p);
    wait_counted(&p, ContractRule::QpPiBeyondRing);
    let items = sub.take(std::time::Duration::from_secs(5)).expect("device");
    let rule = ContractRule::QpPiBeyondRing;
    let bodies: Vec<Body> = items
        .into_iter()
        .filter_map(|i| match i {
            StreamItem::Event(e) => Some(e.body),
            StreamItem::Lost { .. } => None,
        })
        .collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let Body::Contract {
        rule: name,
        number,
        section,
        what,
    } = &bodies[0]
    else {
        panic!("{bodies:?}")
    };
    assert_eq!(
        (name.as_ref(), *number, section.as_ref()),
        (rule.name(), u16::from(rule), rule.section())
    );
    assert!(what.contains("beyond the queue depth"), "{what}");
}
