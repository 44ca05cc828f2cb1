//! The text form of a trace stream: one line per event (`vrnic ctl trace` without
//! `--json`).

use super::event::{Body, Event, StreamItem};
use std::fmt::Write;

fn opt(out: &mut String, name: &str, value: Option<impl std::fmt::LowerHex>) {
    if let Some(v) = value {
        let _ = write!(out, " {name}={v:#x}");
    }
}

/// One line (no newline) for `item`.
pub fn line(item: &StreamItem) -> String {
    match item {
        StreamItem::Lost { lost } => format!("-- lost {lost} events (the reader fell behind)"),
        StreamItem::Event(e) => event_line(e),
    }
}

pub fn event_line(e: &Event) -> String {
    let mut out = format!(
        "{:>6} {:>10}.{:06} {} {:<8}",
        e.seq,
        e.ts_ns / 1_000_000_000,
        e.ts_ns % 1_000_000_000 / 1000,
        e.device,
        e.body.kind().name(),
    );
    if let Some(qpn) = e.qpn {
        let _ = write!(out, " qp {qpn:#x}");
    }
    let _ = match &e.body {
        Body::Admin {
            opcode,
            cmd_id,
            fields,
            status,
            results,
            duration_ns,
        } => {
            let _ = write!(out, " {opcode} id {cmd_id}");
            for (k, v) in fields {
                let _ = write!(out, " {k}={v:#x}");
            }
            let _ = write!(out, " -> {status}");
            // result0, and the others up to the last that is not 0.
            let shown = results.iter().rposition(|r| *r != 0).map_or(1, |i| i + 1);
            for (i, r) in results.iter().take(shown).enumerate() {
                let _ = write!(out, " result{i}={r:#x}");
            }
            write!(out, " ({} us)", duration_ns / 1000)
        }
        Body::Doorbell {
            target,
            page,
            slot,
            pi,
            sq_pi,
            rq_pi,
        } => {
            let _ = write!(out, " {target}");
            opt(&mut out, "page", *page);
            opt(&mut out, "slot", *slot);
            opt(&mut out, "pi", *pi);
            opt(&mut out, "sq_pi", *sq_pi);
            opt(&mut out, "rq_pi", *rq_pi);
            Ok(())
        }
        Body::Wqe {
            index,
            opcode,
            flags,
            wr_id,
            length,
            sges,
            remote_addr,
            rkey,
        } => {
            let _ = write!(
                out,
                " sq[{index}] {opcode} [{}] len {length} sges {sges} wr_id {wr_id:#x}",
                flags.join("|")
            );
            opt(&mut out, "remote_addr", *remote_addr);
            opt(&mut out, "rkey", *rkey);
            Ok(())
        }
        Body::Cqe {
            cqn,
            wqe_index,
            opcode,
            status,
            byte_len,
            vendor_err,
            wr_id,
        } => write!(
            out,
            " cq {cqn:#x} wqe {wqe_index} {opcode} {status} byte_len {byte_len} vendor_err {vendor_err} wr_id {wr_id:#x}"
        ),
        Body::Eqe {
            eqn,
            event,
            obj,
            data,
        } => write!(out, " eq {eqn} {event} obj {obj:#x} data {data:#x}"),
        Body::Irq { vector } => write!(out, " vector {vector}"),
        Body::QpState { from, to } => write!(out, " QP {from} -> {to}"),
        Body::Device { state, fatal_code } => {
            let _ = write!(out, " device {state}");
            match fatal_code {
                Some(code) => write!(out, " ({code})"),
                None => Ok(()),
            }
        }
        Body::CqArm { cqn, arm, seq } => {
            write!(out, " cq {cqn:#x} fired its event (armed {arm}, seq {seq}); disarmed")
        }
        Body::Contract {
            rule,
            number,
            section,
            what,
        } => write!(out, " rule {number} {rule} (SPEC.md {section}) broken: {what}"),
        Body::Fault { id, rule, what } => write!(out, " fault {id} `{rule}` fired: {what}"),
        Body::Hostile { corruption, what } => write!(out, " hostile {corruption}: {what}"),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cqe_line_names_its_opcode_status_and_qp() {
        let e = Event {
            seq: 12,
            ts_ns: 3_000_004_000,
            device: "rnic0".into(),
            qpn: Some(0x10000),
            body: Body::Cqe {
                cqn: 2,
                wqe_index: 5,
                opcode: "RDMA_WRITE".into(),
                status: "SUCCESS".into(),
                byte_len: 0,
                vendor_err: "NONE".into(),
                wr_id: 9,
            },
        };
        let l = line(&StreamItem::Event(Box::new(e)));
        assert!(l.contains("rnic0 cqe"), "{l}");
        assert!(l.contains("3.000004"), "{l}");
        assert!(
            l.contains("qp 0x10000 cq 0x2 wqe 5 RDMA_WRITE SUCCESS"),
            "{l}"
        );
        assert_eq!(
            line(&StreamItem::Lost { lost: 4 }),
            "-- lost 4 events (the reader fell behind)"
        );
    }
}
