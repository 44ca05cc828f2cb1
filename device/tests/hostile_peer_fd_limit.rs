//! The vfio-user server at the process's open-file limit. The test fills this process's
//! fd table itself (the server runs in-process), then checks that a message whose fds
//! the kernel could not hand over is refused without desynchronising the stream, and
//! that accept() failing with EMFILE only delays the next client: the server thread
//! backs off, keeps serving and answers it once fds are free again.
//!
//! One test per binary: filling the fd table would break tests running beside it.

mod harness;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use harness::memory::{memfd, PAGE};
use harness::vfio::{VfioClient, DMA_READ, DMA_WRITE};
use harness::*;

/// What the device code logs (info and above), for the test to look at.
struct Captured(Mutex<Vec<String>>);

static LOG: Captured = Captured(Mutex::new(Vec::new()));

impl log::Log for Captured {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = record.args().to_string();
            self.0.lock().unwrap().push(line);
        }
    }

    fn flush(&self) {}
}

fn logged(needle: &str) -> bool {
    LOG.0.lock().unwrap().iter().any(|l| l.contains(needle))
}

/// Opens /dev/null until the fd table is full; the files keep it full.
fn fill_fd_table() -> Vec<File> {
    let mut hogs = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => hogs.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => return hogs,
            Err(e) => panic!("filling the fd table: {e}"),
        }
    }
}

/// A soft RLIMIT_NOFILE small enough to fill quickly.
fn lower_fd_limit(soft: u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `rl`.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) }, 0);
    rl.rlim_cur = soft.min(rl.rlim_max);
    // SAFETY: setrlimit reads one valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) }, 0);
}

#[test]
fn at_the_fd_limit_fds_lost_in_transit_are_refused_and_accept_backs_off_then_serves() {
    log::set_logger(&LOG).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    lower_fd_limit(512);
    let devices = TestDevices::start(1);
    let mut first = VfioClient::connect(devices.socket(0));
    first.version();
    let ram = memfd(c"vrnic-fd-limit", PAGE);

    // A DMA_MAP whose fd the kernel cannot install in the full table: refused, the
    // stream stays in sync.
    let mut hogs = fill_fd_table();
    let lost = first.dma_map(0, PAGE, 0, DMA_READ | DMA_WRITE, Some(ram.as_raw_fd()));
    let info = first.device_info();
    assert_eq!(lost, Err(libc::EINVAL));
    assert_eq!(info.num_irqs, 3);

    // The next client arrives while the table is full: accept() fails with EMFILE.
    drop(first);
    wait_for("the server to let the first client go", || {
        logged("client disconnected").then_some(())
    });
    hogs.extend(fill_fd_table());
    hogs.pop();
    let mut second = VfioClient::connect(devices.socket(0));
    wait_for("accept to fail with EMFILE", || {
        logged("accept failed").then_some(())
    });
    drop(hogs);

    second.version();
    let info = second.device_info();
    assert_eq!(info.num_irqs, 3);
    assert!(
        second
            .dma_map(0, PAGE, 0, DMA_READ | DMA_WRITE, Some(ram.as_raw_fd()))
            .is_ok(),
        "with fds free again, maps work"
    );
}
