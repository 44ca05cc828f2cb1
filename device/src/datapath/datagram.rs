//! Datagrams of UD and GSI QPs (SPEC "Datagrams (UD and GSI)"): the address vector of a
//! send WQE, and delivery at the destination: Q_Key check, one receive WQE per datagram,
//! the GRH in its first 40 bytes, the payload after it.
//!
//! Delivery is unreliable, as on a wire: whatever finds no taker (no route, no such QP, a
//! wrong Q_Key, no receive WQE) is dropped and counted, and the sender completes with
//! SUCCESS. Receive errors complete the receive WQE in error but leave the QP as it is.

use super::copy::{copy, Fault, Pieces};
use super::grh::{Grh, GRH_LEN};
use super::receive;
use super::responder::Response;
use crate::addr::{Address, Gid, Mac};
use crate::guest_memory::RamSnapshot;
use crate::objects::counters::{Answer, Counters, Op, Wire};
use crate::objects::Qp;
use crate::rnic::fence::InFlight;
use crate::rnic::{Rnic, RnicState};
use std::sync::Arc;
use vrnic_hw::{
    Counter, Cqe, NetworkType, QpType, SendWqeHeader, UdAv, VendorErr, WcFlags, WcOpcode, WcStatus,
    WrOpcode, CQE_FLAG_SOLICITED, GSI_QKEY, GSI_QPN, QPN_MAX,
};

type Failure = (WcStatus, VendorErr);

/// A resolved address vector: where the datagram goes and what its receiver learns.
#[derive(Debug, Clone, Copy)]
pub struct Datagram {
    pub dest: Address,
    pub dest_qpn: u32,
    /// The sender as the receiver sees it: GSI_QPN for a GSI QP.
    pub src_qpn: u32,
    pub qkey: u32,
    pub sl: u8,
    /// IB mode: the sender's LID.
    pub slid: u16,
    pub grh: Option<Grh>,
    /// RoCE mode: the destination MAC the driver resolved (the wire's frame goes there).
    pub dmac: Mac,
}

/// Bit 31 of remote_qkey: send with the QP's own Q_Key.
const QKEY_FROM_QP: u32 = 1 << 31;

/// Resolves the ud_av of the datagram WQE at `addr` of `qp` (opcode and header already
/// read): the address per the device's link mode (IB: dlid, GRH optional; RoCE: GRH with a
/// set source GID, routed by dgid).
pub fn resolve(
    rnic: &Rnic,
    st: &RnicState,
    mem: &RamSnapshot,
    qp: &Qp,
    addr: u64,
    wqe: &SendWqeHeader,
) -> Result<Datagram, Failure> {
    let bad = (WcStatus::LocQpOpErr, VendorErr::BadWqe);
    match WrOpcode::try_from(wqe.opcode) {
        Ok(WrOpcode::Send | WrOpcode::SendWithImm) => {}
        _ => return Err((WcStatus::LocQpOpErr, VendorErr::BadOpcode)),
    }
    if wqe.remote_addr.to_native() != 0 || wqe.rkey.to_native() != 0 {
        return Err(bad);
    }
    let av: UdAv = mem
        .read_obj(addr + SendWqeHeader::SIZE as u64)
        .map_err(|_| (WcStatus::LocQpOpErr, VendorErr::DmaFault))?;
    if av.nonzero_reserved().is_some() || av.sl > 15 || av.is_global > 1 {
        return Err(bad);
    }
    let global = av.is_global == 1;
    let (dest, sgid) = if rnic.link().is_eth() {
        let sgid = st
            .gid_table
            .get(av.sgid_index)
            .filter(|_| global)
            .ok_or(bad)?;
        (Address::Gid(Gid(av.dgid)), Some(sgid))
    } else {
        // IB mode has one GID: fe80:: and the port GUID.
        if global && av.sgid_index != 0 {
            return Err(bad);
        }
        let mut gid0 = [0u8; 16];
        gid0[0] = 0xfe;
        gid0[1] = 0x80;
        gid0[8..].copy_from_slice(&rnic.node_guid.to_be_bytes());
        (
            Address::Lid(av.dlid.to_native()),
            global.then_some(Gid(gid0)),
        )
    };
    let grh = sgid.map(|sgid| Grh {
        sgid,
        dgid: Gid(av.dgid),
        traffic_class: av.traffic_class,
        flow_label: av.flow_label.to_native() & 0xF_FFFF,
        hop_limit: av.hop_limit,
        roce: rnic.link().is_eth(),
    });
    let gsi = qp.kind == QpType::Gsi;
    let remote_qkey = av.remote_qkey.to_native();
    let qkey = match (gsi, remote_qkey & QKEY_FROM_QP != 0) {
        (true, _) => GSI_QKEY,
        (false, true) => qp.attr.qkey.to_native(),
        (false, false) => remote_qkey,
    };
    Ok(Datagram {
        dest,
        dest_qpn: av.remote_qpn.to_native() & QPN_MAX,
        src_qpn: if gsi { GSI_QPN } else { qp.qpn },
        qkey,
        sl: av.sl,
        slid: rnic.lid(),
        grh,
        dmac: Mac(av.dmac),
    })
}

/// Where a datagram's payload is.
#[derive(Clone, Copy)]
pub enum Payload<'a> {
    /// In the sender's guest memory (a device of this process).
    Guest {
        mem: &'a RamSnapshot,
        pieces: &'a Pieces,
    },
    /// In the packet it came in (the wire).
    Bytes(&'a [u8]),
}

impl Payload<'_> {
    /// The first `len` bytes, or None where the sender's memory cannot be read.
    pub fn to_vec(&self, len: u64) -> Option<Vec<u8>> {
        let len = usize::try_from(len).ok()?;
        match *self {
            Payload::Guest { mem, pieces } => {
                let mut data = vec![0u8; len];
                let mut at = 0usize;
                for &(addr, n) in pieces {
                    let n = usize::try_from(n).ok()?.min(len - at);
                    mem.read(addr, &mut data[at..at + n]).ok()?;
                    at += n;
                }
                (at == len).then_some(data)
            }
            Payload::Bytes(b) => b.get(..len).map(<[u8]>::to_vec),
        }
    }
}

/// One datagram on its way: the resolved AV and the sender's payload.
pub struct Send<'a> {
    pub dg: &'a Datagram,
    pub len: u64,
    pub imm: Option<[u8; 4]>,
    pub solicited: bool,
    pub payload: Payload<'a>,
}

/// A datagram the destination QP took: where its GRH and payload go.
struct Accepted {
    qpn: u32,
    counters: Arc<Counters>,
    grh: Option<[u8; GRH_LEN]>,
    pieces: Pieces,
    mem: RamSnapshot,
    epoch: u32,
    _in_flight: InFlight,
}

/// Why a datagram was not placed (it is dropped, or its receive WQE failed).
enum Refused {
    Dropped(&'static str),
    /// The receive WQE completed in error (the QP's counters); the datagram is gone.
    ReceiveFailed(Arc<Counters>),
}

/// The datagram at the device `rnic` it was routed to. The sender's answer: Done (placed
/// or dropped, as on a wire) or LocalFault (its own memory could not be read).
pub fn deliver(rnic: &Rnic, s: &Send) -> Response {
    let accepted = accept(rnic, &mut rnic.lock(), s);
    let acc = match accepted {
        Ok(acc) => acc,
        Err(Refused::Dropped(why)) => {
            dropped(rnic, why, s.dg.dest_qpn);
            return Response::Done;
        }
        Err(Refused::ReceiveFailed(counters)) => {
            received(rnic, &counters, s);
            return Response::Done;
        }
    };
    let (head, tail) = split(&acc.pieces, GRH_LEN as u64);
    let grh_written = match acc.grh {
        Some(grh) => write_pieces(&acc.mem, &head, &grh),
        None => Ok(()),
    };
    let placed = grh_written.and_then(|()| match s.payload {
        Payload::Guest { mem, pieces } => copy(&acc.mem, &tail, mem, pieces, s.len),
        Payload::Bytes(bytes) => {
            let n = usize::try_from(s.len).map_err(|_| Fault::Source)?;
            write_pieces(&acc.mem, &tail, bytes.get(..n).ok_or(Fault::Source)?)
        }
    });
    complete(rnic, &mut rnic.lock(), s, acc, placed)
}

/// A datagram without a taker, counted at `rnic`.
pub fn dropped(rnic: &Rnic, why: &str, qpn: u32) {
    rnic.counters.inc(Counter::DatagramsDropped);
    log::debug!("{}: datagram to QP {qpn} dropped: {why}", rnic.name());
}

fn accept(rnic: &Rnic, st: &mut RnicState, s: &Send) -> Result<Accepted, Refused> {
    if !st.serving() {
        return Err(Refused::Dropped("device not serving"));
    }
    let Some(mem) = st.mem() else {
        return Err(Refused::Dropped("no guest memory"));
    };
    let dg = s.dg;
    let qpn = if dg.dest_qpn == GSI_QPN {
        st.objects.gsi_qpn.ok_or(Refused::Dropped("no GSI QP"))?
    } else {
        dg.dest_qpn
    };
    let qp = st
        .objects
        .qp(qpn)
        .filter(|qp| qp.kind == QpType::Ud || (qp.kind == QpType::Gsi && dg.dest_qpn == GSI_QPN))
        .ok_or(Refused::Dropped("no such UD QP"))?;
    if !qp.receives_allowed() {
        return Err(Refused::Dropped("QP not ready to receive"));
    }
    let qkey = match qp.kind {
        QpType::Gsi => GSI_QKEY,
        _ => qp.attr.qkey.to_native(),
    };
    if dg.qkey != qkey {
        return Err(Refused::Dropped("Q_Key mismatch"));
    }
    let counters = qp.counters.clone();
    if !receive::claim(rnic, st, qpn) {
        return Err(Refused::Dropped("no receive WQE"));
    }
    let need = GRH_LEN as u64 + s.len;
    let (sges, capacity) = match receive::head(st, &mem, qpn) {
        Ok(head) => head,
        Err((status, why)) => {
            fail_receive(rnic, st, &mem, s, qpn, status, why);
            return Err(Refused::ReceiveFailed(counters));
        }
    };
    if capacity < need {
        let (status, why) = (WcStatus::LocLenErr, VendorErr::Length);
        fail_receive(rnic, st, &mem, s, qpn, status, why);
        return Err(Refused::ReceiveFailed(counters));
    }
    let pieces = super::sge::pieces(&st.objects, &sges, 0, need);
    let grh = dg
        .grh
        .map(|g| g.bytes(u32::try_from(s.len).unwrap_or(u32::MAX), s.imm.is_some()));
    let Some(qp) = st.objects.qp_mut(qpn) else {
        return Err(Refused::Dropped("QP gone"));
    };
    qp.receive_in_flight = true;
    Ok(Accepted {
        qpn,
        counters,
        grh,
        pieces,
        mem,
        epoch: qp.epoch,
        _in_flight: rnic.fence.enter(),
    })
}

/// After the copy: the receive's CQE (success, or the fault of the receiver's memory).
fn complete(
    rnic: &Rnic,
    st: &mut RnicState,
    s: &Send,
    acc: Accepted,
    placed: Result<(), Fault>,
) -> Response {
    if receive::copy_ended(rnic, st, acc.qpn, acc.epoch).is_none() {
        return Response::Done;
    }
    match placed {
        Ok(()) => {}
        Err(Fault::Source) => return Response::LocalFault,
        Err(Fault::Destination) => {
            let (status, why) = (WcStatus::LocProtErr, VendorErr::DmaFault);
            fail_receive(rnic, st, &acc.mem, s, acc.qpn, status, why);
            received(rnic, &acc.counters, s);
            return Response::Done;
        }
    }
    received(rnic, &acc.counters, s);
    let mut cqe = receive_cqe(s, WcStatus::Success, VendorErr::None);
    cqe.byte_len = u32::try_from(GRH_LEN as u64 + s.len)
        .unwrap_or(u32::MAX)
        .into();
    if acc.grh.is_some() {
        cqe.wc_flags |= u8::from(WcFlags::Grh);
    }
    receive::complete_head(rnic, st, &acc.mem, acc.qpn, cqe);
    Response::Done
}

/// A datagram of `len` bytes as a wire carries it: one packet, unacknowledged.
pub fn wire(len: u64) -> Wire {
    Wire {
        op: Op::Send,
        bytes: len,
        packets: 1,
        first: true,
        last: true,
        resent: None,
        reliable: false,
    }
}

/// Datagram `s` reached its QP (placed, or its receive WQE failed): counted as received.
fn received(rnic: &Rnic, qp: &Counters, s: &Send) {
    let w = wire(s.len);
    rnic.counters.responded(&w, Answer::Done);
    qp.responded(&w, Answer::Done);
}

/// The receive CQE of datagram `s` with `status`.
fn receive_cqe(s: &Send, status: WcStatus, why: VendorErr) -> Cqe {
    let dg = s.dg;
    let network = dg.grh.map_or(NetworkType::Ib, |g| g.network_type());
    Cqe {
        imm_data: s.imm.unwrap_or_default(),
        src_qp: dg.src_qpn.into(),
        opcode: WcOpcode::Recv.into(),
        status: status.into(),
        wc_flags: if s.imm.is_some() {
            WcFlags::WithImm.into()
        } else {
            0
        },
        vendor_err: why.into(),
        flags: if s.solicited {
            CQE_FLAG_SOLICITED as u8
        } else {
            0
        },
        slid: if dg.grh.is_some_and(|g| g.roce) {
            0
        } else {
            dg.slid
        }
        .into(),
        sl: dg.sl,
        network_type: network.into(),
        ..Default::default()
    }
}

/// The head receive WQE completes in error; the QP stays as it is (datagram receive
/// errors do not move a QP to ERR).
fn fail_receive(
    rnic: &Rnic,
    st: &mut RnicState,
    mem: &RamSnapshot,
    s: &Send,
    qpn: u32,
    status: WcStatus,
    why: VendorErr,
) {
    st.log(
        rnic,
        log::Level::Debug,
        format_args!("QP {qpn}: datagram receive failed: {status:?} ({why:?})"),
    );
    let cqe = receive_cqe(s, status, why);
    receive::complete_head(rnic, st, mem, qpn, cqe);
}

/// The pieces before and after byte `at`.
fn split(pieces: &[(u64, u64)], at: u64) -> (Pieces, Pieces) {
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let mut left = at;
    for &(addr, len) in pieces {
        let take = len.min(left);
        if take > 0 {
            head.push((addr, take));
        }
        if len > take {
            tail.push((addr + take, len - take));
        }
        left -= take;
    }
    (head, tail)
}

/// Writes `bytes` across `pieces` (which cover them).
fn write_pieces(mem: &RamSnapshot, pieces: &[(u64, u64)], bytes: &[u8]) -> Result<(), Fault> {
    let mut done = 0usize;
    for &(addr, len) in pieces {
        let n = usize::try_from(len).map_err(|_| Fault::Destination)?;
        let chunk = bytes.get(done..done + n).ok_or(Fault::Destination)?;
        mem.write(addr, chunk).map_err(|_| Fault::Destination)?;
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_cuts_the_grh_off_the_scatter_list() {
        let pieces = [(0x1000, 30), (0x2000, 30), (0x3000, 5)];
        let (head, tail) = split(&pieces, 40);
        assert_eq!(head, vec![(0x1000, 30), (0x2000, 10)]);
        assert_eq!(tail, vec![(0x200a, 20), (0x3000, 5)]);
    }
}
