//! Profiles read back from files, for `stoke convert`, `stoke diff` and
//! `stoke report --baseline`: folded stacks from any tool, and pprof
//! profiles. The files are the user's to forge: only regular files and
//! standard input are read, and each reader bounds its lines, stacks and
//! counts ([`stacks`]).

mod folded;
mod pprof;
pub(crate) mod stacks;

use std::{
    fs::File,
    io::{self, BufRead, BufReader},
    path::Path,
};

use anyhow::{anyhow, Context, Result};

use crate::{model::Profile, rootfs};

/// The profile in the file at `path` (`-`: standard input): pprof if it is
/// gzipped (pprof's `.pb.gz`), folded stacks otherwise. What the reader
/// warns about (cut stacks, lossy lines) is printed.
pub fn read_profile(path: &Path) -> Result<Profile> {
    let (profile, warnings) = if path == Path::new("-") {
        read_input(io::stdin().lock(), Path::new("standard input"))?
    } else {
        read_input(BufReader::new(open(path)?), path)?
    };
    for warning in warnings {
        eprintln!("stoke: warning: {warning}");
    }
    Ok(profile)
}

/// The regular file at `path`: a FIFO or a device could stall stoke or
/// never end.
fn open(path: &Path) -> Result<File> {
    rootfs::open_regular(path).map_err(|error| match error.kind() {
        io::ErrorKind::InvalidInput => anyhow!(
            "{} is not a regular file: give a file, or - to read standard input",
            path.display()
        ),
        _ => anyhow!(error).context(format!("cannot read {}", path.display())),
    })
}

/// The profile in `input` and its warnings; `path` names it in messages.
pub(crate) fn read_input(mut input: impl BufRead, path: &Path) -> Result<(Profile, Vec<String>)> {
    let start = input
        .fill_buf()
        .with_context(|| format!("cannot read {}", path.display()))?;
    if start.starts_with(&[0x1f, 0x8b]) {
        pprof::read(input, path)
    } else {
        folded::read(input, path)
    }
}
