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
//!
//! What the client cannot do to the process, whatever it sends:
//! - shrink a mapped file: an fd must be sealed with `F_SEAL_SHRINK` (a
//!   sealable memfd is sealed here; anything else is refused with `EPERM`,
//!   see `seal`), so no access ever raises SIGBUS;
//! - pin unbounded fds and mmaps: [`MAX_DMA_MAPS`] per client, and a budget
//!   shared by the whole process (`EAGAIN` when exhausted, see `budget`);
//! - have the device write a range it has unmapped: `unmap` returns once no
//!   snapshot contains the range any more (the contract on [`GuestRam`]).

mod budget;
mod error;
mod ram;
mod retire;
pub(crate) mod seal;
mod snapshot;

pub use budget::MAX_PROCESS_MAPS;
pub use error::{DmaError, MapError};
pub use ram::{DmaMapRequest, GuestRam, MAX_DMA_MAPS};
pub use seal::SealError;
pub use snapshot::RamSnapshot;

#[cfg(test)]
mod tests;
