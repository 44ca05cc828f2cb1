//! Guest RAM as the device reaches it: the DMA map table of one vfio-user
//! client, built on vm-memory.
//!
//! The vfio-user server owns a [`GuestRam`] per connected client and changes
//! it on `DMA_MAP`/`DMA_UNMAP`; the device model gets a clone at connect time
//! and reaches guest memory only through [`RamSnapshot`]s taken from it:
//!
//! ```text
//! let mem = ram.snapshot();                       // cheap: an Arc clone
//! let pi = mem.load_u32(ring + PI, Acquire)?;     // producer index
//! let wqe: Wqe = mem.read_obj(ring + slot)?;      // descriptor
//! mem.copy_from(dst, &peer.snapshot(), src, n)?;  // guest-to-guest DMA
//! mem.store_u32(cqe + OWNER, owner, Release)?;    // publish, then interrupt
//! ```
//!
//! Maps with an fd are mmapped `MAP_SHARED` (read-only unless the client
//! granted write). Maps without an fd are recorded so that DMA into them fails
//! with [`DmaError::NoFd`] instead of crashing; writes into read-only maps fail
//! with [`DmaError::ReadOnly`] before memory is touched.

mod error;
mod ram;
mod snapshot;

pub use error::{DmaError, MapError};
pub use ram::{DmaMapRequest, GuestRam, MAX_DMA_MAPS};
pub use snapshot::RamSnapshot;

#[cfg(test)]
mod tests;
