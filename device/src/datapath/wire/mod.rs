//! The RoCEv2 wire path of the data path (issue 11): RC and UC work requests between a
//! device of this process and a peer that is not, as IBTA packets through the reliability
//! engine of `transport` on a `net::port::Port`. Frames between devices of one process
//! never come here: they keep the in-process path of `requester` / `responder` (no
//! packets, same speed).
//!
//! # Design
//!
//! - **The wire port** (`port`). The fabric attaches each RoCE-mode device to the
//!   process's switch as a `WirePort` and steers to it the frames for the device's MAC that
//!   are UDP to 4791 (`Switch::steer_roce`); everything else for that MAC still reaches the
//!   guest's virtio-net interface. The port's `transmit` (called by the switch, never
//!   blocking) queues the frame on a bounded queue, counts a drop when it is full, and
//!   wakes the device's poller. The device transmits by handing frames to the switch's
//!   ingress as that port (`WirePort::send`).
//! - **The route** (`Route::Wire`). `Peers::route` answers `Route::Device` for a GID a
//!   device of this process holds (`rnic::gids::GidDirectory`), as today; for any other
//!   GID, when the requesting device has a wire port, `Route::Wire`. IB-mode LIDs are never
//!   routed to the wire. The decision is made once per QP, when its engines are made, not
//!   per WQE: a QP is either an in-process QP or a wire QP for its whole connection.
//! - **The engines** (`engines`). Per wire QP one `transport::Requester` (made at RTS from
//!   `sq_psn`, path MTU, `timeout`, `retry_cnt`, `rnr_retry`, `max_rd_atomic`,
//!   `dest_qp_num`) and one `transport::Responder` (made at RTR from `rq_psn`,
//!   `max_dest_rd_atomic`, `min_rnr_timer`), kept with the QP's epoch in the device's
//!   `WireQps` and touched only under the device lock. An epoch that moved (ERR, RESET,
//!   destroy) drops them: the data path's flush completes the WQEs, as today. RTS->RTS
//!   calls `reconfigure`.
//! - **Sending** (requester). A wire QP's send WQEs are read and checked as `plan`/
//!   `resolve` do today and kept, by `WqeId` (the free-running SQ index), with their SGEs
//!   (`engines::LocalBuffers`: keys, addresses, lengths, never guest addresses) until the
//!   engine completes the WQE. The device's poll drives `poll_transmit` (each payload
//!   resolved through the keys and gathered at that moment, `Outgoing::packet`, encoded,
//!   `WirePort::send`), `on_timer` at `next_timer`, which becomes `Progress.retry_at` so a
//!   sleeping poller wakes for a retransmission. A payload whose keys no longer allow it
//!   (DEREG_MR, REREG_MR, DMA_UNMAP, invalidation since) is not read: the engine aborts
//!   the WQE (`Requester::abort`), which ends LOC_PROT_ERR after those before it. Atomics
//!   are posted with their atomic_seg operands and their 8-byte result buffer kept
//!   (`AtomicResult` writes the original value there);
//!   SEND with invalidate carries its R_Key in an IETH; the memory operations (REG_MR,
//!   LOCAL_INV, BIND_MW) are posted as local work (`post_local`) and executed by the
//!   in-process `memory_ops` at `Action::Local`, in queue order (`local`).
//! - **Budgets**. A QP sends at most `QP_PACKETS_PER_PASS` packets in a pass and a device
//!   `DEVICE_PACKETS_PER_PASS` (the QPs take turns), so the device lock is held, and the
//!   frames of a pass take memory, in proportion to those and not to a length a guest or
//!   a peer chose; the rest goes in the next passes (`Progress::worked`).
//! - **Receiving**. The poll drains the port's queue: `wire::Packet::parse` (a bad ICRC or
//!   any malformed frame is dropped and counted), the destination QPN names the QP (an
//!   unknown QP, or one that is not a wire QP of that peer: dropped and counted). A
//!   response goes to the requester engine: `Place` writes READ data into the kept buffers
//!   (resolved now), `Complete` becomes `complete_send` (in order; an error status moves
//!   the QP to ERR), `RnrWait` fills `Qp::waiting`. A request goes to the responder engine;
//!   its `Execute` is one packet accepted, placed and completed by today's responder
//!   helpers (rkey check at the first packet, receive WQE claimed at a SEND's first packet,
//!   CQE at the last, COMM_EST in RTR), with the payload taken from the frame instead of
//!   the requester's guest memory; READ responses (`Payload::Memory`) are checked again as
//!   the READ was (`responder::read_response`: key state, PD, REMOTE_READ, bounds) and read
//!   from the responder's MR as each goes out, a duplicate's too; refused, the engine sends
//!   a NAK instead (`Responder::refuse_read`) and the QP moves to ERR. An atomic is checked
//!   by the same steps and executed once on the word (`atomic::read_modify_write`); its
//!   duplicates are answered from the engine's resources (`Outcome::Atomic`). A SEND with
//!   invalidate invalidates its R_Key and completes IB_WC_WITH_INVALIDATE, as in-process.
//! - **Datagrams** (`datagram`). A UD or GSI send WQE whose AV's GID no device of this
//!   process holds leaves as one UD SEND Only packet (DETH: Q_Key, source QPN; QP1 for a
//!   GSI QP) to the AV's `dmac`, sent from the requester's `carry_out` with no lock held.
//!   Received UD packets are decoded before the device lock is taken and delivered by the
//!   in-process datagram steps (`datapath::datagram::deliver`), the GRH area from the
//!   packet's IP header. CM MADs to QP1 travel this way, so ib_cm and rdma_cm work across.
//! - **Counters** (`count`): the wire port counts frames in, dropped (queue full,
//!   undecodable, bad ICRC, unknown QP) and out; each frame of a wire QP counts in the
//!   SPEC port and QP counters (packets, bytes, messages, ACKs and NAKs), and so do the
//!   engines' `RequesterStats`/`ResponderStats` (retransmitted packets, ACK timeouts,
//!   implied NAKs, duplicate and out-of-sequence requests): `vrnic ctl counters DEV
//!   [QPN]` and the guest's hw counters show wire retries.
//! - **The QP as the guest sees it** (`state`): QUERY_QP's sq_psn/rq_psn are the engines'
//!   PSNs, `Qp::waiting` shows an RNR wait, SQD drains every posted WQE before
//!   SQ_DRAINED, and MODIFY_QP of a sending QP reaches the engines' `reconfigure`.
//!
//! Lock order: a `WireQps` map is taken under its device's lock (it is part of the
//! device state), or alone for a look, never with the device lock taken after it; the
//! port's queue is a leaf lock (rule 2), taken with or without the device lock; frames
//! are handed to the switch with no device lock held (it delivers them inline).
//!
//! # Files
//!
//! `port` (the wire port), `datagram` (UD and GSI packets out and in), `frames` (a QP's path: MACs, IP, UDP source port; received
//! frames classified), `engines` (configurations from the QP's attributes, the per-QP map
//! by epoch, the kept WQEs), `send` (WQEs posted, requester actions), `local` (memory
//! operations, the DMA fence), `receive` (one request packet through the responder's
//! steps, atomics, READ response bytes), `bytes` (payloads out of and into guest-memory
//! pieces), `count` (SPEC counters), `state` (PSNs, waits, SQD, reconfigure). This module: the device's wire, the engines a QP
//! gets on first sight, and the two hooks (`service_qp` in place of the in-process
//! requester for a wire QP in RTS, `poll` for received frames and timers).
//!
//! # Not yet on the wire
//!
//! - XRC.

pub mod bytes;
pub mod count;
pub mod datagram;
pub mod engines;
pub mod frames;
pub mod local;
pub mod port;
pub mod receive;
pub mod send;
pub mod state;

use super::{Peers, Progress, Route, WQE_BUDGET};
use crate::addr::{Address, Gid, Mac};
use crate::guest_memory::RamSnapshot;
use crate::rnic::notify::post_async;
use crate::rnic::{Rnic, RnicState};
use crate::transport::requester::Action;
use crate::transport::responder::Received;
use crate::transport::{Payload, Requester};
use crate::wire::WireError;
use engines::{requester_config, responder_config, QpEngines, WireQps};
use frames::{classify, Dropped, Path};
use port::WirePort;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;
use vrnic_hw::{DbQpSlot, QpState, QpType, VendorErr, WcStatus};

/// Frames the receive path takes from the port per pass.
const RX_BATCH: usize = 256;

/// Set once any device of the process has a wire port: while clear, the data path's wire
/// hooks cost this one relaxed load.
static WIRE_ON: AtomicBool = AtomicBool::new(false);

/// Whether any device has a wire port.
pub fn on() -> bool {
    WIRE_ON.load(Relaxed)
}

fn set_on() {
    WIRE_ON.store(true, Relaxed);
}

/// A RoCE device's wire: its port and its wire QPs.
pub struct WireDevice {
    pub port: Arc<WirePort>,
    qps: Mutex<WireQps>,
    /// Which wire QP goes first in the next pass.
    turn: AtomicUsize,
}

impl WireDevice {
    /// Attaches `rnic` to `switch` (its MAC's RoCEv2 frames come to its wire port).
    pub fn attach(
        switch: &Arc<crate::net::switch::Switch>,
        rnic: &Arc<Rnic>,
        mac: Mac,
    ) -> Result<Arc<WireDevice>, crate::net::switch::SwitchError> {
        let weak: Weak<Rnic> = Arc::downgrade(rnic);
        let wake = Box::new(move || {
            if let Some(r) = weak.upgrade() {
                r.wake();
            }
        });
        let port = WirePort::attach(switch, rnic.name(), mac, wake)?;
        Ok(Arc::new(WireDevice {
            port,
            qps: Mutex::default(),
            turn: AtomicUsize::new(0),
        }))
    }

    /// The wire QPs; taken only under the device lock.
    fn qps(&self) -> MutexGuard<'_, WireQps> {
        self.qps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many QPs are on the wire now (a look at the map, no device lock needed).
    pub fn qp_count(&self) -> usize {
        self.qps().len()
    }

    /// Engine statistics summed over the wire QPs: (retransmitted packets, timeouts).
    pub fn retransmissions(&self, rnic: &Rnic) -> (u64, u64) {
        let _st = rnic.lock();
        let qps = self.qps();
        let mut sum = (0, 0);
        for qpn in qps.qpns() {
            if let Some(rq) = qps.get_any(qpn).and_then(|e| e.requester.as_ref()) {
                sum.0 += rq.stats().retransmitted;
                sum.1 += rq.stats().timeouts;
            }
        }
        sum
    }
}

/// The engines of QP `qpn` if it is a wire QP (RoCE, RC or UC, RTR or later, its peer's
/// GID held by no device of this process), made on first sight.
fn engines_for<'q>(
    peers: &dyn Peers,
    rnic: &Rnic,
    st: &RnicState,
    qps: &'q mut WireQps,
    qpn: u32,
) -> Option<&'q mut QpEngines> {
    let Some(qp) = st.objects.qp(qpn) else {
        // Destroyed: the timer pass over the wire QPs forgets its engines here.
        qps.forget(qpn);
        return None;
    };
    let live = matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd);
    if !live {
        qps.drop_qp(qpn);
        return None;
    }
    if qps.is_local(qpn, qp.epoch) {
        return None;
    }
    if qps.get(qpn, qp.epoch).is_none() {
        let mac = rnic.link().mac()?;
        let dgid = Gid(qp.attr.dgid);
        let wire = matches!(qp.kind, QpType::Rc | QpType::Uc)
            && matches!(peers.route(&Address::Gid(dgid)), Some(Route::Wire));
        if !wire {
            qps.set_local(qpn, qp.epoch);
            return None;
        }
        let sgid = st.gid_table.get(qp.attr.sgid_index)?;
        let dest = qp.attr.dest_qp_num.to_native();
        let grh = (
            qp.attr.traffic_class,
            qp.attr.flow_label.to_native(),
            qp.attr.hop_limit,
        );
        let path = Path::new(mac, Mac(qp.dmac), sgid, dgid, qpn, dest, grh);
        let cfg = responder_config(qp.kind, &qp.attr, qp.mtu_bytes()).ok()?;
        qps.open(qpn, qp.epoch, cfg, path).ok()?;
        log::debug!("{}: QP {qpn} is on the wire (peer {dgid:?})", rnic.name());
    }
    let e = qps.get(qpn, qp.epoch)?;
    if e.requester.is_none() && matches!(qp.state, QpState::Rts | QpState::Sqd) && e.kept.is_empty()
    {
        let cfg = requester_config(qp.kind, &qp.attr, qp.mtu_bytes()).ok()?;
        e.requester = Requester::new(cfg).ok();
        e.requester_cfg = Some(cfg);
        e.posted = qp.sq.ci;
    }
    state::reconfigure(qp, e);
    Some(e)
}

/// Packets one wire QP sends at most in one pass (responses and requests together): a
/// long message, a long READ response or a peer's duplicates go out over several passes,
/// so the device lock is held, and the frames of a pass take memory, in proportion to
/// this and not to a length the guest or the peer chose.
pub const QP_PACKETS_PER_PASS: usize = 64;

/// Packets all wire QPs of a device send at most in one pass (the QPs take turns first).
pub const DEVICE_PACKETS_PER_PASS: usize = 512;

/// The frames of what QP `qpn`'s engines have to send now (ACKs, NAKs, READ responses,
/// requests and retransmissions), at most `budget` of them; returns how many. Every
/// payload is read from guest memory through its key at this moment: a key revoked since
/// fails the READ response (NAK) or the send WQE (LOC_PROT_ERR), and nothing is read.
#[allow(clippy::too_many_arguments)]
fn transmit(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    now: Instant,
    actions: &mut Vec<Action>,
    frames: &mut Vec<Vec<u8>>,
    budget: usize,
) -> usize {
    let mut sent = 0;
    while sent < budget {
        let Some(out) = e.responder.poll_transmit() else {
            break;
        };
        sent += 1;
        let mut refused = None;
        let mut frame = Vec::new();
        let built = e
            .path
            .frame_with(&out, &mut frame, |room| match out.payload {
                Payload::Memory { va, rkey, .. } => {
                    receive::read_memory(rnic, st, mem, qpn, va, rkey, room).map_err(|why| {
                        refused = Some(why);
                        WireError::PayloadUnreadable
                    })
                }
                _ => Ok(()),
            });
        if let Some(why) = refused {
            e.responder.refuse_read(out.psn(), why);
        } else if built.is_ok() {
            count::sent(rnic, st, qpn, &out, out.payload.len() as usize, false);
            frames.push(frame);
        }
    }
    let QpEngines {
        requester,
        kept,
        path,
        ..
    } = e;
    let Some(rq) = requester.as_mut() else {
        return sent;
    };
    while sent < budget {
        let before = rq.stats().retransmitted;
        let Some(out) = rq.poll_transmit(now, actions) else {
            break;
        };
        sent += 1;
        let resent = rq.stats().retransmitted != before;
        let mut frame = Vec::new();
        let built = path.frame_with(&out, &mut frame, |room| match out.payload {
            Payload::Wqe { wqe, offset, len } => kept
                .iter()
                .find(|k| k.index == wqe.0 && !k.fault)
                .and_then(|k| k.local.resolve(&st.objects, offset, u64::from(len)))
                .and_then(|pieces| bytes::gather(mem, &pieces, room))
                .ok_or(WireError::PayloadUnreadable),
            _ => Ok(()),
        });
        match (built, out.payload) {
            (Ok(()), _) => {
                count::sent(rnic, st, qpn, &out, out.payload.len() as usize, resent);
                frames.push(frame);
            }
            // Its local buffers are gone (deregistered, unmapped): nothing of it leaves,
            // and it ends LOC_PROT_ERR.
            (Err(WireError::PayloadUnreadable), Payload::Wqe { wqe, .. }) => {
                if let Some(k) = kept.iter_mut().find(|k| k.index == wqe.0) {
                    k.fault = true;
                }
                let why = VendorErr::DmaFault;
                rq.abort(wqe, WcStatus::LocProtErr, why, now, actions);
            }
            (Err(_), _) => {}
        }
    }
    sent
}

/// QP `qpn`'s turn: `transmit` within `budget`, then what the engines asked for meanwhile
/// (`send::apply`). Returns the packets sent and whether the QP failed.
#[allow(clippy::too_many_arguments)]
fn take_turn(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    now: Instant,
    actions: &mut Vec<Action>,
    frames: &mut Vec<Vec<u8>>,
    budget: usize,
) -> (usize, bool) {
    let sent = transmit(rnic, st, mem, e, qpn, now, actions, frames, budget);
    (sent, send::apply(rnic, st, mem, e, qpn, actions, None, now))
}

/// Sends the frames with no device lock held.
pub(super) fn send_all(wire: &WireDevice, rnic: &Rnic, frames: Vec<Vec<u8>>) {
    let burst = &wire.port.counters.tx_burst_max;
    burst.fetch_max(frames.len() as u64, Relaxed);
    tap_frames(rnic, &frames);
    if !frames.is_empty() {
        wire.port.send(frames);
    }
}

/// The device's packet tap, while on, gets the frames it sent as they left (decoded again:
/// the cost is the capture's, not the data path's). Received frames are recorded as
/// `poll` decodes them.
pub fn tap_frames(rnic: &Rnic, frames: &[Vec<u8>]) {
    if crate::wire::tap::any_on() && rnic.tap.is_on() {
        let packets = frames
            .iter()
            .filter_map(|f| classify(f).ok().map(|p| p.owned()))
            .collect();
        rnic.tap.record(&Arc::new(packets));
    }
}

/// The send side of QP `qpn` if it is a wire QP in RTS or SQD (None: the in-process path
/// serves it, e.g. to flush it in ERR).
pub fn service_qp(peers: &dyn Peers, rnic: &Arc<Rnic>, qpn: u32, now: Instant) -> Option<Progress> {
    let wire = peers.wire(rnic)?;
    let mut frames = Vec::new();
    let mut progress = Progress::default();
    let fenced;
    {
        let mut st = rnic.lock();
        let mem = st.mem()?;
        let qp = st.objects.qp(qpn)?;
        if !matches!(qp.state, QpState::Rts | QpState::Sqd) || !qp.has_doorbell() {
            return None;
        }
        let sq_pi = rnic
            .doorbells
            .slot_word(qp.db_page, qp.db_slot, DbQpSlot::SQ_PI_OFF);
        if sq_pi.wrapping_sub(qp.sq.ci) > qp.sq.ring.depth() {
            return None; // a doorbell error: the in-process path reports it
        }
        let mut qps = wire.qps();
        let e = engines_for(peers, rnic, &st, &mut qps, qpn)?;
        progress.worked |= send::post_new(rnic, &mut st, &mem, e, qpn, sq_pi, WQE_BUDGET);
        let mut actions = Vec::new();
        let budget = QP_PACKETS_PER_PASS;
        let (sent, failed) = take_turn(
            rnic,
            &mut st,
            &mem,
            e,
            qpn,
            now,
            &mut actions,
            &mut frames,
            budget,
        );
        // Spent: more is ready, the poller comes back at once.
        progress.worked |= sent == budget;
        progress.retry_at = e.requester.as_ref().and_then(|r| r.next_timer());
        fenced = e.fenced;
        if failed {
            qps.drop_qp(qpn);
        }
    }
    progress.worked |= !frames.is_empty();
    send_all(&wire, rnic, frames);
    if let Some(id) = fenced {
        send_all(
            &wire,
            rnic,
            local::after_fence(peers, rnic, &wire, qpn, id, now),
        );
        progress.worked = true;
    }
    Some(progress)
}

/// One packet for QP `qpn`. What it makes the engines send goes out in the QP's turn of
/// the pass, within its budget; but a responder that failed sends its NAK now, as the QP
/// leaves the wire with it.
#[allow(clippy::too_many_arguments)]
fn handle(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    e: &mut QpEngines,
    qpn: u32,
    packet: &crate::wire::Packet<&[u8]>,
    now: Instant,
    frames: &mut Vec<Vec<u8>>,
) -> bool {
    let mut actions = Vec::new();
    let mut failed = false;
    count::received(rnic, st, qpn, packet);
    if packet.bth.opcode.is_request() {
        let before = *e.responder.stats();
        match e.responder.on_packet(packet) {
            Received::Execute(ex) => {
                let outcome = receive::execute(rnic, st, mem, qpn, &ex, packet);
                count::executed(rnic, st, qpn, &ex, outcome);
                e.responder.finish(ex, outcome);
            }
            Received::Handled | Received::Abandoned => {}
            Received::Fatal(event) => {
                st.objects.qp_to_error(qpn);
                post_async(rnic, st, event, qpn, 0);
                failed = true;
            }
        }
        count::responder(rnic, st, qpn, &before, e.responder.stats());
    } else if let Some(rq) = e.requester.as_mut() {
        let before = *rq.stats();
        rq.on_packet(packet, now, &mut actions);
        count::requester(rnic, st, qpn, &before, rq.stats(), false);
        failed |= send::apply(
            rnic,
            st,
            mem,
            e,
            qpn,
            &mut actions,
            Some(packet.payload),
            now,
        );
    }
    if e.responder.is_failed() {
        let budget = QP_PACKETS_PER_PASS;
        failed |= take_turn(rnic, st, mem, e, qpn, now, &mut actions, frames, budget).1;
    }
    failed
}

/// The wire part of a device's pass: the frames that came in, then the timers of every
/// wire QP; `retry_at` is the earliest engine timer.
pub fn poll(peers: &dyn Peers, rnic: &Arc<Rnic>, now: Instant) -> Progress {
    let mut progress = Progress::default();
    let Some(wire) = peers.wire(rnic) else {
        return progress;
    };
    // Frames are decoded with no lock held; datagrams are delivered by the datagram
    // steps, which take the device lock themselves.
    let counters = &wire.port.counters;
    let mut incoming = Vec::new();
    // A capture gets what came in as decoded (before any check but the frame's own).
    let tapping = crate::wire::tap::any_on() && rnic.tap.is_on();
    let mut tapped = Vec::new();
    let taken = wire.port.take(RX_BATCH);
    for f in &taken {
        progress.worked = true;
        match classify(f) {
            Ok(p) => {
                if tapping {
                    tapped.push(p.owned());
                }
                match datagram::is_datagram(&p) {
                    true => datagram::receive(rnic, &p),
                    false => incoming.push(p),
                }
            }
            Err(why) => {
                log::debug!(
                    "{}: wire frame of {} bytes dropped: {why}",
                    rnic.name(),
                    f.len()
                );
                match why {
                    Dropped::Icrc(_) => counters.rx_bad_icrc.fetch_add(1, Relaxed),
                    _ => counters.rx_bad.fetch_add(1, Relaxed),
                };
            }
        }
    }
    if !tapped.is_empty() {
        rnic.tap.record(&Arc::new(tapped));
    }
    // Nothing came and no QP is on the wire: the device lock is not needed (the map is
    // only looked at, with no device lock held, so no lock nests the wrong way).
    if incoming.is_empty() && wire.qps().is_empty() {
        return progress;
    }
    let mut frames = Vec::new();
    {
        let mut st = rnic.lock();
        let Some(mem) = st.mem() else {
            return progress;
        };
        let mut qps = wire.qps();
        for packet in incoming {
            let qpn = packet.bth.dest_qpn;
            let Some(e) =
                engines_for(peers, rnic, &st, &mut qps, qpn).filter(|e| e.path.answers(&packet))
            else {
                counters.rx_unknown_qp.fetch_add(1, Relaxed);
                continue;
            };
            if handle(rnic, &mut st, &mem, e, qpn, &packet, now, &mut frames) {
                qps.drop_qp(qpn);
            }
        }
        // The QPs take turns at the device's budget: a different one goes first each pass.
        let mut qpns = qps.qpns();
        if !qpns.is_empty() {
            let first = wire.turn.fetch_add(1, Relaxed) % qpns.len();
            qpns.rotate_left(first);
        }
        let mut left = DEVICE_PACKETS_PER_PASS;
        for qpn in qpns {
            let Some(e) = engines_for(peers, rnic, &st, &mut qps, qpn) else {
                continue;
            };
            let mut actions = Vec::new();
            if let Some(rq) = e.requester.as_mut() {
                if rq.next_timer().is_some_and(|t| t <= now) {
                    let before = *rq.stats();
                    rq.on_timer(now, &mut actions);
                    let ended = actions.iter().any(|a| {
                        matches!(a, Action::Complete { status, .. } if *status == WcStatus::RetryExcErr)
                    });
                    count::requester(rnic, &st, qpn, &before, rq.stats(), ended);
                }
            }
            let budget = QP_PACKETS_PER_PASS.min(left);
            let (sent, failed) = take_turn(
                rnic,
                &mut st,
                &mem,
                e,
                qpn,
                now,
                &mut actions,
                &mut frames,
                budget,
            );
            left -= sent;
            progress.worked |= sent == budget;
            if failed {
                qps.drop_qp(qpn);
                continue;
            }
            let at = e.requester.as_ref().and_then(|r| r.next_timer());
            progress.merge(Progress {
                worked: false,
                retry_at: at,
            });
        }
    }
    progress.worked |= !frames.is_empty();
    send_all(&wire, rnic, frames);
    progress
}
