//! The hw-spec source format (`hw-spec/spec/*.toml`) and its checked layout.

use serde::Deserialize;
use std::collections::HashMap;

/// One spec file: a chapter of SPEC.md and one C header.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    pub title: String,
    pub doc: String,
    #[serde(default)]
    pub constants: Vec<Constant>,
    #[serde(default)]
    pub enums: Vec<Enum>,
    #[serde(default)]
    pub structs: Vec<Struct>,
    #[serde(default)]
    pub registers: Vec<Register>,
    /// Relations between values that the generator verifies (see [`Check`]).
    #[serde(default)]
    pub checks: Vec<Check>,
    /// Contract rules the device checks in this chapter (see [`Rule`]).
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// A rule of the driver-device contract that the device checks (SPEC "Contract checking"):
/// its number (FATAL_DETAIL), the section of its chapter that states it (a `### ` heading
/// of the chapter's prose, or the chapter's title) and the rule in one line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    pub value: u64,
    pub section: String,
    pub doc: String,
}

/// Every rule with its chapter (1-based, as SPEC.md numbers them), ordered by number.
pub fn rules(files: &[(String, SpecFile)]) -> Vec<(usize, &Rule)> {
    let mut all: Vec<(usize, &Rule)> = files
        .iter()
        .enumerate()
        .flat_map(|(i, (_, f))| f.rules.iter().map(move |r| (i + 1, r)))
        .collect();
    all.sort_by_key(|(_, r)| r.value);
    all
}

/// How code and logs cite a rule's section: `5 / Posting work`.
pub fn rule_section(chapter: usize, rule: &Rule) -> String {
    format!("{chapter} / {}", rule.section)
}

/// A relation the spec must satisfy, e.g. `BAR_DB_SIZE == DB_PAGES * DB_PAGE_SIZE`: two
/// expressions compared with `==`, `!=`, `<`, `<=`, `>` or `>=` (see `check::eval`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    pub expr: String,
    pub doc: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constant {
    pub name: String,
    pub value: u64,
    pub doc: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enum {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub doc: String,
    /// The values are single bits combined into masks: also emitted as plain constants
    /// (a Rust module of the enum's name) with their union `ALL`.
    #[serde(default)]
    pub flags: bool,
    pub values: Vec<EnumValue>,
}

impl Enum {
    /// The union of every value (meaningful for flags).
    pub fn all(&self) -> u64 {
        self.values.iter().fold(0, |acc, v| acc | v.value)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnumValue {
    pub name: String,
    pub value: u64,
    pub doc: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Struct {
    pub name: String,
    pub size: u64,
    pub doc: String,
    pub fields: Vec<Field>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    #[serde(default)]
    pub count: Option<u64>,
    #[serde(default)]
    pub doc: Option<String>,
    /// The enum whose values this field holds (documentation and cross-checking only).
    #[serde(default, rename = "enum")]
    pub enum_name: Option<String>,
    /// The byte offset the field must have: the generator fails if the fields before it
    /// overlap it or leave an unnamed hole before it.
    #[serde(default)]
    pub offset: Option<u64>,
}

impl Field {
    /// Reserved fields are must-be-zero, documented and checked as such.
    pub fn is_reserved(&self) -> bool {
        self.name.starts_with("reserved")
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    pub block: String,
    pub name: String,
    pub offset: u64,
    pub access: Access,
    pub reset: u64,
    pub doc: String,
    #[serde(default)]
    pub fields: Vec<BitField>,
}

/// Access type of a register or of a register field.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Ro,
    Rw,
    Wo,
    Rw1c,
    Rw1s,
}

impl Access {
    pub const ALL: [Access; 5] = [
        Access::Ro,
        Access::Rw,
        Access::Wo,
        Access::Rw1c,
        Access::Rw1s,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Access::Ro => "ro",
            Access::Rw => "rw",
            Access::Wo => "wo",
            Access::Rw1c => "rw1c",
            Access::Rw1s => "rw1s",
        }
    }

    /// The Rust variant name of `RegAccess`.
    pub fn variant(self) -> &'static str {
        match self {
            Access::Ro => "Ro",
            Access::Rw => "Rw",
            Access::Wo => "Wo",
            Access::Rw1c => "Rw1c",
            Access::Rw1s => "Rw1s",
        }
    }

    /// What reads and writes do, for the spec and the generated docs.
    pub fn doc(self) -> &'static str {
        match self {
            Access::Ro => "Read-only: the device sets the value; writes are ignored.",
            Access::Rw => "Read-write: a write stores the value, a read returns it.",
            Access::Wo => "Write-only: a write hands the value to the device; reads return 0.",
            Access::Rw1c => "Write 1 to clear: writing 1 clears a bit the device set, writing 0 leaves it; reads return the bits.",
            Access::Rw1s => "Write 1 to trigger: writing 1 starts an action, writing 0 does nothing; self-clearing, reads return 0.",
        }
    }
}

/// How a guest write changes a register, derived from its fields' access types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegMasks {
    /// Bits whose written value is taken (rw and wo).
    pub writable: u32,
    /// Bits a written 1 clears (rw1c).
    pub w1c: u32,
    /// Bits a written 1 triggers an action for (rw1s).
    pub w1s: u32,
    /// Bits a read returns (ro, rw, rw1c).
    pub readable: u32,
    /// Bits outside every field: must be written as 0, read as 0.
    pub reserved: u32,
}

impl Register {
    /// A field's access type: its own, else the register's.
    pub fn field_access(&self, f: &BitField) -> Access {
        f.access.unwrap_or(self.access)
    }

    /// The register's bits as (mask, access): its fields, or the whole register if it has none.
    pub fn parts(&self) -> Vec<(u32, Access)> {
        if self.fields.is_empty() {
            vec![(u32::MAX, self.access)]
        } else {
            self.fields
                .iter()
                .map(|f| (f.mask() as u32, self.field_access(f)))
                .collect()
        }
    }

    pub fn masks(&self) -> RegMasks {
        let parts = self.parts();
        let of = |wanted: &[Access]| {
            parts
                .iter()
                .filter(|(_, a)| wanted.contains(a))
                .fold(0, |acc, (m, _)| acc | m)
        };
        RegMasks {
            writable: of(&[Access::Rw, Access::Wo]),
            w1c: of(&[Access::Rw1c]),
            w1s: of(&[Access::Rw1s]),
            readable: of(&[Access::Ro, Access::Rw, Access::Rw1c]),
            reserved: !parts.iter().fold(0, |acc, (m, _)| acc | m),
        }
    }
}

/// Registers are 32 bits wide.
pub const REG_BITS: u32 = 32;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BitField {
    pub name: String,
    pub lsb: u32,
    pub width: u32,
    /// Defaults to the register's access type.
    #[serde(default)]
    pub access: Option<Access>,
    pub doc: String,
}

impl BitField {
    /// The field's bits (clipped to 32 bits: `check` rejects a field that does not fit).
    pub fn mask(&self) -> u64 {
        let ones = 1u64.checked_shl(self.width).map_or(u64::MAX, |v| v - 1);
        ones.checked_shl(self.lsb).unwrap_or(0) & 0xFFFF_FFFF
    }
}

/// Size and alignment of a primitive field type, if it is one.
pub fn primitive(ty: &str) -> Option<u64> {
    match ty {
        "u8" => Some(1),
        "u16" => Some(2),
        "u32" => Some(4),
        "u64" => Some(8),
        _ => None,
    }
}

/// A field placed at its offset.
pub struct Placed<'a> {
    pub field: &'a Field,
    pub offset: u64,
    pub size: u64,
}

/// Offsets of every struct, computed with C's rules and checked: no implicit padding anywhere,
/// declared sizes match, enums and nested types exist.
pub struct Layout<'a> {
    pub structs: HashMap<&'a str, (u64, u64, Vec<Placed<'a>>)>, // size, align, fields
}

impl<'a> Layout<'a> {
    pub fn compute(files: &'a [(String, SpecFile)]) -> Result<Self, String> {
        let enums: Vec<&str> = files
            .iter()
            .flat_map(|(_, f)| f.enums.iter().map(|e| e.name.as_str()))
            .collect();
        crate::check::items(files)?;
        check_unique_names(files)?;
        let mut structs: HashMap<&'a str, (u64, u64, Vec<Placed<'a>>)> = HashMap::new();
        for (_, file) in files {
            for s in &file.structs {
                let mut offset = 0;
                let mut align = 1;
                let mut placed = Vec::new();
                for f in &s.fields {
                    let (elem_size, elem_align) = match primitive(&f.ty) {
                        Some(n) => (n, n),
                        None => match structs.get(f.ty.as_str()) {
                            Some((size, align, _)) => (*size, *align),
                            None => {
                                return Err(format!("{}.{}: unknown type {}", s.name, f.name, f.ty))
                            }
                        },
                    };
                    if let Some(e) = &f.enum_name {
                        if !enums.contains(&e.as_str()) {
                            return Err(format!("{}.{}: unknown enum {e}", s.name, f.name));
                        }
                    }
                    match f.offset {
                        Some(want) if want > offset => {
                            return Err(format!(
                                "{}.{}: declared at offset {want}, but the fields before it end at {offset}: an unnamed hole of {} bytes; add a reserved field",
                                s.name,
                                f.name,
                                want - offset
                            ))
                        }
                        Some(want) if want < offset => {
                            return Err(format!(
                                "{}.{}: declared at offset {want}, but it overlaps the fields before it (they end at {offset})",
                                s.name, f.name
                            ))
                        }
                        _ => {}
                    }
                    if offset % elem_align != 0 {
                        return Err(format!(
                            "{}.{}: offset {offset} is not {elem_align}-aligned (C would leave an unnamed hole); add an explicit reserved field",
                            s.name, f.name
                        ));
                    }
                    let size = elem_size * f.count.unwrap_or(1);
                    placed.push(Placed {
                        field: f,
                        offset,
                        size,
                    });
                    offset += size;
                    align = align.max(elem_align);
                }
                if offset < s.size {
                    return Err(format!(
                        "{}: fields add up to {offset} bytes, declared size {}: an unnamed hole of {} bytes at the end; add a reserved field",
                        s.name,
                        s.size,
                        s.size - offset
                    ));
                }
                if offset > s.size {
                    return Err(format!(
                        "{}: fields add up to {offset} bytes, more than the declared size {}",
                        s.name, s.size
                    ));
                }
                if s.size % align != 0 {
                    return Err(format!(
                        "{}: size {} is not a multiple of its alignment {align}",
                        s.name, s.size
                    ));
                }
                if structs.insert(&s.name, (s.size, align, placed)).is_some() {
                    return Err(format!("{}: defined twice", s.name));
                }
            }
        }
        Ok(Layout { structs })
    }

    pub fn fields(&self, name: &str) -> &[Placed<'a>] {
        self.structs
            .get(name)
            .map(|(_, _, p)| p.as_slice())
            .unwrap_or(&[])
    }
}

/// `page_list` -> `PageList`, `MTU_256` -> `Mtu256`.
pub fn camel(name: &str) -> String {
    name.split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let lower = p.to_ascii_lowercase();
            let mut c = lower.chars();
            match c.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// Hex for everything but small numbers.
pub fn number(v: u64) -> String {
    if v < 16 {
        v.to_string()
    } else {
        format!("0x{v:X}")
    }
}

/// The per-register masks derived from access types, `<BLOCK>_<REG>_<NAME>_MASK`.
pub const MASK_NAMES: [&str; 5] = ["WRITABLE", "W1C", "W1S", "READABLE", "RESERVED"];

/// Every C name (`VRNIC_...`) the headers will define must be unique.
fn check_unique_names(files: &[(String, SpecFile)]) -> Result<(), String> {
    let mut names = std::collections::HashSet::new();
    let mut add = |name: String| {
        if names.insert(name.clone()) {
            Ok(())
        } else {
            Err(format!("the C name VRNIC_{name} is defined twice"))
        }
    };
    for (_, f) in files {
        for c in &f.constants {
            add(c.name.clone())?;
        }
        for e in &f.enums {
            for v in &e.values {
                add(format!("{}_{}", e.name.to_uppercase(), v.name))?;
            }
        }
        for e in f.enums.iter().filter(|e| e.flags) {
            add(format!("{}_ALL", e.name.to_uppercase()))?;
        }
        for r in &f.rules {
            add(format!("RULE_{}", r.name))?;
        }
        for r in &f.registers {
            let prefix = format!("{}_{}", r.block.to_uppercase(), r.name);
            add(format!("{prefix}_OFF"))?;
            add(format!("{prefix}_RESET"))?;
            for m in MASK_NAMES {
                add(format!("{prefix}_{m}_MASK"))?;
            }
            for field in &r.fields {
                add(format!("{prefix}_{}_MASK", field.name))?;
                add(format!("{prefix}_{}_SHIFT", field.name))?;
            }
        }
        for s in &f.structs {
            add(format!("{}_SIZE", s.name.to_uppercase()))?;
            for field in &s.fields {
                add(format!(
                    "{}_{}_OFF",
                    s.name.to_uppercase(),
                    field.name.to_uppercase()
                ))?;
            }
        }
    }
    Ok(())
}
