//! libFuzzer entry point of the `wqe` target (device/tests/harness/fuzz/wqe.rs).
#![no_main]

#[path = "../../tests/harness/fuzz/mod.rs"]
mod fuzz;
#[path = "../../tests/harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::wqe::run_one(data));
