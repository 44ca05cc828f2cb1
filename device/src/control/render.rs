//! `vrnic ctl`'s human-readable output: the JSON replies as aligned tables.

use super::protocol::{CountersReply, DevicesReply, ObjectsReply, PcapReply, Request};
use crate::objects::counters;
use crate::objects::snapshot::{CqView, EqView, MrView, QpView, QueueView, SrqView};
use crate::rnic::snapshot::DeviceView;

/// The reply line of `request` as text for people.
pub fn render(request: &Request, reply: &str) -> Result<String, serde_json::Error> {
    Ok(match request {
        Request::Devices {} => devices(&serde_json::from_str::<DevicesReply>(reply)?.devices),
        Request::Objects { .. } => objects(&serde_json::from_str::<ObjectsReply>(reply)?),
        Request::Counters { .. } => counter_table(&serde_json::from_str::<CountersReply>(reply)?),
        Request::Trace { .. } => super::trace::render_line(reply)?,
        Request::Pcap { .. } => pcap(&serde_json::from_str::<PcapReply>(reply)?),
        Request::Contract { .. } => super::contract::render(reply)?,
        Request::Fault { .. } | Request::Faults { .. } | Request::FaultClear { .. } => {
            super::faults::render(request, reply)?
        }
        Request::Hostile { .. } => super::hostile::render(&serde_json::from_str(reply)?),
        Request::Uplinks {} => super::uplinks::render_uplinks(&serde_json::from_str(reply)?),
        Request::Impair { .. } => super::uplinks::render_impair(&serde_json::from_str(reply)?),
        Request::Wire {} => super::wire::render(&serde_json::from_str(reply)?),
    })
}

/// Rows under a header, each column as wide as its widest cell, two spaces apart.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

fn queue(q: &Option<QueueView>) -> String {
    q.map_or_else(|| "-".into(), |q| format!("{}/{}/{}", q.pi, q.ci, q.depth))
}

/// The counters in hw-spec order (the reply's map is sorted by name), then any the
/// server has and this client does not know.
fn counter_table(reply: &CountersReply) -> String {
    let mut left = reply.counters.clone();
    let mut rows: Vec<Vec<String>> = vrnic_hw::Counter::ALL
        .iter()
        .filter_map(|&c| {
            let name = counters::name(c);
            left.remove(&name).map(|v| vec![name, v.to_string()])
        })
        .collect();
    rows.extend(left.into_iter().map(|(name, v)| vec![name, v.to_string()]));
    let title = match reply.qpn {
        Some(qpn) => format!("{} QP {qpn:#x}\n", reply.device),
        None => format!("{} port 1\n", reply.device),
    };
    title + &table(&["COUNTER", "VALUE"], &rows)
}

fn pcap(reply: &PcapReply) -> String {
    let mut out = String::new();
    if let Some(s) = &reply.stopped {
        out += &format!(
            "{}: stopped capturing into {}: {} packets written, {} dropped\n",
            reply.device, s.path, s.packets, s.dropped
        );
    }
    match &reply.capturing {
        Some(s) => out += &format!("{}: capturing into {}\n", reply.device, s.path),
        None if reply.stopped.is_none() => out += &format!("{}: pcap is off\n", reply.device),
        None => {}
    }
    out
}

fn devices(devices: &[DeviceView]) -> String {
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            let link = match &d.mac {
                Some(mac) => format!("RoCE {mac}"),
                None => format!("IB lid {}", d.lid),
            };
            let state = match &d.fatal_code {
                Some(code) => format!("{} ({code})", d.state),
                None => d.state.clone(),
            };
            let o = &d.objects;
            let mut row = vec![
                d.name.clone(),
                link,
                d.node_guid.clone(),
                yes(d.vmm_connected),
                state,
            ];
            row.extend([o.uctxs, o.pds, o.mrs, o.cqs, o.eqs, o.qps, o.srqs].map(|n| n.to_string()));
            row.push(d.socket.clone());
            row
        })
        .collect();
    table(
        &[
            "NAME",
            "LINK",
            "NODE_GUID",
            "VMM",
            "STATE",
            "UCTX",
            "PD",
            "MR",
            "CQ",
            "EQ",
            "QP",
            "SRQ",
            "SOCKET",
        ],
        &rows,
    )
}

fn objects(reply: &ObjectsReply) -> String {
    let o = &reply.objects;
    let mut out = format!("device {}\n", reply.device);
    let mut section = |title: &str, n: usize, body: String| {
        out.push_str(&format!("\n{title} ({n})\n"));
        if n > 0 {
            out.push_str(&body);
        }
    };
    if let Some(v) = &o.qps {
        section("QPs", v.len(), qps(v));
    }
    if let Some(v) = &o.cqs {
        section("CQs", v.len(), cqs(v));
    }
    if let Some(v) = &o.mrs {
        section("MRs", v.len(), mrs(v));
    }
    if let Some(v) = &o.eqs {
        section("EQs", v.len(), eqs(v));
    }
    if let Some(v) = &o.srqs {
        section("SRQs", v.len(), srqs(v));
    }
    out
}

fn qps(v: &[QpView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|q| {
            // IB mode routes by LID (a GRH is optional there); RoCE mode has LID 0.
            let dest = match &q.dgid {
                Some(gid) if q.dlid == 0 => gid.clone(),
                _ => format!("lid {}", q.dlid),
            };
            vec![
                format!("{:#08x}", q.qpn),
                q.kind.clone(),
                q.state.clone(),
                q.uctx.to_string(),
                opt(q.pdn),
                opt(q.send_cqn),
                opt(q.recv_cqn),
                opt(q.srqn),
                queue(&q.sq),
                queue(&q.rq),
                format!("{:#08x}", q.sq_psn),
                format!("{:#08x}", q.rq_psn),
                format!("{:#08x}", q.dest_qpn),
                dest,
                q.mtu.to_string(),
                opt(q.waiting.as_ref()),
            ]
        })
        .collect();
    table(
        &[
            "QPN",
            "TYPE",
            "STATE",
            "UCTX",
            "PD",
            "SCQ",
            "RCQ",
            "SRQ",
            "SQ(pi/ci/depth)",
            "RQ(pi/ci/depth)",
            "SQ_PSN",
            "RQ_PSN",
            "DEST_QPN",
            "DEST",
            "MTU",
            "WAITING",
        ],
        &rows,
    )
}

fn cqs(v: &[CqView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|c| {
            vec![
                c.cqn.to_string(),
                c.uctx.to_string(),
                c.eqn.to_string(),
                c.depth.to_string(),
                c.pi.to_string(),
                c.ci.to_string(),
                format!("{}#{}", c.arm, c.arm_seq),
                yes(c.armed),
                yes(c.error),
            ]
        })
        .collect();
    table(
        &[
            "CQN", "UCTX", "EQ", "DEPTH", "PI", "CI", "ARM", "ARMED", "ERROR",
        ],
        &rows,
    )
}

fn mrs(v: &[MrView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|m| {
            let mut extra = Vec::new();
            if let Some(t) = &m.mw_type {
                extra.push(t.clone());
            }
            if let Some(k) = m.mr_key {
                extra.push(format!("mr {k:#x}"));
            }
            if let Some(q) = m.qpn {
                extra.push(format!("qp {q:#x}"));
            }
            if let Some(p) = m.max_pages {
                extra.push(format!("max_pages {p}"));
            }
            vec![
                format!("{:#x}", m.key),
                m.kind.clone(),
                m.state.clone(),
                m.uctx.to_string(),
                m.pdn.to_string(),
                m.iova.map_or_else(|| "-".into(), |a| format!("{a:#x}")),
                opt(m.length),
                if m.access.is_empty() {
                    "-".into()
                } else {
                    m.access.join("|")
                },
                extra.join(" "),
            ]
        })
        .collect();
    table(
        &[
            "KEY", "KIND", "STATE", "UCTX", "PD", "IOVA", "LENGTH", "ACCESS", "",
        ],
        &rows,
    )
}

fn eqs(v: &[EqView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|e| {
            vec![
                e.eqn.to_string(),
                e.vector.to_string(),
                yes(e.is_async),
                e.depth.to_string(),
                e.pi.to_string(),
                e.ci.to_string(),
                e.pending.to_string(),
                e.dropped.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "EQN", "VECTOR", "ASYNC", "DEPTH", "PI", "CI", "PENDING", "DROPPED",
        ],
        &rows,
    )
}

fn srqs(v: &[SrqView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|s| {
            let xrc = match (s.xrcdn, s.cqn) {
                (Some(x), Some(c)) => format!("xrcd {x} cq {c}"),
                _ => "-".into(),
            };
            vec![
                s.srqn.to_string(),
                s.uctx.to_string(),
                s.pdn.to_string(),
                s.depth.to_string(),
                s.pi.to_string(),
                s.ci.to_string(),
                s.limit.to_string(),
                s.max_sge.to_string(),
                yes(s.error),
                xrc,
            ]
        })
        .collect();
    table(
        &[
            "SRQN", "UCTX", "PD", "DEPTH", "PI", "CI", "LIMIT", "MAX_SGE", "ERROR", "XRC",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_to_their_widest_cell() {
        let t = table(
            &["A", "BB", "C"],
            &[
                vec!["xxx".into(), "y".into(), "z".into()],
                vec!["1".into(), "2".into(), "3".into()],
            ],
        );
        assert_eq!(t, "A    BB  C\nxxx  y   z\n1    2   3\n");
    }

    #[test]
    fn devices_render_their_link_state_and_counts() {
        let reply = r#"{"devices":[{"name":"r0","link":"eth","lid":0,"mac":"02:00:00:00:00:01","node_guid":"0x000000fffe000001","socket":"/s","vmm_connected":true,"state":"fatal","fatal_code":"ADMIN_DMA","objects":{"uctxs":1,"pds":2,"mrs":3,"cqs":4,"eqs":5,"qps":6,"srqs":7,"xrcds":0}}]}"#;
        let text = render(&Request::Devices {}, reply).unwrap();
        let row = text.lines().nth(1).unwrap();
        for want in ["RoCE 02:00:00:00:00:01", "fatal (ADMIN_DMA)", "yes"] {
            assert!(row.contains(want), "{row:?} lacks {want:?}");
        }
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            &cells[cells.len() - 8..],
            ["1", "2", "3", "4", "5", "6", "7", "/s"]
        );
    }

    fn qp(dlid: u16, dgid: Option<&str>) -> QpView {
        QpView {
            qpn: 0x10002,
            kind: "RC".into(),
            state: "RTS".into(),
            uctx: 1,
            pdn: Some(0),
            send_cqn: Some(3),
            recv_cqn: Some(4),
            srqn: None,
            xrcdn: None,
            sq: Some(QueueView {
                depth: 64,
                pi: 2,
                ci: 1,
            }),
            rq: None,
            sq_psn: 0x108,
            rq_psn: 0x100,
            dest_qpn: 0x20001,
            dlid,
            dgid: dgid.map(String::from),
            mtu: 4096,
            waiting: Some("RNR".into()),
        }
    }

    #[test]
    fn a_qp_row_shows_its_queues_psns_and_destination_by_link_mode() {
        let reply = ObjectsReply {
            device: "r0".into(),
            objects: crate::rnic::snapshot::ObjectsView {
                qps: Some(vec![qp(2, Some("fe80::1")), qp(0, Some("::ffff:10.0.0.2"))]),
                ..Default::default()
            },
        };
        let line = serde_json::to_string(&reply).unwrap();
        let text = render(
            &Request::Objects {
                device: "r0".into(),
                kinds: vec![],
            },
            &line,
        )
        .unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(&lines[..3], ["device r0", "", "QPs (2)"]);
        let cells: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "0x010002", "RC", "RTS", "1", "0", "3", "4", "-", "2/1/64", "-", "0x000108",
                "0x000100", "0x020001", "lid", "2", "4096", "RNR"
            ]
        );
        assert!(lines[5].contains(" ::ffff:10.0.0.2 "), "{}", lines[5]);
    }
}
