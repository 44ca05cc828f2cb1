//! Target 1: vfio-user messages over the real socket of a served device (the harness's
//! `TestDevices`: server thread, poller). An input is a sequence of messages with mostly
//! valid framing (a 16-byte header whose size matches, known commands with payloads of the
//! right shape, real fds where a command takes them: sealed memfds for DMA_MAP, eventfds
//! for SET_IRQS) and mutated fields: header size, flags and id, argsz, indexes, offsets and
//! counts, stray or too many fds, unknown commands, broken VERSION JSON.
//!
//! A reader thread drains the replies while the messages go out, then the client shuts its
//! write side down. Oracles: every reply is framed as a reply (size within the protocol
//! limit, REPLY type, an id and command that were sent, an error reply with a real errno);
//! the server closes the connection once the client is done; then a new client (the
//! harness's `FakeDriver`) connects, brings the device up and gets a correct QUERY_DEVICE.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vrnic_hw::{
    bar0, BAR_CTRL, BAR_CTRL_SIZE, BAR_DB, BAR_DB_SIZE, BAR_KICK, MSIX_VECTORS, PCI_CONFIG_SIZE,
};

use super::guest::sealed_memfd;
use super::input::Input;
use super::stats;
use crate::harness::vfio::{recv_message, send_message};
use crate::harness::{TestDevices, TIMEOUT};

const HEADER_SIZE: usize = 16;
/// The server's limit on a whole message (1 MiB of data + 4 KiB).
const MAX_MESSAGE_SIZE: usize = (1 << 20) + 4096;
const FLAG_REPLY: u32 = 1;
const FLAG_NO_REPLY: u32 = 1 << 4;
const FLAG_ERROR: u32 = 1 << 5;

/// Guest-physical base of the DMA maps inputs make, and the memfd behind them.
const DMA_BASE: u64 = 0x1_0000_0000;
const DMA_FILE_SIZE: u64 = 16 << 20;

struct State {
    devices: TestDevices,
    ram: File,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Runs one input (the function both runners call).
pub fn run_one(input: &[u8]) {
    STATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let st = slot.get_or_insert_with(|| State {
            devices: TestDevices::start(1),
            ram: sealed_memfd(c"vrnic-fuzz-dma", DMA_FILE_SIZE),
        });
        run(st, input);
    });
}

/// Forgets the devices after a failure (their threads may be stuck); the next input
/// starts new ones.
pub fn discard() {
    STATE.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            std::mem::forget(slot.take());
        }
    });
}

/// One message to send.
struct Msg {
    id: u16,
    command: u16,
    flags: u32,
    error: u32,
    payload: Vec<u8>,
    /// Header size field: the true size unless mutated.
    size: Option<u32>,
    fds: Vec<RawFd>,
}

#[derive(Default)]
struct P(Vec<u8>);

impl P {
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

const QEMU_CAPS: &[u8] = br#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}"#;

/// Regions: the BARs vrnic has, config space, and absent ones.
const REGIONS: &[u32] = &[BAR_CTRL, BAR_DB, BAR_KICK, 7, 1, 3, 5, 6, 8, 9, 0xffff_ffff];

fn region_size(region: u32) -> u64 {
    match region {
        r if r == BAR_CTRL => u64::from(BAR_CTRL_SIZE),
        r if r == BAR_DB => u64::from(BAR_DB_SIZE),
        r if r == BAR_KICK => u64::from(vrnic_hw::BAR_KICK_SIZE),
        7 => u64::from(PCI_CONFIG_SIZE),
        _ => 4096,
    }
}

/// An offset and count in `region`, mostly in bounds and register-sized.
fn access(inp: &mut Input, region: u32) -> (u64, u32) {
    let size = region_size(region);
    let count = match inp.u8() % 8 {
        0..=4 => 4,
        5 => inp.pick(&[1, 2, 8]),
        6 => 1 + inp.below(4096) as u32,
        _ => inp.mostly_u32(1 << 20),
    };
    let offset = if region == BAR_CTRL && inp.chance(70) {
        inp.pick(bar0::REGISTERS).1
    } else {
        inp.len_up_to(size.saturating_sub(u64::from(count)))
    };
    (inp.mostly_u64(offset), inp.mostly_u32(count))
}

fn region(inp: &mut Input) -> u32 {
    if inp.chance(85) {
        inp.pick(&REGIONS[..4])
    } else {
        inp.pick(REGIONS)
    }
}

fn build(
    inp: &mut Input,
    index: usize,
    ram: &File,
    irqs: &[EventFd],
    maps: &mut Vec<(u64, u64)>,
) -> Msg {
    // QEMU starts with VERSION; so do most inputs, or the server refuses everything else.
    let first = index == 0 && inp.chance(90);
    let command = match inp.u8() % 32 {
        _ if first => 1,
        0..=1 => 1,
        2..=4 => 2,
        5..=6 => 3,
        7 => 4,
        8..=9 => 5,
        10 => 7,
        11..=12 => 8,
        13..=18 => 9,
        19..=24 => 10,
        25 => 13,
        26 => 15,
        27 => inp.pick(&[0, 6, 11, 12, 14, 16, 17]),
        28 => inp.u16(),
        _ => {
            if index == 0 {
                1
            } else {
                9
            }
        }
    };
    let mut fds = Vec::new();
    let payload = match command {
        1 => {
            let json: Vec<u8> = match inp.u8() % 8 {
                _ if first => QEMU_CAPS.to_vec(),
                0..=4 => QEMU_CAPS.to_vec(),
                5 => QEMU_CAPS[..inp.below(QEMU_CAPS.len())].to_vec(),
                6 => br#"{"capabilities":{"max_msg_fds":-1,"max_data_xfer_size":0,"pgsizes":1,"migration":{"pgsize":3}}}"#.to_vec(),
                _ => { let v = inp.below(256); inp.bytes(v) }.to_vec(),
            };
            let nul: &[u8] = if inp.chance(90) { &[0] } else { &[] };
            P::default()
                .u16(inp.mostly_u16(0))
                .u16(inp.mostly_u16(0))
                .bytes(&json)
                .bytes(nul)
                .0
        }
        2 => {
            let size = match inp.u8() % 4 {
                0 => DMA_FILE_SIZE,
                1 => 4096,
                _ => (1 + inp.below(4096) as u64) * 4096,
            };
            let offset = if inp.chance(80) {
                0
            } else {
                inp.len_up_to(DMA_FILE_SIZE)
            };
            let addr = DMA_BASE + (inp.below(64) as u64) * (16 << 20);
            if inp.chance(85) {
                fds.push(ram.as_raw_fd());
            }
            let (addr, size) = (inp.mostly_u64(addr), inp.mostly_u64(size));
            maps.push((addr, size));
            P::default()
                .u32(inp.mostly_u32(32))
                .u32({
                    let v = 1 + inp.below(3) as u32;
                    inp.mostly_u32(v)
                })
                .u64(inp.mostly_u64(offset))
                .u64(addr)
                .u64(size)
                .0
        }
        3 => {
            // Mostly a range an earlier DMA_MAP of this input asked for.
            let (addr, size) = if !maps.is_empty() && inp.chance(80) {
                maps[inp.below(maps.len())]
            } else {
                let addr = DMA_BASE + (inp.below(64) as u64) * (16 << 20);
                (addr, inp.len_up_to(DMA_FILE_SIZE))
            };
            P::default()
                .u32(inp.mostly_u32(24))
                .u32(inp.mostly_u32(0))
                .u64(inp.mostly_u64(addr))
                .u64(inp.mostly_u64(size))
                .0
        }
        4 => P::default().u32(inp.mostly_u32(16)).u32(0).u32(0).u32(0).0,
        5 => {
            P::default()
                .u32({
                    let v = if inp.chance(50) { 32 } else { 256 };
                    inp.mostly_u32(v)
                })
                .u32(inp.mostly_u32(0))
                .u32(region(inp))
                .u32(inp.mostly_u32(0))
                .u64(0)
                .u64(0)
                .0
        }
        7 => {
            P::default()
                .u32(inp.mostly_u32(16))
                .u32(inp.mostly_u32(0))
                .u32({
                    let v = inp.below(5) as u32;
                    inp.mostly_u32(v)
                })
                .u32(0)
                .0
        }
        8 => {
            // DATA_NONE 1, DATA_BOOL 2, DATA_EVENTFD 4; MASK 8, UNMASK 16, TRIGGER 32.
            let flags = inp.pick(&[4 | 32, 4 | 32, 4 | 32, 1 | 32, 2 | 32, 1 | 8, 1 | 16, 4 | 8]);
            let start = if inp.chance(80) {
                0
            } else {
                inp.below(12) as u32
            };
            let count = if inp.chance(70) {
                MSIX_VECTORS - start.min(MSIX_VECTORS)
            } else {
                inp.below(12) as u32
            };
            if flags & 4 != 0 && inp.chance(90) {
                let n = if inp.chance(85) {
                    count as usize
                } else {
                    inp.below(20)
                };
                fds.extend(irqs.iter().cycle().take(n).map(|e| e.as_raw_fd()));
            }
            let mut p = P::default()
                .u32(inp.mostly_u32(20))
                .u32(inp.mostly_u32(flags))
                .u32(inp.mostly_u32(2))
                .u32(inp.mostly_u32(start))
                .u32(inp.mostly_u32(count));
            if flags & 2 != 0 {
                p = p.bytes(inp.bytes(count.min(16) as usize));
            }
            p.0
        }
        9 => {
            let region = region(inp);
            let (offset, count) = access(inp, region);
            P::default().u64(offset).u32(region).u32(count).0
        }
        10 => {
            let region = region(inp);
            let (offset, count) = access(inp, region);
            let real = if inp.chance(90) {
                count.min(1 << 20) as usize
            } else {
                inp.below(64)
            };
            let mut data = if region == BAR_CTRL && inp.chance(60) {
                let v: u32 = match offset {
                    bar0::DEV_CTRL => inp.pick(&[1, 2, 0]),
                    bar0::AQ_BASE_LO | bar0::ACQ_BASE_LO => inp.pick(&[0, 0x1000, 0x2000]),
                    bar0::AQ_BASE_HI | bar0::ACQ_BASE_HI => 1,
                    bar0::AQ_DEPTH_LOG2 => inp.below(6) as u32,
                    _ => inp.u32(),
                };
                v.to_le_bytes().to_vec()
            } else {
                inp.bytes(real.min(256)).to_vec()
            };
            data.resize(real, 0);
            P::default()
                .u64(offset)
                .u32(region)
                .u32(count)
                .bytes(&data)
                .0
        }
        13 => Vec::new(),
        15 => {
            let n = if inp.chance(80) {
                1 + inp.below(8)
            } else {
                inp.below(250)
            };
            let mut p = P::default().u64(inp.mostly_u64(n as u64));
            for _ in 0..n {
                let region = region(inp);
                let (offset, count) = access(inp, region);
                p = p
                    .u64(offset)
                    .u32(region)
                    .u32(count.min(8))
                    .bytes(&inp.u64().to_le_bytes());
            }
            p.0
        }
        _ => {
            let v = inp.below(64);
            inp.bytes(v)
        }
        .to_vec(),
    };
    if inp.chance(3) {
        // Stray fds on a command that takes none, or more than the server keeps.
        let n = 1 + inp.below(20);
        fds.extend(std::iter::repeat_n(ram.as_raw_fd(), n));
    }
    let flags = match inp.u8() % 16 {
        0..=11 => 0,
        12 | 13 => FLAG_NO_REPLY,
        14 => FLAG_REPLY,
        _ => inp.u32(),
    };
    let size = inp.chance(4).then(|| {
        let real = (HEADER_SIZE + payload.len()) as u32;
        match inp.u8() % 4 {
            0 => real.wrapping_sub(1 + inp.below(8) as u32),
            1 => real + 1 + inp.below(8) as u32,
            2 => inp.below(HEADER_SIZE) as u32,
            _ => MAX_MESSAGE_SIZE as u32 + 1 + inp.below(64) as u32,
        }
    });
    Msg {
        id: if inp.chance(95) {
            index as u16
        } else {
            inp.u16()
        },
        command,
        flags,
        error: if inp.chance(95) { 0 } else { inp.u32() },
        payload,
        size,
        fds,
    }
}

/// What the reader thread saw.
#[derive(Default)]
struct Seen {
    replies: u64,
    errors: u64,
    eof: bool,
    problem: Option<String>,
}

/// Reads replies until EOF, checking each one's framing against the messages sent.
/// Ids and commands sent, and whether a header size was falsified (after which the server
/// legitimately decodes the rest of the stream as other messages).
#[derive(Default)]
struct Sent {
    ids: HashMap<u16, HashSet<u16>>,
    desynced: bool,
}

fn reader(mut stream: UnixStream, sent: Arc<Mutex<Sent>>) -> Seen {
    let mut seen = Seen::default();
    loop {
        let reply = match recv_message(&mut stream) {
            Ok(Some(r)) => r,
            Ok(None) => {
                seen.eof = true;
                return seen;
            }
            // A signal (libFuzzer's timeout alarm) before any byte: read again.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // The server dropped a connection it could not decode while input was pending.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                seen.eof = true;
                return seen;
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                seen.problem = Some(format!("reply with an impossible {e}"));
                return seen;
            }
            Err(e) => {
                seen.problem = Some(format!("no reply and no close within {TIMEOUT:?}: {e}"));
                return seen;
            }
        };
        let (id, command, flags, error) = (reply.id, reply.command, reply.flags, reply.error);
        let known = {
            let sent = sent.lock().unwrap_or_else(|p| p.into_inner());
            sent.desynced
                || sent
                    .ids
                    .get(&id)
                    .is_some_and(|cmds| cmds.contains(&command))
        };
        let problem = if flags & 0xf != FLAG_REPLY {
            Some(format!("message of type {} from the server", flags & 0xf))
        } else if !known {
            Some(format!(
                "reply (id {id}, command {command}) to no message sent"
            ))
        } else if flags & FLAG_ERROR != 0 && !(1..4096).contains(&error) {
            Some(format!(
                "error reply to command {command} with errno {error}"
            ))
        } else {
            None
        };
        if problem.is_some() {
            seen.problem = problem;
            return seen;
        }
        seen.replies += 1;
        seen.errors += u64::from(flags & FLAG_ERROR != 0);
        let name = if command <= 17 {
            command.to_string()
        } else {
            "unknown".into()
        };
        let outcome = if flags & FLAG_ERROR != 0 {
            format!("errno {error}")
        } else {
            "ok".into()
        };
        stats::count("vfio_msg", format_args!("cmd {name} {outcome}"));
    }
}

fn send(stream: &mut UnixStream, m: &Msg) -> std::io::Result<()> {
    let size = m.size.unwrap_or((HEADER_SIZE + m.payload.len()) as u32);
    let bytes = P::default()
        .u16(m.id)
        .u16(m.command)
        .u32(size)
        .u32(m.flags)
        .u32(m.error)
        .bytes(&m.payload)
        .0;
    send_message(stream, &bytes, &m.fds)
}

fn run(st: &mut State, input: &[u8]) {
    let mut inp = Input::new(input);
    let socket = st.devices.socket(0).to_path_buf();
    let mut stream = UnixStream::connect(&socket).expect("connect to the device socket");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    stream.set_write_timeout(Some(TIMEOUT)).expect("timeout");
    let irqs: Vec<EventFd> = (0..MSIX_VECTORS)
        .map(|_| EventFd::new(EFD_NONBLOCK).expect("eventfd"))
        .collect();
    let sent: Arc<Mutex<Sent>> = Arc::default();
    let rx = stream.try_clone().expect("dup socket");
    let sent_r = sent.clone();
    let reader: JoinHandle<Seen> = std::thread::spawn(move || reader(rx, sent_r));
    let mut index = 0;
    let mut maps = Vec::new();
    while !inp.is_empty() && index < 32 {
        let m = build(&mut inp, index, &st.ram, &irqs, &mut maps);
        {
            let mut sent = sent.lock().unwrap_or_else(|p| p.into_inner());
            sent.ids.entry(m.id).or_default().insert(m.command);
            sent.desynced |= m.size.is_some();
        }
        index += 1;
        if let Err(e) = send(&mut stream, &m) {
            // The server may close a connection it cannot decode; anything else is a hang.
            assert!(
                e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut,
                "the server stopped reading messages: {e}"
            );
            stats::count("vfio_msg", "connection closed by the server");
            break;
        }
        // Drain interrupts so that no eventfd ever fills.
        for e in &irqs {
            let _ = e.read();
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let seen = reader.join().expect("reader thread");
    if let Some(p) = seen.problem {
        panic!("vfio-user: {p}");
    }
    assert!(seen.eof, "the server did not close the connection");
    drop(stream);
    // The device keeps answering: a new VMM connects and brings it up.
    let mut drv = st.devices.connect(0);
    drv.bring_up();
    let attr = drv.query_device();
    assert_eq!(
        attr.vendor_id.to_native(),
        vrnic_hw::PCI_VENDOR_ID,
        "QUERY_DEVICE after the session"
    );
}
