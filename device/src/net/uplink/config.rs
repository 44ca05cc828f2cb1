//! What starts an uplink: `--uplink name=U,tap=IFNAME[,impair=SPEC]` or
//! `--uplink name=U,dev=IFNAME[,impair=SPEC]`, or a `[[uplink]]` entry of the TOML file
//! with the same keys.

use super::tap::check_name;
use crate::net::impair::Spec;
use std::fmt;

/// How the uplink reaches the host's network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A tap device of this name, created or attached to.
    Tap(String),
    /// This existing interface, through a packet socket.
    Dev(String),
}

impl Kind {
    pub fn ifname(&self) -> &str {
        match self {
            Kind::Tap(n) | Kind::Dev(n) => n,
        }
    }

    /// `tap` or `dev`, as the spec writes it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Kind::Tap(_) => "tap",
            Kind::Dev(_) => "dev",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkConfig {
    pub name: String,
    pub kind: Kind,
    /// The impairment in force from the start.
    pub impair: Option<Spec>,
}

impl fmt::Display for UplinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "name={},{}={}",
            self.name,
            self.kind.kind_name(),
            self.kind.ifname()
        )?;
        if let Some(s) = &self.impair {
            write!(f, ",impair={s}")?;
        }
        Ok(())
    }
}

/// The keys of one uplink, from `--uplink` or an `[[uplink]]` entry.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UplinkKeys {
    pub name: Option<String>,
    pub tap: Option<String>,
    pub dev: Option<String>,
    pub impair: Option<String>,
}

impl UplinkKeys {
    /// `name=U,tap=IFNAME|dev=IFNAME[,impair=SPEC]`.
    pub fn parse(spec: &str) -> Result<UplinkKeys, String> {
        // The impairment spec has no commas, so splitting on them is unambiguous.
        let mut keys = UplinkKeys::default();
        for part in spec.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{}` is not key=value", shown(part)))?;
            let slot = match k {
                "name" => &mut keys.name,
                "tap" => &mut keys.tap,
                "dev" => &mut keys.dev,
                "impair" => &mut keys.impair,
                _ => {
                    return Err(format!(
                        "unknown key `{}` (name, tap, dev, impair)",
                        shown(k)
                    ))
                }
            };
            if slot.replace(v.to_string()).is_some() {
                return Err(format!("key `{k}` given twice"));
            }
        }
        Ok(keys)
    }

    pub fn finish(self) -> Result<UplinkConfig, String> {
        let name = self.name.ok_or("name=NAME is required")?;
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(format!(
                "name `{}` is not 1..64 letters, digits, `-`, `_` or `.`",
                shown(&name)
            ));
        }
        let kind =
            match (self.tap, self.dev) {
                (Some(t), None) => Kind::Tap(t),
                (None, Some(d)) => Kind::Dev(d),
                (None, None) => return Err(
                    "tap=IFNAME (a tap device) or dev=IFNAME (an existing interface) is required"
                        .into(),
                ),
                (Some(_), Some(_)) => {
                    return Err("tap= and dev= are two kinds of uplink: give one".into())
                }
            };
        check_name(kind.ifname()).map_err(|e| format!("{}: {e}", kind.kind_name()))?;
        let impair = self
            .impair
            .map(|s| Spec::parse(&s).map_err(|e| format!("impair: {e}")))
            .transpose()?;
        Ok(UplinkConfig { name, kind, impair })
    }
}

fn shown(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Uplink names and interfaces are unique among `uplinks`.
pub fn check_unique(uplinks: &[UplinkConfig]) -> Result<(), String> {
    for (i, a) in uplinks.iter().enumerate() {
        for b in &uplinks[i + 1..] {
            if a.name == b.name {
                return Err(format!("two uplinks are named {}", a.name));
            }
            if a.kind.ifname() == b.kind.ifname() {
                return Err(format!(
                    "uplinks {} and {} both use interface {}",
                    a.name,
                    b.name,
                    a.kind.ifname()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<UplinkConfig, String> {
        UplinkKeys::parse(s)?.finish()
    }

    #[test]
    fn an_uplink_is_a_tap_or_a_device_with_an_optional_impairment() {
        let u = parse("name=up0,tap=vrnic0").unwrap();
        assert_eq!(
            (u.name.as_str(), &u.kind, &u.impair),
            ("up0", &Kind::Tap("vrnic0".into()), &None)
        );
        let u = parse("dev=eth1,name=up1,impair=loss rate=1%;dup every=3").unwrap();
        assert_eq!(u.kind, Kind::Dev("eth1".into()));
        assert_eq!(
            u.to_string(),
            "name=up1,dev=eth1,impair=loss rate=1%; dup every=3"
        );
    }

    #[test]
    fn bad_uplinks_get_clear_errors() {
        for (spec, want) in [
            ("tap=t0", "name=NAME is required"),
            ("name=u", "tap=IFNAME"),
            ("name=u,tap=a,dev=b", "give one"),
            ("name=u,tap=a,tap=b", "`tap` given twice"),
            ("name=u,tap", "`tap` is not key=value"),
            ("name=u,wire=x", "unknown key `wire`"),
            ("name=,tap=a", "name `` is not"),
            ("name=a b,tap=a", "name `a b`"),
            ("name=u,tap=waytoolonginterface", "not 1..15 bytes"),
            ("name=u,dev=a/b", "not a valid interface name"),
            ("name=u,tap=t0,impair=loss", "impair: rule 1 (`loss`)"),
            ("name=u,tap=t0,impair=", "impair: empty impairment spec"),
        ] {
            let why = parse(spec).unwrap_err();
            assert!(why.contains(want), "{spec}: `{why}` does not say `{want}`");
        }
        let a = parse("name=a,tap=t0").unwrap();
        let b = parse("name=a,dev=t1").unwrap();
        let c = parse("name=c,dev=t0").unwrap();
        assert!(check_unique(&[a.clone(), b])
            .unwrap_err()
            .contains("named a"));
        assert!(check_unique(&[a, c]).unwrap_err().contains("interface t0"));
    }
}
