//! The vhost-user-net ports and their switch driven over their sockets, without QEMU: a
//! test frontend (rust-vmm's vhost `Frontend`) plays each VMM, with memfd guest RAM and
//! split virtqueues it lays out itself, as a guest's virtio-net driver would.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vhost::vhost_user::message::VhostUserVirtioFeatures;
use vhost::vhost_user::Frontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vrnic::addr::Mac;
use vrnic::net::service::{NetPortConfig, NetPortStats, NetService};
use vrnic::net::switch::Switch;

const MEM: usize = 4 << 20;
const QSIZE: u16 = 16;
const USER_BASE: u64 = 0x7f00_0000_0000;
const VERSION_1: u64 = 1 << 32;
const MRG_RXBUF: u64 = 1 << 15;
const WRITE: u16 = 2;
const NEXT: u16 = 1;
const HDR: usize = 12;
const MAC_A: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xb];

/// One split virtqueue in the test guest's memory.
struct Ring {
    desc: u64,
    avail: u64,
    used: u64,
    next_desc: u16,
    avail_idx: u16,
    used_seen: u16,
}

impl Ring {
    fn new(base: u64) -> Ring {
        Ring {
            desc: base,
            avail: base + 0x1000,
            used: base + 0x2000,
            next_desc: 0,
            avail_idx: 0,
            used_seen: 0,
        }
    }
}

/// A guest with its VMM's vhost-user connection to one port.
struct Guest {
    fe: Frontend,
    mem: GuestMemoryMmap,
    kick: [EventFd; 2],
    _call: [EventFd; 2],
    rings: [Ring; 2],
    _file: File,
}

const RX: usize = 0;
const TX: usize = 1;

impl Guest {
    fn connect(path: &PathBuf) -> Guest {
        Guest::connect_with(path, vrnic::memfd::create(c"guest", MEM as u64).unwrap())
    }

    fn connect_with(path: &PathBuf, file: File) -> Guest {
        let mem = GuestMemoryMmap::from_ranges_with_files([(
            GuestAddress(0),
            MEM,
            Some(FileOffset::new(file.try_clone().unwrap(), 0)),
        )])
        .unwrap();
        let fe = Frontend::connect(path, 2).unwrap();
        fe.set_owner().unwrap();
        let offered = fe.get_features().unwrap();
        assert_eq!(offered & (VERSION_1 | MRG_RXBUF), VERSION_1 | MRG_RXBUF);
        // QEMU's virtio-net sends SET_VRING_ENABLE before SET_FEATURES, which the vhost
        // crate refuses when PROTOCOL_FEATURES is offered: so it is not.
        let protocol = VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
        assert_eq!(offered & protocol, 0);
        // The rings start enabled once the features are set (no SET_VRING_ENABLE).
        fe.set_features(VERSION_1 | MRG_RXBUF).unwrap();
        fe.set_mem_table(&[VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: MEM as u64,
            userspace_addr: USER_BASE,
            mmap_offset: 0,
            mmap_handle: file.as_raw_fd(),
        }])
        .unwrap();
        let kick = [
            EventFd::new(EFD_NONBLOCK).unwrap(),
            EventFd::new(EFD_NONBLOCK).unwrap(),
        ];
        let call = [
            EventFd::new(EFD_NONBLOCK).unwrap(),
            EventFd::new(EFD_NONBLOCK).unwrap(),
        ];
        let rings = [Ring::new(0x10000), Ring::new(0x20000)];
        Guest::start_rings(&fe, &rings, &kick, &call);
        // A request with a reply: the backend has handled everything before it.
        fe.get_features().unwrap();
        Guest {
            fe,
            mem,
            kick,
            _call: call,
            rings,
            _file: file,
        }
    }

    fn start_rings(fe: &Frontend, rings: &[Ring; 2], kick: &[EventFd; 2], call: &[EventFd; 2]) {
        for q in 0..2 {
            fe.set_vring_num(q, QSIZE).unwrap();
            fe.set_vring_addr(
                q,
                &VringConfigData {
                    queue_max_size: QSIZE,
                    queue_size: QSIZE,
                    flags: 0,
                    desc_table_addr: USER_BASE + rings[q].desc,
                    used_ring_addr: USER_BASE + rings[q].used,
                    avail_ring_addr: USER_BASE + rings[q].avail,
                    log_addr: None,
                },
            )
            .unwrap();
            fe.set_vring_base(q, 0).unwrap();
            fe.set_vring_call(q, &call[q]).unwrap();
            fe.set_vring_kick(q, &kick[q]).unwrap();
        }
    }

    /// What QEMU does when the guest resets its virtio-net device (a reboot, a driver
    /// reload): both rings stopped (GET_VRING_BASE), then set up afresh, empty.
    fn reset_rings(&mut self) {
        for q in 0..2 {
            self.fe.get_vring_base(q).unwrap();
        }
        self.mem
            .write_slice(&[0u8; 0x20000], GuestAddress(0x10000))
            .unwrap();
        self.rings = [Ring::new(0x10000), Ring::new(0x20000)];
        self.fe.set_features(VERSION_1 | MRG_RXBUF).unwrap();
        Guest::start_rings(&self.fe, &self.rings, &self.kick, &self._call);
        self.fe.get_features().unwrap();
    }

    /// Makes one chain of `pieces` (address, length, flags) available on queue `q`, kicks.
    fn post(&mut self, q: usize, pieces: &[(u64, u32, u16)]) {
        let r = &mut self.rings[q];
        let head = r.next_desc;
        for (i, &(addr, len, flags)) in pieces.iter().enumerate() {
            let at = r.desc + 16 * u64::from(r.next_desc);
            let last = i + 1 == pieces.len();
            let next = (r.next_desc + 1) % QSIZE;
            self.mem.write_obj(addr, GuestAddress(at)).unwrap();
            self.mem.write_obj(len, GuestAddress(at + 8)).unwrap();
            let f = if last { flags } else { flags | NEXT };
            self.mem.write_obj(f, GuestAddress(at + 12)).unwrap();
            self.mem.write_obj(next, GuestAddress(at + 14)).unwrap();
            r.next_desc = next;
        }
        let slot = r.avail + 4 + 2 * u64::from(r.avail_idx % QSIZE);
        self.mem.write_obj(head, GuestAddress(slot)).unwrap();
        r.avail_idx = r.avail_idx.wrapping_add(1);
        self.mem
            .write_obj(r.avail_idx, GuestAddress(r.avail + 2))
            .unwrap();
        self.kick[q].write(1).unwrap();
    }

    /// Sends `frame` (behind a zero header) from the buffer at 0x100000.
    fn send(&mut self, frame: &[u8]) {
        let at = 0x10_0000 + 0x4000 * u64::from(self.rings[TX].avail_idx % QSIZE);
        self.mem.write_slice(&[0u8; HDR], GuestAddress(at)).unwrap();
        self.mem
            .write_slice(frame, GuestAddress(at + HDR as u64))
            .unwrap();
        self.post(TX, &[(at, (HDR + frame.len()) as u32, 0)]);
    }

    /// Posts `n` receive buffers of 2 KiB.
    fn post_rx(&mut self, n: u16) {
        for _ in 0..n {
            let at = 0x20_0000 + 0x1000 * u64::from(self.rings[RX].avail_idx % QSIZE);
            self.post(RX, &[(at, 2048, WRITE)]);
        }
    }

    fn used_idx(&self, q: usize) -> u16 {
        self.mem
            .read_obj::<u16>(GuestAddress(self.rings[q].used + 2))
            .unwrap()
    }

    /// Waits until queue `q` has used `n` more chains than last seen; their (id, len).
    fn wait_used(&mut self, q: usize, n: u16) -> Vec<(u32, u32)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let want = self.rings[q].used_seen.wrapping_add(n);
        while self.used_idx(q) != want {
            assert!(
                Instant::now() < deadline,
                "queue {q}: {} used, want {want}",
                self.used_idx(q)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let r = &mut self.rings[q];
        let out = (0..n)
            .map(|i| {
                let e = r.used + 4 + 8 * u64::from(r.used_seen.wrapping_add(i) % QSIZE);
                let id = self.mem.read_obj::<u32>(GuestAddress(e)).unwrap();
                let len = self.mem.read_obj::<u32>(GuestAddress(e + 4)).unwrap();
                (id, len)
            })
            .collect();
        r.used_seen = want;
        out
    }

    /// The frames in the receive buffers the device used, in order.
    fn received(&mut self, n: u16) -> Vec<Vec<u8>> {
        self.wait_used(RX, n)
            .into_iter()
            .map(|(id, len)| {
                let at = 0x20_0000 + 0x1000 * u64::from(id);
                let mut buf = vec![0u8; len as usize];
                self.mem.read_slice(&mut buf, GuestAddress(at)).unwrap();
                assert_eq!(&buf[10..12], &1u16.to_le_bytes(), "num_buffers");
                buf.split_off(HDR)
            })
            .collect()
    }
}

fn frame(dst: [u8; 6], src: [u8; 6], fill: u8, len: usize) -> Vec<u8> {
    let mut f = [dst, src].concat();
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend((14..len).map(|i| fill ^ i as u8));
    f
}

struct Net {
    service: NetService,
    stop: Arc<EventFd>,
    dir: PathBuf,
}

impl Net {
    fn start(tag: &str) -> Net {
        let dir = std::env::temp_dir().join(format!("vrnic-vhost-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ports = [("a", MAC_A), ("b", MAC_B)].map(|(n, mac)| NetPortConfig {
            name: n.into(),
            socket: dir.join(format!("{n}.sock")),
            mac: Mac(mac),
            rnic: None,
        });
        let stop = Arc::new(EventFd::new(EFD_NONBLOCK).unwrap());
        let service = NetService::start(&ports, Switch::new(), stop.clone()).unwrap();
        Net { service, stop, dir }
    }

    fn sock(&self, n: &str) -> PathBuf {
        self.dir.join(format!("{n}.sock"))
    }

    fn stats(&self, n: &str) -> NetPortStats {
        self.service
            .stats()
            .into_iter()
            .find(|s| s.name == n)
            .unwrap()
    }

    fn wait_for(&self, what: &str, cond: impl Fn(&Net) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.stop.write(1).unwrap();
        self.service.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn frames_cross_between_two_guests_byte_exact_unicast_and_broadcast() {
    let net = Net::start("cross");
    let mut a = Guest::connect(&net.sock("a"));
    let mut b = Guest::connect(&net.sock("b"));
    b.post_rx(4);
    a.post_rx(4);
    net.wait_for("both connected", |n| {
        n.stats("a").connections == 1 && n.stats("b").connections == 1
    });
    let to_b = frame(MAC_B, MAC_A, 0x5a, 1514);
    a.send(&to_b);
    assert_eq!(a.wait_used(TX, 1).len(), 1);
    assert_eq!(b.received(1), vec![to_b]);
    let bcast = frame([0xff; 6], MAC_B, 0x33, 60);
    b.send(&bcast);
    assert_eq!(a.received(1), vec![bcast]);
    let (sa, sb) = (net.stats("a"), net.stats("b"));
    assert_eq!(
        (sa.tx_frames, sa.rx_frames, sb.tx_frames, sb.rx_frames),
        (1, 1, 1, 1)
    );
    assert_eq!((sa.switch.rx_bytes, sb.switch.tx_bytes), (1514, 1514));
}

#[test]
fn hostile_transmit_chains_are_dropped_and_counted_and_the_port_goes_on() {
    let net = Net::start("hostile");
    let mut a = Guest::connect(&net.sock("a"));
    let mut b = Guest::connect(&net.sock("b"));
    b.post_rx(4);
    a.post(TX, &[(0x7000_0000, 100, 0)]); // outside guest memory
    a.post(TX, &[(0x10_0000, 100, WRITE)]); // device-writable in a transmit chain
    a.post(TX, &[(0x10_0000, 8, 0)]); // shorter than a header
    a.post(TX, &[(0x10_0000, 0x10_0000, 0)]); // 1 MiB: beyond any frame
    assert_eq!(a.wait_used(TX, 4).len(), 4, "every chain is returned");
    let good = frame(MAC_B, MAC_A, 1, 200);
    a.send(&good);
    a.wait_used(TX, 1);
    assert_eq!(b.received(1), vec![good]);
    let s = net.stats("a");
    assert_eq!((s.tx_errors, s.tx_frames), (4, 1));
}

#[test]
fn the_port_listens_again_after_its_peer_goes() {
    let net = Net::start("again");
    let mut b = Guest::connect(&net.sock("b"));
    b.post_rx(4);
    let a = Guest::connect(&net.sock("a"));
    drop(a);
    let mut a = Guest::connect(&net.sock("a"));
    let f = frame(MAC_B, MAC_A, 9, 100);
    a.send(&f);
    assert_eq!(b.received(1), vec![f]);
    net.wait_for("two connections", |n| n.stats("a").connections == 2);
    let _ = a.fe.reset_owner();
}

#[test]
fn frames_for_a_guest_without_buffers_are_dropped_never_waited_for() {
    let net = Net::start("full");
    let mut a = Guest::connect(&net.sock("a"));
    let mut b = Guest::connect(&net.sock("b"));
    net.wait_for("b connected", |n| n.stats("b").connections == 1);
    let total = 300u16;
    for i in 0..total {
        a.send(&frame(MAC_B, MAC_A, i as u8, 64));
        if i % QSIZE == QSIZE - 1 {
            a.wait_used(TX, QSIZE);
        }
    }
    a.wait_used(TX, total % QSIZE);
    let backlog = vrnic::net::vhost::BACKLOG as u64;
    net.wait_for("the drops", |n| {
        n.stats("b").rx_dropped == u64::from(total) - backlog
    });
    // Buffers posted now get the oldest frames waiting.
    b.post_rx(QSIZE);
    let got = b.received(QSIZE);
    let want: Vec<_> = (0..QSIZE)
        .map(|i| frame(MAC_B, MAC_A, i as u8, 64))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn guest_memory_that_could_shrink_is_refused_and_the_peer_disconnected() {
    let net = Net::start("unsealed");
    let file = vrnic::memfd::create_sealed(c"guest", MEM as u64, vrnic::memfd::Sealing::Unsealable)
        .unwrap();
    let fe = Frontend::connect(net.sock("a"), 2).unwrap();
    fe.set_owner().unwrap();
    fe.set_features(VERSION_1).unwrap();
    let _ = fe.set_mem_table(&[VhostUserMemoryRegionInfo {
        guest_phys_addr: 0,
        memory_size: MEM as u64,
        userspace_addr: USER_BASE,
        mmap_offset: 0,
        mmap_handle: file.as_raw_fd(),
    }]);
    assert!(fe.get_features().is_err(), "the connection is closed");
    // and the port serves the next peer
    let mut a = Guest::connect(&net.sock("a"));
    let mut b = Guest::connect(&net.sock("b"));
    b.post_rx(1);
    let f = frame(MAC_B, MAC_A, 3, 80);
    a.send(&f);
    assert_eq!(b.received(1), vec![f]);
}

#[test]
fn a_guest_driver_reset_drops_the_buffers_of_the_old_rings_and_the_port_goes_on() {
    let net = Net::start("reset");
    let mut a = Guest::connect(&net.sock("a"));
    let mut b = Guest::connect(&net.sock("b"));
    // One 1 KiB buffer: a 1514-byte frame needs two, so the device holds this one.
    b.post(RX, &[(0x20_0000, 1024, WRITE)]);
    a.send(&frame(MAC_B, MAC_A, 7, 1514));
    a.wait_used(TX, 1);
    net.wait_for("the frame at b's port", |n| {
        n.stats("b").switch.tx_frames == 1
    });
    b.reset_rings();
    assert_eq!(b.used_idx(RX), 0, "nothing was written into the old ring");
    b.post_rx(2);
    let f = frame(MAC_B, MAC_A, 8, 100);
    a.send(&f);
    a.wait_used(TX, 1);
    // The frame that waited is either in the new ring, whole, before the next one, or,
    // if b's worker looked at it while the ring was stopped, dropped and counted
    // `rx_not_ready` (which of the two is a race between the worker's wake-up and the
    // reset: both are what a NIC may do with a frame that arrives during a reset).
    net.wait_for("both frames accounted for", |n| {
        let s = n.stats("b");
        s.rx_frames + s.rx_not_ready == 2
    });
    let s = net.stats("b");
    let got = b.received(s.rx_frames as u16);
    match s.rx_not_ready {
        0 => assert_eq!(got, vec![frame(MAC_B, MAC_A, 7, 1514), f]),
        _ => assert_eq!(got, vec![f]),
    }
}

#[test]
fn vrnic_serve_serves_a_devices_interface_and_a_plain_one_and_removes_their_sockets() {
    let dir = std::env::temp_dir().join(format!("vrnic-vhost-proc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (dev, na, nb) = (dir.join("r.sock"), dir.join("a.net"), dir.join("b.net"));
    let serve = |dev: &PathBuf| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vrnic"))
            .arg("serve")
            .arg("--device")
            .arg(format!(
                "r,socket={},link=eth,mac=52:54:00:00:00:0a,net={}",
                dev.display(),
                na.display()
            ))
            .arg("--net")
            .arg(format!(
                "name=b,socket={},mac=52:54:00:00:00:0b",
                nb.display()
            ))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut child = serve(&dev);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(dev.exists() && na.exists() && nb.exists()) {
        assert!(Instant::now() < deadline, "the sockets never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut a = Guest::connect(&na);
    let mut b = Guest::connect(&nb);
    b.post_rx(1);
    let f = frame(MAC_B, MAC_A, 4, 300);
    a.send(&f);
    assert_eq!(b.received(1), vec![f]);
    // A second server (its own device socket) on the same net sockets is refused, and
    // leaves them alone.
    let second = serve(&dir.join("r2.sock")).wait_with_output().unwrap();
    let why = String::from_utf8_lossy(&second.stderr);
    let want = format!(
        "net port r: {}: another server is listening there",
        na.display()
    );
    assert!(!second.status.success() && why.contains(&want), "{why}");
    assert!(na.exists() && nb.exists());
    drop((a, b));
    // SAFETY: kill sends a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    assert!(!na.exists() && !nb.exists() && !dev.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
