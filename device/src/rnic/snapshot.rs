//! Read-only views of a device for the control socket: its identity and state, and its
//! objects (`objects::snapshot`) with the driver's indices from the doorbell BAR.
//!
//! Lock rule 1 and 3 (`lock_order`): each view is copied under this device's lock alone,
//! one chunk of `CHUNK` objects at a time, and nothing else happens under it; callers
//! serialize and write with no lock held.

use super::link::LinkMode;
use super::Rnic;
use crate::objects::snapshot::{
    Chunk, CqView, EqView, MrView, ObjectCounts, ObjectKind, QpView, SrqView,
};
use crate::objects::Objects;
use serde::{Deserialize, Serialize};
use vrnic_hw::{bar0, FatalCode};

/// Objects copied per hold of the device lock.
pub const CHUNK: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceView {
    pub name: String,
    /// "ib" or "eth" (RoCE v2).
    pub link: String,
    /// The port LID (0 in RoCE mode).
    pub lid: u16,
    /// RoCE mode: the device's MAC.
    pub mac: Option<String>,
    /// The node GUID, 0x-prefixed hex.
    pub node_guid: String,
    /// The vfio-user socket.
    pub socket: String,
    /// A VMM is connected (its guest memory is mapped).
    pub vmm_connected: bool,
    /// "disabled", "enabled" or "fatal" (DEV_STATUS).
    pub state: String,
    /// FATAL_CODE's name when fatal.
    pub fatal_code: Option<String>,
    pub objects: ObjectCounts,
}

/// The objects of one device, by kind; kinds not asked for are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectsView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps: Option<Vec<QpView>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cqs: Option<Vec<CqView>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mrs: Option<Vec<MrView>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eqs: Option<Vec<EqView>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srqs: Option<Vec<SrqView>>,
}

impl Rnic {
    /// The device's identity and state, and how many objects it holds.
    pub fn view(&self) -> DeviceView {
        let (vmm_connected, status, fatal_code, objects) = {
            let st = self.lock();
            (
                st.ram.is_some(),
                st.regs.dev_status,
                st.regs.fatal_code,
                st.objects.counts(),
            )
        };
        let fatal = status & bar0::DEV_STATUS_FATAL_MASK != 0;
        let state = if fatal {
            "fatal"
        } else if status & bar0::DEV_STATUS_READY_MASK != 0 {
            "enabled"
        } else {
            "disabled"
        };
        let (link, mac) = match self.config.link {
            LinkMode::Ib { .. } => ("ib", None),
            LinkMode::Eth { mac } => ("eth", Some(mac.to_string())),
        };
        DeviceView {
            name: self.name().into(),
            link: link.into(),
            lid: self.lid(),
            mac,
            node_guid: format!("{:#018x}", self.node_guid),
            socket: self.config.socket.display().to_string(),
            vmm_connected,
            state: state.into(),
            fatal_code: fatal.then(|| match FatalCode::try_from(fatal_code) {
                Ok(code) => code.name().to_string(),
                Err(other) => other.to_string(),
            }),
            objects,
        }
    }

    /// The device's objects of each kind in `kinds`.
    pub fn objects_view(&self, kinds: &[ObjectKind]) -> ObjectsView {
        let mut v = ObjectsView::default();
        let db = |page, slot, field| self.doorbells.slot_word(page, slot, field);
        for kind in kinds {
            match kind {
                ObjectKind::Qps => {
                    v.qps = Some(self.chunked(|o, from| o.qp_views(from, CHUNK, &db)))
                }
                ObjectKind::Cqs => {
                    v.cqs = Some(self.chunked(|o, from| o.cq_views(from, CHUNK, &db)))
                }
                ObjectKind::Mrs => v.mrs = Some(self.chunked(|o, from| o.mr_views(from, CHUNK))),
                ObjectKind::Eqs => {
                    v.eqs = Some(self.chunked(|o, from| o.eq_views(from, CHUNK, &db)))
                }
                ObjectKind::Srqs => {
                    v.srqs = Some(self.chunked(|o, from| o.srq_views(from, CHUNK, &db)))
                }
            }
        }
        v
    }

    /// Every view `take` gives, one chunk per hold of the device lock.
    fn chunked<V>(&self, take: impl Fn(&Objects, u32) -> Chunk<V>) -> Vec<V> {
        let mut out = Vec::new();
        let mut from = Some(0);
        while let Some(start) = from {
            let chunk = take(&self.lock().objects, start);
            out.extend(chunk.views);
            from = chunk.next;
        }
        out
    }
}
