//! The guest's Ethernet, as a converged NIC serves it: virtio-net ports over vhost-user,
//! an L2 switch between them, and uplinks to the host's network (a tap device, or an
//! existing interface through a packet socket), optionally impaired for tests.
//!
//! Foundation layer: nothing here knows about RDMA devices. The fabric attaches each RoCE
//! device to the switch as the port that takes its RoCEv2 frames (the guest's MAC, UDP 4791):
//! `Switch::steer_roce` is that hook.

pub mod frame;
pub mod impair;
pub mod port;
pub mod service;
pub mod switch;
pub mod uplink;
pub mod vhost;
