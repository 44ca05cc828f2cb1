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

/// Byte offset within a doorbell page of one field of doorbell slot `slot`, the field given
/// by its generated offset: `db_slot_field_offset(slot, DbQpSlot::RQ_PI_OFF)`.
pub const fn db_slot_field_offset(slot: u32, field_off: usize) -> u64 {
    db_slot_offset(slot) + field_off as u64
}

/// Byte offset of the flag byte of doorbell slot `slot` within a doorbell page.
pub const fn db_flag_offset(slot: u32) -> u64 {
    DB_FLAGS_BASE as u64 + slot as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_fields_are_found_from_their_generated_offsets() {
        assert_eq!(db_slot_field_offset(0, DbQpSlot::SQ_PI_OFF), 0x200);
        assert_eq!(
            db_slot_field_offset(2, DbCqSlot::ARM_OFF),
            0x200 + 2 * 8 + 4
        );
        assert_eq!(db_slot_field_offset(1, DbEqSlot::CI_OFF), db_slot_offset(1));
        assert_eq!(db_flag_offset(DB_SLOTS_PER_PAGE - 1), 0x1ff);
    }
}
