//! The seeded runner: replays a target's committed corpus, then feeds it generated inputs
//! (random bytes and mutations of the corpus) from a fixed seed, catching each failure,
//! saving its input and going on. A watchdog aborts the process, after saving the input, if
//! one input runs longer than twice the harness timeout (a hang the oracles cannot see).
//!
//! Environment:
//! - `VRNIC_FUZZ_SECS`: run generated inputs for this long instead of the short run;
//! - `VRNIC_FUZZ_SEED`: the seed (decimal or 0x-hex; default [`DEFAULT_SEED`]);
//! - `VRNIC_FUZZ_INPUTS`: generated inputs of the short run (default per target);
//! - `VRNIC_FUZZ_REPLAY`: run only this input file (a reproducer);
//! - `VRNIC_FUZZ_FINDINGS`: where failing inputs are saved;
//! - `VRNIC_FUZZ_GROW`: save every passing input that reached a new outcome (a new
//!   [`stats`](super::stats) counter) into `<dir>/<target>/`, to grow a corpus.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::input::generate;
use super::Target;
use crate::harness::TIMEOUT;

pub const DEFAULT_SEED: u64 = 0x7672_6e69_6366_757a;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v}: {e}")))
}

/// The committed corpus of `name`, sorted by file name.
pub fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(name)
}

fn read_corpus(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    files.sort();
    files
        .into_iter()
        .filter(|p| p.is_file())
        .map(|p| {
            let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), data)
        })
        .collect()
}

fn findings_dir() -> PathBuf {
    std::env::var_os("VRNIC_FUZZ_FINDINGS")
        .map(PathBuf::from)
        .or_else(|| option_env!("CARGO_TARGET_TMPDIR").map(|d| Path::new(d).join("fuzz-findings")))
        .unwrap_or_else(|| std::env::temp_dir().join("vrnic-fuzz-findings"))
}

fn save(target: &str, input: &[u8]) -> PathBuf {
    let dir = findings_dir();
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{target}-{:016x}.bin", fnv(input)));
    let _ = std::fs::write(&path, input);
    path
}

/// The input each runner thread is executing, for the watchdog.
struct InFlight {
    target: &'static str,
    label: String,
    started: Instant,
    input: Vec<u8>,
}

fn in_flight() -> &'static Mutex<BTreeMap<String, InFlight>> {
    static MAP: OnceLock<Mutex<BTreeMap<String, InFlight>>> = OnceLock::new();
    MAP.get_or_init(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_secs(1));
            let map = in_flight().lock().unwrap_or_else(|p| p.into_inner());
            for f in map.values() {
                if f.started.elapsed() > 2 * TIMEOUT {
                    let path = save(f.target, &f.input);
                    eprintln!(
                        "fuzz {}: input {} hangs (over {:?}); saved to {}; aborting",
                        f.target,
                        f.label,
                        2 * TIMEOUT,
                        path.display()
                    );
                    std::process::abort();
                }
            }
        });
        Mutex::new(BTreeMap::new())
    })
}

fn thread_key() -> String {
    format!("{:?}", std::thread::current().id())
}

/// Runs one input; on failure saves it and returns the panic message.
fn exec(target: &Target, input: &[u8], label: &str) -> Option<String> {
    let before = super::stats::distinct(target.name);
    let failure = exec_inner(target, input, label);
    if failure.is_none() && super::stats::distinct(target.name) > before {
        if let Some(dir) = std::env::var_os("VRNIC_FUZZ_GROW") {
            let dir = Path::new(&dir).join(target.name);
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(dir.join(format!("{:016x}", fnv(input))), input);
        }
    }
    failure
}

fn fnv(input: &[u8]) -> u64 {
    input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn exec_inner(target: &Target, input: &[u8], label: &str) -> Option<String> {
    in_flight()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            thread_key(),
            InFlight {
                target: target.name,
                label: label.to_string(),
                started: Instant::now(),
                input: input.to_vec(),
            },
        );
    let result = catch_unwind(AssertUnwindSafe(|| (target.run_one)(input)));
    in_flight()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&thread_key());
    let err = result.err()?;
    (target.discard)();
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(non-string panic)".into());
    let path = save(target.name, input);
    Some(format!(
        "{label}: {msg}\n    input saved to {}",
        path.display()
    ))
}

/// Runs `target` as the environment asks (see the module docs); fails if any input failed.
pub fn run(target: &Target) {
    super::stats::enable();
    if let Ok(path) = std::env::var("VRNIC_FUZZ_REPLAY") {
        let input = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        (target.run_one)(&input);
        return;
    }
    let seed = env_u64("VRNIC_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let secs = env_u64("VRNIC_FUZZ_SECS");
    let count = env_u64("VRNIC_FUZZ_INPUTS").unwrap_or(target.short_run);
    let corpus = read_corpus(&corpus_dir(target.name));
    let start = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    for (name, data) in &corpus {
        if let Some(f) = exec(target, data, name) {
            failures.push(f);
        }
    }
    let replayed = start.elapsed();
    let seeds: Vec<Vec<u8>> = corpus.into_iter().map(|(_, d)| d).collect();
    let deadline = secs.map(|s| start + Duration::from_secs(s));
    let mut generated = 0u64;
    loop {
        match deadline {
            Some(d) if Instant::now() >= d => break,
            None if generated >= count => break,
            _ => {}
        }
        let input = generate(seed, generated, &seeds, target.max_len);
        let label = format!("seed {seed:#x} input {generated}");
        if let Some(f) = exec(target, &input, &label) {
            eprintln!("fuzz {}: FAILED {f}", target.name);
            failures.push(f);
        }
        generated += 1;
    }
    let total = start.elapsed();
    let execs = seeds.len() as u64 + generated;
    eprintln!(
        "fuzz {}: {} corpus inputs in {:.1?}, {generated} generated (seed {seed:#x}); {execs} \
         executions in {:.1?} = {:.0}/s; {} failure(s)",
        target.name,
        seeds.len(),
        replayed,
        total,
        execs as f64 / total.as_secs_f64().max(1e-9),
        failures.len()
    );
    eprintln!(
        "fuzz {}: reached: {}",
        target.name,
        super::stats::report(target.name)
    );
    assert!(
        failures.is_empty(),
        "fuzz {}: {} input(s) failed:\n{}",
        target.name,
        failures.len(),
        failures.join("\n")
    );
}
