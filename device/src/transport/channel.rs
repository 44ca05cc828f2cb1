//! A requester and a responder engine against each other over a channel that loses,
//! reorders and duplicates frames on a deterministic seeded schedule. The test plays the
//! data path of both sides: it keeps the bytes (the requester's messages and READ
//! buffers, the responder's memory and receive buffers), moves every packet through the
//! wire codec, and checks that every message arrives exactly once, in order and
//! byte-exact, that every WQE completes in order with SUCCESS, and that the retries the
//! impairment caused were counted.

use super::requester::{Action, Message};
use super::responder::{Execute, Outcome, Received, Refusal};
use super::segment::{Family, MsgOp};
use super::testing::{net, MAC_A, MAC_B};
use super::*;
use crate::wire::{Packet, Transport};
use std::time::Instant;
use vrnic_hw::WcStatus;

/// xorshift64*: a fixed sequence per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True `per_mille` times in a thousand.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

#[derive(Clone, Copy)]
struct Impairment {
    loss: u64,
    dup: u64,
    reorder: u64,
}

const CLEAN: Impairment = Impairment {
    loss: 0,
    dup: 0,
    reorder: 0,
};

/// One direction of the wire: frames in flight with the step they arrive at.
struct Channel {
    rng: Rng,
    how: Impairment,
    flight: Vec<(u64, u64, Vec<u8>)>,
    seq: u64,
    sent: u64,
    lost: u64,
}

impl Channel {
    fn new(seed: u64, how: Impairment) -> Channel {
        Channel {
            rng: Rng(seed | 1),
            how,
            flight: Vec::new(),
            seq: 0,
            sent: 0,
            lost: 0,
        }
    }

    fn send(&mut self, step: u64, frame: Vec<u8>) {
        self.sent += 1;
        if self.rng.chance(self.how.loss) {
            self.lost += 1;
            return;
        }
        let copies = if self.rng.chance(self.how.dup) { 2 } else { 1 };
        for _ in 0..copies {
            // Two steps on the wire, or up to twelve for a reordered frame.
            let delay = match self.rng.chance(self.how.reorder) {
                true => 2 + self.rng.below(10),
                false => 2,
            };
            self.seq += 1;
            self.flight.push((step + delay, self.seq, frame.clone()));
        }
    }

    /// The frames arriving at `step`, in the order they were sent.
    fn arrivals(&mut self, step: u64) -> Vec<Vec<u8>> {
        let mut due: Vec<_> = Vec::new();
        self.flight.retain(|(at, seq, frame)| {
            let arrived = *at <= step;
            if arrived {
                due.push((*seq, frame.clone()));
            }
            !arrived
        });
        due.sort_by_key(|(seq, _)| *seq);
        due.into_iter().map(|(_, f)| f).collect()
    }

    fn idle(&self) -> bool {
        self.flight.is_empty()
    }
}

fn frame(out: &Outgoing, payload: Vec<u8>) -> Vec<u8> {
    out.packet(MAC_A, MAC_B, net(), 0xc000, payload)
        .encode()
        .expect("engine packets encode")
}

/// The requester's side: the posted messages and what came back into local buffers.
struct Local {
    msgs: Vec<(Message, Vec<u8>)>,
    read_back: Vec<Vec<u8>>,
    atomic_back: Vec<Option<u64>>,
    completions: Vec<(u32, WcStatus)>,
    rnr_waits: u64,
}

const BASE: u64 = 0x10_0000;
const RKEY: u32 = 0x77;
/// The responder's memory: WRITEs go to the first half, READs come from the second,
/// the atomic word is the last 8 bytes.
const MEM: usize = 64 * 1024;
const ATOMIC_AT: usize = MEM - 8;

/// The responder's side: memory, receive buffers, what was delivered.
struct Target {
    mem: Vec<u8>,
    recv_posted: usize,
    receiving: Option<Vec<u8>>,
    delivered: Vec<(Vec<u8>, Option<[u8; 4]>)>,
    write_imms: Vec<[u8; 4]>,
    placements: u64,
}

impl Target {
    fn range(&self, va: u64, len: u64, rkey: u32) -> Option<usize> {
        let at = va.checked_sub(BASE)? as usize;
        (rkey == RKEY && at + len as usize <= MEM).then_some(at)
    }

    fn claim(&mut self) -> bool {
        match self.recv_posted {
            0 => false,
            _ => {
                self.recv_posted -= 1;
                true
            }
        }
    }

    /// What the data path does for `ex`; `payload` is the packet's.
    fn execute(&mut self, ex: &Execute, payload: &[u8]) -> Outcome {
        if ex.restart {
            self.receiving = None;
        }
        match ex.family {
            Family::Send => {
                if ex.position.starts() {
                    if !self.claim() {
                        return Outcome::Rnr;
                    }
                    self.receiving = Some(Vec::new());
                }
                let Some(buf) = self.receiving.as_mut() else {
                    return Outcome::Refused(Refusal::RemoteOperational);
                };
                assert_eq!(buf.len() as u64, ex.offset, "SEND placed in order");
                buf.extend_from_slice(payload);
                self.placements += 1;
                if ex.position.ends() {
                    let msg = self.receiving.take().unwrap_or_default();
                    self.delivered.push((msg, ex.imm));
                }
                Outcome::Done
            }
            Family::Write => {
                let r = ex.reth.expect("a WRITE has its RETH");
                let Some(at) = self.range(r.va, u64::from(r.dma_len), r.rkey) else {
                    return Outcome::Refused(Refusal::RemoteAccess);
                };
                // WRITE with immediate takes its receive WQE before the last bytes land.
                if ex.position.ends() && ex.imm.is_some() && !self.claim() {
                    return Outcome::Rnr;
                }
                let at = at + ex.offset as usize;
                self.mem[at..at + payload.len()].copy_from_slice(payload);
                self.placements += 1;
                if let (true, Some(imm)) = (ex.position.ends(), ex.imm) {
                    self.write_imms.push(imm);
                }
                Outcome::Done
            }
            Family::Read => {
                let r = ex.reth.expect("a READ has its RETH");
                match self.range(r.va, u64::from(r.dma_len), r.rkey) {
                    Some(_) => Outcome::Done,
                    None => Outcome::Refused(Refusal::RemoteAccess),
                }
            }
            Family::Atomic => {
                let a = ex.atomic.expect("an atomic has its AtomicETH");
                let word = &mut self.mem[ATOMIC_AT..];
                let old = u64::from_le_bytes(word[..8].try_into().unwrap());
                word[..8].copy_from_slice(&old.wrapping_add(a.swap_add).to_le_bytes());
                Outcome::Atomic(old)
            }
        }
    }
}

/// The messages of one run: SENDs (with and without immediate), WRITEs (with and without
/// immediate) into the first half, READs of the second half, FETCH_AND_ADDs.
fn workload(rng: &mut Rng, n: usize, reads: bool) -> Vec<(Message, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let kind = rng.below(if reads { 6 } else { 4 });
            let len = match rng.below(4) {
                0 => rng.below(8),
                _ => rng.below(5000),
            };
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let imm = (i as u32).to_be_bytes();
            let (op, at) = match kind {
                0 => (MsgOp::Send, 0),
                1 => (MsgOp::SendImm(imm), 0),
                2 => (MsgOp::Write, rng.below((MEM / 2) as u64 - len)),
                3 => (MsgOp::WriteImm(imm), rng.below((MEM / 2) as u64 - len)),
                4 => (
                    MsgOp::Read,
                    MEM as u64 / 2 + rng.below((MEM / 2) as u64 - 8 - len),
                ),
                _ => (
                    MsgOp::FetchAdd {
                        add: rng.below(1000) + 1,
                    },
                    ATOMIC_AT as u64,
                ),
            };
            let len = if op.is_atomic() { 8 } else { len };
            let msg = Message::new(op, len).remote(BASE + at, RKEY);
            let data = if op.carries_payload() {
                data
            } else {
                Vec::new()
            };
            (msg, data)
        })
        .collect()
}

struct Run {
    local: Local,
    target: Target,
    rq_stats: requester::RequesterStats,
    rs_stats: responder::ResponderStats,
    lost: u64,
    start_mem: Vec<u8>,
}

/// Runs `msgs` from a requester of `transport` to its responder until every WQE has
/// completed and the wire is quiet.
fn run(
    seed: u64,
    how: Impairment,
    transport: Transport,
    recv_start: usize,
    mtu: u32,
    msgs: Vec<(Message, Vec<u8>)>,
) -> Run {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    // Start just below the 24-bit wrap, so every run crosses it.
    let psn = 0xFF_FFFF - rng.below(64) as u32;
    let mut rq = Requester::new(RequesterConfig {
        transport,
        dest_qpn: 0x22,
        sq_psn: psn,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 2,
        ack_req_every: 8,
        window: 48,
        mtu,
        ..RequesterConfig::default()
    })
    .unwrap();
    let mut rs = Responder::new(ResponderConfig {
        transport,
        dest_qpn: 0x11,
        rq_psn: psn,
        max_dest_rd_atomic: 2,
        min_rnr_timer: 1,
        ack_every: 16,
        mtu,
        ..ResponderConfig::default()
    })
    .unwrap();
    let mut start_mem = vec![0u8; MEM];
    for b in start_mem.iter_mut() {
        *b = rng.next() as u8;
    }
    start_mem[ATOMIC_AT..].copy_from_slice(&0u64.to_le_bytes());
    let mut target = Target {
        mem: start_mem.clone(),
        recv_posted: recv_start,
        receiving: None,
        delivered: Vec::new(),
        write_imms: Vec::new(),
        placements: 0,
    };
    let mut local = Local {
        read_back: msgs.iter().map(|(m, _)| vec![0; m.len as usize]).collect(),
        atomic_back: vec![None; msgs.len()],
        completions: Vec::new(),
        rnr_waits: 0,
        msgs,
    };
    for (i, (m, _)) in local.msgs.iter().enumerate() {
        rq.post(WqeId(i as u32), *m).unwrap();
    }
    let mut ab = Channel::new(seed ^ 0xA5A5, how);
    let mut ba = Channel::new(seed ^ 0x5A5A, how);
    // One step is 10 us of simulated time.
    let t0 = Instant::now();
    let mut actions = Vec::new();
    let total = local.msgs.len();
    let mut step = 0u64;
    while local.completions.len() < total || !ab.idle() || !ba.idle() || rs.has_replies() {
        step += 1;
        assert!(step < 2_000_000, "no progress: {:?}", rq.stats());
        let now = t0 + std::time::Duration::from_micros(10 * step);
        // The responder's consumer posts a receive buffer now and then (RNR otherwise).
        if step.is_multiple_of(40) {
            target.recv_posted += 1;
        }
        while let Some(out) = rq.poll_transmit(now, &mut actions) {
            let payload = match out.payload {
                Payload::Wqe { wqe, offset, len } => {
                    let data = &local.msgs[wqe.0 as usize].1;
                    data[offset as usize..offset as usize + len as usize].to_vec()
                }
                _ => Vec::new(),
            };
            ab.send(step, frame(&out, payload));
        }
        while let Some(out) = rs.poll_transmit() {
            let payload = match out.payload {
                Payload::Memory { va, rkey, len } => {
                    let at = target.range(va, u64::from(len), rkey).expect("READ range");
                    target.mem[at..at + len as usize].to_vec()
                }
                _ => Vec::new(),
            };
            ba.send(step, frame(&out, payload));
        }
        for f in ab.arrivals(step) {
            let pkt = Packet::decode(&f).expect("frames decode");
            match rs.on_packet(&pkt) {
                Received::Execute(ex) => {
                    let outcome = target.execute(&ex, &pkt.payload);
                    rs.finish(ex, outcome);
                }
                Received::Abandoned => target.receiving = None,
                Received::Handled => {}
                Received::Fatal(e) => panic!("responder failed: {e:?}"),
            }
        }
        for f in ba.arrivals(step) {
            let pkt = Packet::decode(&f).expect("frames decode");
            rq.on_packet(&pkt, now, &mut actions);
            for a in actions.drain(..) {
                apply(&mut local, a, &pkt.payload);
            }
        }
        rq.on_timer(now, &mut actions);
        for a in actions.drain(..) {
            apply(&mut local, a, &[]);
        }
    }
    Run {
        local,
        target,
        rq_stats: *rq.stats(),
        rs_stats: *rs.stats(),
        lost: ab.lost + ba.lost,
        start_mem,
    }
}

/// What the requester's data path does for an action; `payload` is the packet's.
fn apply(local: &mut Local, a: Action, payload: &[u8]) {
    match a {
        Action::Place { wqe, offset, len } => {
            let buf = &mut local.read_back[wqe.0 as usize];
            let at = offset as usize;
            buf[at..at + len as usize].copy_from_slice(&payload[..len as usize]);
        }
        Action::AtomicResult { wqe, original } => {
            local.atomic_back[wqe.0 as usize] = Some(original);
        }
        Action::Complete { wqe, status, .. } => local.completions.push((wqe.0, status)),
        Action::RnrWait { .. } => local.rnr_waits += 1,
        Action::Local { .. } => unreachable!("no memory operations posted"),
    }
}

/// Every message exactly once, in order, byte-exact; every WQE complete in order.
fn check_delivered_exactly_once(r: &Run) {
    let n = r.local.msgs.len() as u32;
    let expected: Vec<_> = (0..n).map(|i| (i, WcStatus::Success)).collect();
    assert_eq!(r.local.completions, expected);
    let sends: Vec<_> = r
        .local
        .msgs
        .iter()
        .filter_map(|(m, data)| match m.op {
            MsgOp::Send => Some((data.clone(), None)),
            MsgOp::SendImm(imm) => Some((data.clone(), Some(imm))),
            _ => None,
        })
        .collect();
    assert_eq!(
        r.target.delivered.len(),
        sends.len(),
        "SENDs delivered once"
    );
    assert!(r.target.delivered == sends, "SENDs in order and byte-exact");
    let imms: Vec<_> = r
        .local
        .msgs
        .iter()
        .filter_map(|(m, _)| match m.op {
            MsgOp::WriteImm(imm) => Some(imm),
            _ => None,
        })
        .collect();
    assert_eq!(r.target.write_imms, imms, "WRITE immediates once, in order");
    // WRITEs applied in order over the starting memory.
    let mut mem = r.start_mem.clone();
    let mut sum = 0u64;
    let mut originals = Vec::new();
    for (i, (m, data)) in r.local.msgs.iter().enumerate() {
        let at = (m.remote_addr - BASE) as usize;
        match m.op {
            MsgOp::Write | MsgOp::WriteImm(_) => mem[at..at + data.len()].copy_from_slice(data),
            MsgOp::Read => {
                assert!(
                    r.local.read_back[i] == mem[at..at + m.len as usize],
                    "READ {i} byte-exact"
                );
            }
            MsgOp::FetchAdd { add } => {
                originals.push((r.local.atomic_back[i], Some(sum)));
                sum += add;
            }
            _ => {}
        }
    }
    mem[ATOMIC_AT..].copy_from_slice(&sum.to_le_bytes());
    assert!(
        r.target.mem == mem,
        "responder memory: every WRITE once, in order"
    );
    // Each atomic executed once: its original value is the sum of those before it.
    for (got, want) in originals {
        assert_eq!(got, want);
    }
}

#[test]
fn a_clean_wire_delivers_everything_without_a_retransmission() {
    let mut rng = Rng(7);
    let msgs = workload(&mut rng, 80, true);
    let r = run(7, CLEAN, Transport::Rc, 1, 1024, msgs);
    check_delivered_exactly_once(&r);
    assert_eq!(r.rq_stats.timeouts, 0);
    assert_eq!(r.rq_stats.seq_naks, 0);
    assert_eq!(r.rs_stats.duplicates, 0);
    // Only RNR NAKs (the receive buffers come slowly) cause packets to go again.
    assert_eq!(r.rq_stats.rnr_naks, r.local.rnr_waits);
}

#[test]
fn a_lossy_reordering_duplicating_wire_still_delivers_every_message_exactly_once() {
    let how = Impairment {
        loss: 30,
        dup: 30,
        reorder: 60,
    };
    let mut totals = (0, 0, 0, 0, 0);
    for seed in 1..=12u64 {
        let mut rng = Rng(seed * 31);
        let msgs = workload(&mut rng, 60, true);
        // Every path MTU's segmentation meets the same impairment.
        let mtu = [256, 1024, 4096][seed as usize % 3];
        let r = run(seed, how, Transport::Rc, 1, mtu, msgs);
        check_delivered_exactly_once(&r);
        assert!(r.lost > 0, "seed {seed}: the schedule lost frames");
        // The losses were repaired by retransmissions, and counted.
        assert!(r.rq_stats.retransmitted > 0, "seed {seed}");
        totals.0 += r.rq_stats.timeouts;
        totals.1 += r.rq_stats.seq_naks;
        totals.2 += r.rq_stats.implied_naks;
        totals.3 += r.rs_stats.duplicates;
        totals.4 += r.rq_stats.rnr_naks;
    }
    // Over the seeds, every recovery path ran.
    let (timeouts, seq_naks, implied, duplicates, rnr) = totals;
    assert!(timeouts > 0 && seq_naks > 0 && implied > 0 && duplicates > 0 && rnr > 0);
}

#[test]
fn uc_on_a_lossy_wire_delivers_whole_messages_in_order_or_none_of_them() {
    let how = Impairment {
        loss: 30,
        dup: 0,
        reorder: 0,
    };
    let mut rng = Rng(99);
    let msgs = workload(&mut rng, 80, false);
    let r = run(99, how, Transport::Uc, 1000, 512, msgs);
    // Every WQE completes with SUCCESS once sent.
    let n = r.local.msgs.len() as u32;
    assert_eq!(r.local.completions.len(), n as usize);
    assert!(r.local.completions.iter().all(|c| c.1 == WcStatus::Success));
    // What arrived is a subsequence of what was sent, each message whole.
    let sends: Vec<_> = r
        .local
        .msgs
        .iter()
        .filter_map(|(m, data)| match m.op {
            MsgOp::Send => Some((data.clone(), None)),
            MsgOp::SendImm(imm) => Some((data.clone(), Some(imm))),
            _ => None,
        })
        .collect();
    let mut rest = sends.iter();
    for got in &r.target.delivered {
        assert!(
            rest.any(|s| s == got),
            "a delivered SEND is whole and in order"
        );
    }
    assert!(r.target.delivered.len() < sends.len(), "the wire lost some");
    assert!(!r.target.delivered.is_empty());
    assert_eq!(r.rq_stats.retransmitted, 0, "UC never retransmits");
}

/// A random packet of the peer's: any RC opcode, a PSN near the window, any AETH,
/// payloads of awkward lengths.
fn garbage(rng: &mut Rng, around: u32) -> Packet {
    use crate::wire::bth::Op;
    use crate::wire::{Aeth, AtomicEth, Reth};
    let op = Op::ALL[rng.below(Op::ALL.len() as u64) as usize];
    let psn = around.wrapping_add(rng.below(40) as u32).wrapping_sub(20);
    let mut p = super::testing::packet(Transport::Rc, op, psn & 0xFF_FFFF);
    let layout = crate::wire::ext::Layout::of(p.bth.opcode);
    p.bth.ack_req = rng.chance(500);
    let va = BASE + rng.below(MEM as u64 + 100);
    if layout.reth {
        p.reth = Some(Reth {
            va,
            rkey: if rng.chance(900) { RKEY } else { 1 },
            dma_len: rng.below(6000) as u32,
        });
    }
    if layout.atomic_eth {
        p.atomic_eth = Some(AtomicEth {
            va,
            rkey: RKEY,
            swap_add: rng.next(),
            compare: rng.next(),
        });
    }
    if layout.aeth {
        p.aeth = Some(Aeth {
            syndrome: rng.next() as u8,
            msn: rng.below(1 << 24) as u32,
        });
    }
    if layout.atomic_ack {
        p.atomic_ack = Some(rng.next());
    }
    if layout.imm {
        p.imm = Some([1; 4]);
    }
    if layout.ieth {
        p.ieth = Some(2);
    }
    if layout.payload {
        let n = [0, 1, 511, 1023, 1024, 1025, 4096][rng.below(7) as usize];
        p.payload = vec![0x5a; n];
    }
    p
}

#[test]
fn hostile_packets_never_panic_either_engine_and_completions_stay_in_order() {
    let mut rng = Rng(0xBAD);
    let fresh_requester = |rng: &mut Rng| {
        let mut rq = Requester::new(RequesterConfig {
            sq_psn: 0xFF_FFF8,
            max_rd_atomic: 4,
            ..RequesterConfig::default()
        })
        .unwrap();
        for (i, (m, _)) in workload(rng, 50, true).iter().enumerate() {
            rq.post(WqeId(i as u32), *m).unwrap();
        }
        rq
    };
    let mut rq = fresh_requester(&mut rng);
    let mut rs = Responder::new(ResponderConfig {
        rq_psn: 0xFF_FFF8,
        max_dest_rd_atomic: 4,
        ..ResponderConfig::default()
    })
    .unwrap();
    let t0 = Instant::now();
    let mut actions = Vec::new();
    let mut completed = Vec::new();
    let mut target = Target {
        mem: vec![0; MEM],
        recv_posted: 1 << 20,
        receiving: None,
        delivered: Vec::new(),
        write_imms: Vec::new(),
        placements: 0,
    };
    let (mut requesters, mut responders, mut executed) = (1, 1, 0);
    for i in 0..20_000u64 {
        let now = t0 + std::time::Duration::from_micros(i);
        while rq.poll_transmit(now, &mut actions).is_some() {}
        while rs.poll_transmit().is_some() {}
        let p = garbage(&mut rng, rq.next_psn().get());
        rq.on_packet(&p, now, &mut actions);
        rq.on_timer(now, &mut actions);
        for a in actions.drain(..) {
            match a {
                // A placement is exactly the packet's payload.
                Action::Place { len, .. } => assert_eq!(len as usize, p.payload.len()),
                Action::Complete { wqe, .. } => completed.push(wqe.0),
                _ => {}
            }
        }
        if rq.is_failed() || rq.pending() == 0 {
            // Whatever the peer said, WQEs completed at most once each, in order.
            assert!(completed.windows(2).all(|w| w[0] < w[1]), "{completed:?}");
            completed.clear();
            rq = fresh_requester(&mut rng);
            requesters += 1;
        }
        let p = garbage(&mut rng, rs.expected_psn().get());
        if let Received::Execute(ex) = rs.on_packet(&p) {
            executed += 1;
            let outcome = match rng.below(10) {
                0 => Outcome::Rnr,
                1 => Outcome::Refused(Refusal::RemoteOperational),
                _ => target.execute(&ex, &p.payload),
            };
            rs.finish(ex, outcome);
        }
        if rs.is_failed() {
            rs = Responder::new(ResponderConfig {
                rq_psn: rng.below(1 << 24) as u32,
                ..ResponderConfig::default()
            })
            .unwrap();
            responders += 1;
        }
    }
    assert!(completed.windows(2).all(|w| w[0] < w[1]), "{completed:?}");
    // The garbage reached the engines' deeper paths, not only their first checks.
    assert!(
        requesters > 5 && responders > 10 && executed > 100,
        "{requesters} {responders} {executed}"
    );
}

#[test]
fn a_dead_wire_sends_each_packet_retry_cnt_more_times_then_fails_with_retry_exc_err() {
    for retry_cnt in [0u8, 3, 7] {
        let mut rq = Requester::new(RequesterConfig {
            timeout: 4,
            retry_cnt,
            ..RequesterConfig::default()
        })
        .unwrap();
        rq.post(WqeId(0), Message::new(MsgOp::Send, 2000)).unwrap();
        let mut wire = Channel::new(
            1,
            Impairment {
                loss: 1000,
                dup: 0,
                reorder: 0,
            },
        );
        let mut actions = Vec::new();
        let mut now = Instant::now();
        while !rq.is_failed() {
            while let Some(out) = rq.poll_transmit(now, &mut actions) {
                wire.send(0, frame(&out, vec![0; out.payload.len() as usize]));
            }
            now = rq.next_timer().expect("the ACK timer runs");
            rq.on_timer(now, &mut actions);
        }
        // Two packets, sent once and then once per retry.
        assert_eq!(wire.sent, 2 * (1 + u64::from(retry_cnt)));
        assert_eq!(rq.stats().timeouts, 1 + u64::from(retry_cnt));
        assert_eq!(rq.stats().retransmitted, 2 * u64::from(retry_cnt));
        assert!(matches!(
            actions[..],
            [Action::Complete {
                wqe: WqeId(0),
                status: WcStatus::RetryExcErr,
                ..
            }]
        ));
    }
}
