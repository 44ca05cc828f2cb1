//! Boots a real QEMU guest (TCG) attached to a `vrnic serve` device and checks, from inside
//! the guest, that it sees the PCI device the hw-spec describes.
//!
//! Needs QEMU with vfio-user-pci and the guest image. The test provisions them itself
//! (`qemu-config/provision.sh qemu kernel guest`: as root, cached after the first run; `make
//! test` has provisioned before cargo test runs). When provisioning fails the test fails and
//! says how to provision. Setting `VRNIC_SKIP_QEMU_TESTS=1` opts out: the test then checks
//! nothing and says on stderr that it did not run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The opt-out: set (to anything but empty or 0), the test does not run.
const OPT_OUT: &str = "VRNIC_SKIP_QEMU_TESTS";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// True, after saying so, when the opt-out is set. Written to the real stderr, not through
/// the test harness's capture, so that the notice shows although the test reports "ok".
fn opted_out(test: &str) -> bool {
    let set = std::env::var_os(OPT_OUT).is_some_and(|v| !v.is_empty() && v != "0");
    if set {
        let _ = writeln!(
            std::io::stderr(),
            "NOT RUN: {test}: {OPT_OUT} is set, so no guest was booted and nothing was checked"
        );
    }
    set
}

/// Provisions QEMU, the guest kernel and the guest image (cached after the first run), or
/// fails the test saying how to provision.
fn provision() {
    let script = repo().join("qemu-config/provision.sh");
    let status = Command::new("bash")
        .arg(&script)
        .args(["qemu", "kernel", "guest"])
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => panic!(
            "no QEMU guest can boot here: `{} qemu kernel guest` failed ({other:?}). \
             Provision as root with `make provision` (network access needed once; cached in \
             /var/cache/vrnic), or set {OPT_OUT}=1 to skip this test (it then checks nothing).",
            script.display()
        ),
    }
}

struct Device(Child);

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_device(socket: &Path) -> Device {
    let child = Command::new(env!("CARGO_BIN_EXE_vrnic"))
        .arg("serve")
        .arg("--device")
        .arg(format!(
            "guest0,socket={},lid=7,subsystem=0x00aa",
            socket.display()
        ))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start vrnic");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "vrnic did not create {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Device(child)
}

const JOB: &str = r#"#!/bin/sh
for d in /sys/bus/pci/devices/*; do
  [ "$(cat $d/vendor)" = 0x1234 ] || continue
  echo "ids $(cat $d/vendor) $(cat $d/device) $(cat $d/subsystem_vendor) $(cat $d/subsystem_device) $(cat $d/class)"
  i=0
  while read start end flags; do
    [ "$start" != 0x0000000000000000 ] && echo "bar $i $(( end - start + 1 )) $flags"
    i=$((i + 1))
  done < $d/resource
  lspci -vv -s "${d##*/}" | grep -E 'MSI-X|Express'
done
"#;

#[test]
fn guest_sees_pci_ids_class_bars_and_msix() {
    if opted_out("guest_sees_pci_ids_class_bars_and_msix") {
        return;
    }
    provision();
    let dir = std::env::temp_dir().join(format!("vrnic-qemu-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("guest0.sock");
    let job = dir.join("job.sh");
    std::fs::write(&job, JOB).unwrap();
    let _device = start_device(&socket);
    let out = Command::new("bash")
        .arg(repo().join("qemu-config/run-job.sh"))
        .arg(&job)
        .arg("--vrnic-socket")
        .arg(&socket)
        .args(["--timeout", "300", "--mem", "1G"])
        .output()
        .expect("run the guest");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "guest job failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // vendor, device, subsystem vendor, subsystem (overridden on the command line), class
    assert!(
        text.contains("ids 0x1234 0x7652 0x1234 0x00aa 0x020700"),
        "IDs/class wrong:\n{text}"
    );
    for (bar, size) in [
        (0, vrnic_hw::BAR_CTRL_SIZE),
        (2, vrnic_hw::BAR_DB_SIZE),
        (4, vrnic_hw::BAR_KICK_SIZE),
    ] {
        let line = format!("bar {bar} {size} ");
        assert!(
            text.contains(&line),
            "BAR{bar} should be {size} bytes:\n{text}"
        );
    }
    let msix = format!("MSI-X: Enable- Count={}", vrnic_hw::MSIX_VECTORS);
    assert!(text.contains(&msix), "MSI-X capability missing:\n{text}");
    assert!(
        text.contains("Express (v2)"),
        "PCIe capability missing:\n{text}"
    );
}
