//! Device-side tracing against served devices driven by the fake driver: the exact events
//! of an admin command, of a signalled RDMA WRITE to an armed CQ (doorbell, WQE, CQE, the
//! CQ's event, EQE, interrupt) and of QP state changes; `vrnic ctl trace`'s stream over the
//! control socket, a client that never reads it (the device goes on; the stream says how
//! many events it lost, exactly where), one dropped at its write deadline; and `trace=PATH`
//! tracing a driver's bring-up from start-up.

mod harness;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use harness::devices::{ib, TEST_POLL_IDLE};
use harness::*;
use serde_json::{json, Value};
use vrnic::control::Limits;
use vrnic::fabric::PollerConfig;
use vrnic::rnic::RnicConfig;
use vrnic::serve::Service;
use vrnic::trace::{Body, Event, Filter, Kind, KindSet, StreamItem, Subscription};
use vrnic_hw::*;
use Which::A;

/// Events of `sub` until `done` says the list is complete (or TIMEOUT fails the test).
fn events_until(sub: &Subscription, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    while !done(&got) {
        assert!(Instant::now() < deadline, "events so far: {got:#?}");
        for item in sub.take(Duration::from_millis(50)).expect("device gone") {
            match item {
                StreamItem::Event(e) => got.push(*e),
                StreamItem::Lost { lost } => panic!("{lost} events lost"),
            }
        }
    }
    got
}

fn subscribe(devs: &TestDevices, i: usize, kinds: &[Kind], qpn: Option<u32>) -> Subscription {
    devs.rnic(i).trace.subscribe(
        Filter {
            kinds: KindSet::of(kinds),
            qpn,
        },
        1024,
    )
}

fn kinds(events: &[Event]) -> Vec<Kind> {
    events.iter().map(|e| e.body.kind()).collect()
}

#[test]
fn an_admin_command_is_traced_with_its_doorbell_decoded_fields_status_and_results() {
    let devs = TestDevices::start(1);
    let mut drv = devs.driver(0);
    let uctx = drv.alloc_uctx();
    let sub = subscribe(&devs, 0, &[Kind::Admin, Kind::Doorbell], None);

    let pd = drv.alloc_pd(uctx);
    let refused = drv.dealloc_pd(uctx, pd + 100);
    assert_eq!(refused.status, u8::from(AqStatus::BadHandle));

    let events = events_until(&sub, |e| e.len() >= 4);
    assert_eq!(
        kinds(&events),
        [Kind::Doorbell, Kind::Admin, Kind::Doorbell, Kind::Admin]
    );
    assert!(
        matches!(&events[0].body, Body::Doorbell { target, pi: Some(_), .. } if target == "AQ")
    );
    let Body::Admin {
        opcode,
        fields,
        status,
        results,
        ..
    } = &events[1].body
    else {
        unreachable!()
    };
    assert_eq!((opcode.as_ref(), status.as_ref()), ("ALLOC_PD", "SUCCESS"));
    assert_eq!(fields.get("uctx"), Some(&u64::from(uctx)));
    assert_eq!(results[0], pd);
    let Body::Admin {
        opcode,
        fields,
        status,
        results,
        ..
    } = &events[3].body
    else {
        unreachable!()
    };
    assert_eq!(
        (opcode.as_ref(), status.as_ref()),
        ("DEALLOC_PD", "BAD_HANDLE")
    );
    assert_eq!(fields.get("handle"), Some(&u64::from(pd + 100)));
    assert!(results.is_empty());
    assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert!(events
        .iter()
        .all(|e| e.device == "rnic0" && e.qpn.is_none()));
}

#[test]
fn a_write_to_an_armed_cq_is_doorbell_wqe_cqe_cq_event_eqe_and_interrupt_in_order() {
    let mut p = Pair::new(Topology::TwoDevices);
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(Which::B, 8, ACCESS_ALL);
    let (qpn, cqn) = (p.qpn(A), p.a.send_cq.cqn);
    let (eqn, vector) = {
        let eq = p.drv(A).comp_eq.as_ref().expect("EQ");
        (eq.eqn, eq.vector)
    };
    let (drv, side) = p.side(A);
    drv.arm_cq(&mut side.send_cq, CqArm::Next);
    let sub = subscribe(&p.devices, 0, &Kind::ALL, None);

    p.post_send(
        A,
        &SendWr::write(5, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(A), 5, WcOpcode::RdmaWrite);

    let events = events_until(&sub, |e| e.len() >= 6);
    assert_eq!(
        kinds(&events),
        [
            Kind::Doorbell,
            Kind::Wqe,
            Kind::Cqe,
            Kind::State,
            Kind::Eqe,
            Kind::Irq
        ],
        "{events:#?}"
    );
    assert_eq!(
        events[0].body,
        Body::Doorbell {
            target: "QP".into(),
            page: Some(p.a.qp.page),
            slot: Some(p.a.qp.slot),
            pi: None,
            sq_pi: Some(1),
            rq_pi: Some(0),
        }
    );
    assert_eq!(
        events[1].body,
        Body::Wqe {
            index: 0,
            opcode: "RDMA_WRITE".into(),
            flags: vec!["SIGNALED".into()],
            wr_id: 5,
            length: 8,
            sges: 1,
            remote_addr: Some(dst.addr(0)),
            rkey: Some(dst.key),
        }
    );
    assert_eq!(
        events[2].body,
        Body::Cqe {
            cqn,
            wqe_index: 0,
            opcode: "RDMA_WRITE".into(),
            status: "SUCCESS".into(),
            byte_len: 8,
            vendor_err: "NONE".into(),
            wr_id: 5,
        }
    );
    assert!(
        matches!(&events[3].body, Body::CqArm { cqn: c, arm, .. } if *c == cqn && arm == "NEXT")
    );
    assert_eq!(
        events[4].body,
        Body::Eqe {
            eqn,
            event: "COMPLETION".into(),
            obj: cqn,
            data: 0,
        }
    );
    assert_eq!(events[5].body, Body::Irq { vector });
    let qpns: Vec<Option<u32>> = events.iter().map(|e| e.qpn).collect();
    assert_eq!(
        qpns,
        [Some(qpn), Some(qpn), Some(qpn), None, None, None],
        "the QP's own events name it"
    );
}

#[test]
fn qp_state_changes_are_traced_from_admin_and_from_the_data_path_for_that_qp_only() {
    let mut p = Pair::new(Topology::TwoDevices);
    let qpn = p.qpn(A);
    let sub = subscribe(&p.devices, 0, &[Kind::State], Some(qpn));
    let src = p.mr(A, 8, ACCESS_ALL);
    let mut dst = p.mr(Which::B, 8, ACCESS_ALL);

    // A bad rkey: the target NAKs, the requester's QP moves to ERR (data path).
    dst.key ^= 0x100;
    p.post_send(
        A,
        &SendWr::write(1, vec![src.sge(0, 8)], &dst, 0).signaled(),
    );
    let failed = p.send_cqe(A);
    assert_eq!(failed.status, u8::from(WcStatus::RemAccessErr));
    // Then the driver resets it (admin).
    let (drv, side) = p.side(A);
    drv.set_qp_state(&mut side.qp, QpState::Reset).ok();

    let events = events_until(&sub, |e| e.len() >= 2);
    let moves: Vec<(String, String)> = events
        .iter()
        .map(|e| match &e.body {
            Body::QpState { from, to } => (from.to_string(), to.to_string()),
            other => panic!("not a QP state change: {other:?}"),
        })
        .collect();
    assert_eq!(
        moves,
        [("RTS".into(), "ERR".into()), ("ERR".into(), "RESET".into())]
    );
    assert!(events.iter().all(|e| e.qpn == Some(qpn)));
    assert!(sub.take(Duration::from_millis(100)).unwrap().is_empty());
}

/// A control client reading a trace stream's lines.
struct Stream {
    reader: BufReader<UnixStream>,
}

impl Stream {
    fn open(path: &Path, request: &Value) -> Stream {
        let mut s = UnixStream::connect(path).expect("connect");
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(format!("{request}\n").as_bytes()).unwrap();
        Stream {
            reader: BufReader::new(s),
        }
    }

    fn line(&mut self) -> Value {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("a stream line");
        assert!(line.ends_with('\n'), "a whole line: {line:?}");
        serde_json::from_str(&line).expect("JSON")
    }
}

#[test]
fn ctl_trace_streams_the_kinds_asked_for_and_refuses_bad_requests_in_band() {
    let devs = TestDevices::start_with_control(vec![ib(0), ib(1)], Limits::default());
    let control = devs.control_socket().to_path_buf();
    let mut p = Pair::on(
        devs,
        Topology::TwoDevices,
        QpCaps::default(),
        ConnectOpts::default(),
    );
    let mut bad = Stream::open(&control, &json!({"cmd":"trace","device":"nic9"}));
    let e = bad.line();
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("unknown device `nic9`"),
        "{e}"
    );
    bad.reader
        .get_mut()
        .write_all(b"{\"cmd\":\"trace\",\"device\":\"rnic0\",\"kinds\":[\"pcap\"]}\n")
        .unwrap();
    let e = bad.line();
    assert!(e["error"].as_str().unwrap().contains("pcap"), "{e}");

    let qpn = p.qpn(A);
    let mut s = Stream::open(
        &control,
        &json!({"cmd":"trace","device":"rnic0","kinds":["wqe","cqe"],"qpn":qpn}),
    );
    assert_eq!(
        s.line(),
        json!({"trace":"rnic0","kinds":["wqe","cqe"],"qpn":qpn})
    );
    let src = p.mr(A, 4096, ACCESS_ALL);
    let dst = p.mr(Which::B, 4096, ACCESS_ALL);
    p.post_send(
        A,
        &SendWr::write(9, vec![src.sge(0, 4096)], &dst, 0).signaled(),
    );
    assert_cqe_ok(&p.send_cqe(A), 9, WcOpcode::RdmaWrite);

    let wqe = s.line();
    assert_eq!(
        (&wqe["kind"], &wqe["opcode"], &wqe["length"], &wqe["qpn"]),
        (
            &json!("wqe"),
            &json!("RDMA_WRITE"),
            &json!(4096),
            &json!(qpn)
        )
    );
    assert_eq!(wqe["rkey"], json!(dst.key));
    let cqe = s.line();
    assert_eq!(
        (&cqe["kind"], &cqe["status"], &cqe["wr_id"], &cqe["device"]),
        (&json!("cqe"), &json!("SUCCESS"), &json!(9), &json!("rnic0"))
    );
    assert_eq!(cqe["seq"], json!(wqe["seq"].as_u64().unwrap() + 1));
}

/// Posts `n` signalled 8-byte WRITEs from A in batches the send queue holds, reaping each
/// batch's completions: the device keeps executing.
fn writes(p: &mut Pair, n: usize) {
    let src = p.mr(A, 8, ACCESS_ALL);
    let dst = p.mr(Which::B, 8, ACCESS_ALL);
    let mut done = 0;
    while done < n {
        let batch: Vec<SendWr> = (0..32.min(n - done))
            .map(|i| SendWr::write((done + i) as u64, vec![src.sge(0, 8)], &dst, 0).signaled())
            .collect();
        p.post_sends(A, &batch);
        for cqe in p.send_cqes(A, batch.len()) {
            assert_eq!(cqe.status, u8::from(WcStatus::Success));
        }
        done += batch.len();
    }
}

#[test]
fn a_trace_client_that_does_not_read_loses_events_not_device_time_and_is_told_exactly_where() {
    let devs = TestDevices::start_with_control(vec![ib(0), ib(1)], Limits::default());
    let control = devs.control_socket().to_path_buf();
    let mut p = Pair::on(
        devs,
        Topology::TwoDevices,
        QpCaps::default(),
        ConnectOpts::default(),
    );
    let mut s = Stream::open(&control, &json!({"cmd":"trace","device":"rnic0"}));
    assert_eq!(s.line()["trace"], json!("rnic0"));

    // Two events a WRITE (WQE, CQE) and a doorbell per batch: far more than the client's
    // queue (8192), the batch its server thread is stuck writing (at most as many) and its
    // socket hold while it reads nothing.
    writes(&mut p, 12_000);

    // The client reads now: what fitted, then how many did not, where they were.
    let mut last_seq = 0;
    let lost = loop {
        let line = s.line();
        if let Some(n) = line["lost"].as_u64() {
            break n;
        }
        let seq = line["seq"].as_u64().expect("an event");
        assert_eq!(seq, last_seq + 1, "nothing lost before the queue filled");
        last_seq = seq;
    };
    assert!(lost > 0 && last_seq > 0);
    // The stream goes on with the next event, whose seq is just past the gap.
    writes(&mut p, 1);
    let next = s.line();
    assert_eq!(
        next["seq"].as_u64(),
        Some(last_seq + lost + 1),
        "the lost count is exactly the gap: {next}"
    );
    let mut line = next;
    while !(line["kind"] == "cqe" && line["wr_id"] == 0) {
        line = s.line();
    }
    p.assert_still_serving();
}

#[test]
fn a_trace_client_stuck_past_the_write_deadline_is_dropped_and_tracing_stops() {
    let limits = Limits {
        max_clients: 2,
        write_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let devs = TestDevices::start_with_control(vec![ib(0), ib(1)], limits);
    let control = devs.control_socket().to_path_buf();
    let mut p = Pair::on(
        devs,
        Topology::TwoDevices,
        QpCaps::default(),
        ConnectOpts::default(),
    );
    let stuck = Stream::open(&control, &json!({"cmd":"trace","device":"rnic0"}));
    let rnic = p.devices.rnic(0);
    wait_for("the stream's subscription", || {
        (rnic.trace.subscribers() == 1).then_some(())
    });
    writes(&mut p, 3000);

    wait_for("the stuck client dropped", || {
        (rnic.trace.subscribers() == 0).then_some(())
    });
    assert!(
        !rnic.trace.on(Kind::Wqe),
        "nobody traces: the hooks are off"
    );
    writes(&mut p, 10);
    drop(stuck);
}

#[test]
fn trace_path_records_a_drivers_bring_up_from_start_up() {
    let dir = std::env::temp_dir().join(format!("vrnic-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rnic0.trace");
    let config = RnicConfig {
        trace: Some(file.clone()),
        ..RnicConfig::new("rnic0", dir.join("rnic0.sock"), ib(0))
    };
    let poller = PollerConfig {
        idle: TEST_POLL_IDLE,
        give_way: false,
        threads: None,
    };
    let service = Service::start(vec![config.clone()], poller).expect("service");
    let mut drv = FakeDriver::connect(&config.socket, 1);
    drv.bring_up();
    let uctx = drv.alloc_uctx();
    let pd = drv.alloc_pd(uctx);
    drop(drv);
    service.stop();

    let text = std::fs::read_to_string(&file).unwrap();
    let events: Vec<Event> = text
        .lines()
        .map(
            |l| match serde_json::from_str::<StreamItem>(l).expect("a JSON line") {
                StreamItem::Event(e) => *e,
                StreamItem::Lost { lost } => panic!("{lost} lost"),
            },
        )
        .collect();
    assert!(
        matches!(&events[0].body, Body::Device { state, .. } if state == "ENABLED"),
        "{:?}",
        events[0]
    );
    let admin: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.body {
            Body::Admin { opcode, status, .. } => Some((opcode.to_string(), status.to_string())),
            _ => None,
        })
        .collect();
    let ok = |op: &str| (op.to_string(), "SUCCESS".to_string());
    assert!(admin.contains(&ok("CREATE_EQ")), "{admin:?}");
    assert_eq!(admin[admin.len() - 2..], [ok("ALLOC_UCTX"), ok("ALLOC_PD")]);
    assert!(events.iter().any(
        |e| matches!(&e.body, Body::Admin { opcode, results, .. } if opcode == "ALLOC_PD" && results[0] == pd)
    ));
    assert!(
        events.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "nothing lost"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first `n` lines `vrnic ctl ARGS` prints, read while it runs; then it is killed
/// (it streams until interrupted).
fn ctl_lines(control: &Path, args: &[&str], n: usize, meanwhile: impl FnOnce()) -> Vec<String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_vrnic"))
        .arg("ctl")
        .arg("--control")
        .arg(control)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run vrnic ctl");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(TIMEOUT);
    meanwhile();
    let mut lines: Vec<String> = first.into_iter().collect();
    while lines.len() < n {
        match rx.recv_timeout(TIMEOUT) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
fn vrnic_ctl_trace_prints_one_line_per_event_as_text_or_json_until_killed() {
    let devs = TestDevices::start_with_control(vec![ib(0)], Limits::default());
    let control = devs.control_socket().to_path_buf();
    let mut drv = devs.driver(0);
    let uctx = drv.alloc_uctx();

    let text = ctl_lines(&control, &["trace", "rnic0", "--kinds", "admin"], 2, || {
        drv.alloc_pd(uctx);
    });
    assert_eq!(text[0], "tracing rnic0 (admin); interrupt to stop");
    assert!(
        text[1].contains(" rnic0 admin")
            && text[1].contains("ALLOC_PD")
            && text[1].ends_with(" us)"),
        "{text:?}"
    );
    assert!(
        text[1].contains(&format!("uctx={uctx:#x} -> SUCCESS")),
        "{text:?}"
    );

    let json = ctl_lines(
        &control,
        &["--json", "trace", "rnic0", "--qp", "7"],
        1,
        || {},
    );
    let head: Value = serde_json::from_str(&json[0]).unwrap();
    assert_eq!(head["qpn"], json!(7));
    // A killed client is noticed within the stream's look-ups (200 ms), events or not.
    let rnic = devs.rnic(0);
    wait_for("the killed clients unsubscribed", || {
        (rnic.trace.subscribers() == 0).then_some(())
    });
}

#[test]
fn a_trace_path_that_cannot_be_created_refuses_the_start_and_says_which() {
    let dir = std::env::temp_dir().join(format!("vrnic-trace-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = RnicConfig {
        trace: Some(dir.join("no-such-dir").join("rnic0.trace")),
        ..RnicConfig::new("rnic0", dir.join("rnic0.sock"), ib(0))
    };
    let poller = PollerConfig {
        idle: TEST_POLL_IDLE,
        give_way: false,
        threads: None,
    };
    let err = Service::start(vec![config], poller)
        .err()
        .expect("the start is refused")
        .to_string();
    assert!(
        err.contains("device rnic0: trace file") && err.contains("no-such-dir/rnic0.trace"),
        "{err}"
    );
    assert!(
        !dir.join("rnic0.sock").exists(),
        "nothing was left listening"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
