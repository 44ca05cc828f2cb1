//! The control socket (`vrnic serve --control PATH`) and its client (`vrnic ctl`): a view
//! into the running devices while guests use them.
//!
//! # Protocol
//!
//! A UNIX stream socket, mode 0600 (root and the server's user only). The client sends one
//! JSON object per line; the server answers each with one JSON object on one line, in
//! order. A request names its command in `cmd`:
//!
//! ```text
//! {"cmd":"devices"}
//!   -> {"devices":[{"name":"rnic0","link":"ib","lid":1,"mac":null,
//!        "node_guid":"0x0200000000000001","socket":"/run/vrnic/rnic0.sock",
//!        "vmm_connected":true,"state":"enabled","fatal_code":null,
//!        "objects":{"uctxs":2,"pds":1,"mrs":1,"cqs":2,"eqs":2,"qps":1,"srqs":0,"xrcds":0}}]}
//! {"cmd":"objects","device":"rnic0"}                      every kind
//! {"cmd":"objects","device":"rnic0","kinds":["qps","cqs"]} some: qps cqs mrs eqs srqs
//!   -> {"device":"rnic0","qps":[{"qpn":65536,"type":"RC","state":"RTS",...}],"cqs":[...]}
//! {"cmd":"pcap","device":"rnic0","path":"/tmp/rnic0.pcap"}   capture (path absolute)
//! {"cmd":"pcap","device":"rnic0"}                            stop
//!   -> {"device":"rnic0","capturing":{"path":"/tmp/rnic0.pcap","packets":0,"dropped":0},
//!       "stopped":null}          (stopping: "capturing":null, "stopped":{...final figures})
//! {"cmd":"contract","device":"rnic0"}                    the contract checker
//!   -> {"device":"rnic0","mode":"warn","violations":0,"fatal_rule":null,
//!       "rules":[{"rule":"REG_RESERVED_BITS","number":1,"section":"3 / Access types","count":0},...]}
//! {"cmd":"hostile","device":"rnic0"}                      the hostile-device mode
//! {"cmd":"hostile","device":"rnic0","on":true,"settings":"cqe+eqe:42:10"}
//! {"cmd":"hostile","device":"rnic0","on":false}
//!   -> {"device":"rnic0","on":true,"settings":"cqe+eqe:42:10","written":{"cqe-phase":3,...}}
//! ```
//!
//! `uplinks` lists the uplinks with their counters; `impair` shows, replaces or switches
//! off an uplink's impairment (`control::uplinks`); `wire` lists the RoCE devices' wire
//! ports with their counters (`control::wire`).
//!
//! `fault`, `faults` and `fault_clear` arm, list and clear fault-injection rules
//! (`control::faults`, the rule syntax in `faults::rule`).
//!
//! The fields of each object are those of `objects::snapshot` (QPs: type, state, context,
//! PD, CQs, SRQ, send and receive queue depth/pi/ci, sq_psn and rq_psn as the device keeps
//! them, dest_qpn, dlid/dgid; CQs: depth, pi/ci, arm request and whether it is armed, EQ;
//! MRs: key, kind MR/FRMR/MW, PD, iova, length, access, state; EQs; SRQs: depth, limit,
//! pi/ci). Producer indices the driver owns (a QP's sq/rq pi, an SRQ's pi, a CQ's or EQ's
//! ci) are what its doorbell slot holds at that moment.
//!
//! `trace` turns the connection into a stream: after its first line (what is traced), one
//! line per event of the device (`trace::Event`: seq, ts_ns, device, qpn if any, kind and
//! the kind's decoded fields), and `{"lost":N}` where N events did not fit the client's
//! queue (8192), until the client closes or the server stops. Nothing more is read.
//!
//! ```text
//! {"cmd":"trace","device":"rnic0"}                                     every kind
//! {"cmd":"trace","device":"rnic0","kinds":["admin","cqe"],"qpn":65536} some, one QP
//!   -> {"trace":"rnic0","kinds":["admin","cqe"],"qpn":65536}
//!   -> {"seq":41,"ts_ns":1203344,"device":"rnic0","qpn":65536,"kind":"cqe","cqn":2,
//!       "wqe_index":0,"opcode":"RDMA_WRITE","status":"SUCCESS","byte_len":0,...}
//!   -> {"lost":310}
//! ```
//!
//! The kinds asked for: admin, doorbell, wqe, cqe, eqe, irq, state. An event's `kind` is
//! one of those, but for state, whose events are qp_state, device (ENABLED, RESET, FATAL)
//! and cq_arm (see `trace::event::Body`). The device never waits for a client: each client has a bounded queue, and the limits below
//! apply to a stream as to any response (each batch of lines must be taken within 10 s).
//!
//! A failed request is answered with `{"error":"..."}` (the only reply with an `error`
//! key): not JSON, no `cmd`, an unknown command, unknown or missing fields, an unknown
//! device. The connection stays open, except for these, which also close it:
//! a line longer than 64 KiB; no complete request within 30 s of the connection or of the
//! last response (a trace stream excepted); a client beyond the 16 served at once (refused at once); a peer of
//! another user. A response not taken by the client within 10 s closes the connection.
//!
//! # Concurrency
//!
//! One thread accepts, one thread serves each client (`server::Limits`). A request copies
//! what it needs from the devices under one device lock at a time, for a bounded number of
//! objects each time (`rnic::snapshot`), and encodes and writes the reply with no lock
//! held, so a slow or stuck client never holds up a device or another client.
//!
//! # Adding a command
//!
//! A variant of `protocol::Request` (and its name in `Request::COMMANDS`), its handler in
//! `handlers`, its reply type in `protocol`, its command line in `cli` and its text form in
//! `render`.

pub mod client;
pub mod connection;
pub mod contract;
pub mod faults;
pub mod handlers;
pub mod hostile;
pub mod protocol;
pub mod render;
pub mod server;
pub mod trace;
pub mod uplinks;
pub mod wire;

pub use protocol::Request;
pub use server::{ControlError, ControlServer, Limits};
