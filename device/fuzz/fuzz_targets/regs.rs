//! libFuzzer entry point of the `regs` target (device/tests/harness/fuzz/regs.rs).
#![no_main]

#[path = "../../tests/harness/fuzz/mod.rs"]
mod fuzz;
#[path = "../../tests/harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::regs::run_one(data));
