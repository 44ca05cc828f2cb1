//! The socket files this process's servers listen on (vfio-user, vhost-user-net, the
//! control socket): one rule for what may already be at the path, and one wait for a
//! connection that a stop event cuts short.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use vmm_sys_util::eventfd::EventFd;

/// Why a server may not take a path.
#[derive(Debug)]
pub enum Occupied {
    /// Something other than a socket is there: never removed.
    NotASocket,
    /// A server accepts connections there.
    InUse,
    /// The path could not be examined or the stale socket removed.
    Io(io::Error),
}

/// Clears `path` for a new listener: nothing there is fine; a stale socket (nobody accepts
/// on it: its server died) is removed, with a warning naming `what`; anything else stays
/// and is refused.
pub fn clear_stale(path: &Path, what: &str) -> Result<(), Occupied> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Occupied::Io(e)),
        Ok(meta) if !meta.file_type().is_socket() => return Err(Occupied::NotASocket),
        Ok(_) => {}
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(Occupied::InUse),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            log::warn!("{what} {}: removing a stale socket", path.display());
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Occupied::Io(e)),
                _ => Ok(()),
            }
        }
        Err(e) => Err(Occupied::Io(e)),
    }
}

/// Waits until `listener` is readable (true: a connection waits) or `stop` is (false).
/// A failing poll is an error for the caller to report.
pub fn wait_for_connection(listener: &impl AsRawFd, stop: &EventFd) -> io::Result<bool> {
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a valid array of two pollfds that outlives the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            return Ok(false);
        }
        if fds[0].revents != 0 {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use vmm_sys_util::eventfd::EFD_NONBLOCK;

    fn dir(test: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("vrnic-unix-socket-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_stale_socket_goes_a_live_one_or_a_file_stays() {
        let d = dir("stale");
        let stale = d.join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        assert!(clear_stale(&stale, "test").is_ok());
        assert!(!stale.exists());
        assert!(clear_stale(&stale, "test").is_ok(), "nothing there");
        let live = d.join("live.sock");
        let _l = UnixListener::bind(&live).unwrap();
        assert!(matches!(clear_stale(&live, "test"), Err(Occupied::InUse)));
        assert!(live.exists());
        let file = d.join("file");
        std::fs::write(&file, b"keep").unwrap();
        assert!(matches!(
            clear_stale(&file, "test"),
            Err(Occupied::NotASocket)
        ));
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_wait_ends_with_a_connection_or_the_stop() {
        let d = dir("wait");
        let path = d.join("w.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let stop = EventFd::new(EFD_NONBLOCK).unwrap();
        let _c = UnixStream::connect(&path).unwrap();
        assert!(wait_for_connection(&listener, &stop).unwrap());
        stop.write(1).unwrap();
        let other = UnixListener::bind(d.join("idle.sock")).unwrap();
        assert!(!wait_for_connection(&other, &stop).unwrap());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
