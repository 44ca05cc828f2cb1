//! The contract checker (SPEC "Contract checking"): the driver's violations of hw-spec's
//! contract rules (`vrnic_hw::ContractRule`), counted per rule and logged, or in `strict`
//! mode made a fatal device error that names the rule (FATAL_CODE CONTRACT, FATAL_DETAIL).
//!
//! The checks live where the device already looks at the input (the register write, the
//! admin doorbell, the command decoder, the data path's error branches) and call `report`;
//! what the device does with the bad input is unchanged. Only trapped register writes do
//! work of their own here (`check_reg_write`); on the data path a check runs only on a
//! branch that already handles an error, so correct traffic pays nothing.
//!
//! Counts are kept per device from its start, across resets (the host reads them after
//! the guest has gone), outside the device lock.

use super::{Rnic, RnicState};
use crate::trace::{Body, Kind};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use vrnic_hw::{bar0, ContractRule, FatalCode};

/// What a device does about a violation (`contract=` in the device spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContractMode {
    /// Count and log (rate-limited).
    #[default]
    Warn,
    /// Count, log, and fail the device (FATAL_CODE CONTRACT).
    Strict,
    /// Neither.
    Off,
}

impl ContractMode {
    pub const ALL: [ContractMode; 3] =
        [ContractMode::Warn, ContractMode::Strict, ContractMode::Off];

    pub fn as_str(self) -> &'static str {
        match self {
            ContractMode::Warn => "warn",
            ContractMode::Strict => "strict",
            ContractMode::Off => "off",
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == text)
            .ok_or_else(|| format!("contract: `{text}` is not warn, strict or off"))
    }
}

/// One device's checker: its mode and a count per rule.
#[derive(Debug)]
pub struct Contract {
    mode: AtomicU8,
    counts: [AtomicU64; ContractRule::COUNT],
}

impl Contract {
    pub fn new(mode: ContractMode) -> Self {
        Contract {
            mode: AtomicU8::new(mode as u8),
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub fn mode(&self) -> ContractMode {
        match self.mode.load(Ordering::Relaxed) {
            m if m == ContractMode::Strict as u8 => ContractMode::Strict,
            m if m == ContractMode::Off as u8 => ContractMode::Off,
            _ => ContractMode::Warn,
        }
    }

    /// Violations of `rule` so far.
    pub fn count(&self, rule: ContractRule) -> u64 {
        self.counts[rule.index()].load(Ordering::Relaxed)
    }

    /// Every rule with its count, in rule order.
    pub fn counts(&self) -> Vec<(ContractRule, u64)> {
        ContractRule::ALL
            .iter()
            .map(|&r| (r, self.count(r)))
            .collect()
    }
}

/// The driver broke `rule`; `what` says how (object, values). Counts it, logs it
/// (rate-limited, with the rule's name and SPEC.md section) and in strict mode fails the
/// device. Every violation goes through here: this is where the tracer is to be connected.
pub fn report(rnic: &Rnic, st: &mut RnicState, rule: ContractRule, what: std::fmt::Arguments<'_>) {
    let mode = rnic.contract.mode();
    if mode == ContractMode::Off {
        return;
    }
    rnic.contract.counts[rule.index()].fetch_add(1, Ordering::Relaxed);
    rnic.trace.emit(Kind::Contract, None, || {
        Some(Body::Contract {
            rule: rule.name().into(),
            number: u16::from(rule),
            section: rule.section().into(),
            what: what.to_string(),
        })
    });
    st.warn(
        rnic,
        format_args!(
            "contract rule {} (SPEC.md {}) broken: {what}",
            rule.name(),
            rule.section()
        ),
    );
    if mode == ContractMode::Strict && st.regs.dev_status & bar0::DEV_STATUS_FATAL_MASK == 0 {
        rnic.fatal(st, FatalCode::Contract, u32::from(u16::from(rule)));
    }
}

/// What the host sees of a device's checker (`vrnic ctl contract`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContractView {
    /// warn, strict or off.
    pub mode: String,
    /// Violations of every rule together.
    pub violations: u64,
    /// The rule that made the device FATAL (FATAL_CODE CONTRACT), until a reset.
    pub fatal_rule: Option<String>,
    /// Every rule, by number, with its count.
    pub rules: Vec<RuleCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuleCount {
    pub rule: String,
    pub number: u16,
    pub section: String,
    pub count: u64,
}

impl Rnic {
    /// The checker's view: mode and counts (no lock), the fatal rule (the lock, briefly).
    pub fn contract_view(&self) -> ContractView {
        let (code, detail) = {
            let st = self.lock();
            (st.regs.fatal_code, st.regs.fatal_detail)
        };
        let fatal_rule = (code == u32::from(FatalCode::Contract))
            .then(|| {
                u16::try_from(detail)
                    .ok()
                    .and_then(|d| ContractRule::try_from(d).ok())
            })
            .flatten()
            .map(|r| r.name().to_string());
        let rules: Vec<RuleCount> = self
            .contract
            .counts()
            .into_iter()
            .map(|(r, count)| RuleCount {
                rule: r.name().into(),
                number: r.into(),
                section: r.section().into(),
                count,
            })
            .collect();
        ContractView {
            mode: self.contract.mode().as_str().into(),
            violations: rules.iter().map(|r| r.count).sum(),
            fatal_rule,
            rules,
        }
    }
}

/// The admin queue registers, latched at ENABLE (SPEC "Bring-up").
const AQ_REGS: [u64; 5] = [
    bar0::AQ_BASE_LO,
    bar0::AQ_BASE_HI,
    bar0::ACQ_BASE_LO,
    bar0::ACQ_BASE_HI,
    bar0::AQ_DEPTH_LOG2,
];

/// Checks a trapped BAR0 write before it takes effect: reserved bits set, admin queue
/// registers written while enabled. (Writes to read-only or undefined offsets are reported
/// where the register file ignores them.) False if the write made the device fail (strict):
/// the caller then drops it.
pub fn check_reg_write(rnic: &Rnic, st: &mut RnicState, offset: u64, value: u32) -> bool {
    if rnic.contract.mode() == ContractMode::Off {
        return true;
    }
    let Some(masks) = bar0::masks(offset).filter(|m| m.is_writable()) else {
        return true;
    };
    let fatal = |st: &RnicState| st.regs.dev_status & bar0::DEV_STATUS_FATAL_MASK != 0;
    let was_fatal = fatal(st);
    let reserved = masks.reserved_bits(value);
    if reserved != 0 {
        report(
            rnic,
            st,
            ContractRule::RegReservedBits,
            format_args!(
                "BAR0 write of {value:#x} to {offset:#x} sets reserved bits {reserved:#x}"
            ),
        );
    }
    if AQ_REGS.contains(&offset) && st.regs.dev_ctrl & bar0::DEV_CTRL_ENABLE_MASK != 0 {
        report(
            rnic,
            st,
            ContractRule::AqRegWhileEnabled,
            format_args!(
                "BAR0 write of {value:#x} to admin queue register {offset:#x} while enabled"
            ),
        );
    }
    was_fatal || !fatal(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_their_names_and_refuse_others() {
        for m in ContractMode::ALL {
            assert_eq!(ContractMode::parse(m.as_str()), Ok(m));
        }
        let e = ContractMode::parse("loud").unwrap_err();
        assert!(e.contains("warn, strict or off"), "{e}");
    }

    #[test]
    fn the_mode_reads_back_and_counts_start_at_zero() {
        for m in ContractMode::ALL {
            let c = Contract::new(m);
            assert_eq!(c.mode(), m);
            assert!(c.counts().iter().all(|(_, n)| *n == 0));
            assert_eq!(c.counts().len(), ContractRule::COUNT);
        }
    }
}
