//! The vrnic hardware interface: every register, command, descriptor and ABI struct shared by
//! the device, the kernel driver and the rdma-core provider.
//!
//! Everything here is generated from `hw-spec/spec/*.toml` by `vrnic-hwgen` (see
//! `hw-spec/SPEC.md` for the prose); structs are `#[repr(C)]` with little-endian fields and
//! implement `vm_memory::ByteValued`, so they are read from and written to guest memory as is.

mod generated;

pub use generated::*;

/// Byte offset of doorbell slot `slot` within a doorbell page.
pub const fn db_slot_offset(slot: u32) -> u64 {
    DB_SLOT_BASE as u64 + slot as u64 * DB_SLOT_SIZE as u64
}
