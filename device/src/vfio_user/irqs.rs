//! Interrupt commands: DEVICE_GET_IRQ_INFO and DEVICE_SET_IRQS.

use std::os::fd::OwnedFd;

use log::debug;
use vfio_bindings::bindings::vfio;
use vmm_sys_util::eventfd::EventFd;

use super::protocol::{IrqInfo, IrqSet, NUM_IRQ_INDEXES};
use super::ratelimit::client_warn;
use super::scm::into_eventfd;
use super::session::{Errno, Handled, Reply, Session};

impl Session<'_, '_, '_> {
    /// DEVICE_GET_IRQ_INFO for INTx, MSI and MSI-X: eventfd-capable, not
    /// maskable, resizable (QEMU enables MSI-X vectors one at a time).
    pub(crate) fn irq_info(&mut self, p: &[u8]) -> Handled {
        let req = IrqInfo::decode(p).map_err(|_| Errno::EINVAL)?;
        if req.argsz < IrqInfo::SIZE || req.index >= NUM_IRQ_INDEXES {
            return Err(Errno::EINVAL);
        }
        let count = self.model().irq_count(req.index);
        let info = IrqInfo {
            argsz: IrqInfo::SIZE,
            flags: vfio::VFIO_IRQ_INFO_EVENTFD,
            index: req.index,
            count,
        };
        Ok(Reply::with(info.encode()))
    }

    /// DEVICE_SET_IRQS, ACTION_TRIGGER only:
    /// - DATA_NONE with count 0: disable every vector of the index;
    /// - DATA_EVENTFD with `count` fds: vectors `start..start+count` signal
    ///   those eventfds;
    /// - DATA_EVENTFD without fds: disable those vectors (QEMU's "start 0
    ///   count 1, no fd" when it enables MSI-X);
    /// - DATA_EVENTFD with count 0: nothing.
    ///
    /// Every fd must be an eventfd (EINVAL otherwise); it is made
    /// non-blocking, so signalling a vector never blocks the device.
    /// MASK/UNMASK actions, DATA_BOOL and client-triggered interrupts are
    /// refused with ENOTSUP.
    pub(crate) fn set_irqs(&mut self, p: &[u8], fds: Vec<OwnedFd>) -> Handled {
        let req = IrqSet::decode(p).map_err(|_| Errno::EINVAL)?;
        let data = req.flags & vfio::VFIO_IRQ_SET_DATA_TYPE_MASK;
        let action = req.flags & vfio::VFIO_IRQ_SET_ACTION_TYPE_MASK;
        let known = vfio::VFIO_IRQ_SET_DATA_TYPE_MASK | vfio::VFIO_IRQ_SET_ACTION_TYPE_MASK;
        if req.index >= NUM_IRQ_INDEXES
            || req.flags & !known != 0
            || data.count_ones() != 1
            || action.count_ones() != 1
        {
            client_warn!(
                self.warn,
                self.name,
                "SET_IRQS index {} flags {:#x} is malformed",
                req.index,
                req.flags
            );
            return Err(Errno::EINVAL);
        }
        if action != vfio::VFIO_IRQ_SET_ACTION_TRIGGER {
            return Err(Errno::ENOTSUP);
        }
        let irq_count = self.model().irq_count(req.index);
        let vectors: Vec<Option<EventFd>> = match data {
            vfio::VFIO_IRQ_SET_DATA_NONE if req.count == 0 && fds.is_empty() => {
                debug!(
                    "{}: IRQ index {}: disable all {irq_count} vectors",
                    self.name, req.index
                );
                return self.apply_irqs(req.index, 0, (0..irq_count).map(|_| None).collect());
            }
            vfio::VFIO_IRQ_SET_DATA_EVENTFD => {
                let in_range = req
                    .start
                    .checked_add(req.count)
                    .is_some_and(|end| end <= irq_count);
                let count = usize::try_from(req.count).map_err(|_| Errno::EINVAL)?;
                if !in_range || (!fds.is_empty() && fds.len() != count) {
                    client_warn!(
                        self.warn,
                        self.name,
                        "SET_IRQS index {} vectors {}+{} with {} fds (index has {irq_count})",
                        req.index,
                        req.start,
                        req.count,
                        fds.len()
                    );
                    return Err(Errno::EINVAL);
                }
                if count == 0 {
                    return Ok(Reply::empty());
                }
                if fds.is_empty() {
                    (0..count).map(|_| None).collect()
                } else {
                    self.take_eventfds(req.index, fds)?
                }
            }
            _ => return Err(Errno::ENOTSUP),
        };
        debug!(
            "{}: IRQ index {} vectors {}+{}: {}",
            self.name,
            req.index,
            req.start,
            req.count,
            if vectors.iter().any(Option::is_some) {
                "eventfds"
            } else {
                "disabled"
            }
        );
        self.apply_irqs(req.index, req.start, vectors)
    }

    /// The interrupt fds of one SET_IRQS: each must be an eventfd, and is
    /// made non-blocking (see `scm::into_eventfd`). Anything else is EINVAL.
    fn take_eventfds(
        &mut self,
        index: u32,
        fds: Vec<OwnedFd>,
    ) -> Result<Vec<Option<EventFd>>, Errno> {
        fds.into_iter()
            .map(|fd| match into_eventfd(fd) {
                Ok(efd) => Ok(Some(efd)),
                Err(e) => {
                    client_warn!(self.warn, self.name, "SET_IRQS index {index} refused: {e}");
                    Err(Errno::EINVAL)
                }
            })
            .collect()
    }

    fn apply_irqs(&mut self, index: u32, start: u32, vectors: Vec<Option<EventFd>>) -> Handled {
        self.model()
            .set_irqs(index, start, vectors)
            .map_err(Errno::from_model)?;
        Ok(Reply::empty())
    }
}
