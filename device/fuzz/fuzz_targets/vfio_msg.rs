//! libFuzzer entry point of the `vfio_msg` target (device/tests/harness/fuzz/vfio_msg.rs).
#![no_main]

#[path = "../../tests/harness/fuzz/mod.rs"]
mod fuzz;
#[path = "../../tests/harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::vfio_msg::run_one(data));
