//! MSI-X vectors: the eventfds the VMM gave us, one per vector, behind their own leaf lock
//! so that SET_IRQS and interrupt delivery never wait for a device lock.
//!
//! Work done under the device lock only records which vectors fire (`PendingIrqs`); they
//! are signalled when the lock is released (`StateGuard`'s drop). The eventfds are
//! non-blocking (the vfio-user server makes them so): a full counter means the interrupt is
//! already pending, and is not an error.

use super::lock_order;
use crate::ratelimit::WarnLimiter;
use std::sync::{Mutex, PoisonError};
use vmm_sys_util::eventfd::EventFd;
use vrnic_hw::MSIX_VECTORS;

/// Vectors to signal, one bit each.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PendingIrqs(u32);

impl PendingIrqs {
    pub fn raise(&mut self, vector: u16) {
        if u32::from(vector) < MSIX_VECTORS {
            self.0 |= 1 << vector;
        }
    }

    pub fn take(&mut self) -> PendingIrqs {
        std::mem::take(self)
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// The vectors, one bit each.
    pub fn bits(&self) -> u32 {
        self.0
    }
}

#[derive(Default)]
pub struct IrqLines {
    lines: Mutex<Lines>,
}

#[derive(Default)]
struct Lines {
    vectors: Vec<Option<EventFd>>,
    warn: WarnLimiter,
}

impl IrqLines {
    pub fn set(&self, start: u32, fds: Vec<Option<EventFd>>) -> Result<(), i32> {
        let end = (start as usize)
            .checked_add(fds.len())
            .ok_or(libc::EINVAL)?;
        if end > MSIX_VECTORS as usize {
            return Err(libc::EINVAL);
        }
        let mut lines = self.lock();
        if lines.vectors.len() < end {
            lines.vectors.resize_with(end, || None);
        }
        for (i, fd) in fds.into_iter().enumerate() {
            lines.vectors[start as usize + i] = fd;
        }
        Ok(())
    }

    /// Signals every vector in `pending`. Never blocks; call without a device lock.
    pub fn signal(&self, pending: PendingIrqs, who: &str) {
        if pending.is_empty() {
            return;
        }
        lock_order::assert_no_device_lock("interrupt delivery");
        let mut lines = self.lock();
        let Lines { vectors, warn } = &mut *lines;
        for (vector, fd) in vectors.iter().enumerate() {
            let Some(fd) = fd else { continue };
            if pending.0 & (1 << vector) == 0 {
                continue;
            }
            match fd.write(1) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    if warn.allow(who) {
                        log::warn!("{who}: MSI-X vector {vector}: eventfd write failed: {e}");
                    }
                }
            }
        }
    }

    pub fn clear(&self) {
        self.lock().vectors.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
