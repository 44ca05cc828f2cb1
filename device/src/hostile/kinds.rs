//! The corruptions the hostile mode knows, each a named kind, and sets of them.

/// What a kind corrupts: the ring or buffer it writes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Cqe,
    Eqe,
    Admin,
    Attr,
    Irq,
}

macro_rules! kinds {
    ($($kind:ident $name:literal $class:ident $doc:literal;)*) => {
        /// One corruption (SPEC structures named in each).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Kind { $(#[doc = $doc] $kind,)* }

        impl Kind {
            pub const ALL: &'static [Kind] = &[$(Kind::$kind,)*];

            /// The kind's name in device specs, ctl and logs.
            pub fn name(self) -> &'static str {
                match self { $(Kind::$kind => $name,)* }
            }

            pub fn class(self) -> Class {
                match self { $(Kind::$kind => Class::$class,)* }
            }

            pub fn doc(self) -> &'static str {
                match self { $(Kind::$kind => $doc,)* }
            }
        }
    };
}

kinds! {
    CqeQpnWrong "cqe-qpn-wrong" Cqe "cqe.qpn names another existing QP (not the one that completed).";
    CqeQpnForeign "cqe-qpn-foreign" Cqe "cqe.qpn names a QP of another context than the CQ's.";
    CqeQpnRange "cqe-qpn-range" Cqe "cqe.qpn is no QPN at all (0, 1 or above QPN_MAX).";
    CqeQpnFree "cqe-qpn-free" Cqe "cqe.qpn is a valid-looking QPN that no QP has.";
    CqeWqeRange "cqe-wqe-range" Cqe "cqe.wqe_index is outside its queue (>= depth).";
    CqeWqeUnposted "cqe-wqe-unposted" Cqe "cqe.wqe_index names a slot the driver has not posted.";
    CqeOpcode "cqe-opcode" Cqe "cqe.opcode is no wc_opcode.";
    CqeStatus "cqe-status" Cqe "cqe.status is no wc_status.";
    CqeFlags "cqe-flags" Cqe "cqe.flags and wc_flags carry bits no enum defines.";
    CqeByteLen "cqe-byte-len" Cqe "cqe.byte_len is larger than any posted buffer (above MAX_MSG_SIZE).";
    CqeSrqn "cqe-srqn" Cqe "cqe has CQE_FLAG_SRQ and an srqn of no SRQ.";
    CqeDuplicate "cqe-duplicate" Cqe "the CQE is written twice (two ring entries).";
    CqePhase "cqe-phase" Cqe "the CQE is written with the wrong owner phase.";
    EqeType "eqe-type" Eqe "eqe.event_type is no event_type.";
    EqeObjRange "eqe-obj-range" Eqe "eqe.obj is out of the range of its kind of object.";
    EqeObjFree "eqe-obj-free" Eqe "eqe.obj is a number no object of its kind has.";
    EqeObjForeign "eqe-obj-foreign" Eqe "eqe.obj names an object of someone else (a CQ of another EQ, a QP or SRQ of another context).";
    EqeStorm "eqe-storm" Eqe "the EQE is repeated many times (an event storm).";
    AdminCmdId "admin-cmd-id" Admin "aq_completion.cmd_id is not the command's.";
    AdminStatus "admin-status" Admin "aq_completion.status is no aq_status.";
    AdminHandleRange "admin-handle-range" Admin "a created object's handle (or doorbell slot/page) is out of range.";
    AdminHandleInUse "admin-handle-in-use" Admin "a created object's handle is that of another existing object.";
    AttrDevice "attr-device" Attr "a device_attr field is nonsense (a max_* of 0 or huge, no ports, no vectors).";
    AttrPort "attr-port" Attr "a port_attr field is nonsense (unknown state, MTU, link layer, empty tables).";
    IrqSpurious "irq-spurious" Irq "an MSI-X vector is raised with nothing new for it.";
}

impl Kind {
    pub const COUNT: usize = Kind::ALL.len();

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

/// A set of kinds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindSet(u32);

const _: () = assert!(Kind::COUNT <= 32);

/// Names of groups of kinds, accepted where a kind is.
const GROUPS: &[(&str, Option<Class>)] = &[
    ("all", None),
    ("cqe", Some(Class::Cqe)),
    ("eqe", Some(Class::Eqe)),
    ("admin", Some(Class::Admin)),
    ("attr", Some(Class::Attr)),
    ("irq", Some(Class::Irq)),
];

impl KindSet {
    pub const ALL: KindSet = KindSet((1u32 << Kind::COUNT) - 1);

    pub fn all() -> KindSet {
        KindSet::ALL
    }

    pub fn insert(&mut self, kind: Kind) {
        self.0 |= 1 << kind as u32;
    }

    pub fn contains(self, kind: Kind) -> bool {
        self.0 & (1 << kind as u32) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Kind> {
        Kind::ALL.iter().copied().filter(move |&k| self.contains(k))
    }

    /// `+`-separated kind or group names (`cqe+eqe-type+irq`).
    pub fn parse(text: &str) -> Result<KindSet, String> {
        let mut set = KindSet::default();
        for word in text.split('+') {
            if let Some(kind) = Kind::from_name(word) {
                set.insert(kind);
            } else if let Some((_, class)) = GROUPS.iter().find(|(g, _)| *g == word) {
                for &k in Kind::ALL {
                    if class.is_none_or(|c| k.class() == c) {
                        set.insert(k);
                    }
                }
            } else {
                let shown: String = word.chars().take(40).collect();
                return Err(format!(
                    "`{shown}` is neither a kind nor a group (groups: all, cqe, eqe, admin, attr, irq; kinds: {})",
                    Kind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        Ok(set)
    }
}

impl std::fmt::Display for KindSet {
    /// The shortest spelling: `all`, else groups and kinds joined by `+`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == KindSet::all() {
            return f.write_str("all");
        }
        let mut words = Vec::new();
        for (name, class) in &GROUPS[1..] {
            let members: Vec<Kind> = Kind::ALL
                .iter()
                .copied()
                .filter(|k| Some(k.class()) == *class)
                .collect();
            if members.iter().all(|&k| self.contains(k)) {
                words.push(name.to_string());
            } else {
                words.extend(
                    members
                        .iter()
                        .filter(|&&k| self.contains(k))
                        .map(|k| k.name().to_string()),
                );
            }
        }
        f.write_str(&words.join("+"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_groups_parse_and_print_back() {
        let set = KindSet::parse("eqe+cqe-phase+irq").unwrap();
        assert!(set.contains(Kind::EqeStorm) && set.contains(Kind::CqePhase));
        assert!(!set.contains(Kind::CqeOpcode));
        assert_eq!(set.to_string(), "cqe-phase+eqe+irq");
        assert_eq!(KindSet::parse(&set.to_string()), Ok(set));
        assert_eq!(KindSet::parse("all").unwrap().to_string(), "all");
        assert_eq!(KindSet::all().iter().count(), Kind::COUNT);
    }

    #[test]
    fn an_unknown_kind_is_refused_with_the_known_ones() {
        let e = KindSet::parse("cqe+bogus").unwrap_err();
        assert!(e.contains("`bogus`") && e.contains("cqe-qpn-wrong"), "{e}");
        assert!(KindSet::parse("").is_err());
    }
}
