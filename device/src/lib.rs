//! vrnic: a virtual RDMA NIC served to QEMU guests over vfio-user.
//!
//! Layers, each importing only those below it:
//! 1. foundations: `addr` (MACs, GIDs, addresses), `guest_memory` (guest RAM through vm-memory), `pci` (config space),
//!    `vfio_user` (the protocol server, device-agnostic), `memfd`, `ratelimit`, `unix_socket` (the servers' socket files), `rng` (seeded random numbers), `trace` (decoded
//!    device events for subscribers), `wire` (the RoCEv2 packet codec, pcap files and the
//!    packet tap), `net` (virtio-net over vhost-user, the L2 switch, uplinks, impairment),
//!    `transport` (the RC/UC reliability engine on the wire, sans-I/O; imports `wire`);
//! 2. `objects`: the object tables (PDs, MRs, CQs, EQs, QPs) and their names; the fault
//!    plan of `faults` (each device owns one; `faults::act` sits beside `admin`);
//! 3. `rnic`: the device state (registers, doorbells, interrupt lines, DMA fence) and the
//!    notifications that change it (CQEs, EQEs); beside it `hostile`, the hostile-device
//!    mode its notifications and the admin completions call (it reads objects and doorbells);
//! 4. `admin` (the admin queue engine) and `datapath` (work requests between devices;
//!    `datapath::wire` carries them to peers outside the process as RoCEv2 packets);
//! 5. `model` (the vfio-user face of a device) and `fabric` (routing, poller shards);
//! 6. `control` (the control socket and `vrnic ctl`: views of the devices while they run);
//! 7. `serve` (the wiring `main` and the tests share) and `cli`.

pub mod addr;
pub mod admin;
pub mod cli;
pub mod control;
pub mod datapath;
pub mod fabric;
pub mod faults;
pub mod guest_memory;
pub mod hostile;
pub mod memfd;
pub mod model;
pub mod net;
pub mod objects;
pub mod pci;
pub mod ratelimit;
pub mod rng;
pub mod rnic;
pub mod serve;
pub mod trace;
pub mod transport;
pub mod unix_socket;
pub mod vfio_user;
pub mod wire;
