//! The classic pcap file format (libpcap's savefile, as tcpdump -w and QEMU's filter-dump
//! write it): a global header, then a record header and the bytes of each frame. Link type
//! Ethernet, so Wireshark's UDP port 4791 heuristic dissects the frames as RoCEv2.
//!
//! The writer writes microsecond timestamps in this host's byte order; the reader takes
//! either byte order and microsecond or nanosecond timestamps, Ethernet frames only, and
//! refuses anything else a well-formed file cannot hold (a record longer than the file's
//! snapshot length or than its frame, a fraction of a second of a second or more, a file
//! that ends inside a record).

use std::io::{self, Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microsecond timestamps, written in this host's byte order (readers detect it).
const MAGIC: u32 = 0xA1B2_C3D4;
/// The same with nanosecond timestamps (libpcap 1.5 and later).
const MAGIC_NANOS: u32 = 0xA1B2_3C4D;
const FILE_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;
/// The longest record any libpcap reads (its MAXIMUM_SNAPLEN): a bound on what a file
/// can make the reader allocate.
pub const MAX_RECORD: u32 = 262_144;
const VERSION: (u16, u16) = (2, 4);
/// Longest frame recorded whole: more than any RoCEv2 frame (4096-byte MTU plus headers).
pub const SNAPLEN: u32 = 65_535;
/// LINKTYPE_ETHERNET.
const LINKTYPE_ETHERNET: u32 = 1;

pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC.to_ne_bytes());
        h.extend_from_slice(&VERSION.0.to_ne_bytes());
        h.extend_from_slice(&VERSION.1.to_ne_bytes());
        // thiszone (UTC) and sigfigs.
        h.extend_from_slice(&[0; 8]);
        h.extend_from_slice(&SNAPLEN.to_ne_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// One frame seen at `at`; frames beyond SNAPLEN are cut there (the record says how
    /// long the frame was).
    pub fn frame(&mut self, at: SystemTime, frame: &[u8]) -> io::Result<()> {
        let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let kept = &frame[..frame.len().min(SNAPLEN as usize)];
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&(since.as_secs() as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&since.subsec_micros().to_ne_bytes());
        h[8..12].copy_from_slice(&(kept.len() as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&(u32::try_from(frame.len()).unwrap_or(u32::MAX)).to_ne_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(kept)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Why bytes are not a pcap file of Ethernet frames.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("cannot read the capture: {0}")]
    Io(#[from] io::Error),
    #[error(
        "magic number {0:#010x} is not a pcap file's (0xa1b2c3d4 or 0xa1b23c4d, either byte order)"
    )]
    Magic(u32),
    #[error("pcap version {major}.{minor}: only 2.4 exists")]
    Version { major: u16, minor: u16 },
    #[error("link type {0} is not Ethernet (1)")]
    LinkType(u32),
    #[error("snapshot length {0} is 0 or beyond {MAX_RECORD}")]
    Snaplen(u32),
    #[error("the file ends inside {what} (record {record}): {have} of {need} bytes")]
    Truncated {
        what: &'static str,
        record: u64,
        need: usize,
        have: usize,
    },
    #[error("record {record} holds {caplen} bytes, more than the snapshot length {snaplen}")]
    CapLen {
        record: u64,
        caplen: u32,
        snaplen: u32,
    },
    #[error("record {record} holds {caplen} bytes of a {orig_len}-byte frame")]
    OrigLen {
        record: u64,
        caplen: u32,
        orig_len: u32,
    },
    #[error("record {record}: timestamp fraction {frac} is a second or more")]
    Fraction { record: u64, frac: u32 },
}

/// One frame of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub at: SystemTime,
    /// The frame's length on the wire (longer than `data` when the capture cut it).
    pub orig_len: u32,
    pub data: Vec<u8>,
}

impl Record {
    /// The whole frame was recorded.
    pub fn is_whole(&self) -> bool {
        self.data.len() == self.orig_len as usize
    }
}

pub struct PcapReader<R: Read> {
    input: R,
    swapped: bool,
    nanos: bool,
    snaplen: u32,
    /// Records read so far (for errors).
    records: u64,
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the file header.
    pub fn new(mut input: R) -> Result<Self, PcapError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        let have = read_full(&mut input, &mut h)?;
        if have < h.len() {
            return Err(PcapError::Truncated {
                what: "the file header",
                record: 0,
                need: h.len(),
                have,
            });
        }
        let magic = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match magic {
            MAGIC => (false, false),
            MAGIC_NANOS => (false, true),
            m if m.swap_bytes() == MAGIC => (true, false),
            m if m.swap_bytes() == MAGIC_NANOS => (true, true),
            _ => return Err(PcapError::Magic(magic)),
        };
        let mut r = PcapReader {
            input,
            swapped,
            nanos,
            snaplen: 0,
            records: 0,
        };
        let (major, minor) = (r.u16_at(&h, 4), r.u16_at(&h, 6));
        if (major, minor) != VERSION {
            return Err(PcapError::Version { major, minor });
        }
        let snaplen = r.u32_at(&h, 16);
        if snaplen == 0 || snaplen > MAX_RECORD {
            return Err(PcapError::Snaplen(snaplen));
        }
        let linktype = r.u32_at(&h, 20);
        if linktype != LINKTYPE_ETHERNET {
            return Err(PcapError::LinkType(linktype));
        }
        r.snaplen = snaplen;
        Ok(r)
    }

    /// The next record, or None at the end of the file (which must fall between records).
    pub fn next_record(&mut self) -> Result<Option<Record>, PcapError> {
        let record = self.records;
        let mut h = [0u8; RECORD_HEADER_LEN];
        let have = read_full(&mut self.input, &mut h)?;
        if have == 0 {
            return Ok(None);
        }
        if have < h.len() {
            return Err(PcapError::Truncated {
                what: "a record header",
                record,
                need: h.len(),
                have,
            });
        }
        let (secs, frac) = (self.u32_at(&h, 0), self.u32_at(&h, 4));
        let (caplen, orig_len) = (self.u32_at(&h, 8), self.u32_at(&h, 12));
        let limit = if self.nanos { 1_000_000_000 } else { 1_000_000 };
        if frac >= limit {
            return Err(PcapError::Fraction { record, frac });
        }
        if caplen > self.snaplen {
            return Err(PcapError::CapLen {
                record,
                caplen,
                snaplen: self.snaplen,
            });
        }
        if caplen > orig_len {
            return Err(PcapError::OrigLen {
                record,
                caplen,
                orig_len,
            });
        }
        // caplen <= snaplen <= MAX_RECORD: a bounded allocation.
        let mut data = vec![0u8; caplen as usize];
        let have = read_full(&mut self.input, &mut data)?;
        if have < data.len() {
            return Err(PcapError::Truncated {
                what: "a frame",
                record,
                need: data.len(),
                have,
            });
        }
        self.records += 1;
        let nanos = if self.nanos { frac } else { frac * 1000 };
        Ok(Some(Record {
            at: UNIX_EPOCH + Duration::new(u64::from(secs), nanos),
            orig_len,
            data,
        }))
    }

    /// Every record to the end of the file.
    pub fn records(mut self) -> Result<Vec<Record>, PcapError> {
        let mut out = Vec::new();
        while let Some(r) = self.next_record()? {
            out.push(r);
        }
        Ok(out)
    }

    fn u16_at(&self, b: &[u8], i: usize) -> u16 {
        let v = u16::from_ne_bytes([b[i], b[i + 1]]);
        if self.swapped {
            v.swap_bytes()
        } else {
            v
        }
    }

    fn u32_at(&self, b: &[u8], i: usize) -> u32 {
        let v = u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if self.swapped {
            v.swap_bytes()
        } else {
            v
        }
    }
}

/// Reads until `buf` is full or the input ends; how many bytes it read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut have = 0;
    while have < buf.len() {
        match input.read(&mut buf[have..]) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(have)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_the_global_header_then_one_record_per_frame() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let at = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_000);
        w.frame(at, &[1, 2, 3]).unwrap();
        let out = w.out;
        assert_eq!(out.len(), 24 + 16 + 3);
        let word = |i: usize| u32::from_ne_bytes(out[i..i + 4].try_into().unwrap());
        assert_eq!(word(0), MAGIC);
        assert_eq!(word(20), 1);
        assert_eq!(
            (word(24), word(28), word(32), word(36)),
            (1_700_000_000, 123_456, 3, 3)
        );
        assert_eq!(&out[40..], &[1, 2, 3]);
    }
}

#[cfg(test)]
mod reader_tests {
    use super::*;

    fn file(frames: &[&[u8]]) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let at = UNIX_EPOCH + Duration::new(1_700_000_000, 5_000);
        for f in frames {
            w.frame(at, f).unwrap();
        }
        w.out
    }

    #[test]
    fn the_reader_reads_back_what_the_writer_wrote() {
        let bytes = file(&[&[1, 2, 3], &[], &[9; 100]]);

        let records = PcapReader::new(&bytes[..]).unwrap().records().unwrap();

        assert_eq!(records.len(), 3);
        assert_eq!(records[0].data, [1, 2, 3]);
        assert!(records[1].data.is_empty());
        assert_eq!(records[2].data, [9; 100]);
        assert!(records.iter().all(Record::is_whole));
        assert_eq!(
            records[0].at,
            UNIX_EPOCH + Duration::new(1_700_000_000, 5_000)
        );
    }

    #[test]
    fn a_file_of_the_other_byte_order_with_nanoseconds_is_read() {
        // Built by hand, big-endian on a little-endian host or the reverse.
        let foreign = |v: u32| {
            if cfg!(target_endian = "little") {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut b = Vec::new();
        b.extend_from_slice(&foreign(MAGIC_NANOS));
        b.extend_from_slice(&foreign(2 << 16 | 4)[..]); // major 2, minor 4 as two u16
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&foreign(65_535));
        b.extend_from_slice(&foreign(1));
        for v in [7, 999_999_999, 2, 60] {
            b.extend_from_slice(&foreign(v));
        }
        b.extend_from_slice(&[0xAA, 0xBB]);

        let records = PcapReader::new(&b[..]).unwrap().records().unwrap();

        assert_eq!(records.len(), 1);
        assert_eq!(records[0].at, UNIX_EPOCH + Duration::new(7, 999_999_999));
        assert_eq!(
            (records[0].orig_len, &records[0].data[..]),
            (60, &[0xAA, 0xBB][..])
        );
        assert!(!records[0].is_whole());
    }

    fn error(bytes: &[u8]) -> PcapError {
        match PcapReader::new(bytes).and_then(PcapReader::records) {
            Ok(r) => panic!("read {} records from a bad file", r.len()),
            Err(e) => e,
        }
    }

    fn set(bytes: &mut [u8], at: usize, v: u32) {
        bytes[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn malformed_files_get_the_error_that_names_the_fault() {
        let good = file(&[&[1, 2, 3, 4]]);
        let mut magic = good.clone();
        set(&mut magic, 0, 0x0A0D_0D0A); // pcapng
        assert!(matches!(error(&magic), PcapError::Magic(0x0A0D_0D0A)));
        let mut version = good.clone();
        version[4..6].copy_from_slice(&3u16.to_ne_bytes());
        assert!(matches!(
            error(&version),
            PcapError::Version { major: 3, minor: 4 }
        ));
        let mut link = good.clone();
        set(&mut link, 20, 101); // raw IP
        assert!(matches!(error(&link), PcapError::LinkType(101)));
        let mut snap = good.clone();
        set(&mut snap, 16, MAX_RECORD + 1);
        assert!(matches!(error(&snap), PcapError::Snaplen(_)));
        let mut frac = good.clone();
        set(&mut frac, 24 + 4, 1_000_000);
        assert!(matches!(
            error(&frac),
            PcapError::Fraction { record: 0, .. }
        ));
        let mut orig = good.clone();
        set(&mut orig, 24 + 12, 3);
        assert!(matches!(
            error(&orig),
            PcapError::OrigLen {
                caplen: 4,
                orig_len: 3,
                ..
            }
        ));
        let mut cap = good.clone();
        set(&mut cap, 16, 2);
        assert!(matches!(
            error(&cap),
            PcapError::CapLen {
                caplen: 4,
                snaplen: 2,
                ..
            }
        ));
    }

    #[test]
    fn a_file_that_ends_inside_a_header_or_a_frame_is_an_error() {
        let good = file(&[&[1, 2, 3, 4], &[5, 6]]);
        for len in 0..good.len() {
            let cut = &good[..len];
            let whole_records = len == 24 || len == 24 + 16 + 4;
            match PcapReader::new(cut).and_then(PcapReader::records) {
                Ok(_) => assert!(whole_records, "{len}"),
                Err(PcapError::Truncated { .. }) => assert!(!whole_records, "{len}"),
                Err(e) => panic!("{len}: {e}"),
            }
        }
    }
}
