//! The fault-injection commands of the control socket (`faults`): their replies, handlers,
//! text form and `vrnic ctl fault DEVICE ...` words, and the start-up fault files.
//!
//! ```text
//! {"cmd":"fault","device":"rnic0","rule":"wqe qp=new:1 nth=3 status=REM_ACCESS_ERR"}
//!   -> {"device":"rnic0","id":1,"rule":"wqe qp=new:1 nth=3 status=REM_ACCESS_ERR","state":"armed"}
//! {"cmd":"fault","device":"rnic0","rule":"event port_down"}
//!   -> {"device":"rnic0","id":2,"rule":"event port_down","state":"fired","fired":"port 1 ..."}
//! {"cmd":"faults","device":"rnic0"}
//!   -> {"device":"rnic0","port":"down","stall_ms_left":null,"admin_held":null,"rules":[..]}
//! {"cmd":"fault_clear","device":"rnic0"} -> {"device":"rnic0","cleared":2}
//! ```

use super::handlers::{device, encode};
use super::protocol::{Request, RequestError};
use crate::fabric::Fabric;
use crate::faults::act::{self, FaultError};
use crate::faults::rule::Rule;
use crate::faults::view::FaultsView;
use serde::{Deserialize, Serialize};

/// The answer to `fault`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultReply {
    pub device: String,
    pub id: u32,
    pub rule: String,
    /// "armed" (waits for its occurrence) or "fired" (an event or stall, done now).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired: Option<String>,
}

/// The answer to `faults`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultsReply {
    pub device: String,
    #[serde(flatten)]
    pub faults: FaultsView,
}

/// The answer to `fault_clear`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultClearReply {
    pub device: String,
    pub cleared: usize,
}

pub fn fault(fabric: &Fabric, name: &str, text: &str) -> Result<Vec<u8>, RequestError> {
    let rnic = device(fabric, name)?;
    let applied = act::apply_text(rnic, text).map_err(|e| RequestError::Fault(e.to_string()))?;
    encode(&FaultReply {
        device: rnic.name().into(),
        id: applied.id,
        rule: applied.rule.to_string(),
        state: if applied.fired.is_some() {
            "fired"
        } else {
            "armed"
        }
        .into(),
        fired: applied.fired,
    })
}

pub fn faults(fabric: &Fabric, name: &str) -> Result<Vec<u8>, RequestError> {
    let rnic = device(fabric, name)?;
    encode(&FaultsReply {
        device: rnic.name().into(),
        faults: act::view(rnic),
    })
}

pub fn clear(fabric: &Fabric, name: &str) -> Result<Vec<u8>, RequestError> {
    let rnic = device(fabric, name)?;
    encode(&FaultClearReply {
        device: rnic.name().into(),
        cleared: act::clear(rnic),
    })
}

/// `vrnic ctl fault DEVICE list | clear | RULE...` as a request.
pub fn ctl_request(device: &str, words: &[&str]) -> Result<Request, String> {
    let device = device.to_string();
    match words {
        [] => Err("fault DEVICE needs `list`, `clear` or a rule (see `vrnic --help`)".into()),
        ["list"] => Ok(Request::Faults { device }),
        ["clear"] => Ok(Request::FaultClear { device }),
        rule => {
            let rule = rule.join(" ");
            // Checked here too, so a typo is reported without a round trip.
            Rule::parse(&rule).map_err(|e| e.to_string())?;
            Ok(Request::Fault { device, rule })
        }
    }
}

/// The rules of a start-up fault file for one device (`vrnic serve --faults DEVICE=FILE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultFile {
    pub device: String,
    pub path: std::path::PathBuf,
    /// Each rule with its line.
    pub rules: Vec<(usize, Rule)>,
}

/// Longest fault file read.
pub const MAX_FAULT_FILE: u64 = 64 * 1024;

impl FaultFile {
    /// Reads and parses `DEVICE=FILE`; an error says which file and line.
    pub fn read(spec: &str) -> Result<FaultFile, String> {
        let (device, path) = spec
            .split_once('=')
            .filter(|(d, p)| !d.is_empty() && !p.is_empty())
            .ok_or_else(|| format!("`{spec}` is not DEVICE=FILE"))?;
        let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(file, MAX_FAULT_FILE + 1),
            &mut text,
        )
        .map_err(|e| format!("{path}: {e}"))?;
        if text.len() as u64 > MAX_FAULT_FILE {
            return Err(format!("{path}: longer than {MAX_FAULT_FILE} bytes"));
        }
        let mut rules = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let rule = Rule::parse(line).map_err(|e| format!("{path} line {}: {e}", n + 1))?;
            rules.push((n + 1, rule));
        }
        if rules.len() > crate::faults::plan::MAX_RULES {
            return Err(format!(
                "{path}: more than {} rules",
                crate::faults::plan::MAX_RULES
            ));
        }
        Ok(FaultFile {
            device: device.into(),
            path: path.into(),
            rules,
        })
    }

    /// Applies the rules to their device of `fabric`, in order (at start-up: events that
    /// need a driver's objects fail here, with their line).
    pub fn apply(&self, fabric: &Fabric) -> Result<(), String> {
        let rnic = device(fabric, &self.device).map_err(|e| e.to_string())?;
        for (line, rule) in &self.rules {
            act::apply(rnic, *rule)
                .map_err(|e: FaultError| format!("{} line {line}: {e}", self.path.display()))?;
        }
        Ok(())
    }
}

fn render_view(reply: &FaultsReply) -> String {
    let f = &reply.faults;
    let mut out = format!("device {}: port {}", reply.device, f.port);
    if let Some(ms) = f.stall_ms_left {
        out.push_str(&format!(", data path stalled for {ms} ms more"));
    }
    if let Some(h) = &f.admin_held {
        out.push_str(&format!(
            ", admin {} (queue index {}) held for {} ms more",
            h.opcode, h.index, h.ms_left
        ));
    }
    out.push('\n');
    if f.rules.is_empty() {
        out.push_str("no fault rules\n");
        return out;
    }
    let rows: Vec<Vec<String>> = f
        .rules
        .iter()
        .map(|r| {
            let state = match (r.qpn, r.fired_ms_ago) {
                (_, Some(ago)) => format!("fired {ago} ms ago"),
                (Some(qpn), None) => format!("armed (QP {qpn:#x})"),
                (None, None) => "armed".into(),
            };
            vec![
                r.id.to_string(),
                r.rule.clone(),
                state,
                r.seen.to_string(),
                r.fired.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    out + &super::render::table(&["ID", "RULE", "STATE", "SEEN", "WHAT"], &rows)
}

/// The text form of the fault replies.
pub fn render(request: &Request, reply: &str) -> Result<String, serde_json::Error> {
    match request {
        Request::Fault { .. } => serde_json::from_str::<FaultReply>(reply).map(|r| match r.fired {
            Some(what) => format!("{}: fault {} `{}` fired: {what}\n", r.device, r.id, r.rule),
            None => format!("{}: fault {} armed: {}\n", r.device, r.id, r.rule),
        }),
        Request::Faults { .. } => {
            serde_json::from_str::<FaultsReply>(reply).map(|r| render_view(&r))
        }
        Request::FaultClear { .. } => serde_json::from_str::<FaultClearReply>(reply)
            .map(|r| format!("{}: {} fault rules cleared\n", r.device, r.cleared)),
        _ => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(text: &str) -> (vmm_sys_util::tempdir::TempDir, String) {
        let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
        let path = dir.as_path().join("faults");
        std::fs::write(&path, text).unwrap();
        let spec = format!("rnic0={}", path.display());
        (dir, spec)
    }

    #[test]
    fn a_fault_file_gives_its_rules_with_their_lines() {
        let (_dir, spec) = file_with(
            "# start with the port down\nevent port_down\n\nwqe nth=2 status=FATAL_ERR # then\n",
        );
        let f = FaultFile::read(&spec).unwrap();
        assert_eq!(f.device, "rnic0");
        let lines: Vec<usize> = f.rules.iter().map(|(n, _)| *n).collect();
        assert_eq!(lines, vec![2, 4]);
    }

    #[test]
    fn a_bad_fault_file_names_the_file_and_line() {
        let (_dir, spec) = file_with("stall ms=5\nadmin delay ms=100000\n");
        let e = FaultFile::read(&spec).unwrap_err();
        assert!(e.contains("line 2: ms=100000 is out of range"), "{e}");
        assert!(FaultFile::read("rnic0")
            .unwrap_err()
            .contains("DEVICE=FILE"));
        assert!(FaultFile::read("rnic0=/nonexistent/x")
            .unwrap_err()
            .contains("/nonexistent/x"));
        let (_dir, spec) = file_with(&"stall ms=5\n".repeat(20_000));
        assert!(FaultFile::read(&spec).unwrap_err().contains("longer than"));
    }

    #[test]
    fn ctl_words_become_fault_requests() {
        assert_eq!(
            ctl_request("rnic0", &["list"]),
            Ok(Request::Faults {
                device: "rnic0".into()
            })
        );
        assert_eq!(
            ctl_request("rnic0", &["wqe", "nth=2", "status=FATAL_ERR"]),
            Ok(Request::Fault {
                device: "rnic0".into(),
                rule: "wqe nth=2 status=FATAL_ERR".into()
            })
        );
        assert!(ctl_request("rnic0", &["wqe"])
            .unwrap_err()
            .contains("status"));
        assert!(ctl_request("rnic0", &[]).unwrap_err().contains("list"));
    }
}
