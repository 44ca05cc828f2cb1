//! libFuzzer entry point of the `admin` target (device/tests/harness/fuzz/admin.rs).
#![no_main]

#[path = "../../tests/harness/fuzz/mod.rs"]
mod fuzz;
#[path = "../../tests/harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::admin::run_one(data));
