//! `vrnic serve` as a process: argument errors, serving several sockets, and a clean stop on
//! SIGTERM and SIGINT that removes the sockets.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    let sockets = [dir.join("a.sock"), dir.join("b.sock")];
    let child = vrnic()
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
fn help_describes_serve() {
    let out = vrnic().arg("--help").output().expect("run vrnic");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vrnic serve --device NAME,socket=PATH,lid=N"),
        "{text}"
    );
}
