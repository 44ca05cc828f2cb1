//! A bounded table of objects addressed by small integer handles.

/// Objects of one kind, each at the index the table chose for it.
#[derive(Debug)]
pub struct Table<T> {
    slots: Vec<Option<T>>,
    limit: usize,
    live: usize,
}

impl<T> Table<T> {
    pub fn new(limit: usize) -> Self {
        Table {
            slots: Vec::new(),
            limit,
            live: 0,
        }
    }

    /// The lowest free index at or above `first`, without taking it.
    pub fn free_index(&self, first: usize) -> Option<usize> {
        if self.live >= self.limit {
            return None;
        }
        (first..first + self.limit + 1).find(|i| self.slots.get(*i).is_none_or(|s| s.is_none()))
    }

    /// The first free index at or after `cursor`, wrapping around to 0.
    pub fn free_index_from(&self, cursor: usize) -> Option<usize> {
        if self.live >= self.limit {
            return None;
        }
        let start = cursor % self.limit.max(1);
        (start..self.limit)
            .chain(0..start)
            .find(|i| self.slots.get(*i).is_none_or(|s| s.is_none()))
    }

    /// Stores `value` at `index` (which must be free, e.g. from `free_index`).
    pub fn insert_at(&mut self, index: usize, value: T) {
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, || None);
        }
        if self.slots[index].replace(value).is_none() {
            self.live += 1;
        }
    }

    pub fn get(&self, index: u32) -> Option<&T> {
        self.slots.get(index as usize)?.as_ref()
    }

    pub fn get_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slots.get_mut(index as usize)?.as_mut()
    }

    pub fn remove(&mut self, index: u32) -> Option<T> {
        let value = self.slots.get_mut(index as usize)?.take();
        if value.is_some() {
            self.live -= 1;
        }
        value
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (i as u32, v)))
    }

    /// The objects at index `start` and above, lowest index first.
    pub fn iter_from(&self, start: u32) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .skip(start as usize)
            .filter_map(|(i, s)| s.as_ref().map(|v| (i as u32, v)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.as_mut().map(|v| (i as u32, v)))
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn clear(&mut self) {
        self.slots.clear();
        self.live = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn table_reuses_lowest_free_index_and_enforces_its_limit() {
        let mut t = Table::new(2);
        let a = t.free_index(0).unwrap();
        t.insert_at(a, "a");
        let b = t.free_index(0).unwrap();
        t.insert_at(b, "b");
        assert_eq!((a, b), (0, 1));
        assert_eq!(t.free_index(0), None);
        assert_eq!(t.remove(0), Some("a"));
        assert_eq!(t.free_index(0), Some(0));
        assert_eq!(t.get(1), Some(&"b"));
        assert_eq!(t.get(7), None);
    }
}
