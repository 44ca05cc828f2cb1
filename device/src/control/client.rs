//! `vrnic ctl`: sends one request to a control socket and reads its response line.

use super::protocol::{ErrorReply, Request};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest response line `vrnic ctl` reads (a listing of 64K QPs is some 30 MB).
pub const MAX_RESPONSE_LINE: u64 = 1 << 30;

/// How long `vrnic ctl` waits for the server at each step.
pub const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {path}: {source} (is `vrnic serve --control {path}` running?)")]
    Connect {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
    #[error("the server closed the connection without answering")]
    NoAnswer,
    #[error("the response is longer than {MAX_RESPONSE_LINE} bytes")]
    TooLong,
    #[error("the response is not JSON: {0}")]
    NotJson(String),
    /// The server answered with an error.
    #[error("{0}")]
    Server(String),
}

/// Connects to the control socket at `path` (with `TIMEOUT` for each read and write) and
/// sends `request`: the stream, and whether the request went out. A server that refuses
/// the connection (too many clients, another user) answers and closes before reading: the
/// request may not go out, the answer is still there, so the caller reads it first.
pub(super) fn send(
    path: &Path,
    request: &Request,
) -> Result<(UnixStream, io::Result<()>), ClientError> {
    let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
        path: path.to_path_buf(),
        source,
    })?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let mut line = serde_json::to_vec(request).map_err(|e| ClientError::NotJson(e.to_string()))?;
    line.push(b'\n');
    let sent = (&stream).write_all(&line);
    Ok((stream, sent))
}

/// Sends `request` to the control socket at `path`; the response line (without its
/// newline), or the server's error.
pub fn call(path: &Path, request: &Request) -> Result<String, ClientError> {
    let (stream, sent) = send(path, request)?;
    let mut reader = BufReader::new((&stream).take(MAX_RESPONSE_LINE + 1));
    let mut reply = Vec::new();
    let read = reader.read_until(b'\n', &mut reply);
    if reply.last() != Some(&b'\n') {
        sent?;
        read?;
        return Err(if reply.len() as u64 > MAX_RESPONSE_LINE {
            ClientError::TooLong
        } else {
            ClientError::NoAnswer
        });
    }
    reply.pop();
    let text = String::from_utf8(reply).map_err(|e| ClientError::NotJson(e.to_string()))?;
    if let Ok(ErrorReply { error }) = serde_json::from_str(&text) {
        return Err(ClientError::Server(error));
    }
    Ok(text)
}
