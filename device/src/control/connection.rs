//! One control client: bounded request lines in, response lines out, each under a deadline,
//! so a peer that sends too much, too slowly, or never reads cannot pin its thread for long
//! (and holds no device lock while it stalls: requests are answered from views copied
//! before any byte is written).

use super::handlers;
use super::protocol::{error_line, parse_request, RequestError};
use super::server::Limits;
use crate::fabric::Fabric;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// How a read of a request line ended badly.
#[derive(Debug)]
enum LineError {
    TooLong,
    Timeout,
    Io(io::Error),
}

/// Splits a byte stream into lines of at most `max` bytes (newline included).
struct LineReader {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a newline (a line trickled in one byte at a
    /// time is searched once, not once per byte).
    scanned: usize,
    max: usize,
}

impl LineReader {
    fn new(max: usize) -> Self {
        LineReader {
            buf: Vec::new(),
            scanned: 0,
            max,
        }
    }

    /// The next line without its newline; None at end of stream (a partial last line is
    /// dropped: a request ends with its newline).
    fn next_line(
        &mut self,
        stream: &mut UnixStream,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, LineError> {
        loop {
            if let Some(i) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
                let end = self.scanned + i;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                self.scanned = 0;
                line.pop();
                if line.len() >= self.max {
                    return Err(LineError::TooLong);
                }
                return Ok(Some(line));
            }
            self.scanned = self.buf.len();
            if self.buf.len() >= self.max {
                return Err(LineError::TooLong);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(LineError::Timeout);
            }
            stream.set_read_timeout(Some(left)).map_err(LineError::Io)?;
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(LineError::Timeout),
                Err(e) => return Err(LineError::Io(e)),
            }
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Writes all of `bytes` by `deadline`.
pub(super) fn write_by(stream: &mut UnixStream, bytes: &[u8], deadline: Instant) -> io::Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(&bytes[off..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The response line to one request line.
pub fn respond(fabric: &Fabric, line: &[u8]) -> Vec<u8> {
    match parse_request(line).and_then(|request| handlers::handle(fabric, &request)) {
        Ok(reply) => reply,
        Err(e) => error_line(&e),
    }
}

/// Serves one client until it closes, breaks a limit, or the server shuts its socket down.
pub fn serve(mut stream: UnixStream, fabric: &Fabric, limits: &Limits, who: &str) {
    let mut reader = LineReader::new(limits.max_line);
    loop {
        let deadline = Instant::now() + limits.request_timeout;
        let line = match reader.next_line(&mut stream, deadline) {
            Ok(Some(line)) => line,
            Ok(None) => {
                log::debug!("{who}: closed");
                return;
            }
            Err(LineError::Io(e)) => {
                log::debug!("{who}: {e}");
                return;
            }
            Err(LineError::TooLong) => {
                log::debug!("{who}: request line too long; closing");
                goodbye(&mut stream, &RequestError::TooLong(limits.max_line));
                return;
            }
            Err(LineError::Timeout) => {
                log::debug!("{who}: no request in time; closing");
                goodbye(
                    &mut stream,
                    &RequestError::Timeout(limits.request_timeout.as_secs()),
                );
                return;
            }
        };
        if line.trim_ascii().is_empty() {
            continue;
        }
        if let Some(go_on) = super::trace::serve_if_trace(&mut stream, fabric, limits, who, &line) {
            match go_on {
                true => continue,
                false => return,
            }
        }
        let reply = respond(fabric, &line);
        if let Err(e) = write_by(&mut stream, &reply, Instant::now() + limits.write_timeout) {
            log::debug!("{who}: cannot write the response ({e}); closing");
            return;
        }
    }
}

/// A last error line for a client being dropped, if its socket takes it at once.
pub fn goodbye(stream: &mut UnixStream, e: &RequestError) {
    let _ = write_by(
        stream,
        &error_line(e),
        Instant::now() + Duration::from_millis(100),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader_over(data: &[u8], max: usize) -> (LineReader, UnixStream) {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(data).unwrap();
        drop(a);
        (LineReader::new(max), b)
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn pipelined_lines_come_out_one_by_one_and_a_partial_tail_is_dropped() {
        let (mut r, mut s) = reader_over(b"one\ntwo\r\nthr", 64);
        assert_eq!(r.next_line(&mut s, soon()).unwrap(), Some(b"one".to_vec()));
        assert_eq!(
            r.next_line(&mut s, soon()).unwrap(),
            Some(b"two\r".to_vec())
        );
        assert_eq!(r.next_line(&mut s, soon()).unwrap(), None);
    }

    #[test]
    fn a_line_of_the_limit_or_more_is_refused() {
        let (mut r, mut s) = reader_over(&[b'x'; 100], 64);
        assert!(matches!(
            r.next_line(&mut s, soon()),
            Err(LineError::TooLong)
        ));
        let mut long = vec![b'y'; 64];
        long.push(b'\n');
        let (mut r, mut s) = reader_over(&long, 64);
        assert!(matches!(
            r.next_line(&mut s, soon()),
            Err(LineError::TooLong)
        ));
        let mut fits = vec![b'z'; 63];
        fits.push(b'\n');
        let (mut r, mut s) = reader_over(&fits, 64);
        assert_eq!(r.next_line(&mut s, soon()).unwrap(), Some(vec![b'z'; 63]));
    }

    #[test]
    fn a_deadline_already_passed_is_a_timeout_not_a_wait() {
        let (_keep, mut s) = UnixStream::pair().unwrap();
        let mut r = LineReader::new(64);
        assert!(matches!(
            r.next_line(&mut s, Instant::now()),
            Err(LineError::Timeout)
        ));
    }
}
