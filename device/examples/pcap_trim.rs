//! Trims a capture of RoCEv2 traffic to a small fixture: only UDP-4791 frames, at most
//! `--per-class N` of each class (IP version, BTH opcode, pad count, length rounded to
//! 256 bytes, and for ACKs the AETH syndrome's kind, for MADs to QP1 the management class,
//! method and attribute), in their original order. The classes come from the raw bytes,
//! not from vrnic's decoder, so a frame the decoder refuses is kept too (the codec tests
//! then name it). tests/softroce-capture.sh runs it.
//!
//! Usage: pcap_trim IN.pcap OUT.pcap [--per-class N]   (N: 2)

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::process::ExitCode;
use vrnic::wire::pcap::{PcapReader, PcapWriter};

/// The class of a RoCEv2 frame, or None for any other frame.
fn class(f: &[u8]) -> Option<String> {
    let ethertype = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    let (v, ip_len, proto) = match ethertype {
        0x0800 => (4, usize::from(f.get(14)? & 0xF) * 4, *f.get(14 + 9)?),
        0x86dd => (6, 40, *f.get(14 + 6)?),
        _ => return None,
    };
    let udp = 14 + ip_len;
    if proto != 17 || u16::from_be_bytes([*f.get(udp + 2)?, *f.get(udp + 3)?]) != 4791 {
        return None;
    }
    let bth = udp + 8;
    let opcode = *f.get(bth)?;
    let pad = f.get(bth + 1)? >> 4 & 3;
    let dest_qpn = u32::from_be_bytes([0, *f.get(bth + 5)?, *f.get(bth + 6)?, *f.get(bth + 7)?]);
    let mut key = format!("v{v} op {opcode:#04x} pad {pad} len {}", f.len() / 256);
    match opcode & 0x1F {
        // Acknowledge, ATOMIC Acknowledge: the syndrome's kind (ACK, RNR NAK, NAK code).
        0x11 | 0x12 => {
            let s = *f.get(bth + 12)?;
            let kind = if s >> 5 == 0 { 0 } else { s };
            key += &format!(" aeth {kind:#04x}");
        }
        _ => {}
    }
    if dest_qpn == 1 {
        // A MAD after BTH and DETH: class, method, attribute.
        let mad = bth + 12 + 8;
        let g = |i: usize| f.get(mad + i).copied().unwrap_or(0);
        key += &format!(
            " qpn {dest_qpn} mad {:02x}/{:02x}/{:02x}{:02x}",
            g(1),
            g(3),
            g(16),
            g(17)
        );
    }
    Some(key)
}

fn run(args: &[String]) -> Result<String, String> {
    let (input, output) = match args {
        [i, o, ..] => (i, o),
        _ => return Err("usage: pcap_trim IN.pcap OUT.pcap [--per-class N]".into()),
    };
    let per_class: usize = match args.get(2..) {
        Some([flag, n]) if flag == "--per-class" => n.parse().map_err(|e| format!("{n}: {e}"))?,
        Some([]) | None => 2,
        Some(other) => return Err(format!("unexpected arguments {other:?}")),
    };
    let file = File::open(input).map_err(|e| format!("{input}: {e}"))?;
    let records = PcapReader::new(BufReader::new(file))
        .and_then(PcapReader::records)
        .map_err(|e| format!("{input}: {e}"))?;
    let out = File::create(output).map_err(|e| format!("{output}: {e}"))?;
    let mut w = PcapWriter::new(BufWriter::new(out)).map_err(|e| format!("{output}: {e}"))?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let (mut roce, mut kept) = (0, 0);
    for r in &records {
        let Some(key) = class(&r.data) else { continue };
        roce += 1;
        let n = seen.entry(key).or_default();
        *n += 1;
        if *n <= per_class && r.is_whole() {
            w.frame(r.at, &r.data)
                .map_err(|e| format!("{output}: {e}"))?;
            kept += 1;
        }
    }
    w.flush().map_err(|e| format!("{output}: {e}"))?;
    let mut classes: Vec<_> = seen.into_iter().collect();
    classes.sort();
    let mut report = String::new();
    for (key, n) in &classes {
        report += &format!("{n:6} {key}\n");
    }
    report += &format!(
        "{input}: {} frames, {roce} RoCEv2 in {} classes; kept {kept} in {output}",
        records.len(),
        classes.len()
    );
    Ok(report)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pcap_trim: {e}");
            ExitCode::FAILURE
        }
    }
}
