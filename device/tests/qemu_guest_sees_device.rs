//! Boots a real QEMU guest (TCG) attached to a `vrnic serve` device and checks, from inside
//! the guest, that it sees the PCI device the hw-spec describes.
//!
//! Needs QEMU with vfio-user-pci and the guest image (`qemu-config/provision.sh`). Under
//! CI=true a missing piece is a failure; elsewhere the test is skipped with a message when
//! provisioning fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Provisions (cached after the first run). Returns false if the test must be skipped.
fn provisioned() -> bool {
    let ok = Command::new("bash")
        .arg(repo().join("qemu-config/provision.sh"))
        .args(["qemu", "kernel", "guest"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: QEMU and the guest image must be provisioned"
        );
        eprintln!("SKIPPED: qemu-config/provision.sh failed, so no guest can boot here");
    }
    ok
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
    if !provisioned() {
        return;
    }
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
