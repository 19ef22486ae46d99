//! Which parts of a fixed-size array are free: the unwind maps hold the
//! tables of files that processes map now, and a file no process maps any
//! more gives its rows back for the next file, so that a host running for
//! days, its programs updated and its containers replaced, never runs out
//! of room for tables.

use std::collections::BTreeMap;

/// The free ranges of an array of `capacity` slots.
#[derive(Debug)]
pub struct FreeRanges {
    /// Free ranges by start, their lengths; never empty, never touching
    /// (released neighbours are joined).
    free: BTreeMap<u32, u32>,
}

impl FreeRanges {
    /// An array of `capacity` slots, all free.
    pub fn new(capacity: u32) -> Self {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        Self { free }
    }

    /// Takes `count` slots from the first free range with room (lowest
    /// address first, which keeps the used part of the array together):
    /// their start, or `None` if no range has room. Zero slots take none,
    /// and start at 0.
    pub fn take(&mut self, count: u32) -> Option<u32> {
        if count == 0 {
            return Some(0);
        }
        let (&start, &len) = self.free.iter().find(|(_, &len)| len >= count)?;
        self.free.remove(&start);
        if len > count {
            self.free.insert(start + count, len - count);
        }
        Some(start)
    }

    /// Gives back `count` slots from `start`, which [`Self::take`] gave.
    pub fn give_back(&mut self, start: u32, count: u32) {
        if count == 0 {
            return;
        }
        let (mut start, mut len) = (start, count);
        if let Some((&before, &before_len)) = self.free.range(..start).next_back() {
            if before + before_len == start {
                self.free.remove(&before);
                start = before;
                len += before_len;
            }
        }
        if let Some(after_len) = self.free.remove(&(start + len)) {
            len += after_len;
        }
        self.free.insert(start, len);
    }

    /// Free slots in all.
    #[cfg(test)]
    pub fn free(&self) -> u64 {
        self.free.values().map(|&len| u64::from(len)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_given_back_are_taken_again_and_join_their_neighbours() {
        let mut ranges = FreeRanges::new(100);
        assert_eq!(ranges.take(0), Some(0));
        let a = ranges.take(30).unwrap();
        let b = ranges.take(30).unwrap();
        let c = ranges.take(30).unwrap();
        assert_eq!((a, b, c), (0, 30, 60));
        assert_eq!(ranges.take(11), None, "10 left");
        ranges.give_back(b, 30);
        // The first range with room: b's.
        assert_eq!(ranges.take(20), Some(30));
        assert_eq!(ranges.take(11), None, "two ranges of 10 are not 20");
        ranges.give_back(30, 20);
        ranges.give_back(a, 30);
        // a, then b's 30 and its 10 left: one range of 60.
        assert_eq!(ranges.take(60), Some(0));
        ranges.give_back(0, 60);
        ranges.give_back(c, 30);
        assert_eq!(ranges.free(), 100);
        assert_eq!(ranges.take(100), Some(0), "all joined into one");
        assert_eq!(FreeRanges::new(0).take(1), None);
    }
}
