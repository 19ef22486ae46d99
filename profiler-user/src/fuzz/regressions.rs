//! What the fuzz targets found: each input that broke a parser, kept
//! under `profiler-user/fuzz/regressions/` and replayed by a test here.
//! A bug in code this branch does not own is reported to its owner; its
//! test is ignored until the fix lands, and the target leaves out inputs
//! that trigger it (counted as `known` in its report line), so that it
//! keeps looking for others.

/// Whether a mapped file's path trips procfs-core 0.18's maps parser:
/// - it takes any path starting with `/SYSV` for a System V segment and
///   slices and parses its next 8 bytes: a shorter name panics (a slice
///   out of range, or inside a UTF-8 character), another fails the whole
///   file;
/// - it reads lines into a `String`: a name that is not UTF-8 (Linux
///   allows any bytes) fails the whole file.
pub fn procfs_misreads(path: &[u8]) -> bool {
    path.trim_ascii().starts_with(b"/SYSV") || std::str::from_utf8(path).is_err()
}

use std::panic::catch_unwind;

use procfs::{process::MemoryMaps, FromBufRead};

use super::harness;
use crate::jvm::{attach::ProcStatus, profiler::innermost_ns_id};

/// A reproducer's bytes.
fn reproducer(name: &str) -> Vec<u8> {
    let path = format!("{}/fuzz/regressions/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// A container names its files as it likes: `/SYSV` (or `/SYSV (deleted)`)
/// makes procfs panic or refuse the whole maps file, and stoke loses
/// every frame name of the process, or dies.
#[test]
#[ignore = "procfs-core 0.18 bug, reported: symbolize/maps.rs owns the fix"]
fn maps_of_a_file_named_sysv_parse() {
    for name in ["maps-sysv-short", "maps-sysv-deleted"] {
        let maps = reproducer(name);
        let parsed = catch_unwind(|| MemoryMaps::from_buf_read(&maps[..]));
        assert!(
            matches!(parsed, Ok(Ok(ref maps)) if maps.0.len() == 2),
            "{name}: {parsed:?}"
        );
    }
}

/// A file whose name is not UTF-8 (`/\x80`, mapped then deleted) makes
/// procfs refuse the whole maps file: the process's frames go unnamed.
#[test]
#[ignore = "procfs-core 0.18 bug, reported: symbolize/maps.rs owns the fix"]
fn maps_of_a_file_named_in_latin1_parse() {
    let maps = reproducer("maps-not-utf8");
    let parsed = MemoryMaps::from_buf_read(&maps[..]);
    assert!(
        matches!(parsed, Ok(ref maps) if maps.0.len() == 2),
        "{parsed:?}"
    );
}

/// A thread's name is any 15 bytes (`prctl(PR_SET_NAME)`; a UTF-8 name cut
/// at 15 bytes ends inside a character): `innermost_ns_id` reads the status
/// file as UTF-8, gets nothing, and the thread's Java stacks find no host
/// thread, while attach's parser (lossy) reads the same file fine.
#[test]
#[ignore = "jvm/profiler.rs bug, reported to its owner"]
fn status_of_a_thread_named_in_latin1_gives_its_pid() {
    let status = reproducer("status-name-not-utf8");
    let parsed = ProcStatus::parse(&String::from_utf8_lossy(&status)).unwrap();
    let file = harness::memfd(&status);
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
    assert_eq!(
        innermost_ns_id(std::path::Path::new(&path)),
        Some(parsed.ns_pid)
    );
}
