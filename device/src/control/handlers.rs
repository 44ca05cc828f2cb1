//! What each request does: one handler per `Request` variant, each returning its response
//! line.
//!
//! Handlers take device state only through the views of the layers that own it
//! (`Rnic::view`, `Rnic::objects_view`), which hold one device lock at a time for a short
//! copy; the reply is encoded and written by the caller with no lock held.

use super::protocol::{
    CountersReply, DevicesReply, ObjectsReply, PcapReply, PcapStats, Request, RequestError,
};
use crate::fabric::Fabric;
use crate::objects::counters;
use crate::objects::snapshot::ObjectKind;
use crate::rnic::Rnic;
use serde::Serialize;
use std::sync::Arc;

/// Runs `request` against the devices of `fabric`; the response line, newline included.
pub fn handle(fabric: &Fabric, request: &Request) -> Result<Vec<u8>, RequestError> {
    match request {
        Request::Devices {} => devices(fabric),
        Request::Objects { device, kinds } => objects(fabric, device, kinds),
        Request::Counters { device, qpn } => counters(fabric, device, *qpn),
        // The connection serves it as a stream (`control::trace`); never one reply.
        Request::Trace { .. } => Err(RequestError::BadRequest("trace is a stream".into())),
        Request::Pcap { device, path } => pcap(fabric, device, path.as_deref()),
        Request::Contract { device } => super::contract::handle(fabric, device),
        Request::Fault { device, rule } => super::faults::fault(fabric, device, rule),
        Request::Faults { device } => super::faults::faults(fabric, device),
        Request::FaultClear { device } => super::faults::clear(fabric, device),
        Request::Hostile {
            device,
            on,
            settings,
        } => super::hostile::handle(self::device(fabric, device)?, *on, settings.as_deref()),
        Request::Uplinks {} => super::uplinks::uplinks(fabric),
        Request::Wire {} => super::wire::wire(fabric),
        Request::Impair { uplink, spec } => super::uplinks::impair(fabric, uplink, spec.as_deref()),
    }
}

/// The response line (newline included) of `reply`.
pub fn encode<T: Serialize>(reply: &T) -> Result<Vec<u8>, RequestError> {
    let mut line = serde_json::to_vec(reply).map_err(|e| RequestError::Encode(e.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

pub fn device<'a>(fabric: &'a Fabric, name: &str) -> Result<&'a Arc<Rnic>, RequestError> {
    fabric
        .devices()
        .iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| RequestError::UnknownDevice {
            name: name.chars().take(64).collect(),
            known: fabric
                .devices()
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn devices(fabric: &Fabric) -> Result<Vec<u8>, RequestError> {
    encode(&DevicesReply {
        devices: fabric.devices().iter().map(|d| d.view()).collect(),
    })
}

fn objects(fabric: &Fabric, name: &str, kinds: &[ObjectKind]) -> Result<Vec<u8>, RequestError> {
    let rnic = device(fabric, name)?;
    let kinds = if kinds.is_empty() {
        &ObjectKind::ALL[..]
    } else {
        kinds
    };
    encode(&ObjectsReply {
        device: rnic.name().into(),
        objects: rnic.objects_view(kinds),
    })
}

fn counters(fabric: &Fabric, name: &str, qpn: Option<u32>) -> Result<Vec<u8>, RequestError> {
    let rnic = device(fabric, name)?;
    // Rnic::qp_counters takes the device lock once, briefly; no lock is held here.
    let values = match qpn {
        None => rnic.port_counters(),
        Some(qpn) => rnic
            .qp_counters(qpn)
            .ok_or_else(|| RequestError::UnknownQp {
                device: rnic.name().into(),
                qpn,
            })?,
    };
    encode(&CountersReply {
        device: rnic.name().into(),
        qpn,
        counters: counters::named(&values).collect(),
    })
}

fn pcap_stats(s: crate::wire::tap::TapStats) -> PcapStats {
    PcapStats {
        path: s.path.display().to_string(),
        packets: s.packets,
        dropped: s.dropped,
    }
}

/// Switches the device's tap (no device lock is taken: the tap has its own; stopping
/// waits for its writer to write out what is queued).
fn pcap(
    fabric: &Fabric,
    name: &str,
    path: Option<&std::path::Path>,
) -> Result<Vec<u8>, RequestError> {
    let rnic = device(fabric, name)?;
    let refuse = |why: String| RequestError::Pcap {
        device: rnic.name().into(),
        why,
    };
    let stopped = match path {
        None => rnic.tap.stop(),
        Some(p) if !p.is_absolute() => {
            return Err(refuse(format!("{} is not an absolute path", p.display())))
        }
        Some(p) => rnic
            .tap
            .start(p, rnic.name())
            .map_err(|e| refuse(e.to_string()))?,
    };
    encode(&PcapReply {
        device: rnic.name().into(),
        capturing: rnic.tap.status().map(pcap_stats),
        stopped: stopped.map(pcap_stats),
    })
}
