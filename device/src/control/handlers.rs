//! What each request does: one handler per `Request` variant, each returning its response
//! line.
//!
//! Handlers take device state only through the views of the layers that own it
//! (`Rnic::view`, `Rnic::objects_view`), which hold one device lock at a time for a short
//! copy; the reply is encoded and written by the caller with no lock held.

use super::protocol::{CountersReply, DevicesReply, ObjectsReply, Request, RequestError};
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
        Request::Hostile {
            device,
            on,
            settings,
        } => super::hostile::handle(device_named(fabric, device)?, *on, settings.as_deref()),
    }
}

/// The response line (newline included) of `reply`.
pub fn encode<T: Serialize>(reply: &T) -> Result<Vec<u8>, RequestError> {
    let mut line = serde_json::to_vec(reply).map_err(|e| RequestError::Encode(e.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

fn device<'a>(fabric: &'a Fabric, name: &str) -> Result<&'a Arc<Rnic>, RequestError> {
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

/// The device called `name` (for handlers in their own files).
pub fn device_named<'a>(fabric: &'a Fabric, name: &str) -> Result<&'a Arc<Rnic>, RequestError> {
    device(fabric, name)
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
