//! The memory key table: memory regions, fast-registration MRs and memory windows share one
//! space of keys (`index << 8 | variant`) in one table of MAX_MR entries (SPEC "Object
//! handles", "Memory keys"). A key names at most one of them, and only under its current
//! variant.

use super::mr::{split_key, Mr};
use super::page_list::Segments;
use super::{Generations, Objects, MAX_MTT_ENTRIES};
use vrnic_hw::{MwType, VendorErr};

/// One entry of the key table.
#[derive(Debug)]
pub enum Mkey {
    /// REG_MR: valid from the command until DEREG_MR.
    Mr(Mr),
    /// ALLOC_MR: FREE or VALID, changed by REG_MR and LOCAL_INV work requests.
    FastReg(FastRegMr),
    /// ALLOC_MW: a remote key for part of an MR once bound.
    Window(Window),
}

/// A fast-registration MR (kernel context only).
#[derive(Debug)]
pub struct FastRegMr {
    /// Its current key: the one ALLOC_MR returned, then that of its last REG_MR.
    pub key: u32,
    pub pdn: u32,
    pub uctx: u32,
    /// Most pages one REG_MR work request may give it.
    pub max_pages: u32,
    /// VALID: the registration of its last REG_MR (whose key is `key`). FREE: None.
    pub valid: Option<Mr>,
}

/// A memory window.
#[derive(Debug)]
pub struct Window {
    /// Its current rkey: the one ALLOC_MW returned, then that of its last BIND_MW.
    pub key: u32,
    pub pdn: u32,
    pub uctx: u32,
    pub kind: MwType,
    /// Bound (type 2 windows: VALID) or not (FREE).
    pub binding: Option<Binding>,
}

/// What a bound window gives: part of an MR, with remote access rights of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// The MR's key (DEREG_MR of it is BUSY while the binding lasts).
    pub mr_key: u32,
    pub addr: u64,
    pub length: u64,
    /// REMOTE_* bits.
    pub access: u32,
    /// Type 2: the only QP whose incoming requests may use the window.
    pub qpn: Option<u32>,
}

impl Mkey {
    /// The key the entry answers to now.
    pub fn key(&self) -> u32 {
        match self {
            Mkey::Mr(mr) => mr.key,
            Mkey::FastReg(f) => f.key,
            Mkey::Window(w) => w.key,
        }
    }

    pub fn pdn(&self) -> u32 {
        match self {
            Mkey::Mr(mr) => mr.pdn,
            Mkey::FastReg(f) => f.pdn,
            Mkey::Window(w) => w.pdn,
        }
    }

    pub fn uctx(&self) -> u32 {
        match self {
            Mkey::Mr(mr) => mr.uctx,
            Mkey::FastReg(f) => f.uctx,
            Mkey::Window(w) => w.uctx,
        }
    }

    /// The memory region the key names as an lkey or rkey: a REG_MR region, or a VALID
    /// fast-registration MR. Windows are never lkeys.
    pub fn region(&self) -> Option<&Mr> {
        match self {
            Mkey::Mr(mr) => Some(mr),
            Mkey::FastReg(f) => f.valid.as_ref(),
            Mkey::Window(_) => None,
        }
    }

    /// Page-list entries the entry holds against the device's budget. A fast-registration
    /// MR holds its `max_pages` from ALLOC_MR on, so a REG_MR work request never needs more.
    pub fn entries_held(&self) -> usize {
        match self {
            Mkey::Mr(mr) => mr.pages.entries_held(),
            Mkey::FastReg(f) => f.max_pages as usize,
            Mkey::Window(_) => 0,
        }
    }

    /// A window bound to the MR of key `mr_key`.
    pub fn binds(&self, mr_key: u32) -> bool {
        matches!(self, Mkey::Window(Window { binding: Some(b), .. }) if b.mr_key == mr_key)
    }
}

/// What an rkey gives a target QP: an MR's pages, through a window's range and access if
/// the key is a window's.
#[derive(Debug, Clone, Copy)]
pub struct RemoteKey<'a> {
    mr: &'a Mr,
    window: Option<(&'a Window, Binding)>,
}

impl<'a> RemoteKey<'a> {
    pub fn pdn(&self) -> u32 {
        match self.window {
            Some((w, _)) => w.pdn,
            None => self.mr.pdn,
        }
    }

    /// Whether the key grants every `access` bit (a window: its own rights only).
    pub fn allows(&self, access: u32) -> bool {
        match self.window {
            Some((_, b)) => b.access & access == access,
            None => self.mr.allows(access),
        }
    }

    /// The guest pieces of `[addr, addr + len)` if that range lies inside what the key
    /// covers (a window: inside its range, which lies inside its MR).
    pub fn range(&self, addr: u64, len: u64) -> Option<Segments<'a>> {
        if let Some((_, b)) = self.window {
            let offset = addr.checked_sub(b.addr)?;
            if offset.checked_add(len)? > b.length {
                return None;
            }
        }
        self.mr.range(addr, len)
    }
}

impl Objects {
    /// The key table entry at `key`'s index, whatever its current variant.
    pub fn mkey_at(&self, key: u32) -> Option<&Mkey> {
        self.keys.get(index_of(key))
    }

    pub fn mkey_at_mut(&mut self, key: u32) -> Option<&mut Mkey> {
        self.keys.get_mut(index_of(key))
    }

    /// The entry that answers to `key` now (index and variant both match).
    pub fn mkey(&self, key: u32) -> Option<&Mkey> {
        self.mkey_at(key).filter(|e| e.key() == key)
    }

    pub fn mkey_mut(&mut self, key: u32) -> Option<&mut Mkey> {
        self.mkey_at_mut(key).filter(|e| e.key() == key)
    }

    /// The memory region `key` names as an lkey or rkey (an MR, or a VALID fast-registration
    /// MR under its current key), if any.
    pub fn mr_by_key(&self, key: u32) -> Option<&Mr> {
        self.mkey(key)?.region()
    }

    /// Looks up `rkey` for a request arriving at QP `qpn`: an MR, a VALID fast-registration
    /// MR, or a bound window (type 2: bound to `qpn`), under exactly its current key. PD,
    /// access and bounds are the caller's to check.
    pub fn remote_key(&self, rkey: u32, qpn: u32) -> Result<RemoteKey<'_>, VendorErr> {
        match self.mkey(rkey).ok_or(VendorErr::BadRkey)? {
            Mkey::Window(w) => {
                let b = w.binding.ok_or(VendorErr::BadRkey)?;
                if b.qpn.is_some_and(|bound| bound != qpn) {
                    return Err(VendorErr::MkeyState);
                }
                // A bound window's MR stays registered: DEREG_MR is BUSY meanwhile.
                let mr = self.mr_by_key(b.mr_key).ok_or(VendorErr::BadRkey)?;
                Ok(RemoteKey {
                    mr,
                    window: Some((w, b)),
                })
            }
            other => other
                .region()
                .map(|mr| RemoteKey { mr, window: None })
                .ok_or(VendorErr::BadRkey),
        }
    }

    /// A free key index and the key an object created there gets (the variant changes
    /// every time an index is reused).
    pub fn next_key(&mut self) -> Option<(usize, u32)> {
        let index = self.keys.free_index(1)?;
        let variant = Generations::bump(&mut self.generations.mr, index);
        Some((index, (index as u32) << 8 | u32::from(variant)))
    }

    /// Gives the entry at `key`'s index the key `key` (a REG_MR or BIND_MW work request
    /// chose its variant). The index's next generation follows it, so a later object there
    /// does not get this key back at once.
    pub fn rekey(&mut self, key: u32) {
        let (index, variant) = split_key(key);
        Generations::set(&mut self.generations.mr, index as usize, variant);
        match self.keys.get_mut(index) {
            Some(Mkey::Mr(mr)) => mr.key = key,
            Some(Mkey::FastReg(f)) => f.key = key,
            Some(Mkey::Window(w)) => w.key = key,
            None => {}
        }
    }

    /// Whether an entry holding `entries` more page-list entries fits the device's budget.
    pub fn mtt_room_for(&self, entries: usize) -> bool {
        self.mtt_entries.saturating_add(entries) <= MAX_MTT_ENTRIES
    }

    pub fn insert_key(&mut self, index: usize, entry: Mkey) {
        self.mtt_entries += entry.entries_held();
        self.keys.insert_at(index, entry);
    }

    pub fn insert_mr(&mut self, index: usize, mr: Mr) {
        self.insert_key(index, Mkey::Mr(mr));
    }

    /// Removes the entry at `key`'s index (whatever its variant: the caller checked it).
    pub fn remove_key(&mut self, key: u32) -> Option<Mkey> {
        let entry = self.keys.remove(index_of(key))?;
        self.mtt_entries -= entry.entries_held();
        Some(entry)
    }

    /// Every entry of the table.
    pub fn mkeys(&self) -> impl Iterator<Item = &Mkey> {
        self.keys.iter().map(|(_, e)| e)
    }

    /// Memory windows that exist (at most MAX_MW).
    pub fn windows(&self) -> usize {
        self.mkeys()
            .filter(|e| matches!(e, Mkey::Window(_)))
            .count()
    }
}

/// The index part of a key (the table slot).
pub fn index_of(key: u32) -> u32 {
    split_key(key).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::page_list::GuestPages;

    fn region(key: u32) -> Mr {
        Mr {
            key,
            pdn: 1,
            uctx: 0,
            iova: 0x1000,
            length: 0x2000,
            access: 0x1F,
            pages: GuestPages::list(vec![0x10_0000, 0x20_0000], 12),
            first_offset: 0,
        }
    }

    #[test]
    fn a_fast_registration_mr_answers_only_to_its_current_key_while_valid() {
        let mut o = Objects::new();
        let (index, key) = o.next_key().unwrap();
        o.insert_key(
            index,
            Mkey::FastReg(FastRegMr {
                key,
                pdn: 1,
                uctx: 0,
                max_pages: 2,
                valid: None,
            }),
        );
        assert!(o.mr_by_key(key).is_none(), "FREE: no lkey");
        let new_key = (key & !0xFF) | 0x42;

        o.rekey(new_key);
        if let Some(Mkey::FastReg(f)) = o.mkey_at_mut(new_key) {
            f.valid = Some(region(new_key));
        }

        assert!(o.mr_by_key(new_key).is_some());
        assert!(o.mr_by_key(key).is_none(), "the old variant is retired");
        assert_eq!(o.remote_key(key, 7).err(), Some(VendorErr::BadRkey));
        o.remove_key(new_key);
        let (again, next) = o.next_key().unwrap();
        assert_eq!(again, index);
        assert_ne!(
            next, new_key,
            "the index's next key follows the chosen variant"
        );
    }

    #[test]
    fn a_window_gives_its_range_and_rights_and_a_type_2_one_only_to_its_qp() {
        let mut o = Objects::new();
        let (mr_index, mr_key) = o.next_key().unwrap();
        o.insert_mr(mr_index, region(mr_key));
        let (index, rkey) = o.next_key().unwrap();
        let binding = Binding {
            mr_key,
            addr: 0x1800,
            length: 0x1000,
            access: 0x4,
            qpn: Some(9),
        };
        o.insert_key(
            index,
            Mkey::Window(Window {
                key: rkey,
                pdn: 1,
                uctx: 0,
                kind: MwType::Type2,
                binding: Some(binding),
            }),
        );

        let key = o.remote_key(rkey, 9).unwrap();
        assert!(key.allows(0x4) && !key.allows(0x2));
        assert_eq!(
            key.range(0x1800, 0x1000).map(|s| s.collect::<Vec<_>>()),
            Some(vec![(0x10_0800, 0x800), (0x20_0000, 0x800)])
        );
        assert!(key.range(0x17ff, 1).is_none());
        assert!(key.range(0x2000, 0x801).is_none());
        assert_eq!(o.remote_key(rkey, 8).err(), Some(VendorErr::MkeyState));
        assert!(o.mr_by_key(rkey).is_none(), "a window is never an lkey");
        assert!(o.mkeys().any(|e| e.binds(mr_key)));
    }
}
