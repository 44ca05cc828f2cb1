//! Shared receive queues (SPEC "Shared receive queues"): a receive ring that the QPs created
//! with its srqn take their receive WQEs from, in index order.
//!
//! An SRQ lives in its device's object tables like every other object, and only QPs of that
//! device use it, so taking a WQE needs nothing but that device's lock. An XRC SRQ (SPEC
//! "XRC") is served by the XRC_TGT QPs of its domain, each request naming it, and completes
//! on a CQ of its own.

use super::queues::Ring;

#[derive(Debug)]
pub struct Srq {
    pub uctx: u32,
    /// Protection domain the receive SGEs are checked against.
    pub pdn: u32,
    pub ring: Ring,
    pub max_sge: u8,
    /// Doorbell page (of context `uctx`) and slot.
    pub db_page: u32,
    pub db_slot: u32,
    /// Free-running count of WQEs taken by QPs.
    pub ci: u32,
    /// The armed limit (0: not armed).
    pub limit: u32,
    /// A doorbell overflowed: the SRQ takes no more WQEs (SRQ_ERR was posted).
    pub error: bool,
    /// XRC SRQs: their domain and CQ. None for a basic SRQ.
    pub xrc: Option<XrcSrq>,
}

/// What makes an SRQ an XRC SRQ: the XRC domain whose TGT QPs serve it, and the CQ its
/// completions go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XrcSrq {
    pub xrcdn: u32,
    pub cqn: u32,
}

/// What taking a WQE from an SRQ found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// The WQE of this free-running index is now the taker's.
    Taken {
        index: u32,
        /// The armed limit was crossed: post SRQ_LIMIT_REACHED (the limit is disarmed).
        limit_reached: bool,
    },
    /// Nothing posted beyond what was taken.
    Empty,
    /// The producer index is more than the depth ahead: the SRQ has just failed.
    Overflow,
    /// The SRQ failed earlier.
    Failed,
}

impl Srq {
    /// Takes the next WQE given the producer index `pi` the driver last stored.
    pub fn take(&mut self, pi: u32) -> Take {
        if self.error {
            return Take::Failed;
        }
        let posted = pi.wrapping_sub(self.ci);
        if posted > self.ring.depth() {
            self.error = true;
            return Take::Overflow;
        }
        if posted == 0 {
            return Take::Empty;
        }
        let index = self.ci;
        self.ci = index.wrapping_add(1);
        let left = posted - 1;
        let limit_reached = self.limit > 0 && left < self.limit;
        if limit_reached {
            self.limit = 0;
        }
        Take::Taken {
            index,
            limit_reached,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::page_list::GuestPages;

    fn srq(depth_log2: u8) -> Srq {
        Srq {
            uctx: 1,
            pdn: 0,
            ring: Ring {
                pages: GuestPages::list(vec![0x1000], 12),
                depth_log2,
                entry_shift: 5,
            },
            max_sge: 1,
            db_page: 1,
            db_slot: 0,
            ci: 0,
            limit: 0,
            error: false,
            xrc: None,
        }
    }

    #[test]
    fn wqes_are_taken_in_index_order_until_none_is_posted() {
        let mut s = srq(2);
        let taken: Vec<Take> = (0..3).map(|_| s.take(2)).collect();
        assert_eq!(
            taken,
            vec![
                Take::Taken {
                    index: 0,
                    limit_reached: false
                },
                Take::Taken {
                    index: 1,
                    limit_reached: false
                },
                Take::Empty
            ]
        );
    }

    #[test]
    fn the_limit_fires_once_when_fewer_than_it_are_left_and_disarms() {
        let mut s = srq(3);
        s.limit = 2;
        let fired: Vec<bool> = (0..4)
            .map(|_| {
                matches!(
                    s.take(4),
                    Take::Taken {
                        limit_reached: true,
                        ..
                    }
                )
            })
            .collect();
        assert_eq!(fired, vec![false, false, true, false]);
        assert_eq!(s.limit, 0);
    }

    #[test]
    fn a_producer_index_beyond_the_depth_fails_the_srq_for_good() {
        let mut s = srq(1);
        assert_eq!(s.take(3), Take::Overflow);
        assert_eq!(s.take(1), Take::Failed);
    }
}
