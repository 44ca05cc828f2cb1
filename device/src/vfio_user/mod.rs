//! vfio-user server: serves a [`DeviceModel`] to one client at a time (QEMU's
//! `vfio-user-pci`) over a UNIX socket.
//!
//! Layout:
//! - [`model`]: the interface a device implements;
//! - `protocol`: wire format (header, commands, payloads, limits);
//! - `connection` + `scm`: message framing, fd passing, waits that watch the
//!   stop eventfd;
//! - `session`: one client's message loop and device-wide commands;
//!   `regions`, `irqs`, `dma`: the other commands;
//! - [`Server`]: the socket and accept loop.
//!
//! Rules the server keeps whatever the client sends: a message is read whole
//! (`message_size` bytes, at most 1 MiB + 4 KiB) before it is handled, so an
//! unknown or malformed command cannot desynchronise the stream; at most 16
//! fds per message are kept; every error reply carries a real errno; a
//! stream that cannot be decoded (size below the header, above the limit,
//! EOF mid-message) drops that client only, and the server accepts the next.

mod connection;
mod dma;
mod irqs;
pub mod model;
mod protocol;
mod ratelimit;
mod regions;
mod scm;
mod server;
mod session;

pub use model::{DeviceModel, RegionInfo, RegionMmap};
pub use protocol::{MAX_DATA_XFER_SIZE, MAX_MESSAGE_SIZE, MAX_MSG_FDS, NUM_IRQ_INDEXES};
pub use server::{Server, ServerError};
