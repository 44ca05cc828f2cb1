//! Consistency checks of the spec: every error names the item at fault.
//!
//! [`items`] checks each item on its own (enums, struct fields, registers and their fields);
//! [`relations`] evaluates the `[[checks]]` of every file, relations between constants, struct
//! sizes, enums and registers that the TOML states explicitly.

use crate::model::{primitive, Access, Layout, Register, SpecFile, REG_BITS};
use std::collections::{HashMap, HashSet};

/// Checks every enum, struct and register of the spec on its own.
pub fn items(files: &[(String, SpecFile)]) -> Result<(), String> {
    let mut enums = HashSet::new();
    let mut blocks: HashMap<&str, Vec<&Register>> = HashMap::new();
    for (_, file) in files {
        for e in &file.enums {
            if !enums.insert(e.name.as_str()) {
                return Err(format!("enum {}: defined twice", e.name));
            }
            enum_values(e)?;
        }
        for s in &file.structs {
            let mut names = HashSet::new();
            for f in &s.fields {
                if !names.insert(f.name.as_str()) {
                    return Err(format!("{}.{}: field defined twice", s.name, f.name));
                }
            }
        }
        for r in &file.registers {
            register(r)?;
            blocks.entry(&r.block).or_default().push(r);
        }
    }
    for (_, file) in files {
        for s in &file.structs {
            for f in &s.fields {
                let Some(name) = &f.enum_name else { continue };
                let Some(e) = files
                    .iter()
                    .flat_map(|(_, f)| &f.enums)
                    .find(|e| &e.name == name)
                else {
                    continue; // Layout reports the unknown enum.
                };
                let Some(size) = primitive(&f.ty) else {
                    return Err(format!(
                        "{}.{}: enum {name} on a field of type {}",
                        s.name, f.name, f.ty
                    ));
                };
                let max = e.values.iter().map(|v| v.value).max().unwrap_or(0);
                if !fits(max, size) {
                    return Err(format!(
                        "{}.{}: enum {name} has value {max:#x}, which does not fit in {}",
                        s.name, f.name, f.ty
                    ));
                }
            }
        }
    }
    for (_, file) in files {
        for e in file.enums.iter().filter(|e| e.flags) {
            if blocks.contains_key(e.name.as_str()) {
                return Err(format!(
                    "enum {} (flags): its Rust module would clash with register block {}",
                    e.name, e.name
                ));
            }
        }
    }
    let mut names: Vec<&&str> = blocks.keys().collect();
    names.sort();
    for block in names {
        block_registers(block, &blocks[*block])?;
    }
    Ok(())
}

fn fits(value: u64, size: u64) -> bool {
    size >= 8 || value >> (size * 8) == 0
}

fn enum_values(e: &crate::model::Enum) -> Result<(), String> {
    let Some(size) = primitive(&e.ty) else {
        return Err(format!(
            "enum {}: type {} is not u8, u16, u32 or u64",
            e.name, e.ty
        ));
    };
    let mut names = HashSet::new();
    let mut values: HashMap<u64, &str> = HashMap::new();
    for v in &e.values {
        if !names.insert(v.name.as_str()) {
            return Err(format!("enum {}: value name {} used twice", e.name, v.name));
        }
        if let Some(other) = values.insert(v.value, &v.name) {
            return Err(format!(
                "enum {}: {other} and {} both have the value {:#x}",
                e.name, v.name, v.value
            ));
        }
        if !fits(v.value, size) {
            return Err(format!(
                "enum {}: {} = {:#x} does not fit in {}",
                e.name, v.name, v.value, e.ty
            ));
        }
        if e.flags && !v.value.is_power_of_two() {
            return Err(format!(
                "enum {} (flags): {} = {:#x} is not a single bit",
                e.name, v.name, v.value
            ));
        }
    }
    Ok(())
}

fn register(r: &Register) -> Result<(), String> {
    let id = format!("register {}.{}", r.block, r.name);
    let mut names = HashSet::new();
    let mut used: u64 = 0;
    for f in &r.fields {
        if !names.insert(f.name.as_str()) {
            return Err(format!("{id}: field {} defined twice", f.name));
        }
        if f.width == 0 {
            return Err(format!("{id}: field {} has width 0", f.name));
        }
        let end = u64::from(f.lsb) + u64::from(f.width);
        if end > u64::from(REG_BITS) {
            return Err(format!(
                "{id}: field {} (bits {}:{}) extends beyond the {REG_BITS}-bit register",
                f.name,
                end - 1,
                f.lsb
            ));
        }
        let mask = f.mask();
        if used & mask != 0 {
            let other = r
                .fields
                .iter()
                .find(|o| o.name != f.name && o.mask() & mask != 0)
                .map_or("another field", |o| o.name.as_str());
            return Err(format!(
                "{id}: fields {other} and {} overlap (bits {:#x})",
                f.name,
                used & mask
            ));
        }
        used |= mask;
    }
    let accesses: Vec<Access> = r.parts().iter().map(|(_, a)| *a).collect();
    let consistent = match r.access {
        Access::Ro => accesses.iter().all(|a| *a == Access::Ro),
        Access::Wo => accesses
            .iter()
            .all(|a| matches!(a, Access::Wo | Access::Rw1s)),
        Access::Rw => accesses.iter().any(|a| *a != Access::Ro),
        Access::Rw1c | Access::Rw1s => accesses.iter().all(|a| *a == r.access),
    };
    if !consistent {
        let list: Vec<String> = r
            .fields
            .iter()
            .map(|f| format!("{} {}", f.name, r.field_access(f).as_str()))
            .collect();
        return Err(format!(
            "{id}: access {} does not agree with its fields ({})",
            r.access.as_str(),
            list.join(", ")
        ));
    }
    let masks = r.masks();
    let reset = u32::try_from(r.reset)
        .map_err(|_| format!("{id}: reset value {:#x} is wider than 32 bits", r.reset))?;
    if reset & masks.reserved != 0 {
        return Err(format!(
            "{id}: reset value {reset:#x} sets reserved bits {:#x}",
            reset & masks.reserved
        ));
    }
    if reset & !masks.readable & !masks.reserved != 0 {
        return Err(format!(
            "{id}: reset value {reset:#x} sets bits {:#x} that always read 0 (wo or rw1s)",
            reset & !masks.readable
        ));
    }
    Ok(())
}

fn block_registers(block: &str, regs: &[&Register]) -> Result<(), String> {
    let mut names = HashSet::new();
    let mut offsets: HashMap<u64, &str> = HashMap::new();
    for r in regs {
        if !names.insert(r.name.as_str()) {
            return Err(format!("register {block}.{}: defined twice", r.name));
        }
        if r.offset % 4 != 0 {
            return Err(format!(
                "register {block}.{}: offset {:#x} is not 4-byte aligned",
                r.name, r.offset
            ));
        }
        if let Some(other) = offsets.insert(r.offset, &r.name) {
            return Err(format!(
                "registers {block}.{other} and {block}.{} overlap at offset {:#x}",
                r.name, r.offset
            ));
        }
    }
    Ok(())
}

/// Evaluates every `[[checks]]` entry.
pub fn relations(files: &[(String, SpecFile)], layout: &Layout) -> Result<(), String> {
    embedded_structs(files, layout)?;
    contract_rules(files)?;
    let env = Env { files, layout };
    for (stem, file) in files {
        for c in &file.checks {
            let outcome =
                eval(&c.expr, &env).map_err(|e| format!("{stem}.toml: check `{}`: {e}", c.expr))?;
            if let Some((left, op, right)) = outcome {
                return Err(format!(
                    "{stem}.toml: check `{}` fails: {left} ({left:#x}) {op} {right} ({right:#x}) is false; {}",
                    c.expr, c.doc
                ));
            }
        }
    }
    Ok(())
}

/// What names in a check expression refer to.
pub struct Env<'a> {
    pub files: &'a [(String, SpecFile)],
    pub layout: &'a Layout<'a>,
}

impl Env<'_> {
    fn constant(&self, name: &str) -> Option<u64> {
        self.files
            .iter()
            .flat_map(|(_, f)| &f.constants)
            .find(|c| c.name == name)
            .map(|c| c.value)
    }

    fn enum_(&self, name: &str) -> Result<&crate::model::Enum, String> {
        self.files
            .iter()
            .flat_map(|(_, f)| &f.enums)
            .find(|e| e.name == name)
            .ok_or_else(|| format!("unknown enum {name}"))
    }

    fn register(&self, name: &str) -> Result<&Register, String> {
        let (block, reg) = name
            .split_once('.')
            .ok_or_else(|| format!("{name}: name a register as block.NAME"))?;
        self.files
            .iter()
            .flat_map(|(_, f)| &f.registers)
            .find(|r| r.block == block && r.name == reg)
            .ok_or_else(|| format!("unknown register {name}"))
    }

    fn call(&self, function: &str, arg: &str) -> Result<u64, String> {
        match function {
            "sizeof" => self
                .layout
                .structs
                .get(arg)
                .map(|(size, _, _)| *size)
                .ok_or_else(|| format!("unknown struct {arg}")),
            "all" => Ok(self.enum_(arg)?.all()),
            "max" => Ok(self
                .enum_(arg)?
                .values
                .iter()
                .map(|v| v.value)
                .max()
                .unwrap_or(0)),
            "reset" => Ok(self.register(arg)?.reset),
            "offset" => Ok(self.register(arg)?.offset),
            "end" => self
                .files
                .iter()
                .flat_map(|(_, f)| &f.registers)
                .filter(|r| r.block == arg)
                .map(|r| r.offset + 4)
                .max()
                .ok_or_else(|| format!("unknown register block {arg}")),
            other => Err(format!(
                "unknown function {other} (sizeof, all, max, reset, offset, end)"
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(u64),
    Name(String),
    Op(&'static str),
}

const OPS: [&str; 17] = [
    "==", "!=", "<=", ">=", "<<", ">>", "<", ">", "+", "-", "*", "/", "%", "|", "&", "(", ")",
];

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while let Some(c) = rest.chars().next() {
        if c.is_ascii_digit() {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let word = rest[..end].replace('_', "");
            let value = match word.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => word.parse(),
            }
            .map_err(|_| format!("bad number {}", &rest[..end]))?;
            out.push(Token::Num(value));
            rest = &rest[end..];
        } else if c.is_ascii_alphabetic() || c == '_' {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(rest.len());
            out.push(Token::Name(rest[..end].to_string()));
            rest = &rest[end..];
        } else {
            let op = OPS
                .iter()
                .find(|op| rest.starts_with(**op))
                .ok_or_else(|| format!("unexpected character {c:?}"))?;
            out.push(Token::Op(op));
            rest = &rest[op.len()..];
        }
        rest = rest.trim_start();
    }
    Ok(out)
}

struct Parser<'a, 'e> {
    tokens: Vec<Token>,
    pos: usize,
    env: &'a Env<'e>,
}

/// Binary operators by precedence level, loosest first (C's order).
const LEVELS: [&[&str]; 5] = [&["|"], &["&"], &["<<", ">>"], &["+", "-"], &["*", "/", "%"]];

impl Parser<'_, '_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn expect(&mut self, op: &str) -> Result<(), String> {
        match self.next() {
            Some(Token::Op(o)) if o == op => Ok(()),
            other => Err(format!("expected `{op}`, found {other:?}")),
        }
    }

    fn binary(&mut self, level: usize) -> Result<u64, String> {
        if level == LEVELS.len() {
            return self.primary();
        }
        let mut left = self.binary(level + 1)?;
        loop {
            let op = match self.peek() {
                Some(Token::Op(op)) if LEVELS[level].contains(op) => *op,
                _ => return Ok(left),
            };
            self.pos += 1;
            let right = self.binary(level + 1)?;
            let value = match op {
                "|" => Some(left | right),
                "&" => Some(left & right),
                "<<" => u32::try_from(right).ok().and_then(|r| left.checked_shl(r)),
                ">>" => u32::try_from(right).ok().and_then(|r| left.checked_shr(r)),
                "+" => left.checked_add(right),
                "-" => left.checked_sub(right),
                "*" => left.checked_mul(right),
                "/" => left.checked_div(right),
                _ => left.checked_rem(right),
            };
            left = value.ok_or_else(|| format!("{left} {op} {right} overflows"))?;
        }
    }

    fn primary(&mut self) -> Result<u64, String> {
        match self.next() {
            Some(Token::Num(n)) => Ok(n),
            Some(Token::Op("(")) => {
                let v = self.binary(0)?;
                self.expect(")")?;
                Ok(v)
            }
            Some(Token::Name(name)) => {
                if self.peek() == Some(&Token::Op("(")) {
                    self.pos += 1;
                    let arg = match self.next() {
                        Some(Token::Name(arg)) => arg,
                        other => return Err(format!("{name}(): expected a name, found {other:?}")),
                    };
                    self.expect(")")?;
                    self.env.call(&name, &arg)
                } else {
                    self.env
                        .constant(&name)
                        .ok_or_else(|| format!("unknown constant {name}"))
                }
            }
            other => Err(format!("expected a value, found {other:?}")),
        }
    }
}

/// Evaluates `left OP right`: `Ok(None)` if it holds, `Ok(Some((left, op, right)))` if not.
pub fn eval(text: &str, env: &Env) -> Result<Option<(u64, &'static str, u64)>, String> {
    let mut p = Parser {
        tokens: tokens(text)?,
        pos: 0,
        env,
    };
    let left = p.binary(0)?;
    let op = match p.next() {
        Some(Token::Op(op)) if ["==", "!=", "<", "<=", ">", ">="].contains(&op) => op,
        other => return Err(format!("expected a comparison, found {other:?}")),
    };
    let right = p.binary(0)?;
    if let Some(extra) = p.peek() {
        return Err(format!("unexpected {extra:?} after the comparison"));
    }
    let holds = match op {
        "==" => left == right,
        "!=" => left != right,
        "<" => left < right,
        "<=" => left <= right,
        ">" => left > right,
        _ => left >= right,
    };
    Ok(if holds { None } else { Some((left, op, right)) })
}

/// Every `{{struct:NAME}}` line in a file's prose names a struct.
pub fn embedded_structs(files: &[(String, SpecFile)], layout: &Layout) -> Result<(), String> {
    for (stem, file) in files {
        for line in file.doc.lines() {
            let Some(rest) = line.trim().strip_prefix("{{struct:") else {
                continue;
            };
            let name = rest
                .strip_suffix("}}")
                .ok_or_else(|| format!("{stem}.toml: `{}`: missing }}}}", line.trim()))?;
            if !layout.structs.contains_key(name) {
                return Err(format!("{stem}.toml: `{}`: unknown struct", line.trim()));
            }
        }
    }
    Ok(())
}

/// Contract rules: unique names (upper case) and numbers (1..=0xFFFF: 0 is "no rule" in
/// FATAL_DETAIL), a one-line statement, and a section that exists in the rule's chapter.
pub fn contract_rules(files: &[(String, SpecFile)]) -> Result<(), String> {
    let mut names = HashSet::new();
    let mut values = HashMap::new();
    for (stem, file) in files {
        let mut sections: Vec<String> = file
            .doc
            .lines()
            .filter_map(|l| l.trim().strip_prefix("### "))
            .map(|h| h.trim().to_string())
            .collect();
        sections.push(file.title.clone());
        sections.extend(file.structs.iter().map(|s| format!("Struct `{}`", s.name)));
        sections.extend(file.enums.iter().map(|e| format!("Enum `{}`", e.name)));
        sections.extend(
            file.registers
                .iter()
                .map(|r| format!("Register block `{}`", r.block)),
        );
        if !file.registers.is_empty() {
            sections.push("Access types".into());
        }
        for r in &file.rules {
            let at = format!("{stem}.toml: rule {}", r.name);
            let upper = !r.name.is_empty()
                && r.name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !upper {
                return Err(format!("{at}: a rule's name is UPPER_CASE"));
            }
            if !names.insert(r.name.as_str()) {
                return Err(format!("{at}: defined twice"));
            }
            if r.value == 0 || r.value > 0xFFFF {
                return Err(format!(
                    "{at}: number {} is not in 1..=0xFFFF (0 means no rule)",
                    r.value
                ));
            }
            if let Some(other) = values.insert(r.value, r.name.as_str()) {
                return Err(format!("{at}: number {} is also rule {other}'s", r.value));
            }
            if r.doc.trim().is_empty() || r.doc.contains('\n') {
                return Err(format!("{at}: the statement is one non-empty line"));
            }
            if !sections.contains(&r.section) {
                return Err(format!(
                    "{at}: section `{}` is not a heading of its chapter ({})",
                    r.section,
                    sections.join(", ")
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::model::{Layout, SpecFile};

    /// Runs every check of the generator on one spec file given as TOML items.
    fn verdict(items: &str) -> Result<(), String> {
        let text = format!("title = \"t\"\ndoc = \"d\"\n{items}");
        let file: SpecFile = toml::from_str(&text).map_err(|e| format!("parse: {e}"))?;
        let files = vec![("t".to_string(), file)];
        let layout = Layout::compute(&files)?;
        super::relations(&files, &layout)
    }

    fn error(items: &str) -> String {
        match verdict(items) {
            Ok(()) => panic!("the spec was accepted:\n{items}"),
            Err(e) => e,
        }
    }

    const CTRL: &str = r#"
[[registers]]
block = "bar0"
name = "CTRL"
offset = 0x100
access = "rw"
reset = 0
doc = "c"
"#;

    #[test]
    fn a_consistent_spec_is_accepted() {
        let spec = format!(
            "{CTRL}fields = [
  {{ name = \"EN\", lsb = 0, width = 1, access = \"rw\", doc = \"e\" }},
  {{ name = \"GO\", lsb = 1, width = 1, access = \"rw1s\", doc = \"g\" }},
  {{ name = \"ERR\", lsb = 2, width = 1, access = \"rw1c\", doc = \"x\" }},
]
[[constants]]
name = \"SLOT\"
value = 8
doc = \"s\"
[[structs]]
name = \"slot\"
size = 8
doc = \"s\"
fields = [
  {{ name = \"a\", type = \"u32\", offset = 0 }},
  {{ name = \"b\", type = \"u32\", offset = 4 }},
]
[[checks]]
expr = \"sizeof(slot) == SLOT\"
doc = \"fits\"
"
        );
        assert_eq!(verdict(&spec), Ok(()));
    }

    #[test]
    fn overlapping_register_fields_are_named() {
        let e = error(&format!(
            "{CTRL}fields = [
  {{ name = \"LOW\", lsb = 0, width = 4, doc = \"l\" }},
  {{ name = \"MID\", lsb = 3, width = 2, doc = \"m\" }},
]"
        ));
        assert!(
            e.contains("bar0.CTRL") && e.contains("LOW") && e.contains("MID"),
            "{e}"
        );
        assert!(e.contains("overlap"), "{e}");
    }

    #[test]
    fn a_field_beyond_the_register_width_is_named() {
        let e = error(&format!(
            "{CTRL}fields = [ {{ name = \"TOP\", lsb = 30, width = 4, doc = \"t\" }} ]"
        ));
        assert!(
            e.contains("bar0.CTRL") && e.contains("TOP") && e.contains("beyond"),
            "{e}"
        );
    }

    #[test]
    fn registers_at_one_offset_of_a_block_are_named() {
        let e = error(&format!("{CTRL}{}", CTRL.replace("\"CTRL\"", "\"OTHER\"")));
        assert!(e.contains("bar0.CTRL and bar0.OTHER overlap"), "{e}");
    }

    #[test]
    fn the_same_offset_in_different_blocks_is_fine() {
        let spec = format!("{CTRL}{}", CTRL.replace("\"bar0\"", "\"db_page\""));
        assert_eq!(verdict(&spec), Ok(()));
    }

    #[test]
    fn an_unaligned_register_is_named() {
        let e = error(&CTRL.replace("0x100", "0x102"));
        assert!(e.contains("bar0.CTRL") && e.contains("aligned"), "{e}");
    }

    #[test]
    fn a_read_only_register_with_a_writable_field_is_named() {
        let e = error(&format!(
            "{}fields = [ {{ name = \"EN\", lsb = 0, width = 1, access = \"rw\", doc = \"e\" }} ]",
            CTRL.replace("\"rw\"", "\"ro\"")
        ));
        assert!(e.contains("bar0.CTRL") && e.contains("EN rw"), "{e}");
    }

    #[test]
    fn a_reset_value_in_reserved_or_write_only_bits_is_named() {
        let reserved = error(&format!(
            "{}fields = [ {{ name = \"EN\", lsb = 0, width = 1, doc = \"e\" }} ]",
            CTRL.replace("reset = 0", "reset = 2")
        ));
        assert!(
            reserved.contains("bar0.CTRL") && reserved.contains("reserved"),
            "{reserved}"
        );
        let trigger = error(&format!(
            "{}fields = [ {{ name = \"GO\", lsb = 1, width = 1, access = \"rw1s\", doc = \"g\" }} ]",
            CTRL.replace("reset = 0", "reset = 2")
        ));
        assert!(trigger.contains("read 0"), "{trigger}");
    }

    const STRUCT: &str = r#"
[[structs]]
name = "slot"
size = 8
doc = "s"
"#;

    #[test]
    fn a_struct_field_overlapping_its_predecessor_is_named() {
        let e = error(&format!(
            "{STRUCT}fields = [
  {{ name = \"a\", type = \"u32\" }},
  {{ name = \"b\", type = \"u32\", offset = 2 }},
]"
        ));
        assert!(e.contains("slot.b") && e.contains("overlaps"), "{e}");
    }

    #[test]
    fn an_unnamed_hole_in_a_struct_is_named() {
        let declared = error(&format!(
            "{STRUCT}fields = [
  {{ name = \"a\", type = \"u16\" }},
  {{ name = \"b\", type = \"u32\", offset = 4 }},
]"
        ));
        assert!(
            declared.contains("slot.b") && declared.contains("hole of 2"),
            "{declared}"
        );
        let implicit = error(&format!(
            "{STRUCT}fields = [ {{ name = \"a\", type = \"u16\" }}, {{ name = \"b\", type = \"u32\" }} ]"
        ));
        assert!(
            implicit.contains("slot.b") && implicit.contains("aligned"),
            "{implicit}"
        );
        let tail = error(&format!(
            "{STRUCT}fields = [ {{ name = \"a\", type = \"u32\" }} ]"
        ));
        assert!(
            tail.contains("slot") && tail.contains("hole of 4"),
            "{tail}"
        );
    }

    #[test]
    fn a_struct_field_defined_twice_is_named() {
        let e = error(&format!(
            "{STRUCT}fields = [ {{ name = \"a\", type = \"u32\" }}, {{ name = \"a\", type = \"u32\" }} ]"
        ));
        assert!(e.contains("slot.a") && e.contains("twice"), "{e}");
    }

    fn enum_spec(ty: &str, flags: bool, values: &str) -> String {
        format!(
            "[[enums]]\nname = \"op\"\ntype = \"{ty}\"\ndoc = \"o\"\nflags = {flags}\nvalues = [{values}]\n"
        )
    }

    #[test]
    fn duplicate_enum_values_and_names_are_named() {
        let value = error(&enum_spec(
            "u8",
            false,
            "{ name = \"A\", value = 1, doc = \"a\" }, { name = \"B\", value = 1, doc = \"b\" }",
        ));
        assert!(
            value.contains("enum op: A and B both have the value 0x1"),
            "{value}"
        );
        let name = error(&enum_spec(
            "u8",
            false,
            "{ name = \"A\", value = 1, doc = \"a\" }, { name = \"A\", value = 2, doc = \"b\" }",
        ));
        assert!(
            name.contains("enum op") && name.contains("A used twice"),
            "{name}"
        );
        let twice = error(&format!(
            "{0}{0}",
            enum_spec("u8", false, "{ name = \"A\", value = 1, doc = \"a\" }")
        ));
        assert!(twice.contains("enum op: defined twice"), "{twice}");
    }

    #[test]
    fn enum_values_must_fit_their_type_and_flags_be_single_bits() {
        let wide = error(&enum_spec(
            "u8",
            false,
            "{ name = \"BIG\", value = 256, doc = \"b\" }",
        ));
        assert!(
            wide.contains("enum op: BIG") && wide.contains("u8"),
            "{wide}"
        );
        let two_bits = error(&enum_spec(
            "u32",
            true,
            "{ name = \"BOTH\", value = 3, doc = \"b\" }",
        ));
        assert!(
            two_bits.contains("BOTH") && two_bits.contains("single bit"),
            "{two_bits}"
        );
    }

    #[test]
    fn a_flags_enum_named_like_a_register_block_is_named() {
        let e = error(&format!(
            "{CTRL}{}",
            enum_spec("u32", true, "{ name = \"A\", value = 1, doc = \"a\" }")
                .replace("\"op\"", "\"bar0\"")
        ));
        assert!(
            e.contains("enum bar0") && e.contains("register block bar0"),
            "{e}"
        );
    }

    #[test]
    fn an_enum_field_narrower_than_its_values_is_named() {
        let e = error(&format!(
            "{}{STRUCT}fields = [ {{ name = \"op\", type = \"u8\", enum = \"op\" }}, {{ name = \"r\", type = \"u8\", count = 7 }} ]",
            enum_spec("u32", false, "{ name = \"BIG\", value = 0x100, doc = \"b\" }")
        ));
        assert!(
            e.contains("slot.op") && e.contains("does not fit in u8"),
            "{e}"
        );
    }

    const SIZES: &str = r#"
[[constants]]
name = "PAGES"
value = 256
doc = "p"
[[constants]]
name = "PAGE_SIZE"
value = 4096
doc = "p"
[[constants]]
name = "BAR_SIZE"
value = 0x80000
doc = "b"
"#;

    #[test]
    fn a_constant_that_disagrees_with_the_sizes_it_describes_is_named() {
        let e = error(&format!(
            "{SIZES}[[checks]]\nexpr = \"BAR_SIZE == PAGES * PAGE_SIZE\"\ndoc = \"the BAR holds every page\"\n"
        ));
        assert!(e.contains("BAR_SIZE == PAGES * PAGE_SIZE"), "{e}");
        assert!(e.contains("524288") && e.contains("1048576"), "{e}");
        assert!(e.contains("the BAR holds every page"), "{e}");
    }

    #[test]
    fn check_expressions_follow_c_precedence() {
        let ok = format!(
            "{SIZES}[[checks]]\nexpr = \"PAGES * PAGE_SIZE >> 1 | 1 == (BAR_SIZE + 1) & 0xFFFFF\"\ndoc = \"x\"\n"
        );
        assert_eq!(verdict(&ok), Ok(()));
    }

    #[test]
    fn a_check_naming_something_unknown_is_an_error() {
        for (expr, says) in [
            ("NOPE == 1", "unknown constant NOPE"),
            ("sizeof(nope) == 1", "unknown struct nope"),
            ("reset(bar0.NOPE) == 1", "unknown register bar0.NOPE"),
            ("PAGES", "expected a comparison"),
            ("PAGES - PAGE_SIZE == 0", "overflows"),
        ] {
            let e = error(&format!(
                "{SIZES}[[checks]]\nexpr = \"{expr}\"\ndoc = \"x\"\n"
            ));
            assert!(e.contains(says), "{expr}: {e}");
        }
    }

    #[test]
    fn embedded_struct_tables_must_name_a_struct() {
        let text = "title = \"t\"\ndoc = \"\"\"\n{{struct:nope}}\n\"\"\"\n";
        let file: SpecFile = toml::from_str(text).expect("parse");
        let files = vec![("t".to_string(), file)];
        let layout = Layout::compute(&files).expect("layout");
        let e = super::relations(&files, &layout).expect_err("unknown struct");
        assert!(
            e.contains("{{struct:nope}}") && e.contains("unknown struct"),
            "{e}"
        );
    }

    #[test]
    fn contract_rules_must_name_a_section_of_their_chapter_and_be_unique() {
        let rule = |name: &str, value: u64, section: &str| {
            format!("[[rules]]\nname = \"{name}\"\nvalue = {value}\nsection = \"{section}\"\ndoc = \"r\"\n")
        };
        assert_eq!(verdict(&rule("A_RULE", 1, "t")), Ok(()));
        assert!(error(&rule("A_RULE", 1, "Nowhere")).contains("section `Nowhere`"));
        assert!(error(&rule("A_RULE", 0, "t")).contains("not in 1..=0xFFFF"));
        assert!(error(&rule("a_rule", 1, "t")).contains("UPPER_CASE"));
        let twice = format!("{}{}", rule("A_RULE", 1, "t"), rule("B_RULE", 1, "t"));
        assert!(error(&twice).contains("also rule A_RULE"));
        let twice = format!("{}{}", rule("A_RULE", 1, "t"), rule("A_RULE", 2, "t"));
        assert!(error(&twice).contains("defined twice"), "{}", error(&twice));
    }
}
