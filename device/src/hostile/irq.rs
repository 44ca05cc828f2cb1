//! Spurious interrupts: an MSI-X vector raised with nothing new for it.

use super::{Class, Hostile, Kind};
use crate::rnic::irqs::PendingIrqs;
use vrnic_hw::MSIX_VECTORS;

impl Hostile {
    /// Maybe raises one more vector in `pending` (called where the device raises its own).
    pub fn irq(&self, pending: &mut PendingIrqs) {
        let Some(mut st) = self.active() else {
            return;
        };
        if st.draw(Class::Irq) != Some(Kind::IrqSpurious) {
            return;
        }
        let vector = st.rng.below(u64::from(MSIX_VECTORS)) as u16;
        pending.raise(vector);
        st.written(
            &self.device,
            Kind::IrqSpurious,
            format_args!("vector {vector} raised"),
        );
    }
}
