//! The hostile-device mode (`vrnic::hostile`), switched through the control socket: each
//! kind writes exactly the corruption it names into what the driver reads (CQ and EQ
//! rings, admin completions, query answers, interrupts), the same ones for the same seed,
//! and the device itself stays sound: its objects, producer indices and later work are
//! those of a device that never was hostile, and switching the mode off gives correct
//! entries again. Every test compares against the same scenario on a device with the mode
//! off (QPNs, handles and addresses are the same on a fresh device).

mod harness;

use harness::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use vm_memory::ByteValued;
use vrnic::control::Limits;
use vrnic_hw::*;
use Which::{A, B};

/// A control client: one JSON line out, one in.
struct Ctl(BufReader<UnixStream>);

impl Ctl {
    fn connect(path: &Path) -> Ctl {
        let s = UnixStream::connect(path).expect("control socket");
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        Ctl(BufReader::new(s))
    }

    fn ask(&mut self, request: Value) -> Value {
        let line = format!("{request}\n");
        self.0.get_mut().write_all(line.as_bytes()).unwrap();
        let mut reply = String::new();
        self.0.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).expect("JSON reply")
    }
}

/// A loopback pair (contexts of A and B differ) on a device with a control socket.
fn pair() -> (Pair, Ctl) {
    let devices = TestDevices::start_with_control(vec![devices::ib(0)], Limits::default());
    let ctl = Ctl::connect(devices.control_socket());
    let p = Pair::on(
        devices,
        Topology::Loopback,
        QpCaps::default(),
        ConnectOpts::default(),
    );
    (p, ctl)
}

fn on(ctl: &mut Ctl, settings: &str) -> Value {
    let r = ctl.ask(json!({"cmd": "hostile", "device": "rnic0", "on": true, "settings": settings}));
    assert_eq!(r["on"], json!(true), "{r}");
    r
}

fn off(ctl: &mut Ctl) {
    let r = ctl.ask(json!({"cmd": "hostile", "device": "rnic0", "on": false}));
    assert_eq!(r["on"], json!(false), "{r}");
}

/// Corruptions written of `kind` since the mode was switched on.
fn written(ctl: &mut Ctl, kind: &str) -> u64 {
    let r = ctl.ask(json!({"cmd": "hostile", "device": "rnic0"}));
    r["written"][kind].as_u64().unwrap_or_else(|| panic!("{r}"))
}

/// The device's producer index of CQ `cqn` (CQEs written), from the control socket.
fn cq_pi(ctl: &mut Ctl, cqn: u32) -> u64 {
    let r = ctl.ask(json!({"cmd": "objects", "device": "rnic0", "kinds": ["cqs"]}));
    let cqs = r["cqs"].as_array().expect("cqs");
    let cq = cqs.iter().find(|c| c["cqn"] == json!(cqn)).expect("the CQ");
    cq["pi"].as_u64().unwrap()
}

fn wait_pi(ctl: &mut Ctl, cqn: u32, pi: u64) {
    wait_for("the device to write the CQE", || {
        (cq_pi(ctl, cqn) >= pi).then_some(())
    });
}

/// Entry `index` of a CQ's ring as it is in memory, whatever its phase.
fn raw(p: &Pair, cq: &Cq, index: u32) -> Cqe {
    p.drivers[0].mem.read_obj(cq.ring.entry(index))
}

/// One SEND of 64 bytes from A into a receive posted on B (wr_ids 100 + n and 200 + n),
/// the n-th of the test: the send CQE of A and the receive CQE of B, read raw once the
/// device has written them (not polled: the harness would stop at a wrong phase).
fn send(p: &mut Pair, ctl: &mut Ctl, n: u32) -> (Cqe, Cqe) {
    let src = p.mr(A, 64, ACCESS_ALL);
    let dst = p.mr(B, 64, ACCESS_ALL);
    p.post_recv(B, &RecvWr::new(200 + u64::from(n), vec![dst.sge(0, 64)]));
    p.post_send(
        A,
        &SendWr::send(100 + u64::from(n), vec![src.sge(0, 64)]).signaled(),
    );
    let (scq, rcq) = (p.a.send_cq.cqn, p.b.recv_cq.cqn);
    wait_pi(ctl, scq, u64::from(n) + 1);
    wait_pi(ctl, rcq, u64::from(n) + 1);
    (raw(p, &p.a.send_cq, n), raw(p, &p.b.recv_cq, n))
}

/// The fields in which two CQEs differ.
fn diff(a: &Cqe, b: &Cqe) -> Vec<&'static str> {
    let fields: [(&str, bool); 16] = [
        ("wr_id", a.wr_id != b.wr_id),
        ("byte_len", a.byte_len != b.byte_len),
        ("imm_data", a.imm_data != b.imm_data),
        ("qpn", a.qpn != b.qpn),
        ("src_qp", a.src_qp != b.src_qp),
        ("wqe_index", a.wqe_index != b.wqe_index),
        ("opcode", a.opcode != b.opcode),
        ("status", a.status != b.status),
        ("wc_flags", a.wc_flags != b.wc_flags),
        ("vendor_err", a.vendor_err != b.vendor_err),
        ("flags", a.flags != b.flags),
        ("slid", a.slid != b.slid),
        ("sl", a.sl != b.sl),
        ("network_type", a.network_type != b.network_type),
        ("srqn", a.srqn != b.srqn),
        ("owner", a.owner != b.owner),
    ];
    fields.iter().filter(|f| f.1).map(|f| f.0).collect()
}

/// The CQEs of one send with the mode off: the reference.
fn clean() -> (Cqe, Cqe) {
    let (mut p, mut ctl) = pair();
    send(&mut p, &mut ctl, 0)
}

/// One send with `kind` at rate 100: (clean, hostile) for the send and the receive CQE;
/// then the mode goes off and a second send must give correct CQEs at the next entries,
/// with the QPs still in RTS (the device's own state was not corrupted).
fn corrupted(kind: &str) -> [(Cqe, Cqe); 2] {
    let (cs, cr) = clean();
    let (mut p, mut ctl) = pair();
    on(&mut ctl, &format!("{kind}:7:100"));
    let (hs, hr) = send(&mut p, &mut ctl, 0);
    assert_eq!(written(&mut ctl, kind), 2, "{kind}: one per CQE");
    off(&mut ctl);
    let next = if kind == "cqe-duplicate" { 2 } else { 1 };
    let (s2, r2) = send(&mut p, &mut ctl, next);
    for (c, clean_c) in [(&s2, &cs), (&r2, &cr)] {
        let mut want = *clean_c;
        want.wr_id = (clean_c.wr_id.to_native() + u64::from(next)).into();
        let mut got = *c;
        // Later entries differ by their slot only where the queue index shows it.
        got.wqe_index = want.wqe_index;
        want.owner = got.owner;
        assert_eq!(diff(&want, &got), Vec::<&str>::new(), "{kind}: after off");
        assert_eq!(c.owner & 1, 1, "{kind}: first-lap phase after off");
    }
    assert_eq!(p.qp_state(A), QpState::Rts, "{kind}: A's QP untouched");
    assert_eq!(p.qp_state(B), QpState::Rts, "{kind}: B's QP untouched");
    [(cs, hs), (cr, hr)]
}

#[test]
fn cqe_qpn_wrong_names_the_other_existing_qp() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-qpn-wrong");
    assert_eq!(diff(&cs, &hs), ["qpn"]);
    assert_eq!(diff(&cr, &hr), ["qpn"]);
    // Two QPs exist: each CQE names the other one.
    assert_eq!((hs.qpn, hr.qpn), (cr.qpn, cs.qpn));
}

#[test]
fn cqe_qpn_foreign_names_a_qp_of_the_other_context() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-qpn-foreign");
    assert_eq!(diff(&cs, &hs), ["qpn"]);
    assert_eq!(diff(&cr, &hr), ["qpn"]);
    assert_eq!(
        (hs.qpn, hr.qpn),
        (cr.qpn, cs.qpn),
        "A and B have their own contexts"
    );
}

#[test]
fn cqe_qpn_range_is_no_qpn_at_all() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-qpn-range");
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["qpn"]);
        let q = h.qpn.to_native();
        assert!(q == 1 || q > QPN_MAX, "{q:#x}");
    }
}

#[test]
fn cqe_qpn_free_is_a_valid_looking_qpn_no_qp_has() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-qpn-free");
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["qpn"]);
        let q = h.qpn.to_native();
        assert!(
            (QPN_MIN..=QPN_MAX).contains(&q) && q != cs.qpn.to_native() && q != cr.qpn.to_native()
        );
    }
}

#[test]
fn cqe_wqe_range_indexes_beyond_the_queue() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-wqe-range");
    let depth = 1u16 << QpCaps::default().sq_depth_log2;
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["wqe_index"]);
        assert!(
            h.wqe_index.to_native() >= depth,
            "{}",
            h.wqe_index.to_native()
        );
    }
}

#[test]
fn cqe_wqe_unposted_names_a_slot_the_driver_did_not_post() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-wqe-unposted");
    let depth = 1u16 << QpCaps::default().sq_depth_log2;
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["wqe_index"]);
        // Only slot 0 was posted on each queue.
        assert!((1..depth).contains(&h.wqe_index.to_native()));
    }
}

#[test]
fn cqe_opcode_is_no_wc_opcode() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-opcode");
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["opcode"]);
        assert!(WcOpcode::try_from(h.opcode).is_err(), "{:#x}", h.opcode);
    }
}

#[test]
fn cqe_status_is_no_wc_status() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-status");
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["status"]);
        assert!(WcStatus::try_from(h.status).is_err(), "{:#x}", h.status);
    }
}

#[test]
fn cqe_flags_carry_undefined_bits() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-flags");
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["wc_flags", "flags"]);
        assert_ne!(h.flags & !0b111, 0);
        assert_ne!(h.wc_flags & !0b1011, 0);
        assert_eq!(h.flags & 0b111, c.flags, "the defined bits stay");
    }
}

#[test]
fn cqe_byte_len_is_more_than_any_buffer() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-byte-len");
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["byte_len"]);
        assert!(h.byte_len.to_native() > bar0::MAX_MSG_SIZE_RESET);
    }
}

#[test]
fn cqe_srqn_names_an_srq_that_does_not_exist() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-srqn");
    for (c, h) in [(cs, hs), (cr, hr)] {
        // No SRQ exists on this device: any srqn is of no SRQ.
        assert_eq!(diff(&c, &h), ["flags", "srqn"]);
        assert_eq!(h.flags, c.flags | CQE_FLAG_SRQ as u8);
    }
}

#[test]
fn cqe_duplicate_writes_the_entry_twice_and_counts_both() {
    let (cs, _) = clean();
    let (mut p, mut ctl) = pair();
    on(&mut ctl, "cqe-duplicate:7:100");

    let (first, _) = send(&mut p, &mut ctl, 0);

    let second = raw(&p, &p.a.send_cq, 1);
    assert_eq!(diff(&cs, &first), Vec::<&str>::new());
    assert_eq!(diff(&cs, &second), Vec::<&str>::new());
    assert_eq!(
        cq_pi(&mut ctl, p.a.send_cq.cqn),
        2,
        "the copy has its own entry"
    );
}

#[test]
fn cqe_phase_writes_the_entry_with_the_wrong_owner() {
    let [(cs, hs), (cr, hr)] = corrupted("cqe-phase");
    for (c, h) in [(cs, hs), (cr, hr)] {
        assert_eq!(diff(&c, &h), ["owner"]);
        assert_eq!(h.owner & 1, 0, "first lap: phase 1 expected, 0 written");
    }
}

#[test]
fn the_same_seed_gives_the_same_corruptions_and_another_seed_others() {
    let run = |settings: &str| {
        let (mut p, mut ctl) = pair();
        on(&mut ctl, settings);
        let cqes: Vec<Vec<u8>> = (0..12)
            .map(|n| send(&mut p, &mut ctl, n))
            .map(|(s, r)| [s.as_slice(), r.as_slice()].concat())
            .collect();
        let r = ctl.ask(json!({"cmd": "hostile", "device": "rnic0"}));
        (cqes, r["written"].clone())
    };
    // Duplicates and wrong phases shift later entries: kinds that keep one entry each.
    let kinds = "cqe-opcode+cqe-status+cqe-byte-len+cqe-qpn-range+cqe-wqe-range";
    let (a, wa) = run(&format!("{kinds}:1234:50"));
    let (b, wb) = run(&format!("{kinds}:1234:50"));
    let (c, _) = run(&format!("{kinds}:4321:50"));
    assert_eq!(a, b);
    assert_eq!(wa, wb);
    assert_ne!(a, c);
    let total: u64 = wa
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!((1..24).contains(&total), "about half of 24 CQEs: {total}");
}

// ---------------------------------------------------------------------------- EQEs

/// Arms B's receive CQ, sends once, and returns the first EQE on the completion EQ.
fn completion_event(p: &mut Pair, ctl: &mut Ctl) -> (Eqe, u32) {
    let (d, side) = p.side(B);
    d.arm_cq(&mut side.recv_cq, CqArm::Next);
    send(p, ctl, 0);
    let d = &mut p.drivers[0];
    let mut eq = d.comp_eq.take().expect("comp EQ");
    let eqe = d.wait_eqe(&mut eq);
    let eqn = eq.eqn;
    d.comp_eq = Some(eq);
    (eqe, eqn)
}

#[test]
fn eqe_type_is_no_event_type_for_the_armed_cq() {
    let (mut p, mut ctl) = pair();
    on(&mut ctl, "eqe-type:3:100");

    let (eqe, _) = completion_event(&mut p, &mut ctl);

    assert!(
        EventType::try_from(eqe.event_type).is_err(),
        "{}",
        eqe.event_type
    );
    assert_eq!(eqe.obj.to_native(), p.b.recv_cq.cqn);
    assert_eq!(written(&mut ctl, "eqe-type"), 1);
}

#[test]
fn eqe_obj_range_names_a_cqn_beyond_max_cq() {
    let (mut p, mut ctl) = pair();
    on(&mut ctl, "eqe-obj-range:3:100");

    let (eqe, _) = completion_event(&mut p, &mut ctl);

    assert_eq!(eqe.event_type, u8::from(EventType::Completion));
    assert!(eqe.obj.to_native() >= bar0::MAX_CQ_RESET);
}

#[test]
fn eqe_obj_free_names_a_cqn_no_cq_has() {
    let (mut p, mut ctl) = pair();
    on(&mut ctl, "eqe-obj-free:3:100");

    let (eqe, _) = completion_event(&mut p, &mut ctl);

    let cqns = [
        p.a.send_cq.cqn,
        p.a.recv_cq.cqn,
        p.b.send_cq.cqn,
        p.b.recv_cq.cqn,
    ];
    let obj = eqe.obj.to_native();
    assert_eq!(eqe.event_type, u8::from(EventType::Completion));
    assert!(obj < bar0::MAX_CQ_RESET && !cqns.contains(&obj), "{obj}");
}

#[test]
fn eqe_obj_foreign_names_a_cq_of_another_eq() {
    let (mut p, mut ctl) = pair();
    let d = &mut p.drivers[0];
    let other_eq = d.create_eq(6, false, 2);
    let other_cq = d.create_cq_on(p.a.uctx, 6, Layout::Contiguous, other_eq.eqn);
    on(&mut ctl, "eqe-obj-foreign:3:100");

    let (eqe, eqn) = completion_event(&mut p, &mut ctl);

    assert_ne!(eqn, other_eq.eqn);
    assert_eq!(eqe.event_type, u8::from(EventType::Completion));
    assert_eq!(
        eqe.obj.to_native(),
        other_cq.cqn,
        "the only CQ bound to another EQ"
    );
}

#[test]
fn eqe_storm_repeats_the_event_and_the_device_keeps_delivering_real_ones() {
    let (mut p, mut ctl) = pair();
    on(&mut ctl, "eqe-storm:3:100");

    let (first, _) = completion_event(&mut p, &mut ctl);
    let d = &mut p.drivers[0];
    let mut eq = d.comp_eq.take().unwrap();
    let mut copies = 0;
    while let Some(e) = d.poll_eq(&mut eq) {
        if e.event_type == first.event_type && e.obj == first.obj {
            copies += 1;
        }
    }
    d.comp_eq = Some(eq);

    assert_eq!(first.obj.to_native(), p.b.recv_cq.cqn);
    assert!((16..=64).contains(&copies), "{copies} copies");
    assert_eq!(
        written(&mut ctl, "eqe-storm"),
        1,
        "storm copies are not stormed again"
    );
}

// ---------------------------------------------------------------------------- admin

/// ALLOC_PD (kernel context) with command id `id`, answered raw.
fn alloc_pd(d: &mut FakeDriver, id: u32) -> AqCompletion {
    d.admin_raw(cmd_handle(AqOpcode::AllocPd, 0, KERNEL_UCTX).as_slice(), id)
}

/// (clean completion, hostile completion) of an ALLOC_PD after A and B's PDs exist;
/// then, the mode off, the PD really created is deallocated and a new one is allocated
/// as on a device that never was hostile.
fn admin_corrupted(kind: &str) -> (AqCompletion, AqCompletion) {
    let (mut p, _) = pair();
    let clean = alloc_pd(&mut p.drivers[0], 77);
    let (mut p, mut ctl) = pair();
    on(&mut ctl, &format!("{kind}:5:100"));
    let bad = alloc_pd(&mut p.drivers[0], 77);
    off(&mut ctl);
    let d = &mut p.drivers[0];
    let real = clean.result0.to_native();
    assert_eq!(
        d.dealloc_pd(KERNEL_UCTX, real).status(),
        Ok(AqStatus::Success),
        "{kind}"
    );
    let again = alloc_pd(d, 78);
    assert_eq!((again.cmd_id.to_native(), again.status), (78, 0), "{kind}");
    (clean, bad)
}

#[test]
fn admin_cmd_id_answers_with_another_commands_id_and_nothing_else_changed() {
    let (c, h) = admin_corrupted("admin-cmd-id");
    assert_ne!(h.cmd_id.to_native(), 77);
    assert_eq!(
        (h.status, h.opcode, h.result0),
        (c.status, c.opcode, c.result0)
    );
}

#[test]
fn admin_status_answers_with_no_aq_status() {
    let (c, h) = admin_corrupted("admin-status");
    assert!(AqStatus::try_from(h.status).is_err(), "{}", h.status);
    assert_eq!(
        (h.cmd_id, h.opcode, h.result0),
        (c.cmd_id, c.opcode, c.result0)
    );
}

#[test]
fn admin_handle_range_answers_a_handle_beyond_every_table() {
    let (c, h) = admin_corrupted("admin-handle-range");
    assert!(h.result0.to_native() >= 0xff00_0000);
    assert_eq!((h.cmd_id, h.status), (c.cmd_id, c.status));
}

#[test]
fn admin_handle_in_use_answers_the_handle_of_an_existing_pd() {
    let (c, h) = admin_corrupted("admin-handle-in-use");
    let (p, _) = pair();
    assert!(
        [p.a.pd, p.b.pd].contains(&h.result0.to_native()),
        "{}",
        h.result0.to_native()
    );
    assert_ne!(h.result0, c.result0);
}

#[test]
fn attr_device_answers_one_field_zero_or_huge() {
    let (mut p, _) = pair();
    let clean = p.drivers[0].query_device();
    let (mut p, mut ctl) = pair();
    on(&mut ctl, "attr-device:9:100");

    let bad = p.drivers[0].query_device();

    let (c, b) = (clean.as_slice(), bad.as_slice());
    let changed: Vec<usize> = (0..c.len()).filter(|&i| c[i] != b[i]).collect();
    assert!(!changed.is_empty() && changed.len() <= 8, "{changed:?}");
    assert_eq!(written(&mut ctl, "attr-device"), 1);
    off(&mut ctl);
    assert_eq!(
        p.drivers[0].query_device().as_slice(),
        c,
        "off: the real answer"
    );
}

#[test]
fn attr_port_answers_one_field_out_of_range() {
    let (mut p, _) = pair();
    let clean = p.drivers[0].query_port();
    let (mut p, mut ctl) = pair();
    on(&mut ctl, "attr-port:9:100");

    let bad = p.drivers[0].query_port();

    let (c, b) = (clean.as_slice(), bad.as_slice());
    let changed: Vec<usize> = (0..c.len()).filter(|&i| c[i] != b[i]).collect();
    assert!(!changed.is_empty() && changed.len() <= 4, "{changed:?}");
    off(&mut ctl);
    assert_eq!(
        p.drivers[0].query_port().as_slice(),
        c,
        "off: the real answer"
    );
}

// ---------------------------------------------------------------------------- irqs, ctl

#[test]
fn irq_spurious_raises_a_vector_per_cqe_without_any_event() {
    // Interrupts of one send (its MRs' admin commands raise vector 0), hostile or not.
    let irqs = |settings: Option<&str>| {
        let (mut p, mut ctl) = pair();
        let d = &p.drivers[0];
        for v in 0..MSIX_VECTORS as u16 {
            d.take_irqs(v);
        }
        if let Some(s) = settings {
            on(&mut ctl, s);
        }
        send(&mut p, &mut ctl, 0);
        let d = &p.drivers[0];
        let n: u64 = (0..MSIX_VECTORS as u16).map(|v| d.take_irqs(v)).sum();
        (n, p, ctl)
    };
    let (clean, _, _) = irqs(None);

    let (hostile, mut p, mut ctl) = irqs(Some("irq-spurious:11:100"));

    let d = &mut p.drivers[0];
    // Two raised; the two CQEs may be written under one lock hold, on one vector.
    assert!((1..=2).contains(&(hostile - clean)), "{hostile} vs {clean}");
    assert_eq!(written(&mut ctl, "irq-spurious"), 2);
    assert!(d.poll_async_event().is_none(), "no event at all");
    let mut eq = d.comp_eq.take().unwrap();
    assert!(
        d.poll_eq(&mut eq).is_none(),
        "no completion event (nothing armed)"
    );
}

#[test]
fn bad_settings_are_refused_and_change_nothing() {
    let (_p, mut ctl) = pair();
    on(&mut ctl, "cqe:1:5");

    for (request, why) in [
        (
            json!({"cmd": "hostile", "device": "rnic0", "on": true, "settings": "bogus:1"}),
            "`bogus`",
        ),
        (
            json!({"cmd": "hostile", "device": "rnic0", "on": true, "settings": "cqe:1:0"}),
            "rate",
        ),
        (
            json!({"cmd": "hostile", "device": "rnic0", "on": false, "settings": "cqe:1"}),
            "only",
        ),
        (
            json!({"cmd": "hostile", "device": "nope", "on": false}),
            "unknown device",
        ),
        (
            json!({"cmd": "hostile", "device": "rnic0", "on": "yes"}),
            "bad request",
        ),
    ] {
        let r = ctl.ask(request.clone());
        let e = r["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{request}: {r}"));
        assert!(e.contains(why), "{request}: {e}");
    }

    let r = ctl.ask(json!({"cmd": "hostile", "device": "rnic0"}));
    assert_eq!(
        (r["on"].clone(), r["settings"].clone()),
        (json!(true), json!("cqe:1:5"))
    );
}

#[test]
fn on_without_settings_resumes_the_last_ones_from_their_seed() {
    let (_p, mut ctl) = pair();
    let never = ctl.ask(json!({"cmd": "hostile", "device": "rnic0"}));
    assert_eq!(
        (never["on"].clone(), never["settings"].clone()),
        (json!(false), Value::Null)
    );
    on(&mut ctl, "eqe+irq:42:30");
    off(&mut ctl);

    let r = ctl.ask(json!({"cmd": "hostile", "device": "rnic0", "on": true}));

    assert_eq!(r["settings"], json!("eqe+irq:42:30"));
    assert_eq!(r["written"]["eqe-storm"], json!(0));
}

#[test]
fn a_device_spec_key_starts_the_device_hostile() {
    use vrnic::cli::{parse, Command};
    let args: Vec<String> = "serve --device r0,socket=/tmp/r0.sock,lid=1,hostile=cqe-phase:9"
        .split(' ')
        .map(String::from)
        .collect();
    let Ok(Command::Serve(s)) = parse(&args) else {
        panic!("parse")
    };
    let h = s.devices[0].hostile.expect("hostile settings");
    assert_eq!(h.to_string(), "cqe-phase:9:10");
    let bad: Vec<String> = "serve --device r0,socket=/tmp/r0.sock,lid=1,hostile=x:y"
        .split(' ')
        .map(String::from)
        .collect();
    let e = parse(&bad).unwrap_err().to_string();
    assert!(e.contains("hostile"), "{e}");
}
