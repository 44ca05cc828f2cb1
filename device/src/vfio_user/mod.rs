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
//! - [`Server`]: the socket and accept loop;
//! - [`raise_fd_limit`]: the process limit the servers need, raised at start.
//!
//! Rules the server keeps whatever the client sends: a message is read whole
//! (`message_size` bytes, at most 1 MiB + 4 KiB) before it is handled, so an
//! unknown or malformed command cannot desynchronise the stream; at most 16
//! fds per message are kept; every error reply carries a real errno; a
//! stream that cannot be decoded (size below the header, above the limit,
//! EOF mid-message) drops that client only, and the server accepts the next.
//!
//! What a hostile client cannot do to the process or to other devices:
//! make it die of SIGBUS (DMA fds must be sealed against shrinking, see
//! [`guest_memory`](crate::guest_memory); the doorbell memfd it gets is
//! sealed, see [`memfd`](crate::memfd)); pin unbounded fds and mappings
//! (`max_dma_maps` per client, a budget shared by the process); stop a
//! server (`accept()` failing for lack of resources is retried after a
//! back-off that still watches the stop eventfd; the thread only ends on
//! stop or on a bug of its own); block interrupt delivery (SET_IRQS takes
//! eventfds only, made non-blocking).

mod connection;
mod dma;
mod irqs;
mod limits;
pub mod model;
mod protocol;
mod ratelimit;
mod regions;
mod scm;
mod server;
mod session;

pub use limits::raise_fd_limit;
pub use model::{DeviceModel, RegionInfo, RegionMmap};
pub use protocol::{MAX_DATA_XFER_SIZE, MAX_MESSAGE_SIZE, MAX_MSG_FDS, NUM_IRQ_INDEXES};
pub use server::{Server, ServerError};
