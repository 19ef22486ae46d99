//! Profiles read back from files, for `stoke convert` and `stoke diff`:
//! folded stacks from any tool, and pprof profiles.

mod folded;
mod pprof;

use std::{
    fs::File,
    io::{BufRead, BufReader},
    path::Path,
};

use anyhow::{Context, Result};

use crate::profile::Profile;

/// The profile in the file at `path`: pprof if it is gzipped (pprof's
/// `.pb.gz`), folded stacks otherwise.
pub fn read_profile(path: &Path) -> Result<Profile> {
    let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut input = BufReader::new(file);
    let start = input
        .fill_buf()
        .with_context(|| format!("cannot read {}", path.display()))?;
    if start.starts_with(&[0x1f, 0x8b]) {
        pprof::read(input, path)
    } else {
        folded::read(input, path)
    }
}
