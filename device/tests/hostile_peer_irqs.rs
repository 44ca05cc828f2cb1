//! A hostile socket peer against interrupt delivery: SET_IRQS takes eventfds only, and
//! makes them non-blocking, so an eventfd whose counter the peer saturated can neither
//! block its device nor, through the shared poller, any other device of the process.

mod harness;

use std::os::fd::AsRawFd;

use harness::memory::{memfd, PAGE};
use harness::pair::{loopback_sides, transfer_and_verify, Ends};
use harness::vfio::IRQ_MSIX;
use harness::*;
use vmm_sys_util::eventfd::EventFd;

/// The async EQ's vector, which every admin completion signals too.
const ADMIN_VECTOR: u16 = 0;

fn status_flags(fd: &impl AsRawFd) -> i32 {
    // SAFETY: F_GETFL takes no argument and only reads the file's status flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    assert!(flags >= 0, "F_GETFL: {}", std::io::Error::last_os_error());
    flags
}

#[test]
fn set_irqs_with_anything_but_an_eventfd_is_einval_and_keeps_the_old_vector() {
    let devices = TestDevices::start(1);
    let mut d = devices.driver(0);
    let pipe = pipe();
    let ram_like = memfd(c"vrnic-not-an-eventfd", PAGE);
    let vector = u32::from(ADMIN_VECTOR);

    let with_pipe = d.vfio.set_irqs(IRQ_MSIX, vector, &[pipe[1].as_raw_fd()]);
    let with_memfd = d.vfio.set_irqs(IRQ_MSIX, vector, &[ram_like.as_raw_fd()]);

    assert_eq!(with_pipe, Err(libc::EINVAL));
    assert_eq!(with_memfd, Err(libc::EINVAL));
    d.take_irqs(ADMIN_VECTOR);
    d.query_device();
    assert!(
        d.wait_irq(ADMIN_VECTOR) >= 1,
        "the old eventfd still signals"
    );
}

#[test]
fn saturated_blocking_eventfd_blocks_neither_its_device_nor_another() {
    let devices = TestDevices::start(2);
    let mut victim = devices.driver(0);
    let mut bystander = devices.driver(1);
    // Blocking, as a hostile peer would pass it, and one below the counter's maximum:
    // a blocking write of 1 would wait for a reader forever.
    let saturated = EventFd::new(0).unwrap();
    saturated.write(u64::MAX - 1).unwrap();

    victim
        .vfio
        .set_irqs(IRQ_MSIX, u32::from(ADMIN_VECTOR), &[saturated.as_raw_fd()])
        .expect("SET_IRQS with an eventfd");

    assert_ne!(status_flags(&saturated) & libc::O_NONBLOCK, 0);
    victim.query_device();
    victim.query_device();
    let (mut a, mut b) = loopback_sides(&mut bystander);
    transfer_and_verify(&mut Ends::One(&mut bystander), &mut a, &mut b, 0x1e5);
    let (mut a, mut b) = loopback_sides(&mut victim);
    transfer_and_verify(&mut Ends::One(&mut victim), &mut a, &mut b, 0x1e6);
}
