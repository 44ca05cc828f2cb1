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
    pub values: Vec<EnumValue>,
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

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Ro,
    Rw,
    Wo,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Ro => "ro",
            Access::Rw => "rw",
            Access::Wo => "wo",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BitField {
    pub name: String,
    pub lsb: u32,
    pub width: u32,
    pub doc: String,
}

impl BitField {
    pub fn mask(&self) -> u64 {
        (((1u64 << self.width) - 1) << self.lsb) & 0xFFFF_FFFF
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
                    if offset % elem_align != 0 {
                        return Err(format!(
                            "{}.{}: offset {offset} is not {elem_align}-aligned; add an explicit reserved field",
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
                if offset != s.size {
                    return Err(format!(
                        "{}: fields add up to {offset} bytes, declared size {}",
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
        for r in &f.registers {
            add(format!("{}_{}_OFF", r.block.to_uppercase(), r.name))?;
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
