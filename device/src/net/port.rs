//! What the switch and its ports see of each other: a port transmits frames out of the
//! switch (into a guest, onto an uplink), and hands the frames it receives to an ingress.

/// A port's number on its switch.
pub type PortId = usize;

/// A place frames leave the switch through: a guest's virtio-net receive queue, an uplink,
/// an RDMA device's wire engine.
pub trait Port: Send + Sync {
    /// Who this is, for logs and counters.
    fn name(&self) -> &str;
    /// Takes one Ethernet frame (destination MAC first, no FCS, no virtio-net header).
    /// Never blocks: a port with no room for it now drops it and counts the drop, as a
    /// NIC with a full ring does.
    fn transmit(&self, frame: &[u8]);
    /// `transmit` of a frame the switch gives away (the one destination of a unicast): a
    /// port that keeps frames takes it without a copy.
    fn transmit_owned(&self, frame: Vec<u8>) {
        self.transmit(&frame);
    }
    /// Frames the switch gives away, in order: a port that can take many at once (one
    /// system call, one lock, one wake-up) does.
    fn transmit_batch(&self, frames: Vec<Vec<u8>>) {
        for f in frames {
            self.transmit_owned(f);
        }
    }
    /// Whether the switch floods broadcast, multicast and unknown unicast here. An RDMA
    /// device's wire engine takes only the RoCEv2 frames steered to it.
    fn takes_floods(&self) -> bool {
        true
    }
}

/// Where a port hands the frames it receives (the switch).
pub trait Ingress: Send + Sync {
    /// Frame `frame` came in on port `from`. Never blocks on a slow destination.
    fn receive(&self, from: PortId, frame: &[u8]);
    /// `receive` of a frame its sender gives away: a unicast reaches its port uncopied.
    fn receive_owned(&self, from: PortId, frame: Vec<u8>) {
        self.receive(from, &frame);
    }
    /// `receive_owned` of frames that came in together, in order.
    fn receive_batch(&self, from: PortId, frames: Vec<Vec<u8>>) {
        for f in frames {
            self.receive_owned(from, f);
        }
    }
}
