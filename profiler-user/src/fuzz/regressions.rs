//! What the fuzz targets found: each input that broke a parser, kept
//! under `profiler-user/fuzz/regressions/` and replayed by a test here.
//! Each test fails on the code before its fix.

use super::harness;
use crate::{
    jvm::attach::target::ProcStatus,
    process::maps::{Entries, MappedPage, MapsPath},
    procfs::innermost_ns_id,
};

/// A reproducer's bytes.
fn reproducer(name: &str) -> Vec<u8> {
    let path = format!("{}/fuzz/regressions/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// The names of the files a maps file shows, byte for byte.
fn mapped_paths(maps: &[u8]) -> Vec<Vec<u8>> {
    Entries::new(maps)
        .map(|entry| entry.unwrap().path.as_bytes().to_vec())
        .collect()
}

/// A container names its files as it likes: `/SYSV` (or `/SYSV (deleted)`)
/// made procfs-core 0.18 panic or refuse the whole maps file, and stoke
/// lost every frame name of the process, or died.
#[test]
fn maps_of_a_file_named_sysv_parse() {
    for (name, path) in [
        ("maps-sysv-short", b"/SYSV".as_slice()),
        ("maps-sysv-deleted", b"/SYSV (deleted)"),
    ] {
        assert_eq!(mapped_paths(&reproducer(name)), [path, b""], "{name}");
    }
}

/// A file whose name is not UTF-8 (`/\x80`, mapped then deleted) made
/// procfs refuse the whole maps file: the process's frames went unnamed.
#[test]
fn maps_of_a_file_named_in_latin1_parse() {
    let maps = reproducer("maps-not-utf8");
    assert_eq!(mapped_paths(&maps), [b"/\x80 (deleted)".as_slice(), b""]);
    let first = Entries::new(&maps[..]).next().unwrap().unwrap();
    assert!(matches!(first.path, MapsPath::File(_)), "{first:?}");
}

/// A thread's name is any 15 bytes (`prctl(PR_SET_NAME)`; a UTF-8 name cut
/// at 15 bytes ends inside a character): `innermost_ns_id` read the status
/// file as UTF-8, got nothing, and the thread's Java stacks found no host
/// thread, while attach's parser (lossy) read the same file fine.
#[test]
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

/// An event log of `count` compilations of one method at distinct
/// addresses, then their unloads, as a JVM (or anything posing as the
/// agent) can write: 32 bytes per event, so the 48 MiB log holds 1.5
/// million of each.
fn churn_log(count: u64) -> Vec<u8> {
    use profiler_common::jvm::{encode, Event};
    let mut log = vec![0u8; count as usize * 2 * 32];
    let mut used = 0;
    let events = (0..count)
        .map(|index| Event::CodeLoad {
            method_id: 1,
            start: 0x1000 + index * 16,
            size: 16,
        })
        .chain((0..count).map(|index| Event::CodeUnload {
            method_id: 1,
            start: 0x1000 + index * 16,
        }));
    for event in events {
        used += encode(&event, &mut log[used..]).expect("room for the event");
    }
    log.truncate(used);
    log
}

/// The time `JavaSymbols` takes to apply [`churn_log`]`(count)`: the
/// best of three, since other tests and builds share the CPUs.
fn churn_time(count: u64) -> std::time::Duration {
    use crate::jvm::symbols::JavaSymbols;
    let log = churn_log(count);
    (0..3)
        .map(|_| {
            let started = std::time::Instant::now();
            let mut symbols = JavaSymbols::default();
            for (_, event) in profiler_common::jvm::events(&log) {
                symbols.apply(event);
            }
            started.elapsed()
        })
        .min()
        .expect("three runs")
}

/// Each unload scanned every compiled blob of its method (`Vec::retain` in
/// `uncompiled`), so a JVM that compiles one method many times over, then
/// unloads, cost stoke quadratic time, and the log has room for 1.5
/// million (minutes while stoke's Java thread drained nothing else). A
/// method's blobs are a set, and at most 4096 versions per method are
/// kept.
#[test]
fn unloads_of_one_method_take_linear_time() {
    let small = churn_time(10_000);
    let large = churn_time(40_000);
    assert!(
        large < small * 8 && large < std::time::Duration::from_millis(500),
        "4 times the events took {:.1} times as long ({small:?}, then {large:?})",
        large.as_secs_f64() / small.as_secs_f64()
    );
}

/// A file name that is not UTF-8 (it starts with a Latin-1 'é'), short
/// enough to be a whole process name (15 bytes).
fn latin1_path(what: &str) -> std::path::PathBuf {
    latin1_path_in(&std::env::temp_dir(), what)
}

fn latin1_path_in(directory: &std::path::Path, what: &str) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let mut name = vec![0xe9];
    name.extend_from_slice(format!("{what}{}", std::process::id()).as_bytes());
    directory.join(std::ffi::OsStr::from_bytes(&name))
}

/// `maps_libjvm` read `/proc/PID/maps` as UTF-8: one mapped file whose
/// name is not (legal on Linux, e.g. a Latin-1 directory) made a JVM look
/// gone, and it was never attached. Here this test process maps such a
/// file executable, as only executable mappings are looked at now: from
/// the test binary's own directory, which allows it (a temporary directory
/// may be mounted noexec).
#[test]
fn a_process_mapping_a_latin1_file_is_seen() {
    use std::os::unix::ffi::OsStrExt;
    let binary = std::env::current_exe().unwrap();
    let path = latin1_path_in(binary.parent().unwrap(), "map");
    std::fs::write(&path, [0u8; 4096]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mapped = MappedPage::of(&file, true);
    let seen = crate::jvm::profiler::maps_libjvm(std::process::id());
    let named = crate::process::maps::executable(std::process::id())
        .unwrap()
        .iter()
        .any(|map| {
            map.start == mapped.start()
                && map.path.as_bytes().starts_with(path.as_os_str().as_bytes())
        });
    drop(mapped);
    assert_eq!(seen, Some(false));
    assert!(
        named,
        "the Latin-1 name is not among the executable mappings"
    );
}

/// `age` read `/proc/PID/stat` as UTF-8: a process whose name is not
/// (it comes from the executable's file name) looked gone, and a starting
/// JVM named so was never looked at again.
#[test]
fn a_process_named_in_latin1_has_an_age() {
    let link = latin1_path("comm");
    std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
    let mut child = std::process::Command::new(&link).arg("5").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let age = crate::procfs::age(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_file(&link).unwrap();
    assert!(age.is_some(), "a running process has no age");
}

/// Naming a Java sample's frames looked, for each frame whose caller is
/// compiled, at every compiled blob of the caller's method (`inlines`): a
/// JVM that reported one method compiled at many addresses made each
/// sample cost that many lookups per frame. Now one lookup per frame.
#[test]
fn frame_kinds_take_bounded_time_per_sample() {
    use profiler_common::jvm::{Event, JavaFrame, MAX_JAVA_FRAMES};

    use crate::jvm::symbols::JavaSymbols;
    let mut symbols = JavaSymbols::default();
    for index in 0..100_000 {
        symbols.apply(Event::CodeLoad {
            method_id: 1,
            start: 0x1000 + index * 16,
            size: 16,
        });
    }
    // One blob with inlining recorded, so that the lookups are real.
    symbols.apply(Event::CodeInline {
        start: 0x1000,
        edges: &[],
    });
    let frames = vec![JavaFrame::new(1, 0); MAX_JAVA_FRAMES];
    let started = std::time::Instant::now();
    symbols.with_kinds(0, &frames);
    let took = started.elapsed();
    assert!(
        // One lookup per frame, not a scan of the caller's blobs.
        took < std::time::Duration::from_millis(1),
        "one sample's frame kinds took {took:?}"
    );
}
