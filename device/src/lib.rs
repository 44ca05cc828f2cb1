//! vrnic device backend.
pub mod guest_memory;
pub mod vfio_user;
