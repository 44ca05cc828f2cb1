//! Structure-aware fuzz targets for vrnic, each a plain `run_one(&[u8])` that both the
//! coverage-guided runner (`device/fuzz`, cargo-fuzz) and the seeded runner of the stable
//! test binary (`device/tests/fuzz.rs`, [`runner`]) drive.
//!
//! Targets (and their committed corpora in `device/tests/fuzz/<name>/`):
//! - [`vfio_msg`]: vfio-user messages over the real socket of a served device;
//! - [`regs`]: PCI config space, BAR0, BAR2 and BAR4 accesses on an in-process device;
//! - [`admin`]: admin commands on an in-process device;
//! - [`wqe`]: doorbells and WQEs on a live in-process device (poller running);
//! - [`wire`]: bytes as a received RoCEv2 frame, through the packet decoder.
//!
//! Inputs are decoded by [`input::Input`] into mostly valid operations (known commands and
//! opcodes, handles from earlier results, addresses in guest RAM) with mutated fields.
//! Guest RAM is a sealed memfd filled with canaries ([`guest`]); the only file that touches
//! device internals is [`glue`].
#![allow(dead_code)]

pub mod admin;
pub mod aq;
pub mod glue;
pub mod guest;
pub mod input;
pub mod objs;
pub mod regs;
pub mod rig;
pub mod runner;
pub mod stats;
pub mod vfio_msg;
pub mod wire;
pub mod wqe;

/// A fuzz target as the runners see it.
pub struct Target {
    pub name: &'static str,
    pub run_one: fn(&[u8]),
    /// Drops the target's state after a failed input (it may be half-way through).
    pub discard: fn(),
    /// Longest generated input.
    pub max_len: usize,
    /// Generated inputs of the short run in `cargo test`.
    pub short_run: u64,
}

pub const VFIO_MSG: Target = Target {
    name: "vfio_msg",
    run_one: vfio_msg::run_one,
    discard: vfio_msg::discard,
    max_len: 1024,
    short_run: 150,
};

pub const REGS: Target = Target {
    name: "regs",
    run_one: regs::run_one,
    discard: regs::discard,
    max_len: 1024,
    short_run: 600,
};

pub const ADMIN: Target = Target {
    name: "admin",
    run_one: admin::run_one,
    discard: admin::discard,
    max_len: 4096,
    short_run: 400,
};

pub const WQE: Target = Target {
    name: "wqe",
    run_one: wqe::run_one,
    discard: wqe::discard,
    max_len: 2048,
    short_run: 300,
};

pub const WIRE: Target = Target {
    name: "wire",
    run_one: wire::run_one,
    discard: wire::discard,
    max_len: 1200,
    short_run: 5000,
};

pub const TARGETS: &[&Target] = &[&VFIO_MSG, &REGS, &ADMIN, &WQE, &WIRE];
