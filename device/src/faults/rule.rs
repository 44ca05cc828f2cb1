//! A fault rule and its text form, the one syntax of `vrnic ctl fault` and of a start-up
//! fault file (`vrnic serve --faults DEVICE=FILE`). Names are hw-spec's (`wc_status`,
//! `aq_opcode`, `aq_status`, `fatal_code`), case-insensitive:
//!
//! ```text
//! wqe [qp=QPN|qp=any|qp=new:K] [nth=N] status=WC_STATUS   the Nth send WQE from now fails
//! admin delay [op=OPCODE|op=any] [nth=N] ms=MS            the Nth such command completes late
//! admin fail [op=OPCODE|op=any] [nth=N] status=AQ_STATUS  the Nth such command fails
//! stall ms=MS                                             the data path stops for MS, now
//! event port_down | port_up                               the port's state changes, now
//! event qp_fatal qp=QPN | event cq_err cq=CQN             the object fails, now
//! event device_fatal [code=FATAL_CODE]                    the device goes FATAL, now
//! ```
//!
//! `qp=new:K` is the K-th QP created from now (a test does not know QPNs in advance);
//! `qp=any` (the default) counts every QP's send WQEs together. `nth` defaults to 1.

use std::fmt;
use std::time::Duration;
use vrnic_hw::{AqOpcode, AqStatus, FatalCode, WcStatus};

/// The syntax, for `vrnic --help` (the module doc says the same).
pub const SYNTAX: &str = "\
  wqe [qp=QPN|qp=any|qp=new:K] [nth=N] status=WC_STATUS
                      The Nth send WQE from now of QP QPN (default any QP of the device,
                      counted together; new:K is the K-th QP created from now) completes
                      with WC_STATUS (an error) and its QP moves to ERR.
  admin delay [op=OPCODE|op=any] [nth=N] ms=MS
                      The Nth such admin command from now completes MS ms late (1..60000);
                      the commands after it wait for it, other devices do not.
  admin fail [op=OPCODE|op=any] [nth=N] status=AQ_STATUS
                      The Nth such admin command fails with AQ_STATUS, not executed.
  stall ms=MS         The device's data path stops for MS ms (1..60000), now.
  event port_down|port_up
                      QUERY_PORT reports the port DOWN (or ACTIVE again); PORT_ERR (or
                      PORT_ACTIVE) is posted. Traffic itself is not stopped.
  event qp_fatal qp=QPN | event cq_err cq=CQN
                      The QP moves to ERR (the CQ to error, its QPs to ERR); QP_FATAL
                      (CQ_ERR) is posted.
  event device_fatal [code=FATAL_CODE]
                      The device goes FATAL (default INTERNAL), as on a real fatal error.
  Names are hw-spec's (wc_status, aq_opcode, aq_status, fatal_code), any case; N, K: 1 or
  more (default 1); each rule fires once.";

/// The longest delay of an admin command and the longest stall: a rule may hold work up,
/// never wedge it.
pub const MAX_DELAY: Duration = Duration::from_secs(60);
/// The largest `nth` or `new:K`.
pub const MAX_NTH: u32 = 1_000_000;
/// The longest rule text accepted.
pub const MAX_RULE_LEN: usize = 256;

/// Which QP's send WQEs a `wqe` rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpSel {
    Qpn(u32),
    Any,
    /// The K-th QP created after the rule was armed.
    Created(u32),
}

/// Something raised at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    PortDown,
    PortUp,
    QpFatal(u32),
    CqErr(u32),
    DeviceFatal(FatalCode),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Wqe {
        qp: QpSel,
        nth: u32,
        status: WcStatus,
    },
    AdminDelay {
        op: Option<AqOpcode>,
        nth: u32,
        delay: Duration,
    },
    AdminFail {
        op: Option<AqOpcode>,
        nth: u32,
        status: AqStatus,
    },
    Stall(Duration),
    Event(Event),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("empty rule (kinds: wqe, admin delay, admin fail, stall, event)")]
    Empty,
    #[error("rule longer than {MAX_RULE_LEN} characters")]
    TooLong,
    #[error("unknown rule `{0}` (kinds: wqe, admin delay, admin fail, stall, event)")]
    UnknownKind(String),
    #[error("admin rules are `admin delay ...` or `admin fail ...`, not `{0}`")]
    UnknownAdmin(String),
    #[error("unknown event `{0}` (port_down, port_up, qp_fatal, cq_err, device_fatal)")]
    UnknownEvent(String),
    #[error("`{0}` is not KEY=VALUE")]
    NotKeyValue(String),
    #[error("unknown key `{key}` for this rule (keys: {keys})")]
    UnknownKey { key: String, keys: &'static str },
    #[error("key `{0}` given twice")]
    Duplicate(String),
    #[error("missing `{0}=`")]
    Missing(&'static str),
    #[error("`{value}` is not a {what}")]
    BadValue { value: String, what: &'static str },
    #[error("{key}={value} is out of range ({range})")]
    OutOfRange {
        key: &'static str,
        value: String,
        range: &'static str,
    },
    #[error("a wqe rule needs an error status, not SUCCESS")]
    SuccessStatus,
    #[error("admin fail needs an error status, not SUCCESS")]
    AdminSuccess,
}

/// The KEY=VALUE words of a rule, each taken at most once; any left over is an error.
struct Keys<'a> {
    pairs: Vec<(&'a str, &'a str)>,
    allowed: &'static str,
}

impl<'a> Keys<'a> {
    fn new(words: &[&'a str], allowed: &'static str) -> Result<Self, RuleError> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| RuleError::NotKeyValue(shown(w)))?;
            if k.is_empty() || !allowed.split(", ").any(|a| a == k) {
                return Err(RuleError::UnknownKey {
                    key: shown(k),
                    keys: if allowed.is_empty() { "none" } else { allowed },
                });
            }
            if pairs.iter().any(|(p, _)| *p == k) {
                return Err(RuleError::Duplicate(shown(k)));
            }
            pairs.push((k, v));
        }
        Ok(Keys { pairs, allowed })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        debug_assert!(self.allowed.split(", ").any(|a| a == key));
        self.pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// At most 64 characters of guest- or user-given text in an error.
fn shown(s: &str) -> String {
    s.chars().take(64).collect()
}

fn number(key: &'static str, v: &str) -> Result<u64, RuleError> {
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|_| RuleError::BadValue {
        value: shown(v),
        what: match key {
            "ms" => "number of milliseconds",
            "qp" | "cq" => "QPN or CQN (decimal or 0x hex)",
            _ => "number",
        },
    })
}

fn nth(keys: &Keys) -> Result<u32, RuleError> {
    let Some(v) = keys.get("nth") else {
        return Ok(1);
    };
    match number("nth", v)? {
        n @ 1..=1_000_000 => Ok(n as u32),
        _ => Err(RuleError::OutOfRange {
            key: "nth",
            value: shown(v),
            range: "1..1000000",
        }),
    }
}

fn millis(keys: &Keys) -> Result<Duration, RuleError> {
    let v = keys.get("ms").ok_or(RuleError::Missing("ms"))?;
    match number("ms", v)? {
        ms @ 1..=60_000 => Ok(Duration::from_millis(ms)),
        _ => Err(RuleError::OutOfRange {
            key: "ms",
            value: shown(v),
            range: "1..60000",
        }),
    }
}

fn object(keys: &Keys, key: &'static str) -> Result<u32, RuleError> {
    let v = keys.get(key).ok_or(RuleError::Missing(key))?;
    u32::try_from(number(key, v)?).map_err(|_| RuleError::OutOfRange {
        key,
        value: shown(v),
        range: "a 32-bit number",
    })
}

/// A hw-spec enum value by its name (any case).
fn named<T: Copy>(
    all: &[T],
    name: fn(T) -> &'static str,
    v: &str,
    what: &'static str,
) -> Result<T, RuleError> {
    all.iter()
        .copied()
        .find(|&x| name(x).eq_ignore_ascii_case(v))
        .ok_or_else(|| RuleError::BadValue {
            value: shown(v),
            what,
        })
}

fn opcode(keys: &Keys) -> Result<Option<AqOpcode>, RuleError> {
    match keys.get("op") {
        None | Some("any") => Ok(None),
        Some(v) => named(
            AqOpcode::ALL,
            AqOpcode::name,
            v,
            "aq_opcode name (e.g. CREATE_QP) or any",
        )
        .map(Some),
    }
}

fn qp_sel(keys: &Keys) -> Result<QpSel, RuleError> {
    let Some(v) = keys.get("qp") else {
        return Ok(QpSel::Any);
    };
    if v == "any" {
        return Ok(QpSel::Any);
    }
    if let Some(k) = v.strip_prefix("new:") {
        return match number("new", k)? {
            k @ 1..=1_000_000 => Ok(QpSel::Created(k as u32)),
            _ => Err(RuleError::OutOfRange {
                key: "qp",
                value: shown(v),
                range: "new:1..new:1000000",
            }),
        };
    }
    object(keys, "qp").map(QpSel::Qpn)
}

impl Rule {
    /// Parses one rule (words separated by spaces or tabs).
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        if text.len() > MAX_RULE_LEN {
            return Err(RuleError::TooLong);
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        let Some((&kind, rest)) = words.split_first() else {
            return Err(RuleError::Empty);
        };
        match kind {
            "wqe" => {
                let keys = Keys::new(rest, "qp, nth, status")?;
                let status = keys.get("status").ok_or(RuleError::Missing("status"))?;
                let status = named(
                    WcStatus::ALL,
                    WcStatus::name,
                    status,
                    "wc_status name (e.g. REM_ACCESS_ERR)",
                )?;
                if status == WcStatus::Success {
                    return Err(RuleError::SuccessStatus);
                }
                Ok(Rule::Wqe {
                    qp: qp_sel(&keys)?,
                    nth: nth(&keys)?,
                    status,
                })
            }
            "admin" => match rest.split_first() {
                Some((&"delay", rest)) => {
                    let keys = Keys::new(rest, "op, nth, ms")?;
                    Ok(Rule::AdminDelay {
                        op: opcode(&keys)?,
                        nth: nth(&keys)?,
                        delay: millis(&keys)?,
                    })
                }
                Some((&"fail", rest)) => {
                    let keys = Keys::new(rest, "op, nth, status")?;
                    let status = keys.get("status").ok_or(RuleError::Missing("status"))?;
                    let status = named(
                        AqStatus::ALL,
                        AqStatus::name,
                        status,
                        "aq_status name (e.g. NO_RESOURCES)",
                    )?;
                    if status == AqStatus::Success {
                        return Err(RuleError::AdminSuccess);
                    }
                    Ok(Rule::AdminFail {
                        op: opcode(&keys)?,
                        nth: nth(&keys)?,
                        status,
                    })
                }
                Some((other, _)) => Err(RuleError::UnknownAdmin(shown(other))),
                None => Err(RuleError::UnknownAdmin(String::new())),
            },
            "stall" => Ok(Rule::Stall(millis(&Keys::new(rest, "ms")?)?)),
            "event" => {
                let Some((&event, rest)) = rest.split_first() else {
                    return Err(RuleError::UnknownEvent(String::new()));
                };
                let event = match event {
                    "port_down" => {
                        Keys::new(rest, "")?;
                        Event::PortDown
                    }
                    "port_up" => {
                        Keys::new(rest, "")?;
                        Event::PortUp
                    }
                    "qp_fatal" => Event::QpFatal(object(&Keys::new(rest, "qp")?, "qp")?),
                    "cq_err" => Event::CqErr(object(&Keys::new(rest, "cq")?, "cq")?),
                    "device_fatal" => {
                        let keys = Keys::new(rest, "code")?;
                        let code = match keys.get("code") {
                            None => FatalCode::Internal,
                            Some(v) => named(
                                FatalCode::ALL,
                                FatalCode::name,
                                v,
                                "fatal_code name (e.g. INTERNAL)",
                            )?,
                        };
                        if code == FatalCode::None {
                            return Err(RuleError::BadValue {
                                value: "NONE".into(),
                                what: "fatal code for a fatal error (ADMIN_DMA, BAD_ADMIN_CONFIG, INTERNAL)",
                            });
                        }
                        Event::DeviceFatal(code)
                    }
                    other => return Err(RuleError::UnknownEvent(shown(other))),
                };
                Ok(Rule::Event(event))
            }
            other => Err(RuleError::UnknownKind(shown(other))),
        }
    }

    /// Whether the rule acts at once (an event or a stall) rather than waiting to match.
    pub fn is_immediate(&self) -> bool {
        matches!(self, Rule::Event(_) | Rule::Stall(_))
    }
}

/// Parses a fault file: one rule per line; blank lines and `#` comments are skipped. An
/// error names its line (1-based).
pub fn parse_file(text: &str) -> Result<Vec<Rule>, (usize, RuleError)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.split('#').next().unwrap_or("").trim()))
        .filter(|(_, line)| !line.is_empty())
        .map(|(n, line)| Rule::parse(line).map_err(|e| (n, e)))
        .collect()
}

fn op_name(op: Option<AqOpcode>) -> &'static str {
    op.map_or("any", AqOpcode::name)
}

/// The canonical text of a rule: what `Rule::parse` reads back to the same rule.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rule::Wqe { qp, nth, status } => {
                let qp = match qp {
                    QpSel::Qpn(n) => format!("{n:#x}"),
                    QpSel::Any => "any".into(),
                    QpSel::Created(k) => format!("new:{k}"),
                };
                write!(f, "wqe qp={qp} nth={nth} status={}", status.name())
            }
            Rule::AdminDelay { op, nth, delay } => write!(
                f,
                "admin delay op={} nth={nth} ms={}",
                op_name(op),
                delay.as_millis()
            ),
            Rule::AdminFail { op, nth, status } => write!(
                f,
                "admin fail op={} nth={nth} status={}",
                op_name(op),
                status.name()
            ),
            Rule::Stall(d) => write!(f, "stall ms={}", d.as_millis()),
            Rule::Event(Event::PortDown) => write!(f, "event port_down"),
            Rule::Event(Event::PortUp) => write!(f, "event port_up"),
            Rule::Event(Event::QpFatal(q)) => write!(f, "event qp_fatal qp={q:#x}"),
            Rule::Event(Event::CqErr(c)) => write!(f, "event cq_err cq={c:#x}"),
            Rule::Event(Event::DeviceFatal(code)) => {
                write!(f, "event device_fatal code={}", code.name())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_with_hw_spec_names_in_any_case() {
        assert_eq!(
            Rule::parse("wqe qp=new:2 nth=3 status=rem_access_err"),
            Ok(Rule::Wqe {
                qp: QpSel::Created(2),
                nth: 3,
                status: WcStatus::RemAccessErr
            })
        );
        assert_eq!(
            Rule::parse("admin delay op=CREATE_CQ ms=8000"),
            Ok(Rule::AdminDelay {
                op: Some(AqOpcode::CreateCq),
                nth: 1,
                delay: Duration::from_secs(8)
            })
        );
        assert_eq!(
            Rule::parse("  admin\tfail status=NO_RESOURCES nth=2 "),
            Ok(Rule::AdminFail {
                op: None,
                nth: 2,
                status: AqStatus::NoResources
            })
        );
        assert_eq!(
            Rule::parse("event qp_fatal qp=0x10012"),
            Ok(Rule::Event(Event::QpFatal(0x10012)))
        );
        assert_eq!(
            Rule::parse("event device_fatal"),
            Ok(Rule::Event(Event::DeviceFatal(FatalCode::Internal)))
        );
        assert_eq!(
            Rule::parse("stall ms=250"),
            Ok(Rule::Stall(Duration::from_millis(250)))
        );
    }

    #[test]
    fn every_rule_reads_back_from_its_canonical_text() {
        for text in [
            "wqe qp=0x12 nth=1 status=LOC_PROT_ERR",
            "wqe qp=any nth=7 status=FATAL_ERR",
            "admin delay op=any nth=3 ms=1",
            "admin fail op=MODIFY_QP nth=1 status=INTERNAL",
            "stall ms=60000",
            "event port_down",
            "event cq_err cq=0x3",
            "event device_fatal code=ADMIN_DMA",
        ] {
            let rule = Rule::parse(text).unwrap();
            assert_eq!(rule.to_string(), text);
        }
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        let err = |t: &str| Rule::parse(t).unwrap_err().to_string();
        assert!(err("").contains("empty rule"));
        assert!(err("drop nth=1").contains("unknown rule `drop`"));
        assert!(err("wqe nth=1").contains("missing `status=`"));
        assert!(err("wqe status=SUCCESS").contains("not SUCCESS"));
        assert!(err("wqe status=NOPE").contains("`NOPE` is not a wc_status name"));
        assert!(err("wqe status=FATAL_ERR nth=0").contains("nth=0 is out of range"));
        assert!(err("wqe status=FATAL_ERR nth=1 nth=2").contains("given twice"));
        assert!(err("wqe status=FATAL_ERR colour=red").contains("unknown key `colour`"));
        assert!(err("wqe status=FATAL_ERR qp=new:0").contains("out of range"));
        assert!(err("wqe status=FATAL_ERR qp=0x1ffffffff").contains("out of range"));
        assert!(err("admin delay ms=60001").contains("ms=60001 is out of range"));
        assert!(err("admin delay ms=-5").contains("not a number of milliseconds"));
        assert!(err("admin delay").contains("missing `ms=`"));
        assert!(err("admin pause ms=5").contains("not `pause`"));
        assert!(err("admin fail status=SUCCESS").contains("not SUCCESS"));
        assert!(err("admin fail op=FROB status=BUSY").contains("aq_opcode"));
        assert!(err("stall").contains("missing `ms=`"));
        assert!(err("event port_down now").contains("not KEY=VALUE"));
        assert!(err("event qp_fatal").contains("missing `qp=`"));
        assert!(err("event meltdown").contains("unknown event"));
        assert!(err("event device_fatal code=NONE").contains("fatal code"));
        assert!(err(&"x".repeat(300)).contains("longer than"));
        // Long user text is never echoed whole.
        assert!(err(&format!("wqe status={}", "A".repeat(200))).len() < 150);
    }

    #[test]
    fn a_file_is_one_rule_per_line_with_comments_and_errors_name_their_line() {
        let rules = parse_file("# faults for rnic0\n\nevent port_down  # at start\nadmin fail op=ALLOC_PD status=BUSY\n").unwrap();
        assert_eq!(rules.len(), 2);
        let (line, e) = parse_file("stall ms=5\nwqe\n").unwrap_err();
        assert_eq!((line, e), (2, RuleError::Missing("status")));
    }
}
