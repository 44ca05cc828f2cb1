//! `vrnic serve` as a process: argument errors, serving several sockets, a clean stop on
//! SIGTERM and SIGINT that removes the sockets, and its open-file limit: raised at start,
//! and shared fairly enough that a client flooding one device with DMA maps is refused
//! while another device keeps serving.

mod harness;

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::memory::{memfd, PAGE};
use harness::vfio::{VfioClient, DMA_READ, DMA_WRITE, REGION_CONFIG};

fn vrnic() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vrnic"))
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vrnic-serve-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn serve_two(dir: &Path) -> (Child, [PathBuf; 2]) {
    serve_two_with_fd_limit(dir, None)
}

/// `vrnic serve` with two devices, started with RLIMIT_NOFILE (soft, hard) if given.
fn serve_two_with_fd_limit(dir: &Path, limit: Option<(u64, u64)>) -> (Child, [PathBuf; 2]) {
    let sockets = [dir.join("a.sock"), dir.join("b.sock")];
    let mut command = vrnic();
    if let Some((soft, hard)) = limit {
        let rl = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        let set_limit = move || {
            // SAFETY: setrlimit reads one valid rlimit; it is async-signal-safe.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // setrlimit, which allocates nothing and takes no lock.
        unsafe { command.pre_exec(set_limit) };
    }
    let child = command
        .arg("serve")
        .arg("--device")
        .arg(format!("a,socket={},lid=1", sockets[0].display()))
        .arg("--device")
        .arg(format!("b,socket={},lid=2", sockets[1].display()))
        .stderr(Stdio::null())
        .spawn()
        .expect("start vrnic");
    wait_until("both sockets", || sockets.iter().all(|s| s.exists()));
    (child, sockets)
}

/// A `vrnic serve` child that is killed, not leaked, if a test fails before `stop`.
struct Serving(Option<Child>);

impl Serving {
    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// Stops it with SIGTERM; asserts it was still running and exits cleanly.
    fn stop(mut self) {
        let mut child = self.0.take().expect("running");
        assert!(
            child.try_wait().unwrap().is_none(),
            "vrnic died: {:?}",
            child.try_wait()
        );
        // SAFETY: kill() with the pid of our own child and a valid signal number.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let mut status = None;
        wait_until("vrnic to exit", || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        assert!(status.unwrap().success(), "exit status {status:?}");
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn stops_cleanly_on(signal: i32, tag: &str) {
    let dir = temp_dir(tag);
    let (mut child, sockets) = serve_two(&dir);

    // SAFETY: kill() with the pid of our own child and a valid signal number.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let mut status = None;
    wait_until("vrnic to exit", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });

    assert!(status.unwrap().success(), "exit status {status:?}");
    assert!(sockets.iter().all(|s| !s.exists()), "sockets removed");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sigterm_stops_serving_and_removes_every_socket() {
    stops_cleanly_on(libc::SIGTERM, "term");
}

#[test]
fn sigint_stops_serving_and_removes_every_socket() {
    stops_cleanly_on(libc::SIGINT, "int");
}

#[test]
fn bad_arguments_exit_2_with_a_message() {
    for args in [
        vec!["serve"],
        vec!["serve", "--device", "a,socket=/tmp/x"],
        vec!["serve", "--device", "a,socket=/tmp/x,lid=70000"],
        vec!["bogus"],
        vec!["serve", "--config", "/nonexistent/vrnic.toml"],
    ] {
        let out = vrnic().args(&args).output().expect("run vrnic");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("vrnic: "), "{args:?}: {stderr}");
    }
}

#[test]
fn duplicate_lids_are_refused_before_serving() {
    let dir = temp_dir("dup");
    let out = vrnic()
        .arg("serve")
        .arg("--device")
        .arg(format!("a,socket={},lid=5", dir.join("a.sock").display()))
        .arg("--device")
        .arg(format!("b,socket={},lid=5", dir.join("b.sock").display()))
        .output()
        .expect("run vrnic");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("LID 5"), "{stderr}");
    assert!(!dir.join("a.sock").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_roce_device_serves_next_to_an_ib_device() {
    let dir = temp_dir("roce");
    let sockets = [dir.join("ib.sock"), dir.join("eth.sock")];
    let child = vrnic()
        .arg("serve")
        .arg("--device")
        .arg(format!("ib,socket={},lid=1", sockets[0].display()))
        .arg("--device")
        .arg(format!(
            "eth,socket={},link=eth,mac=52:54:00:12:34:56",
            sockets[1].display()
        ))
        .stderr(Stdio::null())
        .spawn()
        .expect("start vrnic");
    let serving = Serving(Some(child));

    wait_until("both sockets", || sockets.iter().all(|s| s.exists()));

    serving.stop();
    assert!(sockets.iter().all(|s| !s.exists()), "sockets removed");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_or_duplicate_macs_are_refused_with_the_reason() {
    let dir = temp_dir("mac");
    let dev = |name: &str, mac: &str| {
        format!(
            "{name},socket={},link=eth,mac={mac}",
            dir.join(format!("{name}.sock")).display()
        )
    };
    let cases = [
        (vec![dev("a", "01:00:5e:00:00:01")], "multicast"),
        (vec![dev("a", "00:00:00:00:00:00")], "zero"),
        (vec![dev("a", "52:54:00:12:34")], "not a MAC"),
        (
            vec![dev("a", "52:54:00:12:34:56"), dev("b", "52:54:00:12:34:56")],
            "both use MAC 52:54:00:12:34:56",
        ),
    ];
    for (devices, want) in cases {
        let mut cmd = vrnic();
        cmd.arg("serve");
        for d in &devices {
            cmd.arg("--device").arg(d);
        }
        let out = cmd.output().expect("run vrnic");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{devices:?}: {stderr}");
        assert!(stderr.contains(want), "{devices:?}: {stderr}");
    }
    assert!(!dir.join("a.sock").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_describes_serve() {
    let out = vrnic().arg("--help").output().expect("run vrnic");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vrnic serve --device NAME,socket=PATH,lid=N"),
        "{text}"
    );
    assert!(
        text.contains("--device NAME,socket=PATH,link=eth,mac=MAC"),
        "{text}"
    );
}

#[test]
fn serve_raises_the_soft_open_file_limit_to_the_hard_limit() {
    let dir = temp_dir("nofile");
    let (child, _sockets) = serve_two_with_fd_limit(&dir, Some((256, 1024)));
    let child = Serving(Some(child));

    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();

    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers, ["1024", "1024"], "{line}");
    child.stop();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_client_flooding_dma_maps_is_refused_and_the_other_device_still_serves() {
    let dir = temp_dir("flood");
    let fd_limit = 256;
    let (child, sockets) = serve_two_with_fd_limit(&dir, Some((fd_limit, fd_limit)));
    let child = Serving(Some(child));
    let ram = memfd(c"vrnic-flood", PAGE);
    let map = |client: &mut VfioClient, i: u64| {
        client.dma_map(
            i * PAGE,
            PAGE,
            0,
            DMA_READ | DMA_WRITE,
            Some(ram.as_raw_fd()),
        )
    };
    let mut attacker = VfioClient::connect(&sockets[0]);
    attacker.version();

    let mut maps = 0;
    let refused = loop {
        match map(&mut attacker, maps) {
            Ok(()) => maps += 1,
            Err(errno) => break errno,
        }
        assert!(maps < fd_limit, "{maps} maps accepted with {fd_limit} fds");
    };

    assert_eq!(refused, libc::EAGAIN, "refused after {maps} maps");
    let mut innocent = VfioClient::connect(&sockets[1]);
    innocent.version();
    assert_eq!(innocent.device_info().num_irqs, 3);
    let id = innocent
        .region_read(REGION_CONFIG, 0, 4)
        .expect("config space read");
    assert_eq!(
        u32::from_le_bytes(id.try_into().unwrap()),
        vrnic_hw::PCI_DEVICE_ID << 16 | vrnic_hw::PCI_VENDOR_ID
    );
    drop(attacker);
    wait_until("the attacker's maps to return to the budget", || {
        map(&mut innocent, 0).is_ok()
    });
    child.stop();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_uplink_on_a_missing_interface_stops_the_start_and_names_it() {
    let dir = temp_dir("uplink");
    let out = vrnic()
        .arg("serve")
        .arg("--device")
        .arg(format!("a,socket={},lid=5", dir.join("a.sock").display()))
        .args(["--uplink", "name=up0,dev=vrnnosuch0"])
        .output()
        .expect("run vrnic");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("uplink interface vrnnosuch0: no such interface"),
        "{stderr}"
    );
    assert!(
        !dir.join("a.sock").exists(),
        "the failed start removed its socket"
    );
    let out = vrnic()
        .args(["serve", "--device", "a,socket=/tmp/x,lid=1"])
        .args(["--uplink", "name=up0,tap=t0,impair=loss every=0"])
        .output()
        .expect("run vrnic");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--uplink name=up0,tap=t0,impair=loss every=0: impair: rule 1 (`loss every=0`): every=`0` is not a number in 1..1000000000"),
        "{stderr}"
    );
    let text = vrnic().arg("--help").output().expect("run vrnic").stdout;
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.contains("--uplink name=NAME,tap=IFNAME|dev=IFNAME"),
        "{text}"
    );
    assert!(text.contains("Uplink impairment"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}
