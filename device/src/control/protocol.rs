//! The control protocol's messages: one JSON request per line, one JSON response per line
//! (see the module doc of `control` for the whole protocol).

use crate::objects::snapshot::ObjectKind;
use crate::rnic::snapshot::{DeviceView, ObjectsView};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest request line the server reads (newline included); a longer one is answered with
/// an error and the connection is closed.
pub const MAX_REQUEST_LINE: usize = 64 * 1024;

/// A request. Adding a command is a variant here (its name in `COMMANDS`) and its handler
/// in `handlers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Every device: identity, link, VMM, state, object counts. (A struct variant: serde
    /// refuses unknown fields only in those.)
    Devices {},
    /// A device's objects, of the kinds given (all when empty).
    Objects {
        device: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kinds: Vec<ObjectKind>,
    },
    /// The counters of a device's port, or of one of its QPs (SPEC "Counters").
    Counters {
        device: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        qpn: Option<u32>,
    },
    /// A device's trace events, of the kinds given (all when empty), of one QP if given:
    /// the connection becomes a stream (`control::trace`).
    Trace {
        device: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kinds: Vec<crate::trace::Kind>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        qpn: Option<u32>,
    },
    /// Starts capturing a device's packets into the pcap file `path` (absolute; replacing
    /// a capture running), or stops (`path` absent or null).
    Pcap {
        device: String,
        #[serde(default)]
        path: Option<std::path::PathBuf>,
    },
    /// The contract checker of a device: mode, violations per rule (SPEC "Contract checking").
    Contract { device: String },
    /// Fault injection: arms a rule, or raises an event now (`rule`: the syntax of
    /// `faults::rule`; see `control::faults`).
    Fault { device: String, rule: String },
    /// A device's fault rules, armed and fired, and the state they left.
    Faults { device: String },
    /// Drops a device's fault rules.
    FaultClear { device: String },
    /// The hostile-device mode of a device: shown, or switched on (`on: true`, with
    /// `settings` KINDS:SEED[:RATE] or the last ones) or off.
    Hostile {
        device: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settings: Option<String>,
    },
    /// The uplinks: kind, interface, port, counters, impairment (`control::uplinks`).
    Uplinks {},
    /// The RoCE devices' wire ports: frames in and out, drops, QPs on the wire
    /// (`control::wire`).
    Wire {},
    /// An uplink's impairment: shown, replaced (`spec`: the syntax of `net::impair::spec`)
    /// or switched off (`spec` "off").
    Impair {
        uplink: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<String>,
    },
}

impl Request {
    /// The command names, as `cmd` spells them.
    pub const COMMANDS: &[&str] = &[
        "devices",
        "objects",
        "counters",
        "trace",
        "pcap",
        "contract",
        "fault",
        "faults",
        "fault_clear",
        "hostile",
        "uplinks",
        "impair",
        "wire",
    ];
}

/// A capture's figures: frames written to `path`, frames dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcapStats {
    pub path: String,
    pub packets: u64,
    pub dropped: u64,
}

/// The answer to `pcap`: the capture now running (none after `off`) and the final figures
/// of the one it ended, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcapReply {
    pub device: String,
    pub capturing: Option<PcapStats>,
    pub stopped: Option<PcapStats>,
}

/// The answer to `devices`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicesReply {
    pub devices: Vec<DeviceView>,
}

/// The answer to `objects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectsReply {
    pub device: String,
    #[serde(flatten)]
    pub objects: ObjectsView,
}

/// The answer to `counters`: every counter by its lowercased hw-spec name (tx_packets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountersReply {
    pub device: String,
    /// The QP read, or none for the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qpn: Option<u32>,
    pub counters: BTreeMap<String, u64>,
}

/// The answer to `hostile`: on or off, the settings (KINDS:SEED:RATE) in force or last
/// in force, and the corruptions written per kind since it was last switched on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostileReply {
    pub device: String,
    pub on: bool,
    pub settings: Option<String>,
    pub written: BTreeMap<String, u64>,
}

/// The answer to a request that failed; the only response with an `error` key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: String,
}

/// Why a request got an error response. Each is answered in-band; only `TooLong` (and a
/// timeout) also ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("a request is a JSON object with a \"cmd\" string, e.g. {{\"cmd\":\"devices\"}}")]
    NoCommand,
    #[error("unknown command `{0}` (commands: {list})", list = Request::COMMANDS.join(", "))]
    UnknownCommand(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("unknown device `{name}` (devices: {known})")]
    UnknownDevice { name: String, known: String },
    #[error("device `{device}` has no QP {qpn:#x}")]
    UnknownQp { device: String, qpn: u32 },
    #[error("device `{device}`: pcap: {why}")]
    Pcap { device: String, why: String },
    #[error("fault: {0}")]
    Fault(String),
    #[error("bad hostile settings: {0}")]
    BadHostile(String),
    #[error("unknown uplink `{name}` (uplinks: {known})")]
    UnknownUplink { name: String, known: String },
    #[error("bad impairment: {0}")]
    BadImpair(String),
    #[error("request line longer than {0} bytes; closing the connection")]
    TooLong(usize),
    #[error("no complete request within {0} s; closing the connection")]
    Timeout(u64),
    #[error("too many control clients (at most {0}); try again later")]
    TooManyClients(usize),
    #[error("permission denied: peer uid {0} is neither root nor this server's user")]
    NotPermitted(u32),
    #[error("cannot encode the response: {0}")]
    Encode(String),
}

/// Parses one request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, RequestError> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| RequestError::NotJson(e.to_string()))?;
    let cmd = value
        .get("cmd")
        .and_then(serde_json::Value::as_str)
        .ok_or(RequestError::NoCommand)?;
    if !Request::COMMANDS.contains(&cmd) {
        // Bounded: a 64 KiB command name is not echoed back whole.
        let shown: String = cmd.chars().take(64).collect();
        return Err(RequestError::UnknownCommand(shown));
    }
    serde_json::from_value(value).map_err(|e| RequestError::BadRequest(e.to_string()))
}

/// The response line (newline included) for an error.
pub fn error_line(e: &RequestError) -> Vec<u8> {
    let mut line = serde_json::to_vec(&ErrorReply {
        error: e.to_string(),
    })
    .unwrap_or_else(|_| br#"{"error":"internal error"}"#.to_vec());
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_from_their_json_lines() {
        assert_eq!(
            parse_request(br#"{"cmd":"devices"}"#),
            Ok(Request::Devices {})
        );
        assert_eq!(
            parse_request(br#"{"cmd":"objects","device":"rnic0","kinds":["qps","mrs"]}"#),
            Ok(Request::Objects {
                device: "rnic0".into(),
                kinds: vec![ObjectKind::Qps, ObjectKind::Mrs]
            })
        );
        assert_eq!(
            parse_request(br#"{"cmd":"objects","device":"x"}"#),
            Ok(Request::Objects {
                device: "x".into(),
                kinds: vec![]
            })
        );
    }

    #[test]
    fn pcap_requests_name_a_path_or_none_for_off() {
        assert_eq!(
            parse_request(br#"{"cmd":"pcap","device":"r0","path":"/tmp/a.pcap"}"#),
            Ok(Request::Pcap {
                device: "r0".into(),
                path: Some("/tmp/a.pcap".into())
            })
        );
        for off in [
            &br#"{"cmd":"pcap","device":"r0"}"#[..],
            br#"{"cmd":"pcap","device":"r0","path":null}"#,
        ] {
            assert_eq!(
                parse_request(off),
                Ok(Request::Pcap {
                    device: "r0".into(),
                    path: None
                })
            );
        }
        assert!(matches!(
            parse_request(br#"{"cmd":"pcap","device":"r0","path":7}"#),
            Err(RequestError::BadRequest(_))
        ));
    }

    #[test]
    fn a_request_round_trips_through_its_json() {
        let r = Request::Objects {
            device: "d".into(),
            kinds: vec![ObjectKind::Srqs],
        };
        let line = serde_json::to_vec(&r).unwrap();
        assert_eq!(parse_request(&line), Ok(r));
        assert_eq!(
            serde_json::to_string(&Request::Devices {}).unwrap(),
            r#"{"cmd":"devices"}"#
        );
    }

    #[test]
    fn malformed_requests_get_errors_that_say_what_is_wrong() {
        assert!(matches!(
            parse_request(b"{not json"),
            Err(RequestError::NotJson(_))
        ));
        assert!(matches!(
            parse_request(b"\xff\xfe"),
            Err(RequestError::NotJson(_))
        ));
        assert_eq!(parse_request(b"[1,2]"), Err(RequestError::NoCommand));
        assert_eq!(parse_request(br#"{"cmd":7}"#), Err(RequestError::NoCommand));
        assert_eq!(
            parse_request(br#"{"cmd":"reboot"}"#),
            Err(RequestError::UnknownCommand("reboot".into()))
        );
        let missing = parse_request(br#"{"cmd":"objects"}"#);
        assert!(
            matches!(&missing, Err(RequestError::BadRequest(m)) if m.contains("device")),
            "{missing:?}"
        );
        let extra = parse_request(br#"{"cmd":"devices","force":true}"#);
        assert!(
            matches!(&extra, Err(RequestError::BadRequest(m)) if m.contains("force")),
            "{extra:?}"
        );
        let kind = parse_request(br#"{"cmd":"objects","device":"d","kinds":["pds"]}"#);
        assert!(
            matches!(&kind, Err(RequestError::BadRequest(m)) if m.contains("pds")),
            "{kind:?}"
        );
        let msg = RequestError::UnknownCommand("x".into()).to_string();
        assert!(msg.contains("devices, objects"), "{msg}");
    }

    #[test]
    fn an_error_line_is_one_json_object_with_the_message() {
        let line = error_line(&RequestError::TooManyClients(16));
        assert_eq!(line.last(), Some(&b'\n'));
        let v: ErrorReply = serde_json::from_slice(&line).unwrap();
        assert!(v.error.contains("at most 16"));
    }
}
