//! The command line and the TOML configuration file of `vrnic serve`.

use crate::fabric::PollerConfig;
use crate::pci::PciIds;
use crate::rnic::RnicConfig;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
vrnic: a virtual RDMA NIC served to QEMU guests over vfio-user

Usage:
  vrnic serve --device NAME,socket=PATH,lid=N[,vendor=ID,device=ID,subsystem-vendor=ID,subsystem=ID] ...
              [--config FILE] [--poll-idle-us N] [--poll-always] [--pollers N]
  vrnic --help

Options:
  --device SPEC       Serve one device (repeatable). NAME names it in logs; socket is the
                      vfio-user UNIX socket QEMU connects to; lid is its InfiniBand LID
                      (1..65535, unique). IDs are hex (0x1234) or decimal PCI IDs; the
                      defaults are the hw-spec's (1234:7652, subsystem 1234:0001).
  --config FILE       Read devices (and poll_idle_us) from a TOML file:
                        poll_idle_us = 1000
                        poll_always = false
                        [[device]]
                        name = \"rnic0\"
                        socket = \"/run/vrnic/rnic0.sock\"
                        lid = 1
  --poll-idle-us N    How long the doorbell poller keeps polling after the last work before
                      it sleeps until a driver kicks it (default 1000).
  --poll-always       Keep idle polling even when the host has no core to spare. By default
                      the poller notices it is starved (a host running more busy vCPUs than
                      it has cores) and sleeps instead, so drivers kick it: a kick blocks the
                      posting vCPU and frees a core, which is faster on a crowded host.

  --pollers N         Poller threads serving the devices' doorbells (default: one per
                      core, never more than devices). Devices are spread over them, so N
                      busy devices can use N cores; an idle poller sleeps.

Attach with QEMU (guest RAM must be shared memfd memory):
  -object memory-backend-memfd,id=mem,size=2G,share=on -machine q35,memory-backend=mem -m 2G
  -device '{\"driver\":\"vfio-user-pci\",\"socket\":{\"type\":\"unix\",\"path\":\"PATH\"}}'

Logging: RUST_LOG=info|debug|trace (env_logger). SIGINT/SIGTERM stop cleanly.";

/// A parsed `vrnic serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeArgs {
    pub devices: Vec<RnicConfig>,
    pub poller: PollerConfig,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Serve(ServeArgs),
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
    #[error("no devices: give at least one --device or a --config with [[device]] entries")]
    NoDevices,
    #[error("devices {0} and {1} both use socket {2}")]
    DuplicateSocket(String, String, String),
    #[error("two devices are named {0}")]
    DuplicateName(String),
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, CliError> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        None => return Err(CliError::NoCommand),
        Some("-h" | "--help" | "help") => return Ok(Command::Help),
        Some("serve") => {}
        Some(other) => return Err(CliError::Unknown(other.into())),
    }
    let mut devices = Vec::new();
    let mut poll_idle_us = None;
    let mut poll_always = None;
    let mut pollers = None;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--device" => devices.push(parse_device(
                it.next().ok_or(CliError::MissingValue("--device"))?,
            )?),
            "--poll-idle-us" => {
                let v = it.next().ok_or(CliError::MissingValue("--poll-idle-us"))?;
                poll_idle_us = Some(v.parse().map_err(|_| CliError::BadNumber(v.clone()))?);
            }
            "--poll-always" => poll_always = Some(true),
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
                poll_idle_us = poll_idle_us.or(file.poll_idle_us);
                poll_always = poll_always.or(file.poll_always);
            }
            other => return Err(CliError::Unknown(other.into())),
        }
    }
    check(&devices)?;
    Ok(Command::Serve(ServeArgs {
        devices,
        poller: PollerConfig {
            idle: poll_idle_us.map_or(PollerConfig::default().idle, Duration::from_micros),
            give_way: !poll_always.unwrap_or(false),
            threads: pollers,
        },
    }))
}

fn check(devices: &[RnicConfig]) -> Result<(), CliError> {
    if devices.is_empty() {
        return Err(CliError::NoDevices);
    }
    for (i, a) in devices.iter().enumerate() {
        for b in &devices[i + 1..] {
            if a.name == b.name {
                return Err(CliError::DuplicateName(a.name.clone()));
            }
            if a.socket == b.socket {
                return Err(CliError::DuplicateSocket(
                    a.name.clone(),
                    b.name.clone(),
                    a.socket.display().to_string(),
                ));
            }
        }
    }
    Ok(())
}

fn parse_id(text: &str) -> Option<u16> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// `NAME,socket=PATH,lid=N[,vendor=..,device=..,subsystem-vendor=..,subsystem=..]`
fn parse_device(spec: &str) -> Result<RnicConfig, CliError> {
    let bad = |why: String| CliError::BadDevice {
        spec: spec.into(),
        why,
    };
    let mut parts = spec.split(',');
    let name = parts
        .next()
        .filter(|n| !n.is_empty() && !n.contains('='))
        .ok_or_else(|| bad("starts with the device name".into()))?;
    let (mut socket, mut lid, mut ids) = (None, None, PciIds::default());
    for part in parts {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("`{part}` is not key=value")))?;
        let id =
            || parse_id(value).ok_or_else(|| bad(format!("{key}: `{value}` is not a 16-bit ID")));
        match key {
            "socket" if !value.is_empty() => socket = Some(PathBuf::from(value)),
            "lid" => {
                lid = Some(
                    value
                        .parse::<u16>()
                        .ok()
                        .filter(|l| *l != 0)
                        .ok_or_else(|| bad(format!("lid: `{value}` is not in 1..65535")))?,
                )
            }
            "vendor" => ids.vendor = id()?,
            "device" => ids.device = id()?,
            "subsystem-vendor" => ids.subsystem_vendor = id()?,
            "subsystem" => ids.subsystem = id()?,
            _ => return Err(bad(format!("unknown or empty key `{key}`"))),
        }
    }
    Ok(RnicConfig {
        name: name.into(),
        socket: socket.ok_or_else(|| bad("socket=PATH is required".into()))?,
        lid: lid.ok_or_else(|| bad("lid=N is required".into()))?,
        ids,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    poll_idle_us: Option<u64>,
    poll_always: Option<bool>,
    #[serde(default, rename = "device")]
    devices: Vec<DeviceEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceEntry {
    name: String,
    socket: PathBuf,
    lid: u16,
    vendor: Option<u16>,
    device: Option<u16>,
    subsystem_vendor: Option<u16>,
    subsystem: Option<u16>,
}

struct Config {
    devices: Vec<RnicConfig>,
    poll_idle_us: Option<u64>,
    poll_always: Option<bool>,
}

fn read_config(path: &str) -> Result<Config, CliError> {
    let err = |why: String| CliError::Config {
        path: path.into(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let file: ConfigFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    let defaults = PciIds::default();
    let devices = file
        .devices
        .into_iter()
        .map(|d| {
            if d.lid == 0 {
                return Err(err(format!("device {}: lid must be in 1..65535", d.name)));
            }
            Ok(RnicConfig {
                name: d.name,
                socket: d.socket,
                lid: d.lid,
                ids: PciIds {
                    vendor: d.vendor.unwrap_or(defaults.vendor),
                    device: d.device.unwrap_or(defaults.device),
                    subsystem_vendor: d.subsystem_vendor.unwrap_or(defaults.subsystem_vendor),
                    subsystem: d.subsystem.unwrap_or(defaults.subsystem),
                },
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Config {
        devices,
        poll_idle_us: file.poll_idle_us,
        poll_always: file.poll_always,
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
                a.devices[0].lid,
                a.devices[0].ids.vendor,
                a.poller.idle,
                a.poller.give_way
            ),
            (3, 0x1234, Duration::from_micros(7), false)
        );
        std::fs::write(&path, "[[device]]\nname = \"r0\"\n").unwrap();
        assert!(matches!(
            parse(&args(&format!("serve --config {}", path.display()))),
            Err(CliError::Config { .. })
        ));
        let _ = std::fs::remove_file(path);
    }
}
