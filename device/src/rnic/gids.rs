//! GIDs of RoCE-mode devices: each device's GID table (device state, set by SET_GID) and
//! the process-wide directory from GID to device that routing reads (SPEC "Link modes").
//!
//! The directory is a leaf structure (lock rule 2): SET_GID and reset update it while they
//! hold their device's lock; route look-ups read it with no device lock held. A GID that
//! several devices hold names the one that set it first; when that one lets it go, the
//! next in line takes over.

use crate::addr::Gid;
use std::collections::HashMap;
use std::sync::Mutex;
use vrnic_hw::GID_TABLE_LEN;

/// Index of a device in its fabric.
pub type DeviceId = usize;

/// One device's GID table: GID_TABLE_LEN entries, empty after reset.
#[derive(Debug, Clone, Default)]
pub struct GidTable {
    entries: [Option<Gid>; GID_TABLE_LEN as usize],
}

impl GidTable {
    /// The GID at `index`, if that entry is set.
    pub fn get(&self, index: u8) -> Option<Gid> {
        self.entries.get(usize::from(index)).copied().flatten()
    }

    /// Sets (Some) or clears (None) entry `index`; returns what it held. Out-of-range
    /// indexes change nothing.
    fn replace(&mut self, index: u8, gid: Option<Gid>) -> Option<Gid> {
        let entry = self.entries.get_mut(usize::from(index))?;
        std::mem::replace(entry, gid)
    }

    fn take_all(&mut self) -> Vec<(u8, Gid)> {
        let mut out = Vec::new();
        for (i, e) in self.entries.iter_mut().enumerate() {
            if let (Some(gid), Ok(i)) = (e.take(), u8::try_from(i)) {
                out.push((i, gid));
            }
        }
        out
    }
}

/// Which devices hold each GID, in the order they set it.
#[derive(Debug, Default)]
pub struct GidDirectory {
    holders: Mutex<HashMap<Gid, Vec<(DeviceId, u8)>>>,
}

impl GidDirectory {
    fn holders(&self) -> std::sync::MutexGuard<'_, HashMap<Gid, Vec<(DeviceId, u8)>>> {
        // A panic elsewhere must not take routing down with it.
        self.holders.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device a packet to `gid` goes to: the first that set it.
    pub fn lookup(&self, gid: &Gid) -> Option<DeviceId> {
        self.holders()
            .get(gid)
            .and_then(|h| h.first())
            .map(|(dev, _)| *dev)
    }

    fn add(&self, gid: Gid, dev: DeviceId, index: u8) {
        self.holders().entry(gid).or_default().push((dev, index));
    }

    fn remove(&self, gid: &Gid, dev: DeviceId, index: u8) {
        let mut holders = self.holders();
        if let Some(h) = holders.get_mut(gid) {
            h.retain(|&held| held != (dev, index));
            if h.is_empty() {
                holders.remove(gid);
            }
        }
    }
}

/// A device's table together with the directory it is published in.
pub struct Gids<'a> {
    pub table: &'a mut GidTable,
    pub directory: &'a GidDirectory,
    pub dev: DeviceId,
}

impl Gids<'_> {
    /// Sets (Some) or clears (None) entry `index`, in the table and the directory.
    /// Out-of-range indexes change nothing (SET_GID refuses them before).
    pub fn set(&mut self, index: u8, gid: Option<Gid>) {
        if u32::from(index) >= GID_TABLE_LEN {
            return;
        }
        if let Some(old) = self.table.replace(index, gid) {
            self.directory.remove(&old, self.dev, index);
        }
        if let Some(gid) = gid {
            self.directory.add(gid, self.dev, index);
        }
    }

    /// Clears every entry (device reset).
    pub fn clear(&mut self) {
        for (index, gid) in self.table.take_all() {
            self.directory.remove(&gid, self.dev, index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(last: u8) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = last;
        Gid(g)
    }

    #[test]
    fn a_gid_held_twice_routes_to_the_first_setter_until_it_lets_go() {
        let dir = GidDirectory::default();
        let (mut t0, mut t1) = (GidTable::default(), GidTable::default());
        let mut a = Gids {
            table: &mut t0,
            directory: &dir,
            dev: 0,
        };
        a.set(3, Some(gid(1)));
        let mut b = Gids {
            table: &mut t1,
            directory: &dir,
            dev: 1,
        };
        b.set(0, Some(gid(1)));
        assert_eq!(dir.lookup(&gid(1)), Some(0));

        let mut a = Gids {
            table: &mut t0,
            directory: &dir,
            dev: 0,
        };
        a.set(3, Some(gid(2)));

        assert_eq!(dir.lookup(&gid(1)), Some(1), "replaced: the next holder");
        assert_eq!(dir.lookup(&gid(2)), Some(0));
        assert_eq!(t0.get(3), Some(gid(2)));
    }

    #[test]
    fn clearing_a_table_removes_its_gids_from_the_directory() {
        let dir = GidDirectory::default();
        let mut t = GidTable::default();
        let mut g = Gids {
            table: &mut t,
            directory: &dir,
            dev: 5,
        };
        g.set(0, Some(gid(1)));
        g.set(15, Some(gid(2)));
        g.set(16, Some(gid(3)));
        g.set(0, None);
        assert_eq!(dir.lookup(&gid(1)), None);
        assert_eq!(dir.lookup(&gid(3)), None, "index 16 is outside the table");

        g.clear();

        assert_eq!(dir.lookup(&gid(2)), None);
        assert_eq!(t.get(15), None);
    }
}
