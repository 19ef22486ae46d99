//! Files kept copied and indexed between the intervals of `stoke
//! continuous`, within a budget of memory.
//!
//! A big program sampled in every interval (a container host's dockerd,
//! megabytes of symbols) has new addresses in most intervals, in functions
//! not named before: copying and indexing it again each time would be most
//! of what `stoke continuous` costs on such a host. A recording named once
//! keeps nothing (budget 0): one file at a time takes memory.

use std::collections::HashMap;

use blazesym::symbolize::Symbolizer as BlazeSymbolizer;

use super::copy::Copy;
use crate::process::image::FileVersion;

/// How many intervals a file no address was named in stays prepared.
const KEPT_UNUSED_INTERVALS: u64 = 6;

/// A file's copy, and the blazesym instance that has it indexed.
pub struct Prepared {
    pub copy: Copy,
    pub blazesym: BlazeSymbolizer,
    /// What the copy takes ([`Copy::allocated_bytes`]).
    bytes: u64,
    last_used: u64,
}

impl Prepared {
    pub fn new(copy: Copy, blazesym: BlazeSymbolizer) -> Self {
        Self {
            bytes: copy.allocated_bytes(),
            copy,
            blazesym,
            last_used: 0,
        }
    }
}

/// The prepared files, by version.
#[derive(Default)]
pub struct PreparedFiles {
    /// Most bytes of copies kept.
    budget: u64,
    bytes: u64,
    files: HashMap<FileVersion, Prepared>,
    interval: u64,
}

impl PreparedFiles {
    /// Keeps files within `budget` bytes of copies.
    pub fn with_budget(budget: u64) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    /// The file `version` prepared, if kept.
    pub fn get(&mut self, version: &FileVersion) -> Option<&Prepared> {
        let prepared = self.files.get_mut(version)?;
        prepared.last_used = self.interval;
        Some(prepared)
    }

    /// Forgets the files least recently used until a copy of `bytes` fits
    /// the budget beside those left; none if it alone exceeds it (it will
    /// not be kept). Called before a new copy is mapped and indexed, so that
    /// stoke's memory peaks at the budget, not at the budget and a file.
    pub fn make_room(&mut self, bytes: u64) {
        if bytes > self.budget {
            return;
        }
        while self.bytes + bytes > self.budget {
            let Some(oldest) = self
                .files
                .iter()
                .min_by_key(|(_, kept)| kept.last_used)
                .map(|(version, _)| *version)
            else {
                break;
            };
            self.forget(&oldest);
        }
    }

    /// Keeps `prepared` as `version`, in place of the files least recently
    /// used if the budget is short; not at all if it alone exceeds it.
    pub fn keep(&mut self, version: FileVersion, mut prepared: Prepared) {
        if self.budget == 0 || prepared.bytes > self.budget {
            return;
        }
        self.make_room(prepared.bytes);
        prepared.last_used = self.interval;
        self.bytes += prepared.bytes;
        if let Some(replaced) = self.files.insert(version, prepared) {
            self.bytes -= replaced.bytes;
        }
    }

    /// Ends an interval: forgets the files unused for
    /// [`KEPT_UNUSED_INTERVALS`].
    pub fn end_interval(&mut self) {
        let stale: Vec<FileVersion> = self
            .files
            .iter()
            .filter(|(_, kept)| self.interval - kept.last_used >= KEPT_UNUSED_INTERVALS)
            .map(|(version, _)| *version)
            .collect();
        for version in stale {
            self.forget(&version);
        }
        self.interval += 1;
    }

    fn forget(&mut self, version: &FileVersion) {
        if let Some(forgotten) = self.files.remove(version) {
            self.bytes -= forgotten.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;
    use crate::symbolize::{copy, tests::own_file_at};

    #[test]
    fn files_are_kept_within_the_budget_the_least_recently_used_going_first() {
        let here = files_are_kept_within_the_budget_the_least_recently_used_going_first as *const ()
            as u64;
        let (file, _) = own_file_at(here);
        let prepare = || {
            let copy = copy::for_blazesym(&file, false).unwrap();
            Prepared::new(copy, BlazeSymbolizer::new())
        };
        let one = prepare().bytes;
        assert!(one > 0);
        let version = |n: u64| FileVersion::of(&File::open("/proc/self/exe").unwrap(), (n, n));
        let version = |n| version(n).unwrap();

        let mut kept = PreparedFiles::with_budget(2 * one + one / 2);
        kept.keep(version(1), prepare());
        kept.end_interval();
        kept.keep(version(2), prepare());
        kept.end_interval();
        assert!(kept.get(&version(1)).is_some());
        // Over the budget: 2, used least recently, goes.
        kept.keep(version(3), prepare());
        assert!(kept.get(&version(2)).is_none());
        assert!(kept.get(&version(1)).is_some() && kept.get(&version(3)).is_some());
        assert_eq!(kept.bytes, 2 * one);
        // Room for a new copy is made before it is indexed: 1 goes.
        kept.end_interval();
        assert!(kept.get(&version(3)).is_some());
        kept.make_room(one);
        assert_eq!(kept.bytes, one);
        assert!(
            kept.get(&version(1)).is_none(),
            "the least recently used kept"
        );
        // The interval they were used in, then the unused ones.
        for _ in 0..=KEPT_UNUSED_INTERVALS {
            kept.end_interval();
        }
        assert!(kept.files.is_empty(), "unused files kept");
        assert_eq!(kept.bytes, 0);

        let mut none = PreparedFiles::default();
        none.keep(version(1), prepare());
        assert!(none.get(&version(1)).is_none(), "kept without a budget");
        let mut small = PreparedFiles::with_budget(one - 1);
        small.keep(version(1), prepare());
        assert!(small.get(&version(1)).is_none(), "kept beyond the budget");
    }
}
