//! Compiles a C program against the generated headers and checks that the C compiler sees
//! exactly the sizes, offsets and values the Rust side has: any drift between the two fails.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the C probe prints: numbers (`name value`) and enum value names
/// (`name.<enum>.<value> NAME`).
struct CView {
    values: BTreeMap<String, u64>,
    names: BTreeMap<String, String>,
}

fn c_view() -> CView {
    let hw_spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Tests run in parallel threads of one process: one directory per call.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vrnic-layout-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
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
    let mut view = CView {
        values: BTreeMap::new(),
        names: BTreeMap::new(),
    };
    for line in String::from_utf8(run.stdout).expect("utf-8").lines() {
        let (name, value) = line.split_once(' ').expect("name value");
        if name.starts_with("name.") {
            view.names.insert(name.to_string(), value.to_string());
        } else {
            view.values
                .insert(name.to_string(), value.parse().expect("number"));
        }
    }
    view
}

/// Every difference between two maps, as lines.
fn differences<V: PartialEq + std::fmt::Debug>(
    rust: &BTreeMap<String, V>,
    c: &BTreeMap<String, V>,
) -> Vec<String> {
    rust.iter()
        .filter(|(k, v)| c.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: rust {v:?}, C {:?}", c.get(k)))
        .chain(
            c.keys()
                .filter(|k| !rust.contains_key(*k))
                .map(|k| format!("{k}: only in C")),
        )
        .collect()
}

#[test]
fn c_headers_match_rust_layout_and_values() {
    let c = c_view().values;
    let mut rust: BTreeMap<String, u64> = BTreeMap::new();
    for (name, value) in vrnic_hw::LAYOUT {
        rust.insert(name.to_string(), *value as u64);
    }
    for (name, value) in vrnic_hw::VALUES {
        rust.insert(name.to_string(), *value);
    }
    let mismatches = differences(&rust, &c);
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

#[test]
fn c_name_lookups_match_rust_names_and_say_unknown_outside_the_enum() {
    let c = c_view().names;
    let rust: BTreeMap<String, String> = vrnic_hw::NAMES
        .iter()
        .map(|(e, value, name)| (format!("name.{e}.{value}"), name.to_string()))
        .collect();
    let mismatches = differences(&rust, &c);
    assert!(
        mismatches.is_empty(),
        "C and Rust names disagree:\n{}",
        mismatches.join("\n")
    );
    assert_eq!(
        c.get("name.aq_opcode.14").map(String::as_str),
        Some("MODIFY_QP")
    );
    assert_eq!(
        c.get("name.aq_status.12").map(String::as_str),
        Some("UNKNOWN")
    );
    assert_eq!(vrnic_hw::AqStatus::BadField.name(), "BAD_FIELD");
}

#[test]
fn flag_modules_hold_every_bit_and_their_union() {
    use vrnic_hw::{qp_attr_mask, QpAttrMask};
    assert_eq!(qp_attr_mask::STATE, 1 << 0);
    assert_eq!(qp_attr_mask::DEST_QPN, 1 << 20);
    assert_eq!(
        qp_attr_mask::ALL,
        QpAttrMask::ALL.iter().fold(0, |acc, m| acc | u32::from(*m))
    );
    assert_eq!(vrnic_hw::access::ALL, vrnic_hw::ACCESS_SUPPORTED_MASK);
}

#[test]
fn register_masks_follow_field_access_types() {
    use vrnic_hw::{bar0, RegMasks};
    let ctrl = bar0::DEV_CTRL_MASKS;
    assert_eq!(ctrl.writable, bar0::DEV_CTRL_ENABLE_MASK);
    assert_eq!(ctrl.w1s, bar0::DEV_CTRL_RESET_MASK);
    assert_eq!(ctrl.triggered(0xFFFF_FFFF), bar0::DEV_CTRL_RESET_MASK);
    assert_eq!(ctrl.apply(0, 0xFFFF_FFFF), bar0::DEV_CTRL_ENABLE_MASK);
    assert_eq!(ctrl.reserved_bits(0xFFFF_FFFF), 0xFFFF_FFFC);
    assert!(!bar0::VERSION_MASKS.is_writable());
    assert_eq!(
        bar0::masks(bar0::AQ_DOORBELL),
        Some(bar0::AQ_DOORBELL_MASKS)
    );
    assert_eq!(bar0::AQ_DOORBELL_MASKS.readable, 0);
    assert_eq!(bar0::masks(0xFFC), None);
    // rw1c: a written 1 clears, a written 0 keeps; ro bits keep their value.
    let status = RegMasks {
        writable: 0,
        w1c: 0b0110,
        w1s: 0,
        readable: 0b1111,
        reserved: !0b1111,
    };
    assert_eq!(status.apply(0b1111, 0b0010), 0b1101);
}
