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

#[test]
fn fuzz_roce_frames_decode_to_a_packet_or_an_error_and_packets_round_trip() {
    fuzz::runner::run(&fuzz::WIRE);
}

// The memory oracle itself: a write by "the device" (through another mapping of the memfd,
// as the device has) is reported outside the allowed ranges and accepted inside them.

#[test]
#[should_panic(expected = "outside every ring, MR and buffer")]
fn canary_ram_reports_a_device_write_outside_the_allowed_ranges() {
    use std::os::unix::fs::FileExt;
    let mut ram = fuzz::guest::CanaryRam::new(c"canary-test", 0x1_0000_0000, 64 << 10);
    ram.allow(0x1_0000_0000, 4096);

    ram.fd()
        .write_all_at(&[0xaa; 4], 8192)
        .expect("device write");

    ram.check("canary test");
}

#[test]
fn canary_ram_accepts_device_writes_inside_the_allowed_ranges_and_guest_writes() {
    use std::os::unix::fs::FileExt;
    let mut ram = fuzz::guest::CanaryRam::new(c"canary-test", 0x1_0000_0000, 64 << 10);
    ram.allow(0x1_0000_0000 + 4096, 4096);
    ram.write(0x1_0000_0000 + 100, &[1, 2, 3]);

    ram.fd()
        .write_all_at(&[0xaa; 4096], 4096)
        .expect("device write");

    ram.check("canary test");
}

#[test]
fn guest_ram_memfd_is_sealed_against_shrinking() {
    let ram = fuzz::guest::CanaryRam::new(c"canary-test", 0x1_0000_0000, 64 << 10);

    let shrink = ram.fd().set_len(4096);

    assert!(shrink.is_err(), "a sealed memfd cannot be truncated");
}
