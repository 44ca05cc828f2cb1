//! `vrnic ctl trace`'s options: `--kinds admin,wqe` and `--qp N`.

use super::event::Kind;
use super::filter::Filter;

#[derive(Debug, Default)]
pub struct TraceOptions {
    /// Taken by the trace command; left here means another command was given them.
    pub kinds: Option<Vec<Kind>>,
    pub qpn: Option<u32>,
}

fn parse_qpn(text: &str) -> Option<u32> {
    match text.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

impl TraceOptions {
    /// Takes option `name` with its `value`.
    pub fn option(&mut self, name: &str, value: Option<&String>) -> Result<(), String> {
        let value = value.ok_or_else(|| format!("{name} needs a value"))?;
        match name {
            "--kinds" => {
                let set = Filter::parse_kinds(value).map_err(|e| format!("--kinds: {e}"))?;
                self.kinds = Some(set.kinds());
            }
            _ => {
                let qpn = parse_qpn(value)
                    .ok_or_else(|| format!("--qp: `{value}` is not a QPN (hex 0x.. or decimal)"))?;
                self.qpn = Some(qpn);
            }
        }
        Ok(())
    }

    /// An error if `--kinds` or `--qp` were given to a command other than trace.
    pub fn all_used(&self) -> Result<(), String> {
        match (self.kinds.is_some(), self.qpn.is_some()) {
            (false, false) => Ok(()),
            _ => Err("--kinds and --qp are options of trace only".into()),
        }
    }
}
