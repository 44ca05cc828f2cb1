//! `trace`: the request after which a connection is a stream of a device's trace events
//! (both ends: the server's loop and `vrnic ctl trace`'s reader).
//!
//! The server subscribes with a bounded queue (`trace::queue`), so the device never waits
//! for the client; each batch of lines must be taken within the write timeout, as any
//! response, or the connection is closed and the subscription with it. Events that do not
//! fit the queue while the client is slow become one `{"lost":N}` line where they were.

use super::client::ClientError;
use super::connection::write_by;
use super::handlers;
use super::protocol::{error_line, parse_request, ErrorReply, Request};
use super::server::Limits;
use crate::fabric::Fabric;
use crate::trace::{queue, render, Filter, Kind, KindSet, StreamItem, Subscription};
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the stream waits for events before it looks whether the client is still there.
const WAIT: Duration = Duration::from_millis(200);

/// The first line of a stream: what is traced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceReply {
    /// The device traced.
    pub trace: String,
    pub kinds: Vec<Kind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qpn: Option<u32>,
}

/// Serves `line` if it is a trace request: None if it is not; else whether the connection
/// goes on (a refused request is answered and it does; a stream ends it).
pub fn serve_if_trace(
    stream: &mut UnixStream,
    fabric: &Fabric,
    limits: &Limits,
    who: &str,
    line: &[u8],
) -> Option<bool> {
    let Ok(Request::Trace { device, kinds, qpn }) = parse_request(line) else {
        return None;
    };
    let deadline = || Instant::now() + limits.write_timeout;
    let subscription = match handlers::device(fabric, &device) {
        Ok(rnic) => {
            let kinds = match KindSet::of(&kinds) {
                KindSet(0) => KindSet::ALL,
                set => set,
            };
            rnic.trace
                .subscribe(Filter { kinds, qpn }, queue::DEFAULT_CAPACITY)
        }
        Err(e) => return Some(write_by(stream, &error_line(&e), deadline()).is_ok()),
    };
    let filter = subscription.filter();
    let mut first = serde_json::to_vec(&TraceReply {
        trace: device,
        kinds: filter.kinds.kinds(),
        qpn: filter.qpn,
    })
    .unwrap_or_default();
    first.push(b'\n');
    if write_by(stream, &first, deadline()).is_ok() {
        log::debug!("{who}: tracing");
        follow_events(stream, &subscription, limits, who);
    }
    Some(false)
}

/// Writes the subscription's events until the client leaves, stops reading, or the device
/// or the server goes away.
fn follow_events(stream: &mut UnixStream, sub: &Subscription, limits: &Limits, who: &str) {
    let mut looked = Instant::now();
    let mut lines = Vec::new();
    while let Some(items) = sub.take(WAIT) {
        if !items.is_empty() {
            lines.clear();
            for item in &items {
                if serde_json::to_writer(&mut lines, item).is_err() {
                    continue;
                }
                lines.push(b'\n');
            }
            if let Err(e) = write_by(stream, &lines, Instant::now() + limits.write_timeout) {
                log::debug!("{who}: cannot write trace events ({e}); closing");
                return;
            }
        }
        if looked.elapsed() >= WAIT {
            if client_gone(stream) {
                log::debug!("{who}: closed");
                return;
            }
            looked = Instant::now();
        }
    }
    log::debug!("{who}: the device is gone; closing");
}

/// Whether the client closed its end (or the server shut the socket down). Bytes it sends
/// after the request are read and ignored.
fn client_gone(stream: &mut UnixStream) -> bool {
    if stream
        .set_read_timeout(Some(Duration::from_millis(1)))
        .is_err()
    {
        return true;
    }
    let mut scratch = [0u8; 512];
    match stream.read(&mut scratch) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
        ),
    }
}

/// `vrnic ctl trace`: sends `request` (a `Request::Trace`) and hands each line of the
/// stream, the first (`TraceReply`) included, to `each` until the server ends the stream
/// or `each` fails: a closed stdout (`| head`) ends it quietly, any other failure is
/// returned.
pub fn follow(
    path: &Path,
    request: &Request,
    mut each: impl FnMut(&str) -> io::Result<()>,
) -> Result<(), ClientError> {
    let (stream, sent) = super::client::send(path, request)?;
    let mut reader = BufReader::new(&stream);
    let mut first = String::new();
    let read = reader.read_line(&mut first);
    if !first.ends_with('\n') {
        sent?;
        read?;
        return Err(ClientError::NoAnswer);
    }
    if let Ok(ErrorReply { error }) = serde_json::from_str(&first) {
        return Err(ClientError::Server(error));
    }
    // Events may be minutes apart: wait for them as long as it takes.
    stream.set_read_timeout(None)?;
    let mut next = first;
    loop {
        match each(next.trim_end_matches('\n')) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(ClientError::Io(e)),
            Ok(()) => {}
        }
        next = String::new();
        if reader.read_line(&mut next)? == 0 || !next.ends_with('\n') {
            return Ok(());
        }
    }
}

/// One stream line as text for people (newline included).
pub fn render_line(line: &str) -> Result<String, serde_json::Error> {
    if let Ok(item) = serde_json::from_str::<StreamItem>(line) {
        return Ok(render::line(&item) + "\n");
    }
    let head: TraceReply = serde_json::from_str(line)?;
    let kinds: Vec<&str> = head.kinds.iter().map(|k| k.name()).collect();
    let qp = head.qpn.map(|q| format!(", QP {q:#x}")).unwrap_or_default();
    Ok(format!(
        "tracing {} ({}{qp}); interrupt to stop\n",
        head.trace,
        kinds.join(", ")
    ))
}
