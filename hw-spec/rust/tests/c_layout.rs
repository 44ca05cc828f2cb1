//! Compiles a C program against the generated headers and checks that the C compiler sees
//! exactly the sizes, offsets and values the Rust side has: any drift between the two fails.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn c_view() -> BTreeMap<String, u64> {
    let hw_spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::temp_dir().join(format!("vrnic-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = dir.join("probe");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(hw_spec.join("include"))
        .arg(hw_spec.join("rust/tests/layout_probe.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "C build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the probe");
    assert!(run.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(run.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| {
            let (name, value) = line.split_once(' ').expect("name value");
            (name.to_string(), value.parse().expect("number"))
        })
        .collect()
}

#[test]
fn c_headers_match_rust_layout_and_values() {
    let c = c_view();
    let mut rust: BTreeMap<String, u64> = BTreeMap::new();
    for (name, value) in vrnic_hw::LAYOUT {
        rust.insert(name.to_string(), *value as u64);
    }
    for (name, value) in vrnic_hw::VALUES {
        rust.insert(name.to_string(), *value);
    }
    let mismatches: Vec<String> = rust
        .iter()
        .filter(|(k, v)| c.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: rust {v}, C {:?}", c.get(k)))
        .chain(
            c.keys()
                .filter(|k| !rust.contains_key(*k))
                .map(|k| format!("{k}: only in C")),
        )
        .collect();
    assert!(
        mismatches.is_empty(),
        "C and Rust disagree:\n{}",
        mismatches.join("\n")
    );
    assert!(
        rust.len() > 300,
        "the probe covers the whole interface ({} entries)",
        rust.len()
    );
}

#[test]
fn enums_convert_checked_both_ways() {
    use vrnic_hw::{QpState, WcStatus};
    for state in QpState::ALL {
        assert_eq!(QpState::try_from(u8::from(*state)), Ok(*state));
    }
    assert_eq!(QpState::try_from(7), Err(7));
    assert_eq!(WcStatus::try_from(21), Ok(WcStatus::GeneralErr));
    assert_eq!(WcStatus::try_from(22), Err(22));
}

#[test]
fn nonzero_reserved_reports_field_and_offset() {
    let mut cmd = vrnic_hw::CmdRegMr::default();
    assert_eq!(cmd.nonzero_reserved(), None);
    cmd.pages.reserved0 = 1.into();
    assert_eq!(
        cmd.nonzero_reserved(),
        Some((
            "reserved0",
            vrnic_hw::CmdRegMr::PAGES_OFF + vrnic_hw::PageList::RESERVED0_OFF
        ))
    );
}
