//! Separate debug files: where distributions put the DWARF they strip from
//! binaries (Debian's `*-dbg` and `*-dbgsym` packages), `.debug_frame`
//! included. Code built without unwind tables has its CFI there only.
//!
//! The lookup is gdb's: first by build ID,
//! `/usr/lib/debug/.build-id/xx/rest.debug`; then by the `.gnu_debuglink`
//! name in the file's directory, in its `.debug/` subdirectory and under
//! `/usr/lib/debug/` followed by the file's directory, where the debug
//! file must have the CRC32 the link gives. Every path is resolved inside
//! the root of the process that mapped the file ([`Root`]): a container's
//! debug files, never the host's, and no symlink leads out.

use std::{
    fs::File,
    io,
    os::unix::{ffi::OsStrExt, fs::FileExt},
    path::{Path, PathBuf},
    time::Instant,
};

use crate::rootfs::Root;

/// Where distributions install debug files.
const DEBUG_DIR: &str = "/usr/lib/debug";

/// The largest debug file whose checksum is computed (reading all of it):
/// larger ones found by debuglink are left out. libjvm.so's is 250 MB.
const MAX_CHECKSUMMED_BYTES: u64 = 1 << 30;

/// What a file says about its separate debug file.
#[derive(Clone, Copy, Debug, Default)]
pub struct DebugLinks<'data> {
    /// The GNU build ID note's bytes.
    pub build_id: Option<&'data [u8]>,
    /// `.gnu_debuglink`: the debug file's name and its CRC32.
    pub debuglink: Option<(&'data [u8], u32)>,
}

/// A separate debug file, open.
#[derive(Debug)]
pub struct DebugFile {
    pub file: File,
    /// Its path inside the root it was found in.
    pub path: PathBuf,
}

/// Finds the separate debug file of the file at `path` (inside `root`;
/// `None` if unknown: then only the build ID can find it), within a
/// second.
#[cfg(test)]
pub fn find(root: &Root, path: Option<&Path>, links: &DebugLinks<'_>) -> Option<DebugFile> {
    find_until(
        root,
        path,
        links,
        Instant::now() + std::time::Duration::from_secs(1),
    )
}

/// Like `find`, giving up at `deadline` (checksumming a candidate reads
/// all of it).
pub fn find_until(
    root: &Root,
    path: Option<&Path>,
    links: &DebugLinks<'_>,
    deadline: Instant,
) -> Option<DebugFile> {
    if let Some(found) = links.build_id.and_then(|id| by_build_id(root, id)) {
        return Some(found);
    }
    let (name, crc) = links.debuglink?;
    let name = Path::new(std::ffi::OsStr::from_bytes(name));
    // A file name, nothing that walks elsewhere.
    let plain = name.as_os_str().len() <= 255
        && name.file_name() == Some(name.as_os_str())
        && !name.as_os_str().as_bytes().contains(&b'/');
    if !plain {
        return None;
    }
    let directory = path?.parent().filter(|dir| dir.is_absolute())?;
    let candidates = [
        directory.join(name),
        directory.join(".debug").join(name),
        Path::new(DEBUG_DIR)
            .join(directory.strip_prefix("/").ok()?)
            .join(name),
    ];
    candidates.into_iter().find_map(|candidate| {
        let file = root.open_file(&candidate).ok()?;
        (checksum(&file, deadline).ok()? == crc).then_some(DebugFile {
            file,
            path: candidate,
        })
    })
}

fn by_build_id(root: &Root, id: &[u8]) -> Option<DebugFile> {
    // GNU build IDs are 20 bytes (SHA-1) or 16 (MD5, UUID); gdb takes any
    // of at least 2.
    if !(2..=64).contains(&id.len()) {
        return None;
    }
    let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
    let path = PathBuf::from(format!(
        "{DEBUG_DIR}/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    ));
    let file = root.open_file(&path).ok()?;
    Some(DebugFile { file, path })
}

/// The CRC32 of a whole file, as `.gnu_debuglink` has it (zlib's), if it
/// can be read before `deadline`.
pub fn checksum(file: &File, deadline: Instant) -> io::Result<u32> {
    if file.metadata()?.len() > MAX_CHECKSUMMED_BYTES {
        return Err(io::Error::other("too large a debug file"));
    }
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0; 1 << 20];
    let mut offset = 0;
    loop {
        let read = file.read_at(&mut buffer, offset)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        offset += read as u64;
        if offset > MAX_CHECKSUMMED_BYTES {
            return Err(io::Error::other("too large a debug file"));
        }
        if Instant::now() > deadline {
            return Err(io::Error::other("reading the debug file takes too long"));
        }
    }
    Ok(hasher.finalize())
}
