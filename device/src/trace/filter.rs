//! Which events a subscriber wants: a set of kinds and, optionally, one QP.

use super::event::{Event, Kind};
use serde::{Deserialize, Serialize};

/// Kinds as bits (`Kind::bit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KindSet(pub u32);

impl KindSet {
    pub const ALL: KindSet = KindSet((1 << Kind::ALL.len()) - 1);

    pub fn of(kinds: &[Kind]) -> KindSet {
        KindSet(kinds.iter().fold(0, |acc, k| acc | k.bit()))
    }

    pub fn contains(self, kind: Kind) -> bool {
        self.0 & kind.bit() != 0
    }

    pub fn kinds(self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|k| self.contains(*k))
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("unknown event kind `{0}` (kinds: admin, doorbell, wqe, cqe, eqe, irq, state)")]
    UnknownKind(String),
}

/// What a subscriber is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    #[serde(with = "kinds_as_names")]
    pub kinds: KindSet,
    /// Only events of this QP: admin commands on it, its doorbells, WQEs, CQEs, EQEs and
    /// state changes (events of no QP, such as interrupts, do not pass).
    pub qpn: Option<u32>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            kinds: KindSet::ALL,
            qpn: None,
        }
    }
}

impl Filter {
    /// Kinds as `--kinds` spells them: `admin,wqe` (empty: every kind).
    pub fn parse_kinds(text: &str) -> Result<KindSet, FilterError> {
        let mut set = KindSet::default();
        for word in text.split(',').filter(|w| !w.is_empty()) {
            let kind = Kind::from_name(word)
                .ok_or_else(|| FilterError::UnknownKind(word.chars().take(32).collect()))?;
            set.0 |= kind.bit();
        }
        Ok(if set.0 == 0 { KindSet::ALL } else { set })
    }

    /// Whether an event of `kind` for `qpn` passes (checked before the event is made).
    pub fn wants(&self, kind: Kind, qpn: Option<u32>) -> bool {
        self.kinds.contains(kind) && (self.qpn.is_none() || self.qpn == qpn)
    }

    pub fn passes(&self, event: &Event) -> bool {
        self.wants(event.body.kind(), event.qpn)
    }
}

mod kinds_as_names {
    use super::{Kind, KindSet};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(set: &KindSet, s: S) -> Result<S::Ok, S::Error> {
        set.kinds().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<KindSet, D::Error> {
        let kinds = Vec::<Kind>::deserialize(d)?;
        Ok(match KindSet::of(&kinds) {
            KindSet(0) => KindSet::ALL,
            set => set,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_their_names_and_empty_means_all() {
        assert_eq!(
            Filter::parse_kinds("admin,wqe"),
            Ok(KindSet::of(&[Kind::Admin, Kind::Wqe]))
        );
        assert_eq!(Filter::parse_kinds(""), Ok(KindSet::ALL));
        assert_eq!(
            Filter::parse_kinds("admin,pcap"),
            Err(FilterError::UnknownKind("pcap".into()))
        );
    }

    #[test]
    fn a_qp_filter_passes_that_qp_only() {
        let f = Filter {
            kinds: KindSet::of(&[Kind::Cqe]),
            qpn: Some(7),
        };
        assert!(f.wants(Kind::Cqe, Some(7)));
        assert!(!f.wants(Kind::Cqe, Some(8)));
        assert!(!f.wants(Kind::Cqe, None));
        assert!(!f.wants(Kind::Wqe, Some(7)));
        assert!(Filter::default().wants(Kind::Irq, None));
    }
}
