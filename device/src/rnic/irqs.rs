//! MSI-X vectors: the eventfds QEMU gave us, one per vector.

use vmm_sys_util::eventfd::EventFd;
use vrnic_hw::MSIX_VECTORS;

#[derive(Default)]
pub struct Irqs {
    vectors: Vec<Option<EventFd>>,
}

impl Irqs {
    pub fn set(&mut self, start: u32, fds: Vec<Option<EventFd>>) -> Result<(), i32> {
        let end = (start as usize)
            .checked_add(fds.len())
            .ok_or(libc::EINVAL)?;
        if end > MSIX_VECTORS as usize {
            return Err(libc::EINVAL);
        }
        if self.vectors.len() < end {
            self.vectors.resize_with(end, || None);
        }
        for (i, fd) in fds.into_iter().enumerate() {
            self.vectors[start as usize + i] = fd;
        }
        Ok(())
    }

    pub fn signal(&self, vector: u16) {
        if let Some(Some(fd)) = self.vectors.get(usize::from(vector)) {
            if let Err(e) = fd.write(1) {
                log::error!("MSI-X vector {vector}: eventfd write failed: {e}");
            }
        }
    }

    pub fn clear(&mut self) {
        self.vectors.clear();
    }
}
