//! Stage 2, processes: what each sampled process maps and where it runs,
//! read from /proc once, when the process is first sampled ([`registry`]),
//! through one bounded reader of `/proc/PID/maps` ([`maps`]); its container
//! or service ([`identity`]) from its cgroup ([`cgroup`]) and the container
//! runtimes' files ([`runtime_metadata`]). The recording owns the
//! registry and lends it to the stages that need a process's mappings: the
//! unwind loader (which files to compile tables for), the Java side (is it
//! a JVM; where its JIT code is) and symbolization (which file an address
//! is in).

pub mod cgroup;
pub mod identity;
pub mod image;
pub mod maps;
pub mod registry;
pub mod runtime_metadata;

use std::{fs::File, io::Read, path::Path};

pub use self::{
    image::{MappedFile, MappingTarget, ProcessImage},
    registry::{ImageId, ProcessRegistry},
};

/// At most `limit` bytes of the file at `path` (a /proc file: no regular
/// file check); `None` if it cannot be read.
pub fn read_bounded(path: impl AsRef<Path>, limit: u64) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|file| file.take(limit).read_to_end(&mut bytes))
        .ok()?;
    Some(bytes)
}
