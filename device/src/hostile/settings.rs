//! How a device's hostile mode is set: `hostile=SEED`, `hostile=KINDS:SEED` or
//! `hostile=KINDS:SEED:RATE` in the device spec, or the same text through the control
//! socket.

use super::kinds::KindSet;
use std::fmt;

/// Percentage of writes corrupted when none is given.
pub const DEFAULT_RATE: u8 = 10;

/// Which kinds, from which seed, how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub kinds: KindSet,
    pub seed: u64,
    /// Percentage (1..=100) of the writes a kind applies to that get corrupted.
    pub rate: u8,
}

impl Settings {
    /// `SEED`, `KINDS:SEED` or `KINDS:SEED:RATE` (seed decimal or 0x hex, rate 1..100).
    pub fn parse(text: &str) -> Result<Settings, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let (kinds, seed, rate) = match parts.as_slice() {
            [seed] => (KindSet::all(), *seed, None),
            [kinds, seed] => (KindSet::parse(kinds)?, *seed, None),
            [kinds, seed, rate] => (KindSet::parse(kinds)?, *seed, Some(*rate)),
            _ => return Err("hostile: SEED, KINDS:SEED or KINDS:SEED:RATE".into()),
        };
        let seed = parse_u64(seed).ok_or_else(|| {
            let shown: String = seed.chars().take(24).collect();
            format!("hostile: seed `{shown}` is not a number (decimal or 0x hex)")
        })?;
        let rate = match rate {
            None => DEFAULT_RATE,
            Some(r) => r
                .trim_end_matches('%')
                .parse::<u8>()
                .ok()
                .filter(|r| (1..=100).contains(r))
                .ok_or_else(|| {
                    let shown: String = r.chars().take(24).collect();
                    format!("hostile: rate `{shown}` is not a percentage in 1..100")
                })?,
        };
        Ok(Settings { kinds, seed, rate })
    }
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.kinds, self.seed, self.rate)
    }
}

fn parse_u64(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile::kinds::Kind;

    #[test]
    fn a_seed_alone_means_every_kind_at_the_default_rate() {
        let s = Settings::parse("42").unwrap();
        assert_eq!(
            (s.kinds, s.seed, s.rate),
            (KindSet::all(), 42, DEFAULT_RATE)
        );
        assert_eq!(s.to_string(), "all:42:10");
        assert_eq!(Settings::parse(&s.to_string()), Ok(s));
    }

    #[test]
    fn kinds_seed_and_rate_parse_and_bad_ones_say_why() {
        let s = Settings::parse("cqe-phase+admin:0x10:100").unwrap();
        assert!(s.kinds.contains(Kind::CqePhase) && s.kinds.contains(Kind::AdminStatus));
        assert_eq!((s.seed, s.rate), (16, 100));
        for (text, why) in [
            ("cqe:x", "seed `x`"),
            ("cqe:1:0", "rate `0`"),
            ("cqe:1:101", "rate `101`"),
            ("a:b:c:d", "KINDS:SEED:RATE"),
            ("nope:1", "`nope`"),
        ] {
            let e = Settings::parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
