//! An impairment spec and its text form, the one syntax of `--uplink ...,impair=SPEC`, the
//! TOML `impair` key and `vrnic ctl impair UPLINK SPEC`:
//!
//! ```text
//! SPEC   = RULE [; RULE ...]
//! RULE   = KIND WHICH [dir=egress|ingress|both] [match=all|roce|gsi|not-gsi] [seed=S]
//!          [KIND's keys]
//! KIND   = loss | dup [copies=N] | reorder [by=N] [ms=MS] | corrupt [offset=B] [bit=0..7]
//!        | delay ms=MS
//! WHICH  = rate=P%            each frame with probability P (0.0001..100, '%' optional)
//!        | every=N [from=K]   frames K, K+N, K+2N, ... (K defaults to N)
//!        | frames=LIST        frames of LIST: numbers and ranges, '/'-separated: 3/7/10-12
//! ```
//!
//! Frames are numbered from 1 per rule and per direction: a rule counts the frames of its
//! direction that its `match` takes (`roce`: IPv4 or IPv6 UDP to port 4791, one VLAN tag
//! allowed; `gsi`: those of them to QP 1, the CM's MADs; `not-gsi`: those to any other QP;
//! `all`, the default) and that the rules before it let through. `dir=both` (the
//! default) is one instance per direction, each counting and drawing on its own. A rate
//! draws from SplitMix64 seeded with `seed` (default: the rule's position, 1 for the
//! first), one draw per frame counted, so the same frames give the same choices on every
//! run. `corrupt` flips bit `bit` of byte `offset` (each drawn from the seed when not
//! given; a frame too short for `offset` is counted as `short` and passes unchanged).
//! `dup` sends `copies` more (default 1). `delay` holds the frame `ms`; `reorder` holds it
//! until `by` (default 1) frames of its direction have gone out after it, or `ms` (default
//! 20) have passed. A held frame leaves past the rules after the one that held it, so put
//! `delay` and `reorder` last. No commas (the `--uplink` spec uses them).

use crate::rng::Rng;
use std::fmt;
use std::ops::RangeInclusive;

/// The longest spec text accepted.
pub const MAX_SPEC_LEN: usize = 1024;
/// The most rules in one spec.
pub const MAX_RULES: usize = 16;
/// The most items (numbers or ranges) in a `frames=` list.
pub const MAX_FRAME_ITEMS: usize = 64;
/// The longest hold of `delay` or `reorder`, in ms.
pub const MAX_HOLD_MS: u32 = 10_000;
/// The largest `by` of `reorder` and `copies` of `dup`.
pub const MAX_BY: u32 = 64;
pub const MAX_COPIES: u32 = 8;
/// How long `reorder` holds a frame at most when no `ms` is given.
pub const DEFAULT_REORDER_MS: u32 = 20;
/// The RoCEv2 UDP destination port.
pub const ROCE_PORT: u16 = 4791;

/// The syntax, for `vrnic --help` (the module doc says the same).
pub const SYNTAX: &str = "\
  SPEC is RULE[;RULE...]; each RULE is KIND WHICH [KEY=VALUE ...]:
    loss | dup [copies=N] | reorder [by=N] [ms=MS] | corrupt [offset=B] [bit=0..7] | delay ms=MS
  WHICH: rate=P% (seeded), every=N [from=K] (frames K, K+N, ...; K defaults to N), or
  frames=3/7/10-12 (frame numbers, from 1, per rule and direction).
  dir=egress|ingress|both (default both: onto the uplink, from it, or each on its own),
  match=all|roce|gsi|not-gsi (roce: UDP port 4791 frames only; gsi: those to QP 1, the
  CM's MADs; not-gsi: those to other QPs), seed=S (default the rule's position).
  dup sends `copies` more (default 1); corrupt flips bit `bit` of byte `offset` (drawn from
  the seed when not given); delay holds each frame MS ms (1..10000); reorder holds it until
  `by` more frames (default 1) went out, at most MS ms (default 20). Rules apply in order;
  a held frame leaves past the later rules. E.g. `loss rate=1%;dup rate=1%;reorder rate=1%`.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Loss,
    Dup {
        copies: u32,
    },
    Reorder {
        by: u32,
        ms: u32,
    },
    Corrupt {
        offset: Option<u32>,
        bit: Option<u8>,
    },
    Delay {
        ms: u32,
    },
}

/// Which frames a rule acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// Parts per million (1..=1_000_000), drawn per frame.
    Rate(u32),
    Every {
        n: u64,
        from: u64,
    },
    Frames(Vec<RangeInclusive<u64>>),
}

/// The direction a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Frames vrnic sends onto the uplink.
    Egress,
    /// Frames vrnic receives from the uplink.
    Ingress,
    Both,
}

impl Dir {
    pub fn includes(self, d: Dir) -> bool {
        self == Dir::Both || self == d
    }

    pub fn name(self) -> &'static str {
        match self {
            Dir::Egress => "egress",
            Dir::Ingress => "ingress",
            Dir::Both => "both",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    All,
    Roce,
    /// RoCEv2 frames to QP 1: the MADs of the CM (a test can spare them, or pick them).
    Gsi,
    /// RoCEv2 frames to any QP but 1.
    NotGsi,
}

/// The GSI QP, where the CM's MADs go.
const GSI_QP: u32 = 1;

impl Match {
    /// Whether `frame` (Ethernet, destination MAC first) is one this rule counts.
    pub fn takes(self, frame: &[u8]) -> bool {
        match self {
            Match::All => true,
            Match::Roce => udp_dst_port(frame) == Some(ROCE_PORT),
            Match::Gsi => roce_dest_qp(frame) == Some(GSI_QP),
            Match::NotGsi => roce_dest_qp(frame).is_some_and(|qp| qp != GSI_QP),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Match::All => "all",
            Match::Roce => "roce",
            Match::Gsi => "gsi",
            Match::NotGsi => "not-gsi",
        }
    }
}

/// The UDP destination port of an IPv4 (unfragmented or first fragment) or IPv6 (no
/// extension header) frame, with at most one VLAN tag.
pub fn udp_dst_port(frame: &[u8]) -> Option<u16> {
    dst_port_at(frame, udp_offset(frame)?)
}

/// The destination port of the UDP header at `l4`.
fn dst_port_at(frame: &[u8], l4: usize) -> Option<u16> {
    Some(u16::from_be_bytes([
        *frame.get(l4 + 2)?,
        *frame.get(l4 + 3)?,
    ]))
}

/// The destination QP in the BTH of a RoCEv2 frame (its 24 bits at BTH bytes 5..8, the
/// BTH right after the 8-byte UDP header).
fn roce_dest_qp(frame: &[u8]) -> Option<u32> {
    let l4 = udp_offset(frame)?;
    if dst_port_at(frame, l4)? != ROCE_PORT {
        return None;
    }
    let qp = l4 + 8 + 5;
    let b = frame.get(qp..qp + 3)?;
    Some(u32::from_be_bytes([0, b[0], b[1], b[2]]))
}

/// Where the UDP header of an IPv4 (unfragmented or first fragment) or IPv6 (no extension
/// header) frame starts, with at most one VLAN tag.
fn udp_offset(frame: &[u8]) -> Option<usize> {
    let be16 = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
    };
    let mut l3 = 14;
    let mut ethertype = be16(12)?;
    if ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = be16(16)?;
        l3 = 18;
    }
    let l4 = match ethertype {
        0x0800 => {
            let vihl = *frame.get(l3)?;
            let offset = be16(l3 + 6)? & 0x1fff;
            if vihl >> 4 != 4 || *frame.get(l3 + 9)? != 17 || offset != 0 {
                return None;
            }
            l3 + usize::from(vihl & 0xf) * 4
        }
        0x86dd => {
            if *frame.get(l3 + 6)? != 17 {
                return None;
            }
            l3 + 40
        }
        _ => return None,
    };
    Some(l4)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub action: Action,
    pub which: Which,
    pub dir: Dir,
    pub matches: Match,
    /// As given; `Spec::seed` gives the one in force.
    pub seed: Option<u64>,
}

impl Rule {
    /// Whether frame number `n` (from 1) is picked; a rate draws once per call.
    pub fn picks(&self, n: u64, rng: &mut Rng) -> bool {
        match &self.which {
            Which::Rate(ppm) => rng.below(1_000_000) < u64::from(*ppm),
            Which::Every { n: every, from } => n >= *from && (n - from).is_multiple_of(*every),
            Which::Frames(list) => list.iter().any(|r| r.contains(&n)),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self.action {
            Action::Loss => "loss",
            Action::Dup { .. } => "dup",
            Action::Reorder { .. } => "reorder",
            Action::Corrupt { .. } => "corrupt",
            Action::Delay { .. } => "delay",
        }
    }
}

/// A parsed spec: its rules in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub rules: Vec<Rule>,
}

impl Spec {
    /// The seed in force for rule `index` (from 0).
    pub fn seed(&self, index: usize) -> u64 {
        self.rules[index].seed.unwrap_or(index as u64 + 1)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("empty impairment spec (rules: loss, dup, reorder, corrupt, delay)")]
    Empty,
    #[error("impairment spec longer than {MAX_SPEC_LEN} characters")]
    TooLong,
    #[error("more than {MAX_RULES} impairment rules")]
    TooManyRules,
    #[error("impairment spec has a comma; rules are separated by `;`, lists by `/`")]
    Comma,
    #[error("rule {index} (`{text}`): {why}")]
    Rule {
        index: usize,
        text: String,
        why: RuleError,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("empty rule")]
    Empty,
    #[error("unknown kind `{0}` (loss, dup, reorder, corrupt, delay)")]
    UnknownKind(String),
    #[error("`{0}` is not KEY=VALUE")]
    NotKeyValue(String),
    #[error("unknown key `{key}` (keys: {keys})")]
    UnknownKey { key: String, keys: String },
    #[error("key `{0}` given twice")]
    Duplicate(String),
    #[error("says which frames with one of rate=P%, every=N or frames=LIST")]
    NoWhich,
    #[error("takes one of rate=, every= and frames=, not two")]
    TwoWhich,
    #[error("from= goes with every=")]
    FromWithoutEvery,
    #[error("missing `{0}=`")]
    Missing(&'static str),
    #[error("{key}=`{value}` is not {what}")]
    BadValue {
        key: &'static str,
        value: String,
        what: &'static str,
    },
}

/// At most 64 characters of user-given text in an error.
fn shown(s: &str) -> String {
    s.chars().take(64).collect()
}

const COMMON_KEYS: [&str; 7] = ["rate", "every", "from", "frames", "dir", "match", "seed"];

fn own_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "dup" => &["copies"],
        "reorder" => &["by", "ms"],
        "corrupt" => &["offset", "bit"],
        "delay" => &["ms"],
        _ => &[],
    }
}

/// A rule's KEY=VALUE words, each at most once.
struct Keys<'a>(Vec<(&'static str, &'a str)>);

impl<'a> Keys<'a> {
    fn new(kind: &str, words: &[&'a str]) -> Result<Keys<'a>, RuleError> {
        let own = own_keys(kind);
        let mut pairs = Vec::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| RuleError::NotKeyValue(shown(w)))?;
            let Some(key) = COMMON_KEYS.iter().chain(own).find(|a| **a == k) else {
                let keys: Vec<&str> = COMMON_KEYS.iter().chain(own).copied().collect();
                return Err(RuleError::UnknownKey {
                    key: shown(k),
                    keys: keys.join(", "),
                });
            };
            if pairs.iter().any(|(p, _)| p == key) {
                return Err(RuleError::Duplicate(shown(k)));
            }
            pairs.push((*key, v));
        }
        Ok(Keys(pairs))
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// An integer in `lo..=hi` (decimal or 0x hex), if given.
    fn number(&self, key: &'static str, lo: u64, hi: u64) -> Result<Option<u64>, RuleError> {
        self.get(key)
            .map(|v| {
                parse_u64(v)
                    .filter(|n| (lo..=hi).contains(n))
                    .ok_or_else(|| RuleError::BadValue {
                        key,
                        value: shown(v),
                        what: range_text(lo, hi),
                    })
            })
            .transpose()
    }
}

fn range_text(lo: u64, hi: u64) -> &'static str {
    match (lo, hi) {
        (1, 1_000_000_000) => "a number in 1..1000000000",
        (1, 10_000) => "a number of ms in 1..10000",
        (1, 64) => "a number in 1..64",
        (1, 8) => "a number in 1..8",
        (0, 7) => "a bit number in 0..7",
        (0, 65_535) => "a byte offset in 0..65535",
        _ => "a number (decimal or 0x hex)",
    }
}

fn parse_u64(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// `P`, `P%`, with up to four decimals: parts per million in 1..=1_000_000.
fn parse_rate(text: &str) -> Option<u32> {
    let t = text.strip_suffix('%').unwrap_or(text);
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if int.is_empty() && frac.is_empty()
        || frac.len() > 4
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut frac_ppm = 0u64;
    for (i, d) in frac.bytes().enumerate() {
        frac_ppm += u64::from(d - b'0') * 10u64.pow(3 - i as u32);
    }
    let ppm = int.checked_mul(10_000)?.checked_add(frac_ppm)?;
    (1..=1_000_000).contains(&ppm).then_some(ppm as u32)
}

/// `3/7/10-12`: numbers and ranges of frame numbers (from 1).
fn parse_frames(text: &str) -> Option<Vec<RangeInclusive<u64>>> {
    let items: Vec<&str> = text.split('/').collect();
    if items.len() > MAX_FRAME_ITEMS {
        return None;
    }
    let mut list = Vec::new();
    for item in items {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let (a, b) = (parse_u64(a)?, parse_u64(b)?);
        if a == 0 || b < a {
            return None;
        }
        list.push(a..=b);
    }
    Some(list)
}

fn parse_rule(text: &str) -> Result<Rule, RuleError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let (kind, rest) = words.split_first().ok_or(RuleError::Empty)?;
    if !["loss", "dup", "reorder", "corrupt", "delay"].contains(kind) {
        return Err(RuleError::UnknownKind(shown(kind)));
    }
    let keys = Keys::new(kind, rest)?;
    let bad = |key: &'static str, what: &'static str| RuleError::BadValue {
        key,
        value: shown(keys.get(key).unwrap_or_default()),
        what,
    };
    let which = match (keys.get("rate"), keys.get("every"), keys.get("frames")) {
        (None, None, None) => return Err(RuleError::NoWhich),
        (Some(r), None, None) => {
            Which::Rate(parse_rate(r).ok_or_else(|| bad("rate", "a percentage in 0.0001..100"))?)
        }
        (None, Some(_), None) => {
            let n = keys.number("every", 1, 1_000_000_000)?.unwrap_or(1);
            let from = keys.number("from", 1, 1_000_000_000)?.unwrap_or(n);
            Which::Every { n, from }
        }
        (None, None, Some(f)) => Which::Frames(parse_frames(f).ok_or_else(|| {
            bad(
                "frames",
                "a `/`-separated list of frame numbers (from 1) and ranges A-B, at most 64",
            )
        })?),
        _ => return Err(RuleError::TwoWhich),
    };
    if keys.get("from").is_some() && !matches!(which, Which::Every { .. }) {
        return Err(RuleError::FromWithoutEvery);
    }
    let dir = match keys.get("dir") {
        None | Some("both") => Dir::Both,
        Some("egress") => Dir::Egress,
        Some("ingress") => Dir::Ingress,
        Some(_) => return Err(bad("dir", "egress, ingress or both")),
    };
    let matches = match keys.get("match") {
        None | Some("all") => Match::All,
        Some("roce") => Match::Roce,
        Some("gsi") => Match::Gsi,
        Some("not-gsi") => Match::NotGsi,
        Some(_) => return Err(bad("match", "all, roce, gsi or not-gsi")),
    };
    let seed = keys
        .get("seed")
        .map(|s| parse_u64(s).ok_or_else(|| bad("seed", "a number (decimal or 0x hex)")))
        .transpose()?;
    let ms = |default: Option<u32>| -> Result<u32, RuleError> {
        match (keys.number("ms", 1, 10_000)?, default) {
            (Some(ms), _) => Ok(ms as u32),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(RuleError::Missing("ms")),
        }
    };
    let action = match *kind {
        "loss" => Action::Loss,
        "dup" => Action::Dup {
            copies: keys.number("copies", 1, 8)?.unwrap_or(1) as u32,
        },
        "reorder" => Action::Reorder {
            by: keys.number("by", 1, 64)?.unwrap_or(1) as u32,
            ms: ms(Some(DEFAULT_REORDER_MS))?,
        },
        "corrupt" => Action::Corrupt {
            offset: keys.number("offset", 0, 65_535)?.map(|o| o as u32),
            bit: keys.number("bit", 0, 7)?.map(|b| b as u8),
        },
        _ => Action::Delay { ms: ms(None)? },
    };
    Ok(Rule {
        action,
        which,
        dir,
        matches,
        seed,
    })
}

impl Spec {
    pub fn parse(text: &str) -> Result<Spec, SpecError> {
        if text.len() > MAX_SPEC_LEN {
            return Err(SpecError::TooLong);
        }
        if text.contains(',') {
            return Err(SpecError::Comma);
        }
        if text.trim().is_empty() {
            return Err(SpecError::Empty);
        }
        let pieces: Vec<&str> = text.split(';').collect();
        if pieces.len() > MAX_RULES {
            return Err(SpecError::TooManyRules);
        }
        let rules = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| {
                parse_rule(p).map_err(|why| SpecError::Rule {
                    index: i + 1,
                    text: shown(p.trim()),
                    why,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Spec { rules })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())?;
        match &self.which {
            Which::Rate(ppm) => {
                let (int, frac) = (ppm / 10_000, ppm % 10_000);
                if frac == 0 {
                    write!(f, " rate={int}%")?;
                } else {
                    let frac = format!("{frac:04}");
                    write!(f, " rate={int}.{}%", frac.trim_end_matches('0'))?;
                }
            }
            Which::Every { n, from } if from == n => write!(f, " every={n}")?,
            Which::Every { n, from } => write!(f, " every={n} from={from}")?,
            Which::Frames(list) => {
                let items: Vec<String> = list
                    .iter()
                    .map(|r| match r.start() == r.end() {
                        true => r.start().to_string(),
                        false => format!("{}-{}", r.start(), r.end()),
                    })
                    .collect();
                write!(f, " frames={}", items.join("/"))?;
            }
        }
        match self.action {
            Action::Loss => {}
            Action::Dup { copies: 1 } => {}
            Action::Dup { copies } => write!(f, " copies={copies}")?,
            Action::Reorder { by, ms } => {
                if by != 1 {
                    write!(f, " by={by}")?;
                }
                if ms != DEFAULT_REORDER_MS {
                    write!(f, " ms={ms}")?;
                }
            }
            Action::Corrupt { offset, bit } => {
                if let Some(o) = offset {
                    write!(f, " offset={o}")?;
                }
                if let Some(b) = bit {
                    write!(f, " bit={b}")?;
                }
            }
            Action::Delay { ms } => write!(f, " ms={ms}")?,
        }
        if self.dir != Dir::Both {
            write!(f, " dir={}", self.dir.name())?;
        }
        if self.matches != Match::All {
            write!(f, " match={}", self.matches.name())?;
        }
        if let Some(s) = self.seed {
            write!(f, " seed={s}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.rules.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print_back_the_same() {
        for text in [
            "loss rate=1%",
            "loss rate=0.5% dir=egress match=roce seed=7",
            "dup every=10 from=3 copies=2",
            "reorder rate=1% by=3 ms=50",
            "corrupt frames=3/7/10-12 offset=40 bit=5 dir=ingress",
            "delay every=1 ms=10",
            "loss every=5; dup rate=0.0001%; delay rate=100% ms=1",
        ] {
            let spec = Spec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(spec.to_string(), text);
            assert_eq!(Spec::parse(&spec.to_string()), Ok(spec));
        }
        let spec = Spec::parse("  loss   every=4 from=4 ;reorder rate=2").unwrap();
        assert_eq!(spec.to_string(), "loss every=4; reorder rate=2%");
        assert_eq!((spec.seed(0), spec.seed(1)), (1, 2));
    }

    #[test]
    fn bad_specs_say_what_is_wrong_and_where() {
        let cases = [
            ("", "empty impairment spec"),
            ("   ", "empty impairment spec"),
            ("loss rate=1%,dup rate=1%", "comma"),
            ("loss rate=1%;", "rule 2 (``): empty rule"),
            ("drop rate=1%", "unknown kind `drop`"),
            ("loss", "one of rate=P%, every=N or frames=LIST"),
            ("loss rate=1% every=3", "not two"),
            ("loss rate=1% from=3", "from= goes with every="),
            ("loss rate=0%", "rate=`0%` is not a percentage"),
            ("loss rate=100.01%", "rate=`100.01%`"),
            ("loss rate=0.00001", "rate=`0.00001`"),
            ("loss rate=-1", "rate=`-1`"),
            ("loss every=0", "every=`0` is not a number in 1..1000000000"),
            ("loss frames=0", "frames=`0`"),
            ("loss frames=5-3", "frames=`5-3`"),
            ("loss frames=3//4", "frames=`3//4`"),
            (
                "loss every=2 dir=up",
                "dir=`up` is not egress, ingress or both",
            ),
            ("loss every=2 match=tcp", "all, roce, gsi or not-gsi"),
            ("loss every=2 seed=x", "seed=`x`"),
            ("loss every=2 ms=3", "unknown key `ms` (keys: rate, every"),
            ("loss every=2 every=3", "key `every` given twice"),
            ("loss every", "`every` is not KEY=VALUE"),
            ("delay every=2", "missing `ms=`"),
            ("delay every=2 ms=10001", "ms=`10001`"),
            ("reorder every=2 by=65", "by=`65` is not a number in 1..64"),
            ("dup every=2 copies=9", "copies=`9`"),
            ("corrupt every=2 bit=8", "bit=`8` is not a bit number"),
            ("corrupt every=2 offset=65536", "offset=`65536`"),
        ];
        for (text, want) in cases {
            let why = Spec::parse(text).unwrap_err().to_string();
            assert!(why.contains(want), "{text}: `{why}` does not say `{want}`");
        }
        let long = "loss every=1;".repeat(17);
        assert_eq!(
            Spec::parse(&long[..long.len() - 1]),
            Err(SpecError::TooManyRules)
        );
        assert_eq!(Spec::parse(&"x".repeat(1025)), Err(SpecError::TooLong));
        let many = (1..=65)
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join("/");
        assert!(Spec::parse(&format!("loss frames={many}")).is_err());
    }

    #[test]
    fn patterns_pick_the_frames_they_name() {
        let picked = |text: &str| -> Vec<u64> {
            let spec = Spec::parse(text).unwrap();
            let mut rng = Rng::new(0);
            (1..=20)
                .filter(|n| spec.rules[0].picks(*n, &mut rng))
                .collect()
        };
        assert_eq!(picked("loss every=5"), [5, 10, 15, 20]);
        assert_eq!(picked("loss every=5 from=3"), [3, 8, 13, 18]);
        assert_eq!(picked("loss every=1 from=19"), [19, 20]);
        assert_eq!(picked("loss frames=2/9-11/30"), [2, 9, 10, 11]);
        assert_eq!(picked("loss rate=100%").len(), 20);
    }

    #[test]
    fn roce_frames_are_told_apart_by_their_udp_port() {
        let frame = |ethertype: u16, l3: &[u8]| -> Vec<u8> {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&ethertype.to_be_bytes());
            f.extend_from_slice(l3);
            f
        };
        let mut v4 = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0];
        v4.extend_from_slice(&[0; 8]);
        v4.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7, 0, 8, 0, 0]); // UDP to 4791
        assert_eq!(udp_dst_port(&frame(0x0800, &v4)), Some(4791));
        assert!(Match::Roce.takes(&frame(0x0800, &v4)));
        let mut tcp = v4.clone();
        tcp[9] = 6;
        assert!(!Match::Roce.takes(&frame(0x0800, &tcp)));
        let mut fragment = v4.clone();
        fragment[7] = 1; // a later fragment has no UDP header
        assert!(!Match::Roce.takes(&frame(0x0800, &fragment)));
        let mut v6 = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        v6.extend_from_slice(&[0; 32]);
        v6.extend_from_slice(&[0x30, 0x39, 0x12, 0xb7, 0, 8, 0, 0]);
        assert!(Match::Roce.takes(&frame(0x86dd, &v6)));
        let mut tagged = vec![0x00, 0x05, 0x08, 0x00];
        tagged.extend_from_slice(&v4);
        assert!(Match::Roce.takes(&frame(0x8100, &tagged)));
        assert!(!Match::Roce.takes(&frame(0x0806, &[0; 28])), "ARP");
        assert!(!Match::Roce.takes(&v4[..10]), "too short");
        assert!(Match::All.takes(&[]));
    }

    #[test]
    fn gsi_frames_are_told_apart_by_their_bth_destination_qp() {
        // IPv4 + UDP to 4791 + a BTH whose destination QP is `qp`.
        let frame = |qp: u32| -> Vec<u8> {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&[0; 8]);
            f.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7, 0, 20, 0, 0]);
            let mut bth = [0u8; 12];
            bth[5..8].copy_from_slice(&qp.to_be_bytes()[1..]);
            f.extend_from_slice(&bth);
            f
        };
        let (mad, data) = (frame(1), frame(0x10011));
        assert_eq!(roce_dest_qp(&data), Some(0x10011));
        assert!(Match::Gsi.takes(&mad) && !Match::NotGsi.takes(&mad));
        assert!(Match::NotGsi.takes(&data) && !Match::Gsi.takes(&data));
        assert!(Match::Roce.takes(&mad) && Match::Roce.takes(&data));
        let short = &mad[..mad.len() - 5];
        assert!(
            !Match::Gsi.takes(short) && !Match::NotGsi.takes(short),
            "no BTH"
        );
        let mut tcp = mad.clone();
        tcp[23] = 6;
        assert!(
            !Match::Gsi.takes(&tcp) && !Match::NotGsi.takes(&tcp),
            "not UDP"
        );
        for text in ["loss rate=1% match=gsi", "dup every=2 match=not-gsi"] {
            assert_eq!(Spec::parse(text).unwrap().to_string(), text);
        }
    }
}
