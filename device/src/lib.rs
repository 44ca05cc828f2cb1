//! vrnic: a virtual RDMA NIC served to QEMU guests over vfio-user.
//!
//! Layout: `vfio_user` (the protocol server) drives an `rnic::RnicModel` per device; the
//! device's registers and admin queue (`admin`) create `objects`; the `datapath` poller
//! executes work requests between the devices of the `fabric`, touching guest memory only
//! through `guest_memory`.

pub mod admin;
pub mod cli;
pub mod datapath;
pub mod fabric;
pub mod guest_memory;
pub mod memfd;
pub mod objects;
pub mod pci;
pub mod rnic;
pub mod vfio_user;
