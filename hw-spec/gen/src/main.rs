//! vrnic-hwgen: generates the Rust module, the C headers and SPEC.md from `hw-spec/spec/*.toml`.
//!
//! `vrnic-hwgen` writes the generated files; `vrnic-hwgen --check` writes nothing and exits 1
//! if any generated file differs from what the spec produces.

mod c_out;
mod check;
mod md_out;
mod model;
mod rust_out;

use model::{Layout, SpecFile};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Spec files in dependency order (each C header includes the ones before it).
const SPEC_FILES: &[&str] = &["overview", "pci", "regs", "admin", "io", "abi"];

#[derive(Debug, thiserror::Error)]
enum GenError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("inconsistent spec: {0}")]
    Layout(String),
    #[error("rustfmt: {0}")]
    Rustfmt(String),
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn load(hw_spec: &Path) -> Result<Vec<(String, SpecFile)>, GenError> {
    SPEC_FILES
        .iter()
        .map(|stem| {
            let path = hw_spec.join("spec").join(format!("{stem}.toml"));
            let text = std::fs::read_to_string(&path).map_err(|source| GenError::Read {
                path: path.clone(),
                source,
            })?;
            let file = toml::from_str(&text).map_err(|source| GenError::Parse { path, source })?;
            Ok((stem.to_string(), file))
        })
        .collect()
}

/// Every generated file: path relative to hw-spec/, contents.
fn outputs(files: &[(String, SpecFile)]) -> Result<Vec<(String, String)>, GenError> {
    let layout = Layout::compute(files).map_err(GenError::Layout)?;
    check::relations(files, &layout).map_err(GenError::Layout)?;
    let mut out = vec![
        (
            "rust/src/generated.rs".to_string(),
            rustfmt(&rust_out::generate(files, &layout))?,
        ),
        ("SPEC.md".to_string(), md_out::generate(files, &layout)),
        (
            "include/vrnic/vrnic_hw.h".to_string(),
            c_out::umbrella(&files[1..]),
        ),
        (
            "include/vrnic/vrnic_names.h".to_string(),
            c_out::names(files),
        ),
        (
            "rust/tests/layout_probe.c".to_string(),
            c_out::probe(files, &layout),
        ),
    ];
    // The overview has prose only: no header of its own.
    for index in 1..files.len() {
        let name = format!("include/vrnic/vrnic_{}.h", files[index].0);
        out.push((name, c_out::header(&files[1..], index - 1, &layout)));
    }
    Ok(out)
}

/// Formats generated Rust with the toolchain's rustfmt, so `cargo fmt --check` agrees with it.
fn rustfmt(code: &str) -> Result<String, GenError> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let failed = |e: std::io::Error| GenError::Rustfmt(e.to_string());
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2021", "--emit", "stdout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(failed)?;
    child
        .stdin
        .take()
        .ok_or_else(|| GenError::Rustfmt("no stdin".into()))?
        .write_all(code.as_bytes())
        .map_err(failed)?;
    let out = child.wait_with_output().map_err(failed)?;
    if !out.status.success() {
        return Err(GenError::Rustfmt(format!("exit status {}", out.status)));
    }
    String::from_utf8(out.stdout).map_err(|e| GenError::Rustfmt(e.to_string()))
}

fn run(check: bool) -> Result<bool, GenError> {
    let hw_spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = load(&hw_spec)?;
    let mut fresh = true;
    for (rel, contents) in outputs(&files)? {
        let path = hw_spec.join(&rel);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == contents {
            continue;
        }
        fresh = false;
        if check {
            eprintln!("stale: hw-spec/{rel} (run `cargo run -p vrnic-hwgen`)");
        } else {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|source| GenError::Write {
                    path: dir.into(),
                    source,
                })?;
            }
            std::fs::write(&path, contents).map_err(|source| GenError::Write {
                path: path.clone(),
                source,
            })?;
            println!("wrote hw-spec/{rel}");
        }
    }
    Ok(fresh || !check)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = match args.as_slice() {
        [] => false,
        [flag] if flag == "--check" => true,
        _ => {
            eprintln!("usage: vrnic-hwgen [--check]\n  writes hw-spec's generated files; --check only verifies they are current");
            return ExitCode::from(2);
        }
    };
    match run(check) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("vrnic-hwgen: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Vec<(String, SpecFile)> {
        load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).expect("hw-spec loads")
    }

    fn verdict(files: &[(String, SpecFile)]) -> Result<(), String> {
        let layout = Layout::compute(files)?;
        check::relations(files, &layout)
    }

    #[test]
    fn the_spec_passes_every_check() {
        assert_eq!(verdict(&spec()), Ok(()));
    }

    #[test]
    fn the_spec_checks_catch_a_limit_changed_alone() {
        let mut files = spec();
        let regs = files
            .iter_mut()
            .find(|(stem, _)| stem == "regs")
            .expect("regs.toml");
        let slots = regs
            .1
            .constants
            .iter_mut()
            .find(|c| c.name == "DB_SLOTS_PER_PAGE")
            .expect("DB_SLOTS_PER_PAGE");
        slots.value += 1;
        let e = verdict(&files).expect_err("the slots no longer fit their page");
        assert!(
            e.contains("DB_SLOT_BASE + DB_SLOTS_PER_PAGE * DB_SLOT_SIZE <= DB_PAGE_SIZE"),
            "{e}"
        );
    }
}
