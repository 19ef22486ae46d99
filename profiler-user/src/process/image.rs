//! A process's executable mappings as stoke keeps them: each mapped file
//! held open, so that its frames can be named after the process is gone.

use std::{
    fs::File,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use super::identity::Identity;
#[cfg(test)]
use crate::rootfs;
use crate::rootfs::Root;

/// A file some process mapped executable, held open.
#[derive(Debug)]
pub struct MappedFile {
    pub(super) file: File,
    /// Device and inode: what tells files apart.
    pub key: (u64, u64),
    /// What tells this file's contents from those it had before or after.
    pub version: FileVersion,
    /// The file's name as the process saw it, for frames that have no symbol.
    pub name: Arc<str>,
    /// Where the file is in the filesystem of the first process seen mapping
    /// it; `None` for the vdso.
    pub origin: Option<FileOrigin>,
}

/// A file's identity and the times its contents (and inode) last changed,
/// read once when the file is opened: two [`MappedFile`]s with equal
/// versions hold the same bytes, so names read from one fit the other
/// (`stoke continuous` keeps names by version, across the processes that
/// map the file). A file rewritten in place gets a new `ctime`, one
/// replaced a new inode or `ctime`; the owner of a file can set its
/// `mtime` but not its `ctime`, so a version cannot be forged for another
/// file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileVersion {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileVersion {
    /// The version of the open `file`, which `key` (device and inode as
    /// the process's maps gave them) names.
    pub fn of(file: &File, key: (u64, u64)) -> std::io::Result<Self> {
        let metadata = file.metadata()?;
        Ok(Self {
            device: key.0,
            inode: key.1,
            size: metadata.len(),
            modified: (metadata.mtime(), metadata.mtime_nsec()),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        })
    }
}

/// A mapped file's path, and the root directory it is a path in.
#[derive(Debug)]
pub struct FileOrigin {
    pub root: Arc<Root>,
    /// As `/proc/PID/maps` shows it (the file may have been deleted since).
    pub path: PathBuf,
}

impl MappedFile {
    /// The file at `path` on this host, as if a process had mapped it.
    #[cfg(test)]
    pub fn on_host(path: &Path) -> Self {
        let file = rootfs::open_regular(path).unwrap();
        let metadata = file.metadata().unwrap();
        let key = (metadata.dev(), metadata.ino());
        Self {
            version: FileVersion::of(&file, key).unwrap(),
            file,
            key,
            name: base_name(path),
            origin: Some(FileOrigin {
                root: Arc::new(Root::host().unwrap()),
                path: path.to_owned(),
            }),
        }
    }

    /// A path that opens this very file for as long as the recording runs.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

/// What an executable mapping maps.
#[derive(Clone, Debug)]
pub enum MappingTarget {
    /// A file, open.
    File(Arc<MappedFile>),
    /// Something without a file to read symbols from: `[vdso]`, anonymous
    /// memory (JIT code), or a file that could not be opened.
    Named(Arc<str>),
}

/// One executable mapping of a process.
#[derive(Clone, Debug)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The file offset mapped at `start`.
    pub file_offset: u64,
    /// What is mapped there.
    pub target: MappingTarget,
}

/// A process's address space as it was when first sampled.
#[derive(Debug, Default)]
pub struct ProcessImage {
    /// Process id.
    pub pid: u32,
    /// Process name (its main thread's `comm`).
    pub name: String,
    /// The executable's path, as the process's own root names it.
    pub exe: Option<Arc<str>>,
    /// One of the kernel's own threads (kworker...), which no service runs.
    pub kernel_thread: bool,
    /// Where the process runs: its container or service.
    pub identity: Arc<Identity>,
    /// When it started (its main thread was forked), if its sample said.
    pub started: Option<Instant>,
    /// Executable mappings, sorted by address.
    pub(super) mappings: Vec<Mapping>,
}

impl ProcessImage {
    /// The executable mappings, sorted by address.
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// The names of what the process maps executable: file paths as it saw
    /// them, `[vdso]`, anonymous memory's.
    pub fn mapped_names(&self) -> impl Iterator<Item = &str> {
        self.mappings.iter().map(|mapping| match &mapping.target {
            MappingTarget::File(file) => &*file.name,
            MappingTarget::Named(name) => &**name,
        })
    }

    /// Whether `address` is code of a mapped file (the vdso included), not
    /// anonymous memory such as a JIT's code.
    pub fn is_file_code(&self, address: u64) -> bool {
        // A file that could not be opened keeps its base name; memory
        // without a file has a bracketed one.
        self.locate(address)
            .is_some_and(|(mapping, _)| match &mapping.target {
                MappingTarget::File(_) => true,
                MappingTarget::Named(name) => !name.starts_with('['),
            })
    }

    /// The mapping holding `address`, and the file offset it corresponds to.
    pub fn locate(&self, address: u64) -> Option<(&Mapping, u64)> {
        let index = self
            .mappings
            .partition_point(|mapping| mapping.start <= address)
            .checked_sub(1)?;
        let mapping = &self.mappings[index];
        (address < mapping.end).then(|| (mapping, address - mapping.start + mapping.file_offset))
    }
}

/// A file's name for frames: a name that is not UTF-8 (Linux allows any
/// bytes) still tells the file apart, with replacement characters.
pub(super) fn base_name(path: &Path) -> Arc<str> {
    path.file_name()
        .map_or("[unknown]".into(), |name| name.to_string_lossy().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(start: u64, end: u64, file_offset: u64) -> Mapping {
        Mapping {
            start,
            end,
            file_offset,
            target: MappingTarget::Named("x".into()),
        }
    }

    #[test]
    fn locate_finds_the_mapping_and_its_file_offset() {
        let image = ProcessImage {
            pid: 1,
            name: "p".into(),
            mappings: vec![named(0x1000, 0x2000, 0), named(0x5000, 0x6000, 0x3000)],
            ..ProcessImage::default()
        };
        assert_eq!(image.locate(0x1000).map(|(_, offset)| offset), Some(0));
        assert_eq!(image.locate(0x1fff).map(|(_, offset)| offset), Some(0xfff));
        assert_eq!(image.locate(0x5010).map(|(_, offset)| offset), Some(0x3010));
        for outside in [0xfff, 0x2000, 0x4fff, 0x6000] {
            assert!(image.locate(outside).is_none(), "{outside:#x}");
        }
    }
}
