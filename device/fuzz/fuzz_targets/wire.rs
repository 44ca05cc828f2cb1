//! libFuzzer entry point of the `wire` target (device/tests/harness/fuzz/wire.rs).
#![no_main]

#[path = "../../tests/harness/fuzz/mod.rs"]
mod fuzz;
#[path = "../../tests/harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::wire::run_one(data));
