//! `contract DEVICE`: the contract checker's mode and per-rule violation counts of a device
//! (SPEC "Contract checking"), and their text form.

use super::handlers::{device, encode};
use super::protocol::RequestError;
use crate::fabric::Fabric;
use crate::rnic::contract::ContractView;
use serde::{Deserialize, Serialize};

/// The answer to `contract`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractReply {
    pub device: String,
    #[serde(flatten)]
    pub contract: ContractView,
}

pub fn handle(fabric: &Fabric, name: &str) -> Result<Vec<u8>, RequestError> {
    let rnic = device(fabric, name)?;
    encode(&ContractReply {
        device: rnic.name().into(),
        contract: rnic.contract_view(),
    })
}

/// Every rule with its count, then the mode and the total.
pub fn render(reply: &str) -> Result<String, serde_json::Error> {
    let r: ContractReply = serde_json::from_str(reply)?;
    let c = &r.contract;
    let rows: Vec<Vec<String>> = c
        .rules
        .iter()
        .map(|x| {
            vec![
                x.number.to_string(),
                x.rule.clone(),
                x.count.to_string(),
                format!("SPEC.md {}", x.section),
            ]
        })
        .collect();
    let fatal = c
        .fatal_rule
        .as_ref()
        .map_or(String::new(), |rule| format!(", fatal: broke {rule}"));
    Ok(format!(
        "{} contract checking {}: {} violations{fatal}\n{}",
        r.device,
        c.mode,
        c.violations,
        super::render::table(&["#", "RULE", "COUNT", "SECTION"], &rows)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::contract::RuleCount;

    #[test]
    fn the_text_form_names_each_rule_its_count_and_section_and_a_fatal_rule() {
        let reply = ContractReply {
            device: "r0".into(),
            contract: ContractView {
                mode: "strict".into(),
                violations: 1,
                fatal_rule: Some("QP_PI_BEYOND_RING".into()),
                rules: vec![RuleCount {
                    rule: "QP_PI_BEYOND_RING".into(),
                    number: 8,
                    section: "5 / Posting work (driver -> device)".into(),
                    count: 1,
                }],
            },
        };
        let text = render(&serde_json::to_string(&reply).unwrap()).unwrap();
        for want in [
            "r0 contract checking strict: 1 violations, fatal: broke QP_PI_BEYOND_RING",
            "8  QP_PI_BEYOND_RING  1      SPEC.md 5 / Posting work (driver -> device)",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }
}
