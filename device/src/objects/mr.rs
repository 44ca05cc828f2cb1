//! Memory regions: a protection domain, access rights and the translation of the MR's
//! virtual range onto guest pages.

use super::page_list::{GuestPages, Segments};
use vrnic_hw::{Access, ACCESS_SUPPORTED_MASK};

#[derive(Debug)]
pub struct Mr {
    /// The full memory key (`index << 8 | variant`); lkey and rkey.
    pub key: u32,
    pub pdn: u32,
    pub uctx: u32,
    pub iova: u64,
    pub length: u64,
    /// `vrnic_hw::ACCESS_*` bits.
    pub access: u32,
    pub pages: GuestPages,
    /// Offset of `iova` within the first page.
    pub first_offset: u64,
}

impl Mr {
    /// The guest pieces of `[addr, addr + len)` if that range lies inside the MR.
    pub fn range(&self, addr: u64, len: u64) -> Option<Segments<'_>> {
        let offset = addr.checked_sub(self.iova)?;
        if offset.checked_add(len)? > self.length {
            return None;
        }
        self.pages.segments(self.first_offset + offset, len)
    }

    pub fn allows(&self, access: u32) -> bool {
        self.access & access == access
    }
}

/// Access bits a region may have: known ones, and LOCAL_WRITE with any remote write
/// (REMOTE_WRITE, REMOTE_ATOMIC). REG_MR commands and work requests both check it.
pub fn valid_access(access: u32) -> bool {
    let remote_needs_local = u32::from(Access::RemoteWrite) | u32::from(Access::RemoteAtomic);
    access & !ACCESS_SUPPORTED_MASK == 0
        && (access & remote_needs_local == 0 || access & u32::from(Access::LocalWrite) != 0)
}

/// Splits a memory key into (table index, variant byte).
pub fn split_key(key: u32) -> (u32, u8) {
    (key >> 8, (key & 0xFF) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr() -> Mr {
        Mr {
            key: 0x105,
            pdn: 0,
            uctx: 1,
            iova: 0x7000_0100,
            length: 0x2000,
            access: 0x3,
            pages: GuestPages::list(vec![0x1000, 0x5000, 0x9000], 12),
            first_offset: 0x100,
        }
    }

    #[test]
    fn range_translates_inside_and_refuses_outside() {
        let mr = mr();
        let segs: Vec<_> = mr.range(0x7000_0f00, 0x200).unwrap().collect();
        assert_eq!(segs, vec![(0x1f00, 0x100), (0x5000, 0x100)]);
        assert!(mr.range(0x7000_0100, 0x2000).is_some());
        assert!(mr.range(0x7000_0100, 0x2001).is_none());
        assert!(mr.range(0x7000_00ff, 1).is_none());
        assert!(mr.range(u64::MAX, 2).is_none());
    }

    #[test]
    fn keys_split_into_index_and_variant() {
        assert_eq!(split_key(0x0012_3456), (0x1234, 0x56));
        assert!(mr().allows(0x1) && !mr().allows(0x4));
    }
}
