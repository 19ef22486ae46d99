//! A mapped file's unwind table: the file read within bounds, its
//! separate debug file looked up in the process's root, both compiled.

use std::{
    io,
    path::Path,
    time::{Duration, Instant},
};

use object::ReadCache;

use super::table::{self, CompileError, UnwindTable};
use crate::{
    elf::{bounded::BoundedFile, debug_file::find_until},
    rootfs::Root,
};

/// Why a file has no table.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{0}")]
    Read(#[from] io::Error),
    #[error("{0}")]
    Compile(#[from] CompileError),
}

/// What a recording does with each mapped file: reads `source`, looks up
/// its separate debug file in `root` (the file being at `path` there) and
/// compiles both into a table. Also says how long it took.
///
/// `source` must be a regular file of at most
/// [`crate::elf::bounded::MAX_FILE_BYTES`]; only its headers, notes and CFI sections
/// are read, within [`crate::elf::bounded::MAX_READ_BYTES`] and
/// [`table::COMPILE_TIME_BUDGET`] (the debug file's lookup and reading
/// included).
pub fn read_and_compile(
    source: &Path,
    root: Option<&Root>,
    path: Option<&Path>,
) -> (Result<UnwindTable, TableError>, Duration) {
    let started = Instant::now();
    let deadline = started + table::COMPILE_TIME_BUDGET;
    let table = BoundedFile::open(source, deadline)
        .map_err(TableError::from)
        .and_then(|file| {
            let exceeded = file.exceeded();
            let cache = ReadCache::new(file);
            table::compile_from(&cache, deadline, |links| {
                find_until(root?, path, links, deadline)
            })
            .map_err(
                // The reader's errors reach the compiler as malformed ELF:
                // say which bound was hit instead.
                |error| match exceeded.get() {
                    Some(why) => TableError::Compile(CompileError::Limit(why)),
                    None => TableError::from(error),
                },
            )
        });
    (table, started.elapsed())
}
