//! The command line and the TOML configuration file of `vrnic serve`, and the command line
//! of `vrnic ctl`.

use crate::addr::Mac;
use crate::control::faults::FaultFile;
use crate::control::Request;
use crate::fabric::PollerConfig;
use crate::hostile::Settings;
use crate::net::service::NetPortConfig;
use crate::net::uplink::config::{UplinkConfig, UplinkKeys};
use crate::objects::snapshot::ObjectKind;
use crate::pci::PciIds;
use crate::rnic::contract::ContractMode;
use crate::rnic::link::LinkMode;
use crate::rnic::RnicConfig;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
vrnic: a virtual RDMA NIC served to QEMU guests over vfio-user

Usage:
  vrnic serve --device NAME,socket=PATH,lid=N[,guid=GUID][,IDS] ...        (IB mode)
              --device NAME,socket=PATH,link=eth,mac=MAC[,IDS] ...     (RoCE v2 mode)
              IDS: vendor=ID,device=ID,subsystem-vendor=ID,subsystem=ID
              and in either mode [,trace=PATH][,pcap=PATH][,contract=warn|strict|off]
              and [,hostile=SEED|KINDS:SEED[:RATE]]; in RoCE mode [,net=PATH]
              --net name=NAME,socket=PATH,mac=MAC ...   (a guest interface alone)
              [--config FILE] [--poll-idle-us N] [--poll-always] [--pollers N]
              [--control PATH] [--faults DEVICE=FILE ...]
              [--uplink name=NAME,tap=IFNAME|dev=IFNAME[,impair=SPEC] ...]
  vrnic ctl --control PATH [--json] devices
  vrnic ctl --control PATH [--json] objects DEVICE [qps|cqs|mrs|eqs|srqs ...]
  vrnic ctl --control PATH [--json] counters DEVICE [QPN]
  vrnic ctl --control PATH [--json] trace DEVICE [--kinds KIND,...] [--qp QPN]
  vrnic ctl --control PATH [--json] pcap DEVICE PATH|off
  vrnic ctl --control PATH [--json] contract DEVICE
  vrnic ctl --control PATH [--json] fault DEVICE list | clear | RULE
  vrnic ctl --control PATH [--json] hostile DEVICE [on [KINDS:SEED[:RATE]] | off]
  vrnic ctl --control PATH [--json] uplinks
  vrnic ctl --control PATH [--json] impair UPLINK [SPEC | off]
  vrnic ctl --control PATH [--json] wire
  vrnic --help

Options:
  --device SPEC       Serve one device (repeatable). NAME names it in logs; socket is the
                      vfio-user UNIX socket QEMU connects to. link=ib (the default): an
                      InfiniBand port with LID lid (1..65535, unique) and node GUID guid
                      (0x0123456789abcdef; default 02:00:00:00:00:00 and the LID).
                      link=eth: a RoCE v2 port with the unicast MAC mac (aa:bb:cc:dd:ee:ff,
                      unique); its GUID is the MAC's EUI-64 and the guest's driver pairs
                      it with the network interface of that MAC. IDs are hex (0x1234) or
                      decimal PCI IDs; the defaults are the hw-spec's (1234:7652,
                      subsystem 1234:0001). trace=PATH: every trace event of the
                      device from start-up into PATH (created or truncated), one JSON
                      object per line, as `vrnic ctl --json trace` prints them; a
                      writer that falls behind drops events and writes {\"lost\":N}.
                      pcap=PATH records the packets its
                      transfers would put on a RoCEv2 wire into a pcap file (created
                      mode 0600 or truncated; see `ctl pcap`).
                      contract: what the device does when the
                      driver breaks a hw-spec contract rule (SPEC.md \"Contract rules\"):
                      warn (default: count, and log rate-limited), strict (also a fatal
                      device error, FATAL_CODE CONTRACT, the rule in FATAL_DETAIL), off.
                      hostile=KINDS:SEED[:RATE] starts the device in hostile-device
                      mode: RATE percent (1..100, default 10) of its CQEs, EQEs, admin
                      completions, query answers and interrupts are malformed, of the
                      KINDS given (`+`-separated kinds or groups: all, cqe, eqe, admin,
                      attr, irq; `hostile=SEED` alone means all), chosen from SEED
                      (the same seed, the same corruptions). For hardening drivers.
                      net=PATH (link=eth only): also serve the guest's network
                      interface, with the device's MAC, as a vhost-user-net socket at
                      PATH (QEMU's -netdev vhost-user); see --net.
  --net name=NAME,socket=PATH,mac=MAC
                      Serve a guest network interface with no RDMA function (e.g. for
                      Linux Soft-RoCE on virtio-net) on the vhost-user socket PATH, MAC
                      its unicast address (repeatable). All interfaces of the process,
                      these and the devices' net=PATH, share one L2 learning switch.
                      Names, sockets and MACs are unique; a RoCE device's own MAC is
                      its net=PATH, not a --net.
  --config FILE       Read devices (and poll_idle_us, control) from a TOML file:
                        poll_idle_us = 1000
                        poll_always = false
                        control = \"/run/vrnic/control.sock\"
                        [[device]]
                        name = \"rnic0\"
                        socket = \"/run/vrnic/rnic0.sock\"
                        lid = 1
                        [[device]]
                        name = \"rnic1\"
                        socket = \"/run/vrnic/rnic1.sock\"
                        link = \"eth\"
                        mac = \"02:00:00:00:00:01\"
                        trace = \"/tmp/rnic1.trace\"
                        net = \"/run/vrnic/rnic1.net\"
                        [[net]]
                        name = \"guest2\"
                        socket = \"/run/vrnic/guest2.net\"
                        mac = \"02:00:00:00:00:02\"
  --poll-idle-us N    How long the doorbell poller keeps polling after the last work before
                      it sleeps until a driver kicks it (default 1000).
  --poll-always       Keep idle polling even when the host has no core to spare. By default
                      the poller notices it is starved (a host running more busy vCPUs than
                      it has cores) and sleeps instead, so drivers kick it: a kick blocks the
                      posting vCPU and frees a core, which is faster on a crowded host.

  --pollers N         Poller threads serving the devices' doorbells (default: one per
                      core, never more than devices). Devices are spread over them, so N
                      busy devices can use N cores; an idle poller sleeps.
  --control PATH      Serve the control socket at PATH (a UNIX socket, mode 0600; a stale
                      socket there is replaced, any other file is an error; removed at a
                      clean stop), for `vrnic ctl` while guests run.
  --faults DEVICE=FILE
                      Apply the fault rules of FILE (one per line, `#` comments; the
                      syntax of `vrnic ctl fault`, below) to DEVICE at start-up
                      (repeatable). A bad line stops the start, naming it.
  --uplink name=NAME,tap=IFNAME|dev=IFNAME[,impair=SPEC]
                      An uplink to the host's network (repeatable; [[uplink]] in the
                      TOML file, same keys). tap=IFNAME: a tap device, created or
                      attached to and brought up (the host can address, bridge or move
                      it). dev=IFNAME: an existing interface through a promiscuous packet
                      socket (turn off GRO on it, and a local sender's offloads). Frames
                      go to the other uplinks (the switch's ports once it lands).
                      impair=SPEC: impairment from the start (below).

vrnic ctl talks to that socket: one request, one reply, as tables (or with --json, the
server's JSON reply line, for scripts):
  devices             Every device: name, link (IB LID or RoCE MAC), node GUID, whether a
                      VMM is connected, enabled/fatal state, object counts, socket.
  objects DEVICE [KIND ...]
                      The device's objects (default: all kinds): qps (type, state, context,
                      PD, CQs, SRQ, send/receive queue pi/ci/depth, PSNs, destination),
                      cqs (depth, pi/ci, arm, EQ), mrs (key, MR/FRMR/MW, PD, range,
                      access, state), eqs, srqs (depth, pi/ci, limit).
  counters DEVICE [QPN]
                      The port's counters, or QP QPN's (hex 0x.. or decimal): packets,
                      bytes, requests by opcode, ACKs, NAKs, retries, drops, overflows,
                      completions by status (SPEC \"Counters\").
  trace DEVICE [--kinds KIND,...] [--qp QPN]
                      Streams the device's events, one line each, until interrupted:
                      admin (each command decoded, its status and duration), doorbell,
                      wqe (each send WQE taken), cqe, eqe, irq, state (QP state changes,
                      device enable/reset/fatal, CQ events fired), contract (rules
                      broken), fault (faults fired), hostile (corruptions written).
                      --kinds picks some
                      (default all), --qp one QP's. A reader too slow for the device
                      loses events: \"lost N events\" says how many, where.
  pcap DEVICE PATH|off
                      Start recording DEVICE's packets into the pcap file PATH (replacing
                      a capture running), or stop: what a RoCEv2 wire would carry for its
                      transfers (Ethernet/IP/UDP 4791/IBTA headers/ICRC, segmented at the
                      path MTU), for Wireshark or tshark. Packets the writer cannot keep
                      up with are dropped and counted, never waited for.
  contract DEVICE     The contract checker: its mode and, per hw-spec contract rule, the
                      violations the device saw since it started, with the rule's SPEC.md
                      section, and the rule that made it FATAL in strict mode.
  fault DEVICE RULE   Fault injection: arm RULE (or raise an event now); `fault DEVICE
                      list` shows the rules armed and fired, `fault DEVICE clear` drops
                      them. The rules are listed at the end.
  hostile DEVICE [on [KINDS:SEED[:RATE]] | off]
                      The hostile-device mode of DEVICE: its state and what it wrote per
                      kind; `on` switches it on (with new settings, or the last ones;
                      the generator restarts from the seed), `off` switches it off.
  uplinks             Every uplink: kind and interface, port, frames received and sent,
                      drops and errors, its impairment.
  impair UPLINK [SPEC | off]
                      The uplink's impairment and what each rule did per direction;
                      SPEC replaces it (fresh counts), `off` ends it. Frames it held go
                      out at once. The syntax is at the end.
  wire                Every RoCE device's wire port (RoCEv2 to other hosts): frames in
                      and out, those dropped (queue full, undecodable, bad ICRC, for no
                      QP on the wire) and the QPs on the wire now.
The protocol (one JSON request per line, one JSON reply per line) is in the README.

Attach with QEMU (guest RAM must be shared memfd memory):
  -object memory-backend-memfd,id=mem,size=2G,share=on -machine q35,memory-backend=mem -m 2G
  -device '{\"driver\":\"vfio-user-pci\",\"socket\":{\"type\":\"unix\",\"path\":\"PATH\"}}'
  and a net=PATH / --net socket as the guest's interface (MAC as configured):
  -chardev socket,id=vn0,path=PATH,reconnect-ms=1000 -netdev vhost-user,id=n0,chardev=vn0
  -device virtio-net-pci,netdev=n0,mac=MAC

Logging: RUST_LOG=info|debug|trace (env_logger). SIGINT/SIGTERM stop cleanly.";

/// `vrnic --help`: USAGE, then the fault rules.
pub fn usage() -> String {
    format!(
        "{USAGE}\n\nFault rules (`vrnic ctl fault DEVICE RULE`, `--faults`), counted from when \
         they are armed:\n{}",
        crate::faults::rule::SYNTAX,
    ) + "\n\nUplink impairment (`impair=SPEC`, `vrnic ctl impair UPLINK SPEC`):\n"
        + crate::net::impair::spec::SYNTAX
}

/// A parsed `vrnic serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeArgs {
    pub devices: Vec<RnicConfig>,
    pub poller: PollerConfig,
    /// Where the control socket listens, if anywhere.
    pub control: Option<PathBuf>,
    /// Fault rules to apply at start-up (`--faults DEVICE=FILE`).
    pub faults: Vec<FaultFile>,
    /// The guests' Ethernet interfaces (`--net`, and `net=PATH` of RoCE devices).
    pub net: Vec<NetPortConfig>,
    /// Uplinks to the host's network (`--uplink`, `[[uplink]]`).
    pub uplinks: Vec<UplinkConfig>,
}

/// A parsed `vrnic ctl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtlArgs {
    pub control: PathBuf,
    /// Print the server's JSON reply line instead of tables.
    pub json: bool,
    pub request: Request,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Serve(ServeArgs),
    Ctl(CtlArgs),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CliError {
    #[error("missing command; try `vrnic --help`")]
    NoCommand,
    #[error("unknown command or option `{0}`; try `vrnic --help`")]
    Unknown(String),
    #[error("option {0} needs a value")]
    MissingValue(&'static str),
    #[error("--device {spec}: {why}")]
    BadDevice { spec: String, why: String },
    #[error("--poll-idle-us: `{0}` is not a number of microseconds")]
    BadNumber(String),
    #[error("--pollers: `{0}` is not a number of threads (1 or more)")]
    BadPollers(String),
    #[error("config file {path}: {why}")]
    Config { path: String, why: String },
    #[error("no devices: give at least one --device or --net, or a --config with [[device]] or [[net]] entries")]
    NoDevices,
    #[error("devices {0} and {1} both use socket {2}")]
    DuplicateSocket(String, String, String),
    #[error("two devices are named {0}")]
    DuplicateName(String),
    #[error("devices {0} and {1} both use LID {2}")]
    DuplicateLid(String, String, u16),
    #[error("devices {0} and {1} both use MAC {2}")]
    DuplicateMac(String, String, Mac),
    #[error("devices {0} and {1} both trace into {2}")]
    DuplicateTrace(String, String, String),
    #[error("devices {0} and {1} both capture into the same pcap file")]
    DuplicatePcap(String, String),
    #[error("vrnic ctl needs --control PATH (the socket of `vrnic serve --control PATH`)")]
    NoControl,
    #[error("vrnic ctl: {0}; try `vrnic --help`")]
    BadCtl(String),
    #[error("--faults {0}")]
    BadFaults(String),
    #[error("--net {spec}: {why}")]
    BadNet { spec: String, why: String },
    #[error("{0}")]
    NetConflict(String),
    #[error("--uplink {spec}: {why}")]
    BadUplink { spec: String, why: String },
    #[error("uplinks: {0}")]
    Uplinks(String),
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, CliError> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        None => return Err(CliError::NoCommand),
        Some("-h" | "--help" | "help") => return Ok(Command::Help),
        Some("ctl") => return parse_ctl(it.as_slice()),
        Some("serve") => {}
        Some(other) => return Err(CliError::Unknown(other.into())),
    }
    let mut devices = Vec::new();
    let mut poll_idle_us = None;
    let mut poll_always = None;
    let mut pollers = None;
    let mut control = None;
    let mut faults = Vec::new();
    let mut nets = Vec::new();
    let mut uplinks = Vec::new();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--device" => {
                let (device, net) =
                    parse_device(it.next().ok_or(CliError::MissingValue("--device"))?)?;
                devices.push(device);
                nets.extend(net);
            }
            "--net" => nets.push(parse_net(
                it.next().ok_or(CliError::MissingValue("--net"))?,
            )?),
            "--poll-idle-us" => {
                let v = it.next().ok_or(CliError::MissingValue("--poll-idle-us"))?;
                poll_idle_us = Some(v.parse().map_err(|_| CliError::BadNumber(v.clone()))?);
            }
            "--poll-always" => poll_always = Some(true),
            "--control" => {
                let v = it.next().ok_or(CliError::MissingValue("--control"))?;
                control = Some(PathBuf::from(v));
            }
            "--faults" => {
                let v = it.next().ok_or(CliError::MissingValue("--faults"))?;
                faults.push(FaultFile::read(v).map_err(CliError::BadFaults)?);
            }
            "--uplink" => {
                let v = it.next().ok_or(CliError::MissingValue("--uplink"))?;
                let bad = |why| CliError::BadUplink {
                    spec: v.chars().take(128).collect(),
                    why,
                };
                uplinks.push(
                    UplinkKeys::parse(v)
                        .and_then(UplinkKeys::finish)
                        .map_err(bad)?,
                );
            }
            "--pollers" => {
                let v = it.next().ok_or(CliError::MissingValue("--pollers"))?;
                let n: usize = v.parse().map_err(|_| CliError::BadPollers(v.clone()))?;
                if n == 0 {
                    return Err(CliError::BadPollers(v.clone()));
                }
                pollers = Some(n);
            }
            "--config" => {
                let path = it.next().ok_or(CliError::MissingValue("--config"))?;
                let file = read_config(path)?;
                devices.extend(file.devices);
                nets.extend(file.nets);
                poll_idle_us = poll_idle_us.or(file.poll_idle_us);
                poll_always = poll_always.or(file.poll_always);
                control = control.or(file.control);
                uplinks.extend(file.uplinks);
            }
            other => return Err(CliError::Unknown(other.into())),
        }
    }
    check(&devices, !nets.is_empty() || !uplinks.is_empty())?;
    check_nets(&devices, &nets)?;
    crate::net::uplink::config::check_unique(&uplinks).map_err(CliError::Uplinks)?;
    if let Some(f) = faults
        .iter()
        .find(|f| !devices.iter().any(|d| d.name == f.device))
    {
        return Err(CliError::BadFaults(format!(
            "{}: no device is named so",
            f.device
        )));
    }
    Ok(Command::Serve(ServeArgs {
        devices,
        poller: PollerConfig {
            idle: poll_idle_us.map_or(PollerConfig::default().idle, Duration::from_micros),
            give_way: !poll_always.unwrap_or(false),
            threads: pollers,
        },
        control,
        faults,
        net: nets,
        uplinks,
    }))
}

/// `vrnic ctl`'s arguments: options anywhere, then the command and its arguments.
/// The commands of `vrnic ctl`, for its error messages.
const CTL_COMMANDS: &str =
    "devices, objects, counters, trace, pcap, contract, fault, hostile, uplinks, impair";

fn parse_ctl(args: &[String]) -> Result<Command, CliError> {
    let mut control = None;
    let mut json = false;
    let mut words = Vec::new();
    let mut trace = crate::trace::cli::TraceOptions::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--json" => json = true,
            "--kinds" | "--qp" => trace.option(arg, it.next()).map_err(CliError::BadCtl)?,
            "--control" => {
                let v = it.next().ok_or(CliError::MissingValue("--control"))?;
                control = Some(PathBuf::from(v));
            }
            other if other.starts_with('-') => return Err(CliError::Unknown(other.into())),
            word => words.push(word),
        }
    }
    let bad = |why: String| CliError::BadCtl(why);
    let request = match words.as_slice() {
        [] => return Err(bad(format!("missing command ({CTL_COMMANDS})"))),
        ["devices"] => Request::Devices {},
        ["objects", device, kinds @ ..] => Request::Objects {
            device: device.to_string(),
            kinds: kinds
                .iter()
                .map(|k| {
                    ObjectKind::from_name(k).ok_or_else(|| {
                        bad(format!(
                            "`{k}` is not an object kind (qps, cqs, mrs, eqs, srqs)"
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
        },
        ["objects"] => return Err(bad("objects needs a DEVICE".into())),
        ["counters", device] => Request::Counters {
            device: device.to_string(),
            qpn: None,
        },
        ["counters", device, qpn] => Request::Counters {
            device: device.to_string(),
            qpn: Some(parse_u32(qpn).ok_or_else(|| bad(format!("`{qpn}` is not a QPN")))?),
        },
        ["counters", ..] => return Err(bad("counters takes a DEVICE and an optional QPN".into())),
        ["trace", device] => Request::Trace {
            device: device.to_string(),
            kinds: trace.kinds.take().unwrap_or_default(),
            qpn: trace.qpn.take(),
        },
        ["trace", ..] => return Err(bad("trace takes one DEVICE".into())),
        ["pcap", device, path] => Request::Pcap {
            device: device.to_string(),
            // The server's working directory is not the client's.
            path: match *path {
                "off" => None,
                p => Some(
                    std::path::absolute(p)
                        .map_err(|e| bad(format!("pcap: `{p}` is not a usable path: {e}")))?,
                ),
            },
        },
        ["pcap", ..] => return Err(bad("pcap takes a DEVICE and a PATH (or off)".into())),
        ["contract", device] => Request::Contract {
            device: device.to_string(),
        },
        ["contract", ..] => return Err(bad("contract takes a DEVICE".into())),
        ["fault", device, words @ ..] => {
            crate::control::faults::ctl_request(device, words).map_err(bad)?
        }
        ["fault"] => return Err(bad("fault needs a DEVICE".into())),
        ["hostile", device, rest @ ..] => hostile_request(device, rest).map_err(bad)?,
        ["hostile"] => return Err(bad("hostile needs a DEVICE".into())),
        ["uplinks"] => Request::Uplinks {},
        ["uplinks", ..] => return Err(bad("uplinks takes no argument".into())),
        ["wire"] => Request::Wire {},
        ["wire", ..] => return Err(bad("wire takes no argument".into())),
        ["impair", uplink, rest @ ..] => impair_request(uplink, rest).map_err(bad)?,
        ["impair"] => return Err(bad("impair needs an UPLINK".into())),
        ["devices", extra, ..] => return Err(bad(format!("devices takes no argument `{extra}`"))),
        [other, ..] => return Err(bad(format!("unknown command `{other}` ({CTL_COMMANDS})"))),
    };
    trace.all_used().map_err(CliError::BadCtl)?;
    Ok(Command::Ctl(CtlArgs {
        control: control.ok_or(CliError::NoControl)?,
        json,
        request,
    }))
}

/// `hostile DEVICE [on [SETTINGS] | off]`; settings are checked here too, so a typo
/// is reported before anything is sent.
fn hostile_request(device: &str, rest: &[&str]) -> Result<Request, String> {
    let (on, settings) = match rest {
        [] => (None, None),
        ["on"] => (Some(true), None),
        ["on", s] => {
            Settings::parse(s)?;
            (Some(true), Some(s.to_string()))
        }
        ["off"] => (Some(false), None),
        _ => return Err("hostile takes a DEVICE, then `on [KINDS:SEED[:RATE]]` or `off`".into()),
    };
    Ok(Request::Hostile {
        device: device.into(),
        on,
        settings,
    })
}

/// `impair UPLINK [SPEC... | off]`: the spec's words joined by spaces and checked here,
/// so a typo is reported before anything is sent.
fn impair_request(uplink: &str, rest: &[&str]) -> Result<Request, String> {
    let spec = match rest {
        [] => None,
        ["off"] => Some("off".to_string()),
        words => {
            let text = words.join(" ");
            crate::net::impair::Spec::parse(&text).map_err(|e| e.to_string())?;
            Some(text)
        }
    };
    Ok(Request::Impair {
        uplink: uplink.into(),
        spec,
    })
}

/// The devices' names, sockets, LIDs and MACs are unique; with no Ethernet port (`ethernet`:
/// a guest interface or an uplink) there must be a device.
fn check(devices: &[RnicConfig], ethernet: bool) -> Result<(), CliError> {
    if devices.is_empty() && !ethernet {
        return Err(CliError::NoDevices);
    }
    for (i, a) in devices.iter().enumerate() {
        for b in &devices[i + 1..] {
            if a.name == b.name {
                return Err(CliError::DuplicateName(a.name.clone()));
            }
            match (a.link, b.link) {
                (LinkMode::Ib { lid: x, .. }, LinkMode::Ib { lid: y, .. }) if x == y => {
                    return Err(CliError::DuplicateLid(a.name.clone(), b.name.clone(), x));
                }
                (LinkMode::Eth { mac: x }, LinkMode::Eth { mac: y }) if x == y => {
                    return Err(CliError::DuplicateMac(a.name.clone(), b.name.clone(), x));
                }
                _ => {}
            }
            if a.pcap.is_some() && a.pcap == b.pcap {
                return Err(CliError::DuplicatePcap(a.name.clone(), b.name.clone()));
            }
            if a.socket == b.socket {
                return Err(CliError::DuplicateSocket(
                    a.name.clone(),
                    b.name.clone(),
                    a.socket.display().to_string(),
                ));
            }
            if let (Some(x), Some(y)) = (&a.trace, &b.trace) {
                if x == y {
                    let path = x.display().to_string();
                    return Err(CliError::DuplicateTrace(
                        a.name.clone(),
                        b.name.clone(),
                        path,
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Net ports against each other and the devices: unique names, sockets and MACs; a plain
/// port (`--net`) neither named nor addressed as a device (a RoCE device's own interface
/// is its `net=PATH`).
fn check_nets(devices: &[RnicConfig], nets: &[NetPortConfig]) -> Result<(), CliError> {
    let clash = |why: String| Err(CliError::NetConflict(why));
    for (i, a) in nets.iter().enumerate() {
        for b in &nets[i + 1..] {
            if a.name == b.name {
                return clash(format!("two net ports are named {}", a.name));
            }
            if a.socket == b.socket {
                let path = a.socket.display();
                return clash(format!(
                    "net ports {} and {} both use socket {path}",
                    a.name, b.name
                ));
            }
            if a.mac == b.mac {
                return clash(format!(
                    "net ports {} and {} both use MAC {}",
                    a.name, b.name, a.mac
                ));
            }
        }
        for d in devices {
            if a.socket == d.socket {
                let path = a.socket.display();
                return clash(format!(
                    "device {} and net port {} both use socket {path}",
                    d.name, a.name
                ));
            }
            if a.rnic.is_some() {
                continue;
            }
            if a.name == d.name {
                return clash(format!("net port {} has the name of a device", a.name));
            }
            if d.link.mac() == Some(a.mac) {
                return clash(format!(
                    "net port {} has the MAC {} of RoCE device {}: give the device net=PATH for its own interface",
                    a.name, a.mac, d.name
                ));
            }
        }
    }
    Ok(())
}

/// `name=N,socket=PATH,mac=MAC`: a guest interface with no RDMA function.
fn parse_net(spec: &str) -> Result<NetPortConfig, CliError> {
    let bad = |why: String| CliError::BadNet {
        spec: spec.into(),
        why,
    };
    let (mut name, mut socket, mut mac) = (None, None, None);
    for part in spec.split(',') {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("`{part}` is not key=value")))?;
        match key {
            "name" if !value.is_empty() => name = Some(value.to_string()),
            "socket" if !value.is_empty() => socket = Some(PathBuf::from(value)),
            "mac" => mac = Some(value.to_string()),
            _ => {
                return Err(bad(format!(
                    "unknown or empty key `{key}` (name, socket, mac)"
                )))
            }
        }
    }
    net_port(name, socket, mac).map_err(bad)
}

fn net_port(
    name: Option<String>,
    socket: Option<PathBuf>,
    mac: Option<String>,
) -> Result<NetPortConfig, String> {
    let name = name.ok_or("name=NAME is required")?;
    let socket = socket.ok_or("socket=PATH is required (the vhost-user socket)")?;
    let mac = mac.ok_or("mac=MAC is required (the guest interface's)")?;
    let mac = Mac::parse_unicast(&mac).map_err(|e| format!("mac: {e}"))?;
    Ok(NetPortConfig {
        name,
        socket,
        mac,
        rnic: None,
    })
}

/// The guest interface a device's `net=PATH` asks for: RoCE mode only (it has the MAC).
fn paired_net(device: &RnicConfig, net: Option<PathBuf>) -> Result<Option<NetPortConfig>, String> {
    let Some(socket) = net else { return Ok(None) };
    let mac = device
        .link
        .mac()
        .ok_or("net is for link=eth (the guest's interface has the device's MAC)")?;
    Ok(Some(NetPortConfig {
        name: device.name.clone(),
        socket,
        mac,
        rnic: Some(device.name.clone()),
    }))
}

fn parse_u32(text: &str) -> Option<u32> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn parse_id(text: &str) -> Option<u16> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// A node GUID: 16 hex digits (optionally 0x-prefixed) or eight colon-separated hex bytes;
/// never zero.
fn parse_guid(text: &str) -> Result<u64, String> {
    let bad =
        || format!("guid: `{text}` is not a GUID (0x0123456789abcdef or 01:23:45:67:89:ab:cd:ef)");
    let hex: String = if text.contains(':') {
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() != 8 || parts.iter().any(|p| p.len() != 2) {
            return Err(bad());
        }
        parts.concat()
    } else {
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .unwrap_or(text);
        if digits.len() != 16 {
            return Err(bad());
        }
        digits.into()
    };
    match u64::from_str_radix(&hex, 16) {
        Ok(0) => Err(format!("guid: `{text}` is zero")),
        Ok(g) => Ok(g),
        Err(_) => Err(bad()),
    }
}

/// The keys of one device, from `--device` or a `[[device]]` entry, before they are checked
/// against each other.
#[derive(Default)]
struct DeviceKeys {
    socket: Option<PathBuf>,
    link: Option<String>,
    lid: Option<u16>,
    mac: Option<String>,
    guid: Option<String>,
    ids: PciIds,
    trace: Option<PathBuf>,
    pcap: Option<PathBuf>,
    contract: Option<String>,
    hostile: Option<String>,
    net: Option<PathBuf>,
}

impl DeviceKeys {
    /// The device these keys describe (SPEC "Link modes"): `link=ib` (the default) needs a
    /// LID and may have a GUID; `link=eth` needs a unicast MAC and has neither.
    fn finish(self, name: &str) -> Result<RnicConfig, String> {
        let socket = self.socket.ok_or("socket=PATH is required")?;
        let link = match self.link.as_deref().unwrap_or("ib") {
            "ib" => {
                if self.mac.is_some() {
                    return Err("mac is for link=eth (an IB device has a LID)".into());
                }
                let lid = self
                    .lid
                    .ok_or("lid=N is required (or link=eth,mac=MAC for RoCE)")?;
                if lid == 0 {
                    return Err("lid: 0 is reserved; use 1..65535".into());
                }
                let guid = self.guid.as_deref().map(parse_guid).transpose()?;
                LinkMode::Ib { lid, guid }
            }
            "eth" => {
                if self.lid.is_some() {
                    return Err("lid is for link=ib (a RoCE device has LID 0)".into());
                }
                if self.guid.is_some() {
                    return Err(
                        "guid is for link=ib (a RoCE device's GUID is its MAC's EUI-64)".into(),
                    );
                }
                let mac = self.mac.ok_or("link=eth needs mac=MAC")?;
                let mac = Mac::parse_unicast(&mac).map_err(|e| format!("mac: {e}"))?;
                LinkMode::Eth { mac }
            }
            other => return Err(format!("link: `{other}` is neither ib nor eth")),
        };
        let contract = self
            .contract
            .as_deref()
            .map_or(Ok(Default::default()), ContractMode::parse)?;
        Ok(RnicConfig {
            name: name.into(),
            socket,
            link,
            ids: self.ids,
            trace: self.trace,
            pcap: self.pcap,
            contract,
            hostile: self.hostile.as_deref().map(Settings::parse).transpose()?,
        })
    }
}

/// `NAME,socket=PATH,lid=N[,guid=G]` or `NAME,socket=PATH,link=eth,mac=MAC`, each with
/// optional `vendor=..,device=..,subsystem-vendor=..,subsystem=..`
fn parse_device(spec: &str) -> Result<(RnicConfig, Option<NetPortConfig>), CliError> {
    let bad = |why: String| CliError::BadDevice {
        spec: spec.into(),
        why,
    };
    let mut parts = spec.split(',');
    let name = parts
        .next()
        .filter(|n| !n.is_empty() && !n.contains('='))
        .ok_or_else(|| bad("starts with the device name".into()))?;
    let mut keys = DeviceKeys::default();
    for part in parts {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("`{part}` is not key=value")))?;
        let id =
            || parse_id(value).ok_or_else(|| bad(format!("{key}: `{value}` is not a 16-bit ID")));
        let text = || (!value.is_empty()).then(|| value.to_string());
        match key {
            "socket" if !value.is_empty() => keys.socket = Some(PathBuf::from(value)),
            "lid" => {
                keys.lid = Some(
                    value
                        .parse::<u16>()
                        .map_err(|_| bad(format!("lid: `{value}` is not in 1..65535")))?,
                )
            }
            "link" => keys.link = text(),
            "mac" => keys.mac = text(),
            "guid" => keys.guid = text(),
            "contract" => keys.contract = Some(value.to_string()),
            "hostile" => keys.hostile = text(),
            "vendor" => keys.ids.vendor = id()?,
            "device" => keys.ids.device = id()?,
            "subsystem-vendor" => keys.ids.subsystem_vendor = id()?,
            "subsystem" => keys.ids.subsystem = id()?,
            "trace" if !value.is_empty() => keys.trace = Some(PathBuf::from(value)),
            "pcap" if !value.is_empty() => keys.pcap = Some(PathBuf::from(value)),
            "net" if !value.is_empty() => keys.net = Some(PathBuf::from(value)),
            _ => return Err(bad(format!("unknown or empty key `{key}`"))),
        }
    }
    let net = keys.net.take();
    let device = keys.finish(name).map_err(bad)?;
    let net = paired_net(&device, net).map_err(bad)?;
    Ok((device, net))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    poll_idle_us: Option<u64>,
    poll_always: Option<bool>,
    control: Option<PathBuf>,
    #[serde(default, rename = "device")]
    devices: Vec<DeviceEntry>,
    #[serde(default, rename = "net")]
    nets: Vec<NetEntry>,
    #[serde(default, rename = "uplink")]
    uplinks: Vec<UplinkKeys>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetEntry {
    name: Option<String>,
    socket: Option<PathBuf>,
    mac: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceEntry {
    name: String,
    socket: PathBuf,
    link: Option<String>,
    lid: Option<u16>,
    mac: Option<String>,
    guid: Option<String>,
    vendor: Option<u16>,
    device: Option<u16>,
    subsystem_vendor: Option<u16>,
    subsystem: Option<u16>,
    trace: Option<PathBuf>,
    pcap: Option<PathBuf>,
    contract: Option<String>,
    hostile: Option<String>,
    net: Option<PathBuf>,
}

struct Config {
    devices: Vec<RnicConfig>,
    nets: Vec<NetPortConfig>,
    poll_idle_us: Option<u64>,
    poll_always: Option<bool>,
    control: Option<PathBuf>,
    uplinks: Vec<UplinkConfig>,
}

fn read_config(path: &str) -> Result<Config, CliError> {
    let err = |why: String| CliError::Config {
        path: path.into(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let file: ConfigFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    let defaults = PciIds::default();
    let mut nets = Vec::new();
    let devices = file
        .devices
        .into_iter()
        .map(|d| {
            let keys = DeviceKeys {
                socket: Some(d.socket),
                link: d.link,
                lid: d.lid,
                mac: d.mac,
                guid: d.guid,
                contract: d.contract,
                ids: PciIds {
                    vendor: d.vendor.unwrap_or(defaults.vendor),
                    device: d.device.unwrap_or(defaults.device),
                    subsystem_vendor: d.subsystem_vendor.unwrap_or(defaults.subsystem_vendor),
                    subsystem: d.subsystem.unwrap_or(defaults.subsystem),
                },
                trace: d.trace,
                pcap: d.pcap,
                hostile: d.hostile,
                net: None,
            };
            let why = |why: String| err(format!("device {}: {why}", d.name));
            let device = keys.finish(&d.name).map_err(why)?;
            nets.extend(paired_net(&device, d.net).map_err(why)?);
            Ok(device)
        })
        .collect::<Result<_, _>>()?;
    for n in file.nets {
        let name = n.name.clone().unwrap_or_default();
        nets.push(
            net_port(n.name, n.socket, n.mac).map_err(|why| err(format!("net {name}: {why}")))?,
        );
    }
    let uplinks = file
        .uplinks
        .into_iter()
        .enumerate()
        .map(|(i, u)| {
            u.finish()
                .map_err(|why| err(format!("uplink {}: {why}", i + 1)))
        })
        .collect::<Result<_, _>>()?;
    Ok(Config {
        uplinks,
        devices,
        nets,
        poll_idle_us: file.poll_idle_us,
        poll_always: file.poll_always,
        control: file.control,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn serve_parses_repeated_devices_with_ids() {
        let Ok(Command::Serve(a)) = parse(&args("serve --device a,socket=/tmp/a,lid=1 --device b,socket=/tmp/b,lid=2,vendor=0x15b3,device=4115 --poll-idle-us 50")) else {
            panic!("parse failed")
        };
        assert_eq!(a.devices.len(), 2);
        assert_eq!(
            (a.devices[1].ids.vendor, a.devices[1].ids.device),
            (0x15b3, 4115)
        );
        assert_eq!(
            a.poller,
            PollerConfig {
                idle: Duration::from_micros(50),
                give_way: true,
                threads: None,
            }
        );
    }

    #[test]
    fn bad_arguments_get_clear_errors() {
        assert_eq!(parse(&[]), Err(CliError::NoCommand));
        assert_eq!(parse(&args("serve")), Err(CliError::NoDevices));
        assert!(matches!(
            parse(&args("serve --device a,socket=/x")),
            Err(CliError::BadDevice { .. })
        ));
        assert!(matches!(
            parse(&args("serve --device a,socket=/x,lid=0")),
            Err(CliError::BadDevice { .. })
        ));
        assert!(matches!(
            parse(&args("serve --device a,socket=/x,lid=1,color=red")),
            Err(CliError::BadDevice { .. })
        ));
        assert!(matches!(
            parse(&args(
                "serve --device a,socket=/x,lid=1 --device a,socket=/y,lid=2"
            )),
            Err(CliError::DuplicateName(_))
        ));
        assert!(matches!(
            parse(&args(
                "serve --device a,socket=/x,lid=1 --device b,socket=/x,lid=2"
            )),
            Err(CliError::DuplicateSocket(..))
        ));
        assert_eq!(
            parse(&args("serve --bogus")),
            Err(CliError::Unknown("--bogus".into()))
        );
        assert_eq!(
            parse(&args("serve --device")),
            Err(CliError::MissingValue("--device"))
        );
        assert_eq!(parse(&args("--help")), Ok(Command::Help));
    }

    fn device_error(spec: &str) -> String {
        match parse(&args(&format!("serve --device {spec}"))) {
            Err(CliError::BadDevice { why, .. }) => why,
            other => panic!("{spec}: {other:?}"),
        }
    }

    #[test]
    fn link_modes_parse_with_their_own_keys() {
        let Ok(Command::Serve(a)) = parse(&args(
            "serve --device e,socket=/e,link=eth,mac=02:00:00:00:00:0a --device i,socket=/i,lid=7,guid=0x0011223344556677 --device j,socket=/j,link=ib,lid=8",
        )) else {
            panic!("parse failed")
        };
        assert_eq!(
            a.devices.iter().map(|d| d.link).collect::<Vec<_>>(),
            vec![
                LinkMode::Eth {
                    mac: Mac([2, 0, 0, 0, 0, 0x0a])
                },
                LinkMode::Ib {
                    lid: 7,
                    guid: Some(0x0011_2233_4455_6677)
                },
                LinkMode::Ib { lid: 8, guid: None },
            ]
        );
    }

    #[test]
    fn bad_link_keys_get_clear_errors() {
        let cases = [
            ("a,socket=/x,link=eth", "needs mac"),
            ("a,socket=/x,link=eth,mac=01:00:5e:00:00:01", "multicast"),
            ("a,socket=/x,link=eth,mac=ff:ff:ff:ff:ff:ff", "multicast"),
            ("a,socket=/x,link=eth,mac=00:00:00:00:00:00", "zero"),
            ("a,socket=/x,link=eth,mac=02:00:00:00:01", "not a MAC"),
            (
                "a,socket=/x,link=eth,mac=02:00:00:00:00:01,lid=1",
                "lid is for link=ib",
            ),
            (
                "a,socket=/x,link=eth,mac=02:00:00:00:00:01,guid=0x0000000000000001",
                "guid is for link=ib",
            ),
            (
                "a,socket=/x,lid=1,mac=02:00:00:00:00:01",
                "mac is for link=eth",
            ),
            ("a,socket=/x,link=wifi,lid=1", "neither ib nor eth"),
            ("a,socket=/x,lid=1,guid=12", "not a GUID"),
            ("a,socket=/x,lid=1,guid=0x0000000000000000", "zero"),
            ("a,socket=/x,lid=0", "reserved"),
            ("a,socket=/x,lid=1,contract=loud", "warn, strict or off"),
            ("a,socket=/x,lid=1,contract=", "warn, strict or off"),
        ];
        for (spec, want) in cases {
            let why = device_error(spec);
            assert!(why.contains(want), "{spec}: `{why}` does not say `{want}`");
        }
        assert!(matches!(
            parse(&args("serve --device a,socket=/x,link=eth,mac=02:00:00:00:00:01 --device b,socket=/y,link=eth,mac=02:00:00:00:00:01")),
            Err(CliError::DuplicateMac(..))
        ));
        assert!(matches!(
            parse(&args(
                "serve --device a,socket=/x,lid=3 --device b,socket=/y,lid=3"
            )),
            Err(CliError::DuplicateLid(..))
        ));
    }

    #[test]
    fn the_contract_mode_is_warn_unless_the_device_spec_says_otherwise() {
        let Ok(Command::Serve(a)) = parse(&args(
            "serve --device a,socket=/x,lid=1 --device b,socket=/y,link=eth,mac=02:00:00:00:00:01,contract=strict --device c,socket=/z,lid=3,contract=off",
        )) else {
            panic!("parse failed")
        };
        let modes: Vec<ContractMode> = a.devices.iter().map(|d| d.contract).collect();
        assert_eq!(
            modes,
            [ContractMode::Warn, ContractMode::Strict, ContractMode::Off]
        );
        let path = std::env::temp_dir().join(format!("vrnic-cli-c-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[[device]]\nname = \"r0\"\nsocket = \"/tmp/r0\"\nlid = 3\ncontract = \"strict\"\n[[device]]\nname = \"r1\"\nsocket = \"/tmp/r1\"\nlid = 4\ncontract = \"noisy\"\n",
        )
        .unwrap();
        let e = parse(&args(&format!("serve --config {}", path.display())));
        let _ = std::fs::remove_file(&path);
        let Err(CliError::Config { why, .. }) = e else {
            panic!("a bad contract mode in the file is refused")
        };
        assert!(
            why.contains("r1") && why.contains("warn, strict or off"),
            "{why}"
        );
    }

    #[test]
    fn config_file_supplies_devices() {
        let path = std::env::temp_dir().join(format!("vrnic-cli-{}.toml", std::process::id()));
        std::fs::write(&path, "poll_idle_us = 7\npoll_always = true\n[[device]]\nname = \"r0\"\nsocket = \"/tmp/r0\"\nlid = 3\nvendor = 4660\n").unwrap();
        let Ok(Command::Serve(a)) = parse(&args(&format!("serve --config {}", path.display())))
        else {
            panic!()
        };
        assert_eq!(
            (
                a.devices[0].link.lid(),
                a.devices[0].ids.vendor,
                a.poller.idle,
                a.poller.give_way
            ),
            (3, 0x1234, Duration::from_micros(7), false)
        );
        std::fs::write(&path, "[[device]]\nname = \"e\"\nsocket = \"/tmp/e\"\nlink = \"eth\"\nmac = \"02:00:00:00:00:05\"\n").unwrap();
        let Ok(Command::Serve(a)) = parse(&args(&format!("serve --config {}", path.display())))
        else {
            panic!()
        };
        assert_eq!(
            a.devices[0].link,
            LinkMode::Eth {
                mac: Mac([2, 0, 0, 0, 0, 5])
            }
        );
        std::fs::write(&path, "[[device]]\nname = \"e\"\nsocket = \"/tmp/e\"\nlink = \"eth\"\nmac = \"03:00:00:00:00:05\"\n").unwrap();
        assert!(matches!(
            parse(&args(&format!("serve --config {}", path.display()))),
            Err(CliError::Config { why, .. }) if why.contains("multicast")
        ));
        std::fs::write(&path, "[[device]]\nname = \"r0\"\n").unwrap();
        assert!(matches!(
            parse(&args(&format!("serve --config {}", path.display()))),
            Err(CliError::Config { .. })
        ));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn serve_takes_a_control_socket_from_the_command_line_or_the_config_file() {
        let Ok(Command::Serve(a)) = parse(&args(
            "serve --device a,socket=/tmp/a,lid=1 --control /tmp/ctl.sock",
        )) else {
            panic!("parse failed")
        };
        assert_eq!(a.control, Some(PathBuf::from("/tmp/ctl.sock")));
        let Ok(Command::Serve(a)) = parse(&args("serve --device a,socket=/tmp/a,lid=1")) else {
            panic!("parse failed")
        };
        assert_eq!(a.control, None);
        assert_eq!(
            parse(&args("serve --device a,socket=/tmp/a,lid=1 --control")),
            Err(CliError::MissingValue("--control"))
        );
        let path = std::env::temp_dir().join(format!("vrnic-cli-ctl-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "control = \"/run/c.sock\"\n[[device]]\nname = \"r0\"\nsocket = \"/tmp/r0\"\nlid = 3\n",
        )
        .unwrap();
        let from_file = parse(&args(&format!("serve --config {}", path.display())));
        let on_top = parse(&args(&format!(
            "serve --control /tmp/first.sock --config {}",
            path.display()
        )));
        let _ = std::fs::remove_file(&path);
        let Ok(Command::Serve(a)) = from_file else {
            panic!("{from_file:?}")
        };
        assert_eq!(a.control, Some(PathBuf::from("/run/c.sock")));
        let Ok(Command::Serve(a)) = on_top else {
            panic!("{on_top:?}")
        };
        assert_eq!(
            a.control,
            Some(PathBuf::from("/tmp/first.sock")),
            "the command line wins over the file"
        );
    }

    #[test]
    fn ctl_parses_its_commands_with_options_anywhere() {
        assert_eq!(
            parse(&args("ctl --control /c --json devices")),
            Ok(Command::Ctl(CtlArgs {
                control: "/c".into(),
                json: true,
                request: Request::Devices {}
            }))
        );
        assert_eq!(
            parse(&args("ctl objects rnic0 qps mrs --control /c")),
            Ok(Command::Ctl(CtlArgs {
                control: "/c".into(),
                json: false,
                request: Request::Objects {
                    device: "rnic0".into(),
                    kinds: vec![ObjectKind::Qps, ObjectKind::Mrs]
                }
            }))
        );
        assert_eq!(
            parse(&args("ctl --control /c objects rnic0")),
            Ok(Command::Ctl(CtlArgs {
                control: "/c".into(),
                json: false,
                request: Request::Objects {
                    device: "rnic0".into(),
                    kinds: vec![]
                }
            }))
        );
    }

    #[test]
    fn devices_take_a_pcap_file_from_the_spec_or_the_config_and_never_share_one() {
        let Ok(Command::Serve(a)) = parse(&args(
            "serve --device a,socket=/a,lid=1,pcap=/tmp/a.pcap --device b,socket=/b,lid=2",
        )) else {
            panic!("parse failed")
        };
        assert_eq!(a.devices[0].pcap, Some(PathBuf::from("/tmp/a.pcap")));
        assert_eq!(a.devices[1].pcap, None);
        assert_eq!(
            parse(&args(
                "serve --device a,socket=/a,lid=1,pcap=/p --device b,socket=/b,lid=2,pcap=/p"
            )),
            Err(CliError::DuplicatePcap("a".into(), "b".into()))
        );
        assert!(matches!(
            parse(&args("serve --device a,socket=/a,lid=1,pcap=")),
            Err(CliError::BadDevice { .. })
        ));
        let path = std::env::temp_dir().join(format!("vrnic-cli-pcap-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[[device]]\nname = \"r0\"\nsocket = \"/tmp/r0\"\nlid = 3\npcap = \"/tmp/r0.pcap\"\n",
        )
        .unwrap();
        let parsed = parse(&args(&format!("serve --config {}", path.display())));
        std::fs::remove_file(&path).unwrap();
        let Ok(Command::Serve(c)) = parsed else {
            panic!("{parsed:?}")
        };
        assert_eq!(c.devices[0].pcap, Some(PathBuf::from("/tmp/r0.pcap")));
    }

    #[test]
    fn ctl_pcap_takes_a_path_made_absolute_or_off() {
        let req = |line: &str| match parse(&args(line)) {
            Ok(Command::Ctl(c)) => c.request,
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(
            req("ctl --control /c pcap r0 /tmp/x.pcap"),
            Request::Pcap {
                device: "r0".into(),
                path: Some("/tmp/x.pcap".into())
            }
        );
        assert_eq!(
            req("ctl --control /c pcap r0 off"),
            Request::Pcap {
                device: "r0".into(),
                path: None
            }
        );
        let Request::Pcap { path: Some(p), .. } = req("ctl --control /c pcap r0 x.pcap") else {
            panic!("no path")
        };
        assert_eq!(p, std::env::current_dir().unwrap().join("x.pcap"));
        assert!(matches!(
            parse(&args("ctl --control /c pcap r0")),
            Err(CliError::BadCtl(why)) if why.contains("a DEVICE and a PATH")
        ));
    }

    #[test]
    fn bad_ctl_arguments_get_clear_errors() {
        assert_eq!(parse(&args("ctl devices")), Err(CliError::NoControl));
        assert_eq!(
            parse(&args("ctl --control")),
            Err(CliError::MissingValue("--control"))
        );
        let why = |line: &str| match parse(&args(line)) {
            Err(CliError::BadCtl(why)) => why,
            other => panic!("{line}: {other:?}"),
        };
        assert!(why("ctl --control /c").contains("missing command"));
        assert!(why("ctl --control /c reboot").contains("unknown command `reboot`"));
        assert!(why("ctl --control /c objects").contains("needs a DEVICE"));
        assert!(why("ctl --control /c objects r0 pds").contains("`pds` is not an object kind"));
        assert!(why("ctl --control /c devices r0").contains("no argument"));
        assert!(why("ctl --control /c counters").contains("a DEVICE and an optional QPN"));
        assert!(why("ctl --control /c counters r0 1 2").contains("a DEVICE and an optional QPN"));
        assert!(why("ctl --control /c counters r0 qp1").contains("`qp1` is not a QPN"));
        assert!(why("ctl --control /c contract").contains("contract takes a DEVICE"));
        assert!(why("ctl --control /c contract r0 x").contains("contract takes a DEVICE"));
        assert_eq!(
            parse(&args("ctl --control /c --json contract r0")),
            Ok(Command::Ctl(CtlArgs {
                control: PathBuf::from("/c"),
                json: true,
                request: Request::Contract {
                    device: "r0".into()
                },
            }))
        );
        assert_eq!(
            parse(&args("ctl --control /c counters r0 0x12")),
            Ok(Command::Ctl(CtlArgs {
                control: PathBuf::from("/c"),
                json: false,
                request: Request::Counters {
                    device: "r0".into(),
                    qpn: Some(0x12)
                },
            }))
        );
        assert_eq!(
            parse(&args("ctl --control /c --pretty devices")),
            Err(CliError::Unknown("--pretty".into()))
        );
    }

    #[test]
    fn ctl_trace_takes_kinds_and_a_qp_and_only_trace_takes_them() {
        use crate::trace::Kind;
        let Ok(Command::Ctl(c)) = parse(&args(
            "ctl --control /c trace rnic0 --kinds cqe,admin --qp 0x10000",
        )) else {
            panic!("parse failed")
        };
        assert_eq!(
            c.request,
            Request::Trace {
                device: "rnic0".into(),
                kinds: vec![Kind::Admin, Kind::Cqe],
                qpn: Some(0x10000),
            }
        );
        let Ok(Command::Ctl(c)) = parse(&args("ctl --control /c trace rnic0")) else {
            panic!("parse failed")
        };
        assert!(matches!(c.request, Request::Trace { kinds, qpn: None, .. } if kinds.is_empty()));
        let err = |s: &str| match parse(&args(s)) {
            Err(CliError::BadCtl(why)) => why,
            other => panic!("{s}: {other:?}"),
        };
        assert!(err("ctl --control /c trace rnic0 --kinds pcap").contains("`pcap`"));
        assert!(err("ctl --control /c trace rnic0 --qp x").contains("not a QPN"));
        assert!(err("ctl --control /c counters rnic0 --qp 5").contains("trace only"));
        assert!(err("ctl --control /c trace").contains("one DEVICE"));
    }

    #[test]
    fn a_device_may_trace_into_a_file_of_its_own() {
        let Ok(Command::Serve(a)) = parse(&args(
            "serve --device a,socket=/tmp/a,lid=1,trace=/tmp/a.trace --device b,socket=/tmp/b,lid=2",
        )) else {
            panic!("parse failed")
        };
        assert_eq!(a.devices[0].trace, Some(PathBuf::from("/tmp/a.trace")));
        assert_eq!(a.devices[1].trace, None);
        assert_eq!(
            parse(&args(
                "serve --device a,socket=/tmp/a,lid=1,trace=/t --device b,socket=/tmp/b,lid=2,trace=/t"
            )),
            Err(CliError::DuplicateTrace("a".into(), "b".into(), "/t".into()))
        );
        assert!(matches!(
            parse(&args("serve --device a,socket=/tmp/a,lid=1,trace=")),
            Err(CliError::BadDevice { .. })
        ));
    }

    #[test]
    fn guest_interfaces_come_from_net_options_device_keys_and_the_config_file() {
        let Ok(Command::Serve(a)) = parse(&args(
            "serve --device r,socket=/r,link=eth,mac=02:00:00:00:00:01,net=/r.net --net name=g,socket=/g.net,mac=02:00:00:00:00:02",
        )) else {
            panic!("parse failed")
        };
        assert_eq!(
            a.net,
            vec![
                NetPortConfig {
                    name: "r".into(),
                    socket: "/r.net".into(),
                    mac: Mac([2, 0, 0, 0, 0, 1]),
                    rnic: Some("r".into()),
                },
                NetPortConfig {
                    name: "g".into(),
                    socket: "/g.net".into(),
                    mac: Mac([2, 0, 0, 0, 0, 2]),
                    rnic: None,
                },
            ]
        );
        // Ethernet ports alone: a process for Soft-RoCE guests
        let Ok(Command::Serve(a)) =
            parse(&args("serve --net name=g,socket=/g,mac=02:00:00:00:00:02"))
        else {
            panic!("parse failed")
        };
        assert!(a.devices.is_empty() && a.net.len() == 1);
        let path = std::env::temp_dir().join(format!("vrnic-cli-net-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[[device]]\nname = \"r\"\nsocket = \"/r\"\nlink = \"eth\"\nmac = \"02:00:00:00:00:01\"\nnet = \"/r.net\"\n[[net]]\nname = \"g\"\nsocket = \"/g.net\"\nmac = \"02:00:00:00:00:02\"\n",
        )
        .unwrap();
        let parsed = parse(&args(&format!("serve --config {}", path.display())));
        std::fs::write(&path, "[[net]]\nname = \"g\"\nsocket = \"/g.net\"\n").unwrap();
        let missing = parse(&args(&format!("serve --config {}", path.display())));
        std::fs::remove_file(&path).unwrap();
        let Ok(Command::Serve(c)) = parsed else {
            panic!("{parsed:?}")
        };
        assert_eq!(
            c.net.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["r", "g"]
        );
        assert!(
            matches!(&missing, Err(CliError::Config { why, .. }) if why.contains("net g: mac=MAC is required")),
            "{missing:?}"
        );
    }

    #[test]
    fn bad_or_clashing_guest_interfaces_get_clear_errors() {
        let err = |line: &str| match parse(&args(line)) {
            Err(e) => e.to_string(),
            Ok(c) => panic!("{line}: {c:?}"),
        };
        assert!(err("serve --net name=g,socket=/g").contains("mac=MAC is required"));
        assert!(
            err("serve --net socket=/g,mac=02:00:00:00:00:02").contains("name=NAME is required")
        );
        assert!(err("serve --net name=g,socket=/g,mac=ff:ff:ff:ff:ff:ff").contains("multicast"));
        assert!(
            err("serve --net name=g,socket=/g,mac=02:00:00:00:00:02,mtu=9000")
                .contains("unknown or empty key `mtu`")
        );
        assert!(err("serve --device r,socket=/r,lid=1,net=/n").contains("net is for link=eth"));
        assert!(err("serve --net name=g,socket=/a,mac=02:00:00:00:00:02 --net name=h,socket=/a,mac=02:00:00:00:00:03").contains("both use socket /a"));
        assert!(err("serve --net name=g,socket=/a,mac=02:00:00:00:00:02 --net name=g,socket=/b,mac=02:00:00:00:00:03").contains("two net ports are named g"));
        assert!(err("serve --net name=g,socket=/a,mac=02:00:00:00:00:02 --net name=h,socket=/b,mac=02:00:00:00:00:02").contains("both use MAC"));
        assert!(err(
            "serve --device r,socket=/r,lid=1 --net name=r,socket=/b,mac=02:00:00:00:00:02"
        )
        .contains("net port r has the name of a device"));
        assert!(err(
            "serve --device r,socket=/r,lid=1 --net name=g,socket=/r,mac=02:00:00:00:00:02"
        )
        .contains("both use socket /r"));
        assert!(err("serve --device r,socket=/r,link=eth,mac=02:00:00:00:00:02 --net name=g,socket=/g,mac=02:00:00:00:00:02").contains("give the device net=PATH"));
        assert!(
            err("serve --device r,socket=/r,link=eth,mac=02:00:00:00:00:02,net=/r")
                .contains("both use socket /r")
        );
    }

    #[test]
    fn serve_takes_uplinks_from_the_command_line_and_the_config_file() {
        let Ok(Command::Serve(a)) = parse(&args(
            "serve --device a,socket=/a,lid=1 --uplink name=u0,tap=vrt0",
        )) else {
            panic!("parse failed")
        };
        assert_eq!(
            a.uplinks[0].kind,
            crate::net::uplink::Kind::Tap("vrt0".into())
        );
        let Ok(Command::Serve(a)) = parse(&[
            "serve".into(),
            "--device".into(),
            "a,socket=/a,lid=1".into(),
            "--uplink".into(),
            "name=u1,dev=eth1,impair=loss every=3 from=2 dir=ingress".into(),
        ]) else {
            panic!("parse failed")
        };
        assert_eq!(
            a.uplinks[0].to_string(),
            "name=u1,dev=eth1,impair=loss every=3 from=2 dir=ingress"
        );
        let e = parse(&args(
            "serve --device a,socket=/a,lid=1 --uplink name=u,tap=t,impair=drop every=2",
        ));
        assert!(
            matches!(&e, Err(CliError::BadUplink { why, .. }) if why.contains("impair: rule 1")),
            "{e:?}"
        );
        assert!(matches!(
            parse(&args("serve --device a,socket=/a,lid=1 --uplink name=u,tap=t --uplink name=u,tap=s")),
            Err(CliError::Uplinks(why)) if why.contains("named u")
        ));
        let path = std::env::temp_dir().join(format!("vrnic-cli-up-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[[device]]\nname = \"r0\"\nsocket = \"/tmp/r0\"\nlid = 3\n[[uplink]]\nname = \"u0\"\ntap = \"vrt0\"\nimpair = \"dup rate=1%\"\n[[uplink]]\nname = \"u1\"\n",
        )
        .unwrap();
        let e = parse(&args(&format!("serve --config {}", path.display())));
        assert!(
            matches!(&e, Err(CliError::Config { why, .. }) if why.contains("uplink 2: tap=IFNAME")),
            "{e:?}"
        );
        std::fs::write(
            &path,
            "[[uplink]]\nname = \"u0\"\ntap = \"vrt0\"\nimpair = \"dup rate=1%\"\n[[device]]\nname = \"r0\"\nsocket = \"/tmp/r0\"\nlid = 3\n",
        )
        .unwrap();
        let ok = parse(&args(&format!("serve --config {}", path.display())));
        std::fs::remove_file(&path).unwrap();
        let Ok(Command::Serve(a)) = ok else {
            panic!("{ok:?}")
        };
        assert_eq!(
            a.uplinks[0].to_string(),
            "name=u0,tap=vrt0,impair=dup rate=1%"
        );
    }

    #[test]
    fn ctl_impair_takes_an_uplink_and_a_spec_checked_before_sending() {
        let req = |line: &str| match parse(&args(line)) {
            Ok(Command::Ctl(c)) => Ok(c.request),
            Err(CliError::BadCtl(why)) => Err(why),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(
            req("ctl --control /c impair u0 loss every=5 from=3"),
            Ok(Request::Impair {
                uplink: "u0".into(),
                spec: Some("loss every=5 from=3".into())
            })
        );
        assert_eq!(
            req("ctl --control /c impair u0 off"),
            Ok(Request::Impair {
                uplink: "u0".into(),
                spec: Some("off".into())
            })
        );
        assert_eq!(
            req("ctl --control /c impair u0"),
            Ok(Request::Impair {
                uplink: "u0".into(),
                spec: None
            })
        );
        assert_eq!(req("ctl --control /c uplinks"), Ok(Request::Uplinks {}));
        assert_eq!(req("ctl --control /c wire"), Ok(Request::Wire {}));
        assert!(req("ctl --control /c impair u0 loss often")
            .unwrap_err()
            .contains("`often` is not KEY=VALUE"));
        assert!(req("ctl --control /c impair")
            .unwrap_err()
            .contains("needs an UPLINK"));
        assert!(req("ctl --control /c uplinks u0")
            .unwrap_err()
            .contains("no argument"));
    }
}
