//! The RoCEv2 wire: the packets an RDMA transfer puts on an Ethernet link, encoded and
//! decoded (Ethernet, IPv4 or IPv6, UDP port 4791, the IBTA transport headers, the ICRC),
//! the management datagrams to QP1 and the CM messages rdma_cm exchanges in them (`mad`,
//! `cm`), a pcap file writer and reader, and the per-device tap that records them. Tested
//! against Linux Soft-RoCE's frames (`softroce_tests`, fixtures/).
//!
//! Written from the InfiniBand Architecture Specification Volume 1 (release 1.4): chapter 9
//! (transport layer: the BTH of §9.2 and the extended transport headers of §9.3), §7.8.1
//! (the invariant CRC) and Annex A17 (RoCEv2: the UDP encapsulation of A17.2 and the ICRC
//! of A17.3.3); chapters 12 and 13 for the CM and MADs. The decoder is strict and total: any byte string gives a packet or a
//! `WireError` naming what is wrong, never a panic (`fuzz` checks that).
//!
//! This layer is a foundation: it knows bytes and headers, nothing of devices or QPs. The
//! data path (`datapath::capture`) turns its transfers into `Packet`s for a `Tap`.

pub mod bth;
pub mod cm;
pub mod error;
pub mod eth;
pub mod ext;
pub mod icrc;
pub mod ip;
pub mod mad;
pub mod packet;
pub mod pcap;
pub mod tap;
pub mod udp;

#[cfg(test)]
mod softroce_tests;
#[cfg(test)]
mod tests;

pub use bth::{Bth, Opcode, Transport};
pub use error::WireError;
pub use ext::{Aeth, AethKind, AtomicEth, Deth, Reth};
pub use ip::Network;
pub use packet::Packet;
pub use tap::Tap;

/// Reads `N` bytes at `at` of `bytes`, or says which header was cut short.
fn take<const N: usize>(bytes: &[u8], at: usize, what: &'static str) -> Result<[u8; N], WireError> {
    bytes
        .get(at..)
        .and_then(|rest| rest.get(..N))
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .ok_or(WireError::Truncated {
            what,
            need: N,
            have: bytes.len().saturating_sub(at),
        })
}

/// A big-endian 24-bit field (QPNs, PSNs, MSNs) at the start of `b`.
fn be24(b: &[u8]) -> u32 {
    u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2])
}

fn put_be24(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes()[1..]);
}
