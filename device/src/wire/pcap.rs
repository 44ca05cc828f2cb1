//! The classic pcap file format (libpcap's savefile, as tcpdump -w writes it): a global
//! header, then a record header and the bytes of each frame. Link type Ethernet, so
//! Wireshark's UDP port 4791 heuristic dissects the frames as RoCEv2.

use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

/// Microsecond timestamps, written in this host's byte order (readers detect it).
const MAGIC: u32 = 0xA1B2_C3D4;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
