//! Which CPython a process runs, and where: the file (executable or
//! `libpython3.N.so`) whose dynamic symbols hold `_PyRuntime`, the
//! interpreter's state; `PyCode_Type`, which every code object points
//! at; and `Py_Version` (3.11+: a constant, read from the file), else the
//! version in the file's name. No debug symbols needed: all three are
//! exported.

use std::{path::Path, time::Instant};

use object::{ReadCache, ReadRef};

use crate::{
    elf::{
        bounded::BoundedFile,
        file::{offset_of_vaddr, vaddr_of_offset, ElfFile, LoadSegment},
    },
    unwind::table::COMPILE_TIME_BUDGET,
};

/// What a CPython file exports, as addresses in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonFile {
    pub runtime: u64,
    pub code_type: u64,
    /// The minor version of Python 3 its `Py_Version` says, if it has one.
    pub minor: Option<u32>,
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
    read_file(BoundedFile::open(path, Instant::now() + COMPILE_TIME_BUDGET).ok()?)
}

/// The CPython exports of ELF file `file`, if it has them.
pub fn read_file(file: BoundedFile) -> Option<PythonFile> {
    let cache = ReadCache::new(file);
    let elf = ElfFile::parse_x86_64(&cache).ok()?;
    let segments = elf.load_segments().ok()?;
    let [runtime, code_type, version] = elf
        .sections()
        .ok()?
        .dynamic_symbols([b"_PyRuntime", b"PyCode_Type", b"Py_Version"])
        .ok()?;
    let minor = version
        .and_then(|address| {
            let offset = offset_of_vaddr(&segments, address)?;
            let bytes = cache.read_bytes_at(offset, 8).ok()?;
            Some(u64::from_le_bytes(bytes.try_into().ok()?))
        })
        .filter(|hex| hex >> 24 & 0xff == 3)
        .map(|hex| (hex >> 16 & 0xff) as u32);
    Some(PythonFile {
        runtime: runtime?,
        code_type: code_type?,
        minor,
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
        assert_eq!(file.minor, Some(11));
        assert!(read(Path::new("/bin/true")).is_none());
    }
}
