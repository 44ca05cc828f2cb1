//! Fuzzing, stable toolchain: each test replays a target's committed corpus
//! (`tests/fuzz/<target>/`) and then runs generated inputs from a fixed seed. A short run by
//! default; `VRNIC_FUZZ_SECS=N` makes it a long run (README "Fuzzing"). The same targets run
//! under cargo-fuzz from `device/fuzz`.

#[path = "harness/fuzz/mod.rs"]
mod fuzz;
mod harness;

#[test]
fn fuzz_vfio_user_messages_keep_the_server_answering() {
    fuzz::runner::run(&fuzz::VFIO_MSG);
}

#[test]
fn fuzz_register_and_config_accesses_keep_the_device_sane() {
    fuzz::runner::run(&fuzz::REGS);
}

#[test]
fn fuzz_admin_commands_complete_with_valid_statuses() {
    fuzz::runner::run(&fuzz::ADMIN);
}

#[test]
fn fuzz_doorbells_and_wqes_complete_well_formed_and_stay_in_bounds() {
    fuzz::runner::run(&fuzz::WQE);
}
