//! Which CPython a process runs, and where: the file (executable or
//! `libpython3.N.so`) whose dynamic symbols hold `_PyRuntime`, the
//! interpreter's state; `PyCode_Type`, which every code object points
//! at; and `Py_Version` (3.11+), else the version in the file's name.
//! No debug symbols needed: all three are exported.

use std::{path::Path, time::Instant};

use object::ReadCache;

use crate::{
    elf::{
        bounded::BoundedFile,
        file::{vaddr_of_offset, ElfFile, LoadSegment, SectionContents},
    },
    unwind::table::COMPILE_TIME_BUDGET,
};

/// The most dynamic symbols looked through (libpython has some 2,000).
const MAX_SYMBOLS: usize = 1 << 20;

/// Size of an `Elf64_Sym`.
const SYMBOL_SIZE: usize = 24;

/// What a CPython file exports, as addresses in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonFile {
    pub runtime: u64,
    pub code_type: u64,
    pub version: Option<u64>,
    segments: Vec<LoadSegment>,
}

impl PythonFile {
    /// How far the file mapped with `file_offset` at `start` is moved from
    /// its addresses.
    pub fn bias(&self, start: u64, file_offset: u64) -> Option<u64> {
        Some(start.wrapping_sub(vaddr_of_offset(&self.segments, file_offset)?))
    }
}

/// Whether a mapped file's name may be CPython's.
pub fn may_be_python(name: &str) -> bool {
    name.starts_with("python") || name.starts_with("libpython")
}

/// The minor version of Python 3 a file's name says (`python3.11`,
/// `libpython3.9.so.1.0`), if it says one.
pub fn minor_in_name(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix("lib")
        .unwrap_or(name)
        .strip_prefix("python3.")?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..digits].parse().ok()
}

/// The CPython exports of the ELF file at `path`, if it has them.
pub fn read(path: &Path) -> Option<PythonFile> {
    let cache = ReadCache::new(BoundedFile::open(path, Instant::now() + COMPILE_TIME_BUDGET).ok()?);
    let elf = ElfFile::parse_x86_64(&cache).ok()?;
    let segments = elf.load_segments().ok()?;
    let sections = elf.sections().ok()?;
    let stored = |name| match sections.contents(name) {
        Ok(SectionContents::Stored(bytes)) => Some(bytes),
        _ => None,
    };
    let (symbols, strings) = (stored(".dynsym")?, stored(".dynstr")?);
    let mut found = [None; 3];
    for symbol in symbols.chunks_exact(SYMBOL_SIZE).take(MAX_SYMBOLS) {
        let name = u32::from_le_bytes(symbol[..4].try_into().ok()?) as usize;
        let value = u64::from_le_bytes(symbol[8..16].try_into().ok()?);
        let name = strings
            .get(name..)
            .and_then(|rest| rest.split(|&b| b == 0).next());
        let index = match name {
            Some(b"_PyRuntime") => 0,
            Some(b"PyCode_Type") => 1,
            Some(b"Py_Version") => 2,
            _ => continue,
        };
        found[index] = Some(value).filter(|&value| value != 0);
    }
    Some(PythonFile {
        runtime: found[0]?,
        code_type: found[1]?,
        version: found[2],
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_in_file_names() {
        assert_eq!(minor_in_name("python3.11"), Some(11));
        assert_eq!(minor_in_name("libpython3.9.so.1.0"), Some(9));
        assert_eq!(minor_in_name("python3"), None);
        assert_eq!(minor_in_name("pythonista"), None);
        assert!(may_be_python("libpython3.12.so.1.0"));
        assert!(!may_be_python("libc.so.6"));
    }

    #[test]
    fn finds_the_exports_of_this_hosts_python() {
        let Some(file) = read(Path::new("/usr/bin/python3.11")) else {
            panic!("Debian's python3.11 exports _PyRuntime and PyCode_Type");
        };
        assert!(file.version.is_some());
        assert!(read(Path::new("/bin/true")).is_none());
    }
}
