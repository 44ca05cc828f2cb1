//! vrnic data-path benchmark (not a test): RDMA WRITE bandwidth between two devices at
//! 4 KiB, 64 KiB and 1 MiB with many WQEs in flight and selective signalling, and
//! doorbell-to-CQE latency of an 8-byte WRITE; each next to a plain memcpy of the same size
//! on this machine in this run.
//!
//! Run: `cargo run --release -p vrnic --example bench` (optional argument: seconds per
//! measurement, default 1). It ends with aggregate WRITE bandwidth of 1 and of 4 device
//! pairs in one process (one fake driver thread per pair), which shows how the poller
//! shards spread busy devices over the cores, and the 8-byte latency again with idle QPs
//! on the device (VRNIC_BENCH_IDLE_QPS, default 4000), UD SEND bandwidth of 4 KiB
//! datagrams between two RoCE-mode devices, the rate and latency of RC FETCH_AND_ADD
//! atomics on one word, and 64 KiB WRITE bandwidth and 8-byte latency of an XRC_INI QP
//! through an XRC_TGT QP (the XRC row, next to RC), and the RC QP again across the
//! RoCEv2 wire: two hosts (services with their own switches) joined by a clean cable, at
//! path MTU 1024 and 4096 (the wire rows, next to the in-process ones).
//!
//! The devices are driven by the tests' fake driver over real vfio-user sockets, with the
//! doorbell BAR mmapped, so a post is what a guest's provider does: WQE stores, a doorbell
//! store and a POLL_STATE load (plus a KICK message only while the poller sleeps).

#[path = "../tests/harness/mod.rs"]
mod harness;

use std::hint::black_box;
use std::time::{Duration, Instant};

use harness::pair::Side;
use harness::*;
use vrnic_hw::{WcOpcode, WcStatus};

/// Registered buffer size on each side; transfers cycle through it, so the data does not
/// stay in the caches.
const BUF: u64 = 64 << 20;
/// WQEs kept in flight (the send queue holds 1024).
const WINDOW: u32 = 512;
/// Every SIGNAL_EVERY-th WQE is signalled; its CQE retires the ones before it.
const SIGNAL_EVERY: u32 = 32;
const SQ_DEPTH_LOG2: u32 = 10;

struct Bench {
    a: FakeDriver,
    b: FakeDriver,
    sa: Side,
    src: Mr,
    dst: Mr,
    /// XRC: the target's SRQ every WQE names (the QP of `sa` is an XRC_INI QP).
    xrc_srqn: Option<u32>,
}

impl Bench {
    /// An RDMA WRITE of `len` bytes at `off` of both MRs.
    fn write(&self, n: u64, off: u64, len: u32) -> SendWr {
        let wr = SendWr::write(n, vec![self.src.sge(off, len)], &self.dst, off);
        match self.xrc_srqn {
            Some(srqn) => wr.for_srq(srqn),
            None => wr,
        }
    }
}

/// VRNIC_BENCH_PCAP=DIR: every device captures its packets into DIR/rnicN.pcap (the
/// pcap-on cost); VRNIC_BENCH_PCAP=/dev/null: all encode them and write nothing.
fn capture(devices: TestDevices) -> TestDevices {
    if let Some(to) = std::env::var_os("VRNIC_BENCH_PCAP") {
        let to = std::path::Path::new(&to);
        for i in 0..devices.len() {
            let path = match to.is_dir() {
                true => to.join(format!("rnic{i}.pcap")),
                false => to.to_path_buf(),
            };
            devices.rnic(i).tap.start(&path, "bench").expect("pcap");
        }
    }
    devices
}

/// Devices as `vrnic serve` runs them: pollers poll for 1 ms after work, one per core
/// (VRNIC_BENCH_POLLERS=N: N poller threads). VRNIC_BENCH_TRACE=1: each device traced by a
/// subscriber that encodes every event as `vrnic ctl --json trace` would.
fn devices(n: usize) -> TestDevices {
    let threads = std::env::var("VRNIC_BENCH_POLLERS")
        .ok()
        .and_then(|v| v.parse().ok());
    let devices = capture(TestDevices::start_with(
        n,
        vrnic::fabric::PollerConfig {
            idle: Duration::from_millis(1),
            give_way: true,
            threads,
        },
    ));
    if std::env::var_os("VRNIC_BENCH_TRACE").is_some() {
        (0..n).for_each(|i| trace_all(&devices, i));
    }
    devices
}

/// A subscriber of every event of device `i` that encodes each one as a JSON line, as the
/// control socket does; it ends with the device, saying how many it got and lost.
fn trace_all(devices: &TestDevices, i: usize) {
    use vrnic::trace::{queue, Filter, StreamItem};
    let sub = devices
        .rnic(i)
        .trace
        .subscribe(Filter::default(), queue::DEFAULT_CAPACITY);
    std::thread::spawn(move || {
        let (mut got, mut lost, mut bytes) = (0u64, 0u64, Vec::new());
        while let Some(items) = sub.take(Duration::from_millis(200)) {
            for item in items {
                if let StreamItem::Lost { lost: n } = item {
                    lost += n;
                    continue;
                }
                bytes.clear();
                let _ = serde_json::to_writer(&mut bytes, &item);
                black_box(&bytes);
                got += 1;
            }
        }
        eprintln!("  (traced device {i}: {got} events, {lost} lost)");
    });
}

/// A connected QP from device `i` to device `j`, with MRs on each.
fn setup(devices: &TestDevices, i: usize, j: usize) -> Bench {
    let mut a = FakeDriver::connect_with_ram(devices.socket(i), devices.lid(i), 512 << 20);
    let mut b = FakeDriver::connect_with_ram(devices.socket(j), devices.lid(j), 512 << 20);
    a.bring_up();
    b.bring_up();
    let caps = QpCaps {
        sq_depth_log2: SQ_DEPTH_LOG2,
        ..QpCaps::default()
    };
    let sa = harness::pair::new_side(&mut a, i, caps);
    let sb = harness::pair::new_side(&mut b, j, caps);
    let opts = ConnectOpts::default();
    a.connect_qp(&sa.qp, b.lid, sb.qp.qpn, &opts);
    b.connect_qp(&sb.qp, a.lid, sa.qp.qpn, &opts);
    let src = a.reg_mr(sa.uctx, sa.pd, BUF, ACCESS_ALL);
    let dst = b.reg_mr(sb.uctx, sb.pd, BUF, ACCESS_ALL);
    // Touch every page once so first-touch faults are not measured.
    a.mr_fill(&src, 0x5a);
    b.mr_fill(&dst, 0);
    Bench {
        a,
        b,
        sa,
        src,
        dst,
        xrc_srqn: None,
    }
}

/// Two "hosts" (two services, each with its own fabric, poller and switch) whose RoCE
/// devices' wire ports are joined by a clean cable: an RC QP between them runs as RoCEv2
/// packets through the reliability engine at path MTU `mtu`. The hosts, switches and cable
/// live as long as the returned value.
fn setup_wire(mtu: vrnic_hw::Mtu) -> (Bench, impl Sized) {
    use harness::devices::gid_of;
    let poller = vrnic::fabric::PollerConfig {
        idle: Duration::from_millis(1),
        give_way: true,
        threads: None,
    };
    let wire = harness::cable::WireHosts::start_with(Default::default(), |links| {
        TestDevices::start_links_with(links, poller)
    });
    let hosts = &wire.hosts;
    let mut a = FakeDriver::connect_with_ram(hosts[0].socket(0), hosts[0].lid(0), 512 << 20);
    let mut b = FakeDriver::connect_with_ram(hosts[1].socket(0), hosts[1].lid(0), 512 << 20);
    a.bring_up();
    b.bring_up();
    a.roce_up(gid_of(0));
    b.roce_up(gid_of(1));
    let caps = QpCaps {
        sq_depth_log2: SQ_DEPTH_LOG2,
        ..QpCaps::default()
    };
    let sa = harness::pair::new_side(&mut a, 0, caps);
    let sb = harness::pair::new_side(&mut b, 1, caps);
    let opts = ConnectOpts {
        path_mtu: mtu,
        ..ConnectOpts::default()
    };
    a.connect_qp_to(&sa.qp, b.addr(), sb.qp.qpn, &opts);
    b.connect_qp_to(&sb.qp, a.addr(), sa.qp.qpn, &opts);
    let src = a.reg_mr(sa.uctx, sa.pd, BUF, ACCESS_ALL);
    let dst = b.reg_mr(sb.uctx, sb.pd, BUF, ACCESS_ALL);
    a.mr_fill(&src, 0x5a);
    b.mr_fill(&dst, 0);
    let bench = Bench {
        a,
        b,
        sa,
        src,
        dst,
        xrc_srqn: None,
    };
    (bench, wire)
}

/// An XRC_INI QP on device `i` connected to an XRC_TGT QP of device `j`, whose XRC SRQ's
/// PD holds the target MR.
fn setup_xrc(devices: &TestDevices, i: usize, j: usize) -> Bench {
    let mut a = FakeDriver::connect_with_ram(devices.socket(i), devices.lid(i), 512 << 20);
    let mut b = FakeDriver::connect_with_ram(devices.socket(j), devices.lid(j), 512 << 20);
    a.bring_up();
    b.bring_up();
    let uctx = a.alloc_uctx();
    let pd = a.alloc_pd(uctx);
    let send_cq = a.create_cq(uctx, 8);
    let recv_cq = a.create_cq(uctx, 1);
    let caps = QpCaps {
        sq_depth_log2: SQ_DEPTH_LOG2,
        ..xrc_ini_caps()
    };
    let qp = a.create_xrc_ini_with(uctx, pd, &send_cq, caps);
    let xrcd = b.alloc_xrcd();
    let tgt = b.create_xrc_tgt(xrcd);
    let b_uctx = b.alloc_uctx();
    let b_pd = b.alloc_pd(b_uctx);
    let b_cq = b.create_cq(b_uctx, 8);
    let srq = b.create_xrc_srq(b_uctx, b_pd, xrcd, &b_cq, 4, 1);
    let opts = ConnectOpts::default();
    a.connect_qp(&qp, b.lid, tgt.qpn, &opts);
    b.connect_qp(&tgt, a.lid, qp.qpn, &opts);
    let src = a.reg_mr(uctx, pd, BUF, ACCESS_ALL);
    let dst = b.reg_mr(b_uctx, b_pd, BUF, ACCESS_ALL);
    a.mr_fill(&src, 0x5a);
    b.mr_fill(&dst, 0);
    let sa = Side {
        drv: i,
        uctx,
        pd,
        send_cq,
        recv_cq,
        qp,
    };
    Bench {
        a,
        b,
        sa,
        src,
        dst,
        xrc_srqn: Some(srq.srqn),
    }
}

/// Aggregate bytes per second of `pairs` device pairs, each WRITEing `size` bytes from its
/// own thread for about `secs`.
fn aggregate_bandwidth(pairs: usize, size: u64, secs: f64) -> f64 {
    let devices = devices(2 * pairs);
    let benches: Vec<Bench> = (0..pairs)
        .map(|p| setup(&devices, 2 * p, 2 * p + 1))
        .collect();
    let threads: Vec<_> = benches
        .into_iter()
        .map(|mut bench| std::thread::spawn(move || write_bandwidth(&mut bench, size, secs).0))
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("bench thread"))
        .sum()
}

/// Consumes one CQE of the send CQ, which must be a successful WRITE.
fn reap(bench: &mut Bench) -> bool {
    match bench.a.poll_cq(&mut bench.sa.send_cq) {
        Some(c) => {
            assert_eq!(c.status, u8::from(WcStatus::Success), "WRITE failed: {c:?}");
            assert_eq!(c.opcode, u8::from(WcOpcode::RdmaWrite));
            true
        }
        None => false,
    }
}

/// Bytes per second of RDMA WRITEs of `size` bytes for about `secs`.
fn write_bandwidth(bench: &mut Bench, size: u64, secs: f64) -> (f64, u64) {
    let slots = BUF / size;
    let mut posted: u32 = 0;
    let mut retired: u32 = 0;
    let mut bytes = 0u64;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut batch = Vec::with_capacity(SIGNAL_EVERY as usize);
    while Instant::now() < deadline {
        // Fill the window in batches of SIGNAL_EVERY, the last of each batch signalled.
        while posted.wrapping_sub(retired) + SIGNAL_EVERY <= WINDOW {
            batch.clear();
            for i in 0..SIGNAL_EVERY {
                let n = u64::from(posted + i);
                let off = (n % slots) * size;
                let wr = bench.write(n, off, size as u32);
                batch.push(if i == SIGNAL_EVERY - 1 {
                    wr.signaled()
                } else {
                    wr
                });
            }
            bench.a.post_sends(&mut bench.sa.qp, &batch);
            posted += SIGNAL_EVERY;
        }
        if reap(bench) {
            retired += SIGNAL_EVERY;
            bytes += u64::from(SIGNAL_EVERY) * size;
        } else {
            std::hint::spin_loop();
        }
    }
    while retired != posted {
        if reap(bench) {
            retired += SIGNAL_EVERY;
            bytes += u64::from(SIGNAL_EVERY) * size;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    (bytes as f64 / elapsed, bytes / size)
}

/// Bytes per second of memcpy of `size` bytes between two buffers of BUF bytes, cycling
/// through them like the WRITEs do.
fn memcpy_bandwidth(size: u64, secs: f64) -> f64 {
    let src = vec![0x5au8; BUF as usize];
    let mut dst = vec![0u8; BUF as usize];
    let slots = BUF / size;
    let size = size as usize;
    let mut n = 0u64;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    while Instant::now() < deadline {
        for _ in 0..16 {
            let off = ((n % slots) as usize) * size;
            dst[off..off + size].copy_from_slice(black_box(&src[off..off + size]));
            n += 1;
        }
        black_box(&mut dst);
    }
    (n * size as u64) as f64 / start.elapsed().as_secs_f64()
}

/// Doorbell-to-CQE latencies of single signalled 8-byte WRITEs, sorted (ns).
fn write_latency(bench: &mut Bench, secs: f64) -> Vec<f64> {
    let mut lat = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while Instant::now() < deadline {
        let off = (n % 4096) * 8;
        let wr = bench.write(n, off, 8).signaled();
        let t0 = Instant::now();
        bench.a.post_send(&mut bench.sa.qp, &wr);
        while !reap(bench) {
            std::hint::spin_loop();
        }
        lat.push(t0.elapsed().as_nanos() as f64);
        n += 1;
    }
    lat.sort_by(f64::total_cmp);
    lat
}

/// ns per 8-byte memcpy (between distinct cache lines, like the WRITEs).
fn memcpy_latency() -> f64 {
    let src = vec![0x5au8; 1 << 16];
    let mut dst = vec![0u8; 1 << 16];
    let iters = 10_000_000usize;
    let start = Instant::now();
    for i in 0..iters {
        let off = (i * 64) % (1 << 16);
        dst[off..off + 8].copy_from_slice(black_box(&src[off..off + 8]));
        black_box(&mut dst);
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

/// Datagrams in flight in the UD measurement, and how many per signalled send.
const UD_WINDOW: u32 = 256;
const UD_BATCH: u32 = 32;
/// Bytes the receiver gets per datagram: the GRH and the payload.
const UD_SLOT: u64 = 40 + 4096;

/// UD SEND bandwidth of 4 KiB datagrams (the MTU) between two RoCE devices, by GID with an
/// IPv4 GRH: the receiver keeps a receive posted for every datagram in flight, so none is
/// dropped. Returns (payload bytes per second, datagrams).
fn ud_bandwidth(secs: f64) -> (f64, u64) {
    let devices = capture(TestDevices::start_links_with(
        vec![harness::devices::roce(0), harness::devices::roce(1)],
        vrnic::fabric::PollerConfig {
            idle: Duration::from_millis(1),
            give_way: true,
            threads: None,
        },
    ));
    let mut a = devices.addressed_driver(0);
    let mut b = devices.addressed_driver(1);
    let caps = QpCaps {
        sq_depth_log2: SQ_DEPTH_LOG2,
        rq_depth_log2: SQ_DEPTH_LOG2,
        ..QpCaps::of(vrnic_hw::QpType::Ud)
    };
    let mut ea = a.ud_end_with(caps, TEST_QKEY, SQ_DEPTH_LOG2);
    let mut eb = b.ud_end_with(caps, TEST_QKEY, SQ_DEPTH_LOG2);
    let src = a.reg_mr(ea.uctx, ea.pd, u64::from(UD_WINDOW) * 4096, ACCESS_ALL);
    let dst = b.reg_mr(eb.uctx, eb.pd, u64::from(UD_WINDOW) * UD_SLOT, ACCESS_ALL);
    a.mr_fill(&src, 0x5a);
    b.mr_fill(&dst, 0);
    let av = ud_av(b.addr(), eb.qp.qpn, TEST_QKEY);
    let (mut posted, mut sent, mut received) = (0u32, 0u32, 0u32);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut sends = Vec::with_capacity(UD_BATCH as usize);
    let mut recvs = Vec::with_capacity(UD_BATCH as usize);
    loop {
        let running = Instant::now() < deadline;
        while running && posted.wrapping_sub(received) + UD_BATCH <= UD_WINDOW {
            sends.clear();
            recvs.clear();
            for i in 0..UD_BATCH {
                let slot = u64::from((posted + i) % UD_WINDOW);
                recvs.push(RecvWr::new(
                    slot,
                    vec![dst.sge(slot * UD_SLOT, UD_SLOT as u32)],
                ));
                let wr = SendWr::datagram(slot, vec![src.sge(slot * 4096, 4096)], av);
                sends.push(if i == UD_BATCH - 1 { wr.signaled() } else { wr });
            }
            // Receives first: a datagram that finds none is dropped.
            b.post_recvs(&mut eb.qp, &recvs);
            a.post_sends(&mut ea.qp, &sends);
            posted += UD_BATCH;
        }
        if let Some(c) = a.poll_cq(&mut ea.send_cq) {
            assert_eq!(c.status, u8::from(WcStatus::Success), "UD send: {c:?}");
            sent += UD_BATCH;
        }
        while let Some(c) = b.poll_cq(&mut eb.recv_cq) {
            assert_eq!(c.status, u8::from(WcStatus::Success), "UD receive: {c:?}");
            assert_eq!(u64::from(c.byte_len.to_native()), UD_SLOT);
            received += 1;
        }
        if !running && sent == posted && received == posted {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let got = b.mr_read(&dst, UD_SLOT - 64, 64);
    assert!(got.iter().all(|x| *x == 0x5a), "UD payload did not land");
    (f64::from(received) * 4096.0 / elapsed, u64::from(received))
}

/// RC FETCH_AND_ADD of 1 on one word between two devices: (operations per second with
/// WINDOW in flight, sorted latencies of single atomics in ns). Checks the word counted
/// every add.
fn atomic_rate(secs: f64) -> (f64, Vec<f64>) {
    let devices = devices(2);
    let mut a = devices.driver(0);
    let mut b = devices.driver(1);
    let caps = QpCaps {
        sq_depth_log2: SQ_DEPTH_LOG2,
        ..QpCaps::default()
    };
    let mut sa = harness::pair::new_side(&mut a, 0, caps);
    let sb = harness::pair::new_side(&mut b, 1, caps);
    let access = ACCESS_ALL | REMOTE_ATOMIC;
    let opts = ConnectOpts {
        access,
        ..ConnectOpts::default()
    };
    a.connect_qp(&sa.qp, b.lid, sb.qp.qpn, &opts);
    b.connect_qp(&sb.qp, a.lid, sa.qp.qpn, &opts);
    let results = a.reg_mr(sa.uctx, sa.pd, 8 * u64::from(WINDOW), ACCESS_ALL);
    let word = b.reg_mr(sb.uctx, sb.pd, 8, access);
    let add = |n: u64| {
        let at = (n % u64::from(WINDOW)) * 8;
        SendWr::fetch_and_add(n, results.sge(at, 8), &word, 0, 1)
    };
    let reap = |a: &mut FakeDriver, sa: &mut Side| {
        a.poll_cq(&mut sa.send_cq).map(|c| {
            assert_eq!(
                c.status,
                u8::from(WcStatus::Success),
                "atomic failed: {c:?}"
            );
            assert_eq!(c.opcode, u8::from(WcOpcode::FetchAdd));
        })
    };
    let (mut posted, mut retired) = (0u32, 0u32);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut batch = Vec::with_capacity(SIGNAL_EVERY as usize);
    loop {
        let running = Instant::now() < deadline;
        while running && posted.wrapping_sub(retired) + SIGNAL_EVERY <= WINDOW {
            batch.clear();
            for i in 0..SIGNAL_EVERY {
                let wr = add(u64::from(posted + i));
                batch.push(if i == SIGNAL_EVERY - 1 {
                    wr.signaled()
                } else {
                    wr
                });
            }
            a.post_sends(&mut sa.qp, &batch);
            posted += SIGNAL_EVERY;
        }
        if reap(&mut a, &mut sa).is_some() {
            retired += SIGNAL_EVERY;
        } else if !running && retired == posted {
            break;
        }
    }
    let rate = f64::from(retired) / start.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < deadline {
        let t0 = Instant::now();
        a.post_send(&mut sa.qp, &add(u64::from(posted)).signaled());
        while reap(&mut a, &mut sa).is_none() {
            std::hint::spin_loop();
        }
        lat.push(t0.elapsed().as_nanos() as f64);
        posted += 1;
    }
    let counted = u64::from_le_bytes(b.mr_read(&word, 0, 8).try_into().expect("8 bytes"));
    assert_eq!(counted, u64::from(posted), "every atomic add counted once");
    lat.sort_by(f64::total_cmp);
    (rate, lat)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn gib(bps: f64) -> f64 {
    bps / f64::from(1u32 << 30)
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    println!(
        "vrnic bench: 2 devices, RC QP, {} MiB MRs on scattered 4 KiB pages, {} WQEs in flight, \
         1 in {} signalled, {secs} s per measurement, {} CPUs",
        BUF >> 20,
        WINDOW,
        SIGNAL_EVERY,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // VRNIC_BENCH_ONLY=wire: only the wire rows (e.g. to profile the wire path).
    if std::env::var("VRNIC_BENCH_ONLY").as_deref() == Ok("wire") {
        wire_rows(secs);
        return;
    }
    let devices = devices(2);
    let mut bench = setup(&devices, 0, 1);

    println!();
    println!(
        "{:<22} {:>12} {:>12} {:>10} {:>14}",
        "RDMA WRITE bandwidth", "vrnic GiB/s", "memcpy GiB/s", "ratio", "WQEs"
    );
    for size in [4u64 << 10, 64 << 10, 1 << 20] {
        let kicks = bench.a.kicks;
        let (bps, wqes) = write_bandwidth(&mut bench, size, secs);
        let copy = memcpy_bandwidth(size, secs);
        println!(
            "{:<22} {:>12.2} {:>12.2} {:>9.0}% {:>14}   ({} kicks)",
            format!("{} KiB", size >> 10),
            gib(bps),
            gib(copy),
            100.0 * bps / copy,
            wqes,
            bench.a.kicks - kicks
        );
    }
    // Spot-check that the data really moved.
    let got = bench.b.mr_read(&bench.dst, BUF - 64, 64);
    assert!(got.iter().all(|b| *b == 0x5a), "WRITE data did not land");

    let kicks = bench.a.kicks;
    let lat = write_latency(&mut bench, secs);
    let copy = memcpy_latency();
    println!();
    println!(
        "8-byte WRITE, doorbell to CQE: median {:.2} us, p99 {:.2} us, min {:.2} us over {} \
         WRITEs ({} kicks); 8-byte memcpy: {:.1} ns",
        percentile(&lat, 0.5) / 1000.0,
        percentile(&lat, 0.99) / 1000.0,
        lat[0] / 1000.0,
        lat.len(),
        bench.a.kicks - kicks,
        copy
    );

    // The same latency with many idle QPs on both devices: the poller looks only at QPs
    // whose doorbell was rung, so their number should not matter.
    let (ua, pa) = (bench.sa.uctx, bench.sa.pd);
    let idle: usize = std::env::var("VRNIC_BENCH_IDLE_QPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let cq = bench.a.create_cq(ua, 8);
    for _ in 0..idle {
        bench.a.create_qp(ua, pa, &cq, &cq, QpCaps::default());
    }
    let lat = write_latency(&mut bench, secs);
    println!(
        "same with {idle} idle QPs on the requester: median {:.2} us, p99 {:.2} us",
        percentile(&lat, 0.5) / 1000.0,
        percentile(&lat, 0.99) / 1000.0,
    );
    drop(bench);
    drop(devices);

    let (bps, n) = ud_bandwidth(secs);
    println!();
    println!(
        "UD SEND 4 KiB datagrams (RoCE, IPv4 GRH), {UD_WINDOW} in flight: {:.2} GiB/s, {:.0} K datagrams/s ({n} datagrams)",
        gib(bps),
        bps / 4096.0 / 1000.0
    );

    let (rate, lat) = atomic_rate(secs);
    println!();
    println!(
        "RC FETCH_AND_ADD on one word, {WINDOW} in flight: {:.0} K atomics/s; single: median \
         {:.2} us, p99 {:.2} us",
        rate / 1000.0,
        percentile(&lat, 0.5) / 1000.0,
        percentile(&lat, 0.99) / 1000.0,
    );

    let devices = self::devices(2);
    let mut xrc = setup_xrc(&devices, 0, 1);
    let (bps, _) = write_bandwidth(&mut xrc, 64 << 10, secs);
    let lat = write_latency(&mut xrc, secs);
    println!();
    println!(
        "XRC (XRC_INI -> XRC_TGT) RDMA WRITE 64 KiB: {:.2} GiB/s; 8-byte WRITE: median {:.2} \
         us, p99 {:.2} us",
        gib(bps),
        percentile(&lat, 0.5) / 1000.0,
        percentile(&lat, 0.99) / 1000.0,
    );
    drop(xrc);
    drop(devices);

    wire_rows(secs);

    println!();
    println!("aggregate RDMA WRITE 64 KiB, one driver thread per device pair:");
    for pairs in [1, 4] {
        let bps = aggregate_bandwidth(pairs, 64 << 10, secs);
        println!("  {pairs} pair(s): {:.2} GiB/s", gib(bps));
    }
}

/// The RC rows over the RoCEv2 wire at path MTU 1024 and 4096.
fn wire_rows(secs: f64) {
    println!();
    println!(
        "RC over the RoCEv2 wire (two hosts in this process, a clean cable between their \
         switches; the in-process figures above are the same QP without packets):"
    );
    for (mtu, name) in [
        (vrnic_hw::Mtu::Size1024, 1024),
        (vrnic_hw::Mtu::Size4096, 4096),
    ] {
        let (mut wire, keep) = setup_wire(mtu);
        let mut row = format!("  path MTU {name}: WRITE");
        for size in [4u64 << 10, 64 << 10, 1 << 20] {
            let (bps, _) = write_bandwidth(&mut wire, size, secs);
            row += &format!(" {} KiB {:.3} GiB/s,", size >> 10, gib(bps));
        }
        let got = wire.b.mr_read(&wire.dst, BUF - 64, 64);
        assert!(
            got.iter().all(|b| *b == 0x5a),
            "WRITE data did not cross the wire"
        );
        let lat = write_latency(&mut wire, secs);
        println!(
            "{row} 8-byte WRITE median {:.2} us, p99 {:.2} us",
            percentile(&lat, 0.5) / 1000.0,
            percentile(&lat, 0.99) / 1000.0,
        );
        drop(wire);
        drop(keep);
    }
}
