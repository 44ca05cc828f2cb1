//! The control socket (`vrnic serve --control`, `vrnic ctl`) against served devices driven
//! by the fake driver: what `devices` and `objects` report (states, indices, PSNs after
//! traffic), and hostile clients (oversized lines, garbage, unknown commands, too many
//! clients, a client that never reads), which get errors while the devices and the other
//! clients carry on.

mod harness;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::devices::{ib, roce};
use harness::*;
use serde_json::{json, Value};
use vrnic::control::{ControlError, Limits};
use vrnic::fabric::PollerConfig;
use vrnic::rnic::RnicConfig;
use vrnic::serve::{ServeError, Service};
use vrnic_hw::{CqArm, WcOpcode, KERNEL_UCTX};

/// A control client speaking the protocol itself: one JSON line out, one JSON line in.
struct Ctl {
    reader: BufReader<UnixStream>,
}

impl Ctl {
    fn connect(path: &Path) -> Ctl {
        let stream = UnixStream::connect(path).expect("connect to the control socket");
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(TIMEOUT)).unwrap();
        Ctl {
            reader: BufReader::new(stream),
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("send");
    }

    /// The next response line, parsed; None at end of stream.
    fn reply(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => {
                assert!(
                    line.ends_with('\n'),
                    "a response is one whole line: {line:?}"
                );
                Some(serde_json::from_str(&line).expect("a response is JSON"))
            }
            // The server closed with our unread request bytes in its queue.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => None,
            Err(e) => panic!("reading a response: {e}"),
        }
    }

    fn ask(&mut self, request: &Value) -> Value {
        self.ask_line(&request.to_string())
    }

    fn ask_line(&mut self, line: &str) -> Value {
        self.send_raw(format!("{line}\n").as_bytes());
        self.reply().expect("a response")
    }

    /// The error message of the response to `line`.
    fn error_for(&mut self, line: &str) -> String {
        let r = self.ask_line(line);
        r["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{line}: expected an error, got {r}"))
            .to_string()
    }

    /// Whether the server has closed the connection (every line it still sends read).
    fn closed(&mut self) -> bool {
        while self.reply().is_some() {}
        true
    }
}

/// A new client, if the server admits it (a refused one is told so and closed, maybe
/// before its request is even sent).
fn admitted(path: &Path) -> Option<Ctl> {
    std::thread::sleep(Duration::from_millis(10));
    let mut c = Ctl::connect(path);
    c.reader
        .get_mut()
        .write_all(b"{\"cmd\":\"devices\"}\n")
        .ok()?;
    c.reply().filter(|r| r["devices"].is_array()).map(|_| c)
}

fn devices(ctl: &mut Ctl) -> Vec<Value> {
    let r = ctl.ask(&json!({"cmd": "devices"}));
    r["devices"].as_array().expect("devices").clone()
}

fn objects(ctl: &mut Ctl, device: &str, kind: &str) -> Vec<Value> {
    let r = ctl.ask(&json!({"cmd": "objects", "device": device, "kinds": [kind]}));
    r[kind]
        .as_array()
        .unwrap_or_else(|| panic!("no {kind} in {r}"))
        .clone()
}

/// The object of `kind` whose `key` field is `value`.
fn find(list: &[Value], key: &str, value: u32) -> Value {
    list.iter()
        .find(|o| o[key] == json!(value))
        .unwrap_or_else(|| panic!("no object with {key} {value} in {list:?}"))
        .clone()
}

fn with_control(links: Vec<vrnic::rnic::link::LinkMode>) -> TestDevices {
    TestDevices::start_with_control(links, Limits::default())
}

#[test]
fn devices_lists_each_device_with_its_link_vmm_state_and_object_counts() {
    let devs = with_control(vec![ib(0), roce(1)]);
    let mut ctl = Ctl::connect(devs.control_socket());

    let before = devices(&mut ctl);
    assert_eq!(before.len(), 2);
    assert_eq!(before[0]["name"], "rnic0");
    assert_eq!(
        (&before[0]["link"], &before[0]["lid"], &before[0]["mac"]),
        (&json!("ib"), &json!(1), &Value::Null)
    );
    assert_eq!(before[0]["node_guid"], "0x0200000000000001");
    assert_eq!(
        before[0]["socket"],
        json!(devs.socket(0).display().to_string())
    );
    assert_eq!(
        (&before[1]["link"], &before[1]["lid"], &before[1]["mac"]),
        (&json!("eth"), &json!(0), &json!("02:00:00:00:10:02"))
    );
    assert_eq!(
        before[1]["node_guid"], "0x000000fffe001002",
        "the MAC's EUI-64"
    );
    for d in &before {
        assert_eq!(
            (&d["vmm_connected"], &d["state"], &d["fatal_code"]),
            (&json!(false), &json!("disabled"), &Value::Null)
        );
        assert_eq!(d["objects"]["qps"], 0);
    }

    let mut drv = devs.driver(0);
    let uctx = drv.alloc_uctx();
    let pd = drv.alloc_pd(uctx);
    let cq = drv.create_cq(uctx, 4);
    drv.create_qp(uctx, pd, &cq, &cq, QpCaps::default());
    drv.reg_mr(uctx, pd, 4096, ACCESS_ALL);

    let after = devices(&mut ctl);
    assert_eq!(
        (&after[0]["vmm_connected"], &after[0]["state"]),
        (&json!(true), &json!("enabled"))
    );
    assert_eq!(
        after[0]["objects"],
        json!({"uctxs": 2, "pds": 1, "mrs": 1, "cqs": 1, "eqs": 2, "qps": 1, "srqs": 0, "xrcds": 0}),
        "the kernel context and the user one, bring-up's two EQs"
    );
    assert_eq!(
        after[1]["vmm_connected"], false,
        "the other device is untouched"
    );
}

#[test]
fn objects_show_queue_indices_psns_and_arm_state_after_traffic() {
    let devs = with_control(vec![ib(0), ib(1)]);
    let control = devs.control_socket().to_path_buf();
    let mut p = Pair::on(
        devs,
        Topology::TwoDevices,
        QpCaps::default(),
        ConnectOpts::default(),
    );
    let mut ctl = Ctl::connect(&control);
    const LEN: u64 = 3 * 4096 + 100; // four packets at MTU 4096
    let src = p.mr(Which::A, LEN, ACCESS_ALL);
    let dst = p.mr(Which::B, LEN, ACCESS_ALL);
    p.post_recv(Which::B, &RecvWr::new(7, vec![dst.sge(0, LEN as u32)]));
    p.post_sends(
        Which::A,
        &[
            SendWr::write(1, vec![src.sge(0, LEN as u32)], &dst, 0).signaled(),
            SendWr::send(2, vec![src.sge(0, LEN as u32)]).signaled(),
        ],
    );
    assert_cqe_ok(&p.send_cqe(Which::A), 1, WcOpcode::RdmaWrite);
    assert_cqe_ok(&p.send_cqe(Which::A), 2, WcOpcode::Send);
    assert_cqe_ok(&p.recv_cqe(Which::B), 7, WcOpcode::Recv);

    let (qpn_a, qpn_b) = (p.qpn(Which::A), p.qpn(Which::B));
    let a = find(&objects(&mut ctl, "rnic0", "qps"), "qpn", qpn_a);
    assert_eq!((&a["type"], &a["state"]), (&json!("RC"), &json!("RTS")));
    assert_eq!(
        (&a["uctx"], &a["pdn"], &a["send_cqn"], &a["recv_cqn"]),
        (
            &json!(p.a.uctx),
            &json!(p.a.pd),
            &json!(p.a.send_cq.cqn),
            &json!(p.a.recv_cq.cqn)
        )
    );
    assert_eq!(a["sq"], json!({"depth": 64, "pi": 2, "ci": 2}));
    assert_eq!(a["rq"], json!({"depth": 64, "pi": 0, "ci": 0}));
    assert_eq!(
        a["sq_psn"],
        0x100 + 8,
        "eight request packets sent from 0x100"
    );
    assert_eq!(a["rq_psn"], 0x100, "nothing received");
    assert_eq!(
        (&a["dest_qpn"], &a["dlid"], &a["dgid"], &a["mtu"]),
        (&json!(qpn_b), &json!(2), &Value::Null, &json!(4096))
    );
    assert_eq!((&a["srqn"], &a["waiting"]), (&Value::Null, &Value::Null));
    let b = find(&objects(&mut ctl, "rnic1", "qps"), "qpn", qpn_b);
    assert_eq!(b["rq"], json!({"depth": 64, "pi": 1, "ci": 1}));
    assert_eq!((&b["sq_psn"], &b["rq_psn"]), (&json!(0x100), &json!(0x108)));

    let scq = find(&objects(&mut ctl, "rnic0", "cqs"), "cqn", p.a.send_cq.cqn);
    assert_eq!(
        (&scq["depth"], &scq["pi"], &scq["ci"], &scq["eqn"]),
        (
            &json!(256),
            &json!(2),
            &json!(2),
            &json!(p.drv(Which::A).comp_eqn())
        )
    );
    assert_eq!(
        (&scq["arm"], &scq["armed"], &scq["error"]),
        (&json!("NONE"), &json!(false), &json!(false))
    );
    {
        let (drv, side) = p.side(Which::B);
        drv.arm_cq(&mut side.recv_cq, CqArm::Next);
    }
    let rcq = find(&objects(&mut ctl, "rnic1", "cqs"), "cqn", p.b.recv_cq.cqn);
    assert_eq!(
        (&rcq["arm"], &rcq["arm_seq"], &rcq["armed"], &rcq["pi"]),
        (&json!("NEXT"), &json!(1), &json!(true), &json!(1))
    );
    p.post_recv(Which::B, &RecvWr::new(8, vec![dst.sge(0, 8)]));
    p.post_send(Which::A, &SendWr::send(3, vec![src.sge(0, 8)]));
    assert_cqe_ok(&p.recv_cqe(Which::B), 8, WcOpcode::Recv);
    p.drv(Which::B).wait_comp_event();
    let rcq = find(&objects(&mut ctl, "rnic1", "cqs"), "cqn", p.b.recv_cq.cqn);
    assert_eq!(
        (&rcq["armed"], &rcq["pi"], &rcq["ci"]),
        (&json!(false), &json!(2), &json!(2)),
        "the arm request fired"
    );

    let mrs = objects(&mut ctl, "rnic0", "mrs");
    let m = find(&mrs, "key", src.key);
    assert_eq!(
        (&m["kind"], &m["state"], &m["pdn"], &m["iova"], &m["length"]),
        (
            &json!("MR"),
            &json!("VALID"),
            &json!(p.a.pd),
            &json!(src.iova),
            &json!(LEN)
        )
    );
    assert_eq!(
        m["access"],
        json!(["LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ"]),
        "ACCESS_ALL"
    );

    let eqs = objects(&mut ctl, "rnic0", "eqs");
    assert_eq!(eqs.len(), 2);
    assert_eq!(
        (&eqs[0]["async"], &eqs[0]["vector"], &eqs[0]["depth"]),
        (&json!(true), &json!(0), &json!(64))
    );
    assert_eq!(
        (&eqs[1]["async"], &eqs[1]["vector"], &eqs[1]["depth"]),
        (&json!(false), &json!(1), &json!(1024))
    );
    assert_eq!(
        (&eqs[0]["pending"], &eqs[0]["dropped"]),
        (&json!(0), &json!(0))
    );

    let all = ctl.ask(&json!({"cmd": "objects", "device": "rnic0"}));
    let keys: Vec<&String> = all.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["cqs", "device", "eqs", "mrs", "qps", "srqs"]);
    let some = ctl.ask(&json!({"cmd": "objects", "device": "rnic0", "kinds": ["cqs"]}));
    let keys: Vec<&String> = some.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["cqs", "device"], "only the kinds asked for");
}

#[test]
fn counters_show_the_port_and_each_qp_as_the_device_counted_them() {
    let devs = with_control(vec![ib(0), ib(1)]);
    let control = devs.control_socket().to_path_buf();
    let mut p = Pair::on(
        devs,
        Topology::TwoDevices,
        QpCaps::default(),
        ConnectOpts::default(),
    );
    let mut ctl = Ctl::connect(&control);
    const LEN: u64 = 2 * 4096 + 1; // three packets at MTU 4096
    let src = p.mr(Which::A, LEN, ACCESS_ALL);
    let dst = p.mr(Which::B, LEN, ACCESS_ALL);
    p.post_sends(
        Which::A,
        &[SendWr::write(1, vec![src.sge(0, LEN as u32)], &dst, 0).signaled()],
    );
    assert_cqe_ok(&p.send_cqe(Which::A), 1, WcOpcode::RdmaWrite);

    let qpn_a = p.qpn(Which::A);
    let port_a = ctl.ask(&json!({"cmd": "counters", "device": "rnic0"}));
    let qp_a = ctl.ask(&json!({"cmd": "counters", "device": "rnic0", "qpn": qpn_a}));
    let port_b = ctl.ask(&json!({"cmd": "counters", "device": "rnic1"}));
    assert_eq!(
        (&port_a["device"], &port_a["qpn"]),
        (&json!("rnic0"), &Value::Null)
    );
    assert_eq!(qp_a["qpn"], json!(qpn_a));
    for c in [&port_a, &qp_a] {
        let c = &c["counters"];
        assert_eq!(
            (&c["tx_packets"], &c["tx_bytes"], &c["tx_write_requests"]),
            (&json!(3), &json!(LEN), &json!(1)),
            "{c}"
        );
        assert_eq!((&c["rx_acks"], &c["rx_packets"]), (&json!(1), &json!(1)));
        assert_eq!(c["completions"], json!(1));
        assert_eq!(
            c.as_object().unwrap().len(),
            vrnic_hw::COUNTER_COUNT as usize,
            "every counter, by name"
        );
    }
    let b = &port_b["counters"];
    assert_eq!(
        (
            &b["rx_packets"],
            &b["rx_bytes"],
            &b["rx_write_requests"],
            &b["tx_acks"]
        ),
        (&json!(3), &json!(LEN), &json!(1), &json!(1))
    );
    assert_eq!(
        ctl.ask(&json!({"cmd": "counters", "device": "rnic0", "qpn": 0xabcdef})),
        json!({"error": "device `rnic0` has no QP 0xabcdef"})
    );
    let bad = ctl.ask(&json!({"cmd": "counters", "device": "rnic0", "qpn": "one"}));
    assert!(
        bad["error"].as_str().unwrap().starts_with("bad request"),
        "{bad}"
    );
}

#[test]
fn srqs_and_key_kinds_show_their_own_fields() {
    let devs = with_control(vec![ib(0)]);
    let mut ctl = Ctl::connect(devs.control_socket());
    let mut drv = devs.driver(0);
    let uctx = drv.alloc_uctx();
    let pd = drv.alloc_pd(uctx);
    let cq = drv.create_cq(uctx, 4);
    let mut srq = drv.create_srq(uctx, pd, 4, 1);
    let mr = drv.reg_mr(uctx, pd, 4096, ACCESS_ALL);
    drv.post_srq_recvs(
        &mut srq,
        &[
            RecvWr::new(1, vec![mr.sge(0, 8)]),
            RecvWr::new(2, vec![mr.sge(8, 8)]),
            RecvWr::new(3, vec![mr.sge(16, 8)]),
        ],
    );
    drv.arm_srq_limit(&srq, 2).ok();
    let qp = drv.create_qp_on_srq(uctx, pd, &cq, &cq, QpCaps::default(), &srq);
    let kpd = drv.alloc_pd(KERNEL_UCTX);
    let [frmr, ..] = drv.admin(&cmd_alloc_mr(kpd, KERNEL_UCTX, 16)).ok();
    let [mw, ..] = drv.admin(&cmd_alloc_mw(pd, uctx, 2)).ok();

    let s = find(&objects(&mut ctl, "rnic0", "srqs"), "srqn", srq.srqn);
    assert_eq!(
        s,
        json!({"srqn": srq.srqn, "uctx": uctx, "pdn": pd, "depth": 16, "pi": 3, "ci": 0,
               "limit": 2, "max_sge": 1, "error": false, "xrcdn": null, "cqn": null})
    );
    let q = find(&objects(&mut ctl, "rnic0", "qps"), "qpn", qp.qpn);
    assert_eq!(
        (&q["srqn"], &q["rq"], &q["state"]),
        (&json!(srq.srqn), &Value::Null, &json!("RESET")),
        "a QP on an SRQ has no receive queue of its own"
    );
    let mrs = objects(&mut ctl, "rnic0", "mrs");
    let f = find(&mrs, "key", frmr);
    assert_eq!(
        (&f["kind"], &f["state"], &f["max_pages"], &f["iova"]),
        (&json!("FRMR"), &json!("FREE"), &json!(16), &Value::Null)
    );
    let w = find(&mrs, "key", mw);
    assert_eq!(
        (&w["kind"], &w["state"], &w["mw_type"], &w["access"]),
        (&json!("MW"), &json!("FREE"), &json!("TYPE_2"), &json!([]))
    );
}

#[test]
fn a_listing_longer_than_one_lock_hold_has_every_object_once_in_order() {
    let devs = with_control(vec![ib(0)]);
    let mut ctl = Ctl::connect(devs.control_socket());
    let mut drv = devs.driver(0);
    let uctx = drv.alloc_uctx();
    let cqns: Vec<u32> = (0..600).map(|_| drv.create_cq(uctx, 1).cqn).collect();
    let listed: Vec<u32> = objects(&mut ctl, "rnic0", "cqs")
        .iter()
        .map(|c| c["cqn"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(listed, cqns, "600 CQs, more than two chunks of 256");
}

#[test]
fn garbage_and_unknown_requests_get_clear_errors_and_the_connection_keeps_serving() {
    let devs = with_control(vec![ib(0)]);
    let mut ctl = Ctl::connect(devs.control_socket());
    assert!(ctl.error_for("{not json").starts_with("not JSON"));
    assert!(ctl
        .error_for("\u{7f}\u{1}binary\u{0}garbage")
        .starts_with("not JSON"));
    assert!(ctl.error_for("[1,2,3]").contains("\"cmd\" string"));
    assert_eq!(
        ctl.error_for(r#"{"cmd":"reboot"}"#),
        "unknown command `reboot` (commands: devices, objects, counters, trace, pcap, contract, fault, faults, fault_clear, hostile, uplinks, impair, wire)"
    );
    assert!(ctl.error_for(r#"{"cmd":"objects"}"#).contains("device"));
    assert!(ctl
        .error_for(r#"{"cmd":"devices","all":true}"#)
        .contains("unknown field `all`"));
    assert_eq!(
        ctl.error_for(r#"{"cmd":"objects","device":"rnic9"}"#),
        "unknown device `rnic9` (devices: rnic0)"
    );
    assert!(ctl
        .error_for(r#"{"cmd":"objects","device":"rnic0","kinds":["pds"]}"#)
        .contains("unknown variant `pds`"));
    // Blank lines are not requests; two requests in one write get two answers in order.
    ctl.send_raw(b"\n  \n{\"cmd\":\"devices\"}\n{\"cmd\":\"bogus\"}\n");
    assert!(ctl.reply().unwrap()["devices"].is_array());
    assert!(ctl.reply().unwrap()["error"].is_string());
    assert_eq!(devices(&mut ctl).len(), 1, "still serving");
}

#[test]
fn an_oversized_request_line_gets_an_error_and_its_connection_closes() {
    let devs = with_control(vec![ib(0)]);
    let mut ctl = Ctl::connect(devs.control_socket());
    ctl.send_raw(&vec![b'x'; vrnic::control::protocol::MAX_REQUEST_LINE]);
    let r = ctl.reply().expect("an error before the close");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("longer than 65536 bytes"),
        "{r}"
    );
    assert!(ctl.closed());
    assert_eq!(devices(&mut Ctl::connect(devs.control_socket())).len(), 1);
}

#[test]
fn clients_beyond_the_limit_are_refused_while_the_others_are_served() {
    let limits = Limits {
        max_clients: 3,
        ..Limits::default()
    };
    let devs = TestDevices::start_with_control(vec![ib(0)], limits);
    let path = devs.control_socket();
    let mut served: Vec<Ctl> = (0..3).map(|_| Ctl::connect(path)).collect();
    for c in &mut served {
        assert_eq!(devices(c).len(), 1);
    }
    let mut extra = Ctl::connect(path);
    let r = extra.reply().expect("a refusal");
    assert_eq!(
        r["error"],
        "too many control clients (at most 3); try again later"
    );
    assert!(extra.closed());
    for c in &mut served {
        assert_eq!(devices(c).len(), 1, "the admitted ones keep being served");
    }
    drop(served.pop());
    // Its thread ends once it sees the close; then its place is free.
    let mut next = wait_for("a free client slot", || admitted(path));
    assert_eq!(devices(&mut next).len(), 1);
}

#[test]
fn a_client_that_never_reads_holds_up_neither_the_device_nor_other_clients() {
    let limits = Limits {
        max_clients: 2,
        write_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let devs = TestDevices::start_with_control(vec![ib(0)], limits);
    let path = devs.control_socket().to_path_buf();
    let mut drv = devs.driver(0);
    let uctx = drv.alloc_uctx();
    // A listing of some 600 KB: more than a UNIX socket holds unread (about 200 KB), so
    // the server cannot finish writing it to a client that does not read.
    for _ in 0..6000 {
        drv.create_cq(uctx, 1);
    }
    let mut good = Ctl::connect(&path);
    assert_eq!(devices(&mut good).len(), 1);
    let mut stuck = UnixStream::connect(&path).unwrap();
    stuck
        .write_all(b"{\"cmd\":\"objects\",\"device\":\"rnic0\",\"kinds\":[\"cqs\"]}\n")
        .unwrap();

    // While the server is stuck writing to it, the device executes admin commands, and
    // the other client is answered (the whole listing) and sees them.
    let cq = drv.create_cq(uctx, 1);
    let mut full = String::new();
    good.send_raw(b"{\"cmd\":\"objects\",\"device\":\"rnic0\",\"kinds\":[\"cqs\"]}\n");
    good.reader.read_line(&mut full).unwrap();
    let listed: Value = serde_json::from_str(&full).unwrap();
    let cqs = listed["cqs"].as_array().unwrap();
    assert_eq!(cqs.len(), 6001);
    find(cqs, "cqn", cq.cqn);
    assert!(full.len() > 500_000, "{} bytes", full.len());

    // At its write deadline the stuck client is dropped, which frees its place
    // (max_clients 2: `good` and a new one)...
    let mut next = wait_for("the stuck client's slot", || admitted(&path));
    assert_eq!(devices(&mut next).len(), 1);
    // ...and it got only part of its answer: the server gave up in the middle.
    stuck.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut got = Vec::new();
    match stuck.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("reading what the stuck client was sent: {e}"),
    }
    assert!(
        !got.is_empty() && got.len() < full.len() - 1_000 && !got.ends_with(b"\n"),
        "{} of {} bytes",
        got.len(),
        full.len()
    );
}

fn config(dir: &Path, name: &str) -> RnicConfig {
    RnicConfig::new(name, dir.join(format!("{name}.sock")), ib(0))
}

fn poller() -> PollerConfig {
    PollerConfig {
        idle: harness::devices::TEST_POLL_IDLE,
        give_way: false,
        threads: Some(1),
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vrnic-ctl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_socket_is_private_replaces_a_stale_one_and_is_removed_at_stop() {
    let dir = temp_dir("life");
    let path = dir.join("control.sock");
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "a stale socket: its file stays");
    let service = Service::start_with_control(vec![config(&dir, "r0")], poller(), Some(&path))
        .expect("a stale socket is replaced");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut idle = Ctl::connect(&path);
    assert_eq!(devices(&mut idle).len(), 1);
    with_hang_guard(move || service.stop());
    assert!(!path.exists(), "removed at stop");
    assert!(idle.closed(), "a connected client is let go at stop");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_control_path_held_by_a_live_server_or_another_file_refuses_the_start() {
    let dir = temp_dir("refuse");
    let path = dir.join("control.sock");
    let live = UnixListener::bind(&path).unwrap();
    let err = Service::start_with_control(vec![config(&dir, "a")], poller(), Some(&path));
    assert!(matches!(
        err,
        Err(ServeError::Control(ControlError::InUse(_)))
    ));
    drop(live);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "not a socket").unwrap();
    let err = Service::start_with_control(vec![config(&dir, "b")], poller(), Some(&path));
    assert!(matches!(
        err,
        Err(ServeError::Control(ControlError::NotASocket(_)))
    ));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");
    assert!(
        !dir.join("b.sock").exists(),
        "no device socket is left behind by a refused start"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn another_user_can_neither_connect_nor_be_served_once_the_mode_is_opened() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("NOT RUN: needs root to act as another user");
        return;
    }
    let dir = temp_dir("uid");
    let vrnic = copy_reachable_by_others(&dir);
    let path = dir.join("control.sock");
    let service = Service::start_with_control(vec![config(&dir, "r0")], poller(), Some(&path))
        .expect("service");
    let as_nobody = || {
        use std::os::unix::process::CommandExt;
        Command::new(&vrnic)
            .args(["ctl", "--control"])
            .arg(&path)
            .arg("devices")
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run vrnic ctl as nobody")
    };
    let out = as_nobody();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("Permission denied"), "mode 0600: {err}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_nobody();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "vrnic: permission denied: peer uid 65534 is neither root nor this server's user\n"
    );
    assert_eq!(devices(&mut Ctl::connect(&path)).len(), 1, "root still is");
    with_hang_guard(move || service.stop());
    let _ = std::fs::remove_dir_all(dir);
}

/// Opens `dir` to other users (whatever the umask) and copies the `vrnic` binary into it,
/// so another user can run it: the build's own copy may lie under a private directory, as
/// a clone in root's 0700 home does. The parents of `dir` must be searchable by others.
fn copy_reachable_by_others(dir: &Path) -> PathBuf {
    let open = |path: &Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    for parent in dir.ancestors().skip(1) {
        let mode = std::fs::metadata(parent).unwrap().permissions().mode();
        assert!(
            mode & 0o001 != 0,
            "{} is not searchable by other users: set TMPDIR to a directory that is",
            parent.display()
        );
    }
    open(dir, 0o755);
    let copy = dir.join("vrnic");
    std::fs::copy(env!("CARGO_BIN_EXE_vrnic"), &copy).expect("copy the vrnic binary");
    open(&copy, 0o755);
    copy
}

/// `vrnic ctl` as a process against `vrnic serve --control` as a process.
#[test]
fn vrnic_ctl_talks_to_vrnic_serve_in_json_and_in_tables() {
    let dir = temp_dir("cli");
    let control = dir.join("control.sock");
    let vrnic = env!("CARGO_BIN_EXE_vrnic");
    let mut serve = Command::new(vrnic)
        .arg("serve")
        .arg("--device")
        .arg(format!(
            "rnic0,socket={},lid=5",
            dir.join("r0.sock").display()
        ))
        .arg("--control")
        .arg(&control)
        .stderr(Stdio::null())
        .spawn()
        .expect("start vrnic serve");
    let guard = KillOnDrop(&mut serve);
    wait_for("the control socket", || {
        UnixStream::connect(&control).ok().map(|_| ())
    });
    let ctl = |args: &[&str]| {
        Command::new(vrnic)
            .arg("ctl")
            .arg("--control")
            .arg(&control)
            .args(args)
            .output()
            .expect("run vrnic ctl")
    };

    let out = ctl(&["--json", "devices"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&v["devices"][0]["name"], &v["devices"][0]["lid"]),
        (&json!("rnic0"), &json!(5))
    );
    let out = ctl(&["devices"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("NAME"));
    let row = lines.next().unwrap();
    for want in ["rnic0", "IB lid 5", "disabled"] {
        assert!(row.contains(want), "{row:?} lacks {want:?}");
    }
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[cells.len() - 8..cells.len() - 1],
        ["0"; 7],
        "{row:?}"
    );
    let out = ctl(&["objects", "rnic0", "qps", "cqs"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "device rnic0\n\nQPs (0)\n\nCQs (0)\n"
    );
    let out = ctl(&["counters", "rnic0"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("rnic0 port 1"));
    assert!(lines.next().unwrap().starts_with("COUNTER"));
    assert!(lines.next().unwrap().starts_with("tx_packets "), "{text}");
    assert_eq!(
        lines.count(),
        vrnic_hw::COUNTER_COUNT as usize - 1,
        "{text}"
    );
    let out = ctl(&["counters", "rnic0", "0x77"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "vrnic: device `rnic0` has no QP 0x77\n"
    );
    let out = ctl(&["objects", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "vrnic: unknown device `nope` (devices: rnic0)\n"
    );

    drop(guard);
    // SAFETY: kill() with the pid of our own child and a valid signal number.
    assert_eq!(unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) }, 0);
    assert!(serve.wait().unwrap().success());
    assert!(!control.exists(), "a clean stop removes the control socket");
    let out = ctl(&["devices"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("cannot connect to"));
    let _ = std::fs::remove_dir_all(dir);
}

/// Kills the child if the test fails before it is stopped cleanly.
struct KillOnDrop<'a>(&'a mut std::process::Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
