//! Process limits the servers depend on.
//!
//! Every DMA map with an fd keeps that fd open, every client holds a socket
//! and interrupt eventfds, and the process-wide DMA map budget is half of
//! RLIMIT_NOFILE's soft limit (see `guest_memory`). The soft limit is often
//! 1024 while the hard limit allows far more: raise it before the first
//! device starts.

use std::io;

use log::{info, warn};

/// Raises the soft RLIMIT_NOFILE to the hard limit, before any device is
/// created (the DMA map budget is sized from it at the first map). Logs what
/// it did; on failure the limit stays as it was. Returns the soft limit in
/// force afterwards.
pub fn raise_fd_limit() -> u64 {
    match try_raise_fd_limit() {
        Ok((before, after)) if after > before => {
            info!("raised the open-file limit from {before} to {after}");
            after
        }
        Ok((_, after)) => after,
        Err((before, e)) => {
            warn!("cannot raise the open-file limit above {before}: {e}");
            before
        }
    }
}

/// (soft limit before, soft limit after), or the limit and the error.
fn try_raise_fd_limit() -> Result<(u64, u64), (u64, io::Error)> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `rl`, which is valid for writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err((0, io::Error::last_os_error()));
    }
    let before = rl.rlim_cur;
    if rl.rlim_cur >= rl.rlim_max {
        return Ok((before, before));
    }
    let raised = libc::rlimit {
        rlim_cur: rl.rlim_max,
        rlim_max: rl.rlim_max,
    };
    // SAFETY: setrlimit reads one valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err((before, io::Error::last_os_error()));
    }
    Ok((before, raised.rlim_cur))
}
