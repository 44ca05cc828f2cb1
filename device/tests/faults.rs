//! Fault injection through the control socket (`fault`, `faults`, `fault_clear`), driven by
//! the fake driver: each kind of rule has exactly its injected effect and no other (the
//! Nth WQE's CQE has the status and the ones before it not; the event is in the async EQ
//! and the state changed; a delayed admin command completes late while the device's
//! registers and other devices go on; a failed one returns the status; a stall holds the
//! work, which then runs). Bad rules get clear errors.

mod harness;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::devices::ib;
use harness::*;
use serde_json::{json, Value};
use vrnic::control::Limits;
use vrnic_hw::*;
use Which::{A, B};

/// One request on its own connection; the reply.
fn ctl(path: &Path, request: Value) -> Value {
    let mut stream = UnixStream::connect(path).expect("connect to the control socket");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    writeln!(stream, "{request}").expect("send");
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).expect("reply");
    serde_json::from_str(&line).expect("a JSON reply")
}

fn fault(path: &Path, device: &str, rule: &str) -> Value {
    let r = ctl(path, json!({"cmd":"fault","device":device,"rule":rule}));
    assert!(r.get("error").is_none(), "{rule}: {r}");
    r
}

fn listing(path: &Path, device: &str) -> Value {
    ctl(path, json!({"cmd":"faults","device":device}))
}

fn clear(path: &Path, device: &str) -> u64 {
    ctl(path, json!({"cmd":"fault_clear","device":device}))["cleared"]
        .as_u64()
        .expect("cleared")
}

/// `n` IB devices with a control socket; its path.
fn devices(n: usize) -> (TestDevices, PathBuf) {
    let devs = TestDevices::start_with_control((0..n).map(ib).collect(), Limits::default());
    let path = devs.control_socket().to_path_buf();
    (devs, path)
}

/// A loopback pair on a device with a control socket, armed with `rules` before its QPs
/// were created.
fn pair_with(rules: &[&str]) -> (Pair, PathBuf) {
    let (devs, path) = devices(1);
    for r in rules {
        fault(&path, "rnic0", r);
    }
    let p = Pair::on(
        devs,
        Topology::Loopback,
        QpCaps::default(),
        ConnectOpts::default(),
    );
    (p, path)
}

#[test]
fn the_nth_wqe_of_the_first_new_qp_completes_with_the_status_and_recovery_after_reset_works() {
    let (mut p, path) = pair_with(&["wqe qp=new:1 nth=3 status=REM_ACCESS_ERR"]);
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64, ACCESS_ALL);
    p.write(A, &src, 0, b"faulty!!");
    let write = |id| SendWr::write(id, vec![src.sge(0, 8)], &dst, 0).signaled();

    p.post_sends(A, &[write(1), write(2), write(3), write(4)]);

    let done = p.send_cqes(A, 4);
    let got: Vec<(u64, WcStatus)> = done
        .iter()
        .map(|c| (c.wr_id.to_native(), status_of(c)))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::RemAccessErr),
            (4, WcStatus::WrFlushErr)
        ]
    );
    assert_cqe_status(&done[2], WcStatus::RemAccessErr, VendorErr::None);
    assert_eq!(p.qp_state(A), QpState::Err);
    assert_eq!(
        p.qp_state(B),
        QpState::Rts,
        "the target knows nothing of it"
    );
    let rule = &listing(&path, "rnic0")["rules"][0];
    assert_eq!(rule["state"], "fired");
    assert_eq!(rule["qpn"], p.qpn(A), "bound to the first QP created");
    assert_eq!(rule["seen"], 3);

    // The application's recovery: both ends go through RESET and connect again (the
    // target's expected PSN moved on; a requester that restarts alone is not answered).
    for w in [A, B] {
        let (drv, side) = p.side(w);
        drv.set_qp_state(&mut side.qp, QpState::Reset).ok();
    }
    p.connect(ConnectOpts::default());
    p.post_send(A, &write(5));
    let c = p.send_cqe(A);
    assert_eq!((c.wr_id.to_native(), status_of(&c)), (5, WcStatus::Success));
    assert_eq!(p.read(B, &dst, 0, 8), b"faulty!!");
}

#[test]
fn a_wqe_rule_for_a_named_qp_leaves_the_other_qps_alone() {
    let (mut p, path) = pair_with(&[]);
    fault(
        &path,
        "rnic0",
        &format!("wqe qp={:#x} nth=1 status=LOC_PROT_ERR", p.qpn(B)),
    );
    let a_buf = p.mr(A, 8, ACCESS_ALL);
    let b_buf = p.mr(B, 8, ACCESS_ALL);

    p.post_send(
        A,
        &SendWr::write(7, vec![a_buf.sge(0, 8)], &b_buf, 0).signaled(),
    );
    let c = p.send_cqe(A);
    assert_eq!(status_of(&c), WcStatus::Success);
    p.post_send(
        B,
        &SendWr::write(8, vec![b_buf.sge(0, 8)], &a_buf, 0).signaled(),
    );
    let c = p.send_cqe(B);
    assert_cqe_status(&c, WcStatus::LocProtErr, VendorErr::None);
    assert_eq!(c.wr_id.to_native(), 8);
}

#[test]
fn port_down_and_up_change_the_port_state_and_post_their_events() {
    let (devs, path) = devices(1);
    let mut d = devs.driver(0);

    let r = fault(&path, "rnic0", "event port_down");
    assert_eq!(r["state"], "fired");
    assert_eq!(
        d.wait_async_event_for(EventType::PortErr, PORT_NUM),
        0,
        "PORT_ERR for port 1"
    );
    assert_eq!(d.query_port().state, u8::from(PortState::Down));
    assert_eq!(listing(&path, "rnic0")["port"], "down");

    fault(&path, "rnic0", "event port_up");
    d.wait_async_event_for(EventType::PortActive, PORT_NUM);
    assert_eq!(d.query_port().state, u8::from(PortState::Active));
}

#[test]
fn qp_fatal_moves_the_qp_to_err_posts_qp_fatal_and_flushes_its_work() {
    let (mut p, path) = pair_with(&[]);
    let qpn = p.qpn(A);
    p.post_recv(A, &RecvWr::new(0x51, vec![]));

    fault(&path, "rnic0", &format!("event qp_fatal qp={qpn:#x}"));

    assert_eq!(p.drv(A).wait_async_event_for(EventType::QpFatal, qpn), 0);
    assert_eq!(p.qp_state(A), QpState::Err);
    let r = p.recv_cqe(A);
    assert_cqe_status(&r, WcStatus::WrFlushErr, VendorErr::Flush);
    assert_eq!(p.qp_state(B), QpState::Rts);
}

#[test]
fn cq_err_puts_the_cq_in_error_with_its_qps() {
    let (mut p, path) = pair_with(&[]);
    let cqn = p.a.send_cq.cqn;

    fault(&path, "rnic0", &format!("event cq_err cq={cqn:#x}"));

    p.drv(A).wait_async_event_for(EventType::CqErr, cqn);
    assert_eq!(p.qp_state(A), QpState::Err);
}

#[test]
fn device_fatal_is_the_real_fatal_state_with_its_code_and_event() {
    let (devs, path) = devices(1);
    let mut d = devs.driver(0);

    fault(&path, "rnic0", "event device_fatal code=INTERNAL");

    d.wait_async_event_for(EventType::DeviceFatal, 0);
    assert_ne!(
        d.read_reg(bar0::DEV_STATUS) & bar0::DEV_STATUS_FATAL_MASK,
        0
    );
    assert_eq!(d.read_reg(bar0::FATAL_CODE), u32::from(FatalCode::Internal));
    let dev = &ctl(&path, json!({"cmd":"devices"}))["devices"][0];
    assert_eq!(dev["state"], "fatal");
    // A FATAL device is failed again only after a reset: nothing to fail now.
    let r = ctl(
        &path,
        json!({"cmd":"fault","device":"rnic0","rule":"event device_fatal"}),
    );
    assert!(r["error"].as_str().unwrap().contains("not enabled"), "{r}");
    // A reset recovers it.
    d.reset_device();
    d.bring_up();
    d.alloc_uctx();
}

/// The completion of the next admin command of `d`, if it is there.
fn completion_ready(d: &mut FakeDriver) -> bool {
    d.admin_completion_ready()
}

#[test]
fn a_delayed_admin_command_completes_late_holding_only_its_own_queue() {
    let (devs, path) = devices(2);
    let mut d0 = devs.driver(0);
    let mut d1 = devs.driver(1);
    fault(&path, "rnic0", "admin delay op=ALLOC_PD ms=60000");
    let uctx = d0.alloc_uctx();

    d0.admin_submit_only(bytes_of(&cmd_handle(AqOpcode::AllocPd, uctx, uctx)).as_slice());
    d0.admin_submit_only(bytes_of(&cmd_handle(AqOpcode::AllocPd, uctx, uctx)).as_slice());

    // Held: the device's registers still answer (no lock or thread is held), the other
    // device runs its commands, and the listing shows the held command.
    assert_ne!(
        d0.read_reg(bar0::DEV_STATUS) & bar0::DEV_STATUS_READY_MASK,
        0
    );
    let other = d1.alloc_uctx();
    d1.alloc_pd(other);
    let held = &listing(&path, "rnic0")["admin_held"];
    assert_eq!(held["opcode"], "ALLOC_PD");
    assert!(
        !completion_ready(&mut d0),
        "the held command has not completed"
    );
    // Clearing the rules ends the delay: both commands complete, in order.
    assert_eq!(clear(&path, "rnic0"), 1);
    let done = d0.admin_collect(2);
    assert!(done.iter().all(|c| c.status() == Ok(AqStatus::Success)));
    assert_ne!(done[0].results[0], done[1].results[0]);
}

#[test]
fn a_short_admin_delay_ends_by_itself() {
    let (devs, path) = devices(1);
    let mut d = devs.driver(0);
    fault(&path, "rnic0", "admin delay op=ALLOC_UCTX ms=50");

    d.alloc_uctx();

    assert_eq!(listing(&path, "rnic0")["rules"][0]["state"], "fired");
}

#[test]
fn a_reset_drops_the_held_admin_command() {
    let (devs, path) = devices(1);
    let mut d = devs.driver(0);
    fault(&path, "rnic0", "admin delay op=ALLOC_UCTX ms=60000");
    d.admin_submit_only(bytes_of(&cmd_handle(AqOpcode::AllocUctx, 0, KERNEL_UCTX)).as_slice());

    d.reset_device();
    d.bring_up();

    d.alloc_uctx();
    assert!(listing(&path, "rnic0")["admin_held"].is_null());
}

#[test]
fn a_failed_admin_command_returns_the_status_and_only_the_nth_fails() {
    let (devs, path) = devices(1);
    let mut d = devs.driver(0);
    fault(
        &path,
        "rnic0",
        "admin fail op=ALLOC_PD nth=2 status=NO_RESOURCES",
    );
    let uctx = d.alloc_uctx();
    let pd = || cmd_handle(AqOpcode::AllocPd, uctx, uctx);

    let first = d.admin(&pd());
    let second = d.admin(&pd());
    let other = d.admin(&cmd_handle(AqOpcode::AllocUctx, 0, KERNEL_UCTX));
    let third = d.admin(&pd());

    assert_eq!(first.status(), Ok(AqStatus::Success));
    second.expect_general_err(AqStatus::NoResources);
    assert_eq!(other.status(), Ok(AqStatus::Success));
    assert_eq!(third.status(), Ok(AqStatus::Success));
    let rule = &listing(&path, "rnic0")["rules"][0];
    assert_eq!(
        (rule["state"].clone(), rule["seen"].clone()),
        (json!("fired"), json!(2))
    );
}

#[test]
fn a_stall_holds_the_data_path_until_it_ends() {
    let (mut p, path) = pair_with(&[]);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(B, 8, ACCESS_ALL);
    p.write(A, &src, 0, b"stalled!");
    fault(&path, "rnic0", "stall ms=60000");

    p.post_send(
        A,
        &SendWr::write(9, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );

    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(p.poll_send_cq(A), None, "no work runs while stalled");
    assert_eq!(p.read(B, &dst, 0, 8), vec![0; 8]);
    assert!(listing(&path, "rnic0")["stall_ms_left"].as_u64().unwrap() > 0);
    clear(&path, "rnic0");
    let c = p.send_cqe(A);
    assert_eq!((c.wr_id.to_native(), status_of(&c)), (9, WcStatus::Success));
    assert_eq!(p.read(B, &dst, 0, 8), b"stalled!");
}

#[test]
fn a_short_stall_ends_by_itself() {
    let (mut p, path) = pair_with(&["stall ms=100"]);
    p.assert_still_serving();
    assert!(listing(&path, "rnic0")["stall_ms_left"].is_null());
}

#[test]
fn bad_fault_requests_get_clear_errors_and_change_nothing() {
    let (_devs, path) = devices(1);
    let err = |req: Value| {
        ctl(&path, req)["error"]
            .as_str()
            .unwrap_or_else(|| panic!("expected an error"))
            .to_string()
    };
    let rule = |r: &str| err(json!({"cmd":"fault","device":"rnic0","rule":r}));
    assert!(rule("wqe nth=3").contains("missing `status=`"));
    assert!(rule("admin delay ms=999999").contains("out of range"));
    assert!(rule("stall ms=0").contains("out of range"));
    assert!(rule("event qp_fatal qp=0x123").contains("no QP 0x123"));
    assert!(rule("event cq_err cq=7").contains("no CQ 0x7"));
    assert!(rule(&"x".repeat(10_000)).contains("longer than"));
    assert!(
        err(json!({"cmd":"fault","device":"nope","rule":"stall ms=1"})).contains("unknown device")
    );
    assert!(err(json!({"cmd":"fault","device":"rnic0"})).contains("rule"));
    assert!(err(json!({"cmd":"faults","device":"rnic0","x":1})).contains("x"));
    assert_eq!(listing(&path, "rnic0")["rules"], json!([]));
}
