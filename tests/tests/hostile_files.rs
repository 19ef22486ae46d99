//! Processes that map hostile files, recorded with `stoke record -p`: a
//! device (`/dev/zero`), a sparse 8 GB executable, an ELF file with 65,000
//! note sections, stripped binaries whose `.gnu_debuglink` names a FIFO (by
//! absolute path, and in their own directory), a file truncated and grown
//! again while stoke reads it. Before stoke bounded its reading, the
//! device and the 8 GB file took it to gigabytes, the FIFOs blocked it
//! forever, the truncated file cost its 240 MB; the note sections cost
//! nothing more (they are capped now).
//!
//! Each recording must end within its duration plus [`GRACE`], with a peak
//! RSS under [`MAX_RSS_MB`], and write a profile with the hostile process's
//! samples; the hostile process must be unharmed: alive, never stopped (it
//! prints a tick every 100 ms throughout), no signal pending.

use std::{
    ffi::CString,
    fs,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use stoke_tests::{
    args, describe, read_folded, record_args, require_root, run_tool, Running, Stack, Stoke,
    StokeOutput, TempDir, Workload,
};

/// The recordings' duration (`-d`).
const SECONDS: f64 = 3.0;

/// How much longer than [`SECONDS`] a recording may take: a recording of
/// one process stops and is named within a second; more on a loaded 2-CPU
/// machine.
const GRACE: Duration = Duration::from_secs(10);

/// The peak RSS a recording may reach: a whole-host recording takes about
/// 70 MB, one of a single process less.
const MAX_RSS_MB: u64 = 200;

/// Past this, the test kills stoke, to protect the machine: reading a
/// hostile file whole took stoke to gigabytes.
const KILL_RSS_MB: u64 = 1024;

/// The workload, built into `dir`.
fn workload(dir: &TempDir) -> Workload {
    Workload::build("hostile_files", dir.path())
}

/// Starts the executable `exe` (a copy of the workload, made hostile) as
/// `hostile_files 60 none`.
fn spawn_copy(exe: &Path) -> Running {
    let name = exe.file_name().unwrap().to_str().unwrap();
    let comm: String = name.chars().take(15).collect();
    let mut command = Command::new(exe);
    command.args(["60", "none"]);
    Running::start(command, name, &comm)
}

/// Follows stoke's peak RSS (`VmHWM`) until it exits; kills it past
/// [`KILL_RSS_MB`]. Returns the peak in kB and whether it was killed.
fn watch_rss(pid: u32) -> (u64, bool) {
    let mut peak = 0;
    loop {
        let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
            return (peak, false);
        };
        // A zombie has no VmHWM any more: the last value read stands.
        let Some(hwm) = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|value| value.trim().trim_end_matches(" kB").parse::<u64>().ok())
        else {
            return (peak, false);
        };
        peak = peak.max(hwm);
        if peak > KILL_RSS_MB * 1024 {
            // SAFETY: kill has no memory-safety preconditions; the pid is
            // the test's own unreaped child.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            return (peak, true);
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Signals pending for process `pid` (`SigPnd` and `ShdPnd` of its status).
fn pending_signals(pid: u32) -> (String, String) {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    (field("SigPnd:"), field("ShdPnd:"))
}

/// Records `running` (the hostile process; alone, so that what else runs
/// on the machine does not count), and asserts what the module says. Returns stoke's output and the hostile
/// process's stacks.
fn assert_unharmed_recording(
    running: &mut Running,
    out: &Path,
    what: &str,
) -> (StokeOutput, Vec<Stack>) {
    let started = Instant::now();
    let stoke = Stoke::spawn(&record_args(&args!["-p", running.pid()], 99, SECONDS, out));
    let pid = stoke.pid();
    let watcher = thread::spawn(move || watch_rss(pid));
    let output = stoke.wait(Duration::from_secs_f64(SECONDS) + GRACE);
    let (peak_kb, killed) = watcher.join().unwrap();
    let ticks = running.lines_since("tick", started);
    println!(
        "{what}: stoke took {:.2} s, peak RSS {} MB; the process ticked {ticks} times meanwhile",
        output.elapsed.as_secs_f64(),
        peak_kb / 1024
    );
    assert!(
        !killed,
        "{what}: stoke's RSS passed {KILL_RSS_MB} MB, killed; stderr:\n{}",
        output.stderr
    );
    output.assert_success();
    assert!(
        peak_kb < MAX_RSS_MB * 1024,
        "{what}: stoke's peak RSS was {} MB, more than {MAX_RSS_MB} MB",
        peak_kb / 1024
    );

    let stacks = read_folded(out);
    let root = running.root_frame();
    let mine: Vec<Stack> = stacks
        .iter()
        .filter(|stack| stack.root() == root)
        .cloned()
        .collect();
    assert!(
        !mine.is_empty(),
        "{what}: no samples of {root} in the profile\n{}",
        describe(&stacks, 10)
    );

    // 100 ms per tick: a process stalled by stoke (or stopped) falls far
    // behind. At least a third of the ticks of the recording's duration,
    // for the other loads of a shared machine.
    assert!(
        ticks as f64 >= SECONDS * 10.0 / 3.0,
        "{what}: the process ticked only {ticks} times in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        running.is_alive(),
        "{what}: the process died: {}",
        running.stderr()
    );
    let since = Instant::now();
    thread::sleep(Duration::from_millis(500));
    assert!(
        running.lines_since("tick", since) >= 1,
        "{what}: the process stopped ticking after the recording"
    );
    let (pending, shared_pending) = pending_signals(running.pid());
    assert!(
        pending.trim_start_matches('0').is_empty()
            && shared_pending.trim_start_matches('0').is_empty(),
        "{what}: signals pending for the process: SigPnd {pending}, ShdPnd {shared_pending}"
    );
    (output, mine)
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    let name = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(name.as_ptr(), 0o600) },
        0,
        "mkfifo {}",
        path.display()
    );
}

/// A stripped copy of the workload at `dir/name` whose `.gnu_debuglink`
/// names `link` (written by hand: objcopy's `--add-gnu-debuglink` takes
/// no absolute path, and reads the file it names).
fn stripped_with_debuglink(workload: &Workload, dir: &Path, name: &str, link: &Path) -> PathBuf {
    let exe = dir.join(name);
    fs::copy(workload.exe(), &exe).unwrap();
    run_tool("strip", &[exe.as_os_str()]);
    let mut section = link.as_os_str().as_bytes().to_vec();
    section.push(0);
    section.resize(section.len().next_multiple_of(4), 0);
    // Any CRC: a reader that opens the file to check it is caught already.
    section.extend_from_slice(&0x1234_5678u32.to_le_bytes());
    let content = dir.join(format!("{name}.debuglink"));
    fs::write(&content, section).unwrap();
    let add = format!(".gnu_debuglink={}", content.display());
    run_tool(
        "objcopy",
        &["--add-section".as_ref(), add.as_ref(), exe.as_os_str()],
    );
    exe
}

/// `/dev/zero` mapped readable and executable: a device, endless to read.
#[test]
fn dev_zero_mapped_executable() {
    require_root();
    let dir = TempDir::new("hostile-zero");
    let mut running = workload(&dir).spawn(&["60", "zero"]);
    assert_unharmed_recording(&mut running, &dir.join("zero.folded"), "/dev/zero mapping");
}

/// A process running an 8 GB executable: the workload, extended (sparse)
/// to 8 GB.
#[test]
fn sparse_8_gb_executable() {
    require_root();
    let dir = TempDir::new("hostile-sparse");
    let exe = dir.join("hostile_sparse");
    fs::copy(workload(&dir).exe(), &exe).unwrap();
    fs::File::options()
        .write(true)
        .open(&exe)
        .unwrap()
        .set_len(8 << 30)
        .unwrap();
    let mut running = spawn_copy(&exe);
    let (output, stacks) =
        assert_unharmed_recording(&mut running, &dir.join("sparse.folded"), "8 GB executable");
    // Too large to read symbols from: named by offset, and said so.
    assert!(
        stacks.iter().any(|stack| stack
            .frames
            .iter()
            .any(|frame| frame.starts_with("hostile_sparse+0x"))),
        "no frame of the 8 GB file is named by its offset\n{}",
        describe(&stacks, 10)
    );
    assert!(
        output
            .stderr
            .lines()
            .any(|line| line.starts_with("stoke: warning: hostile_sparse: ")),
        "no warning names the file too large to read symbols from:\n{}",
        output.stderr
    );
}

/// A process running an ELF file with 65,000 note sections: the
/// workload, its section table copied to the end of the file and followed
/// by 65,000 copies of its build ID note's header.
#[test]
fn executable_with_65000_note_sections() {
    require_root();
    let dir = TempDir::new("hostile-notes");
    let mut bytes = fs::read(workload(&dir).exe()).unwrap();
    let u16_at = |bytes: &[u8], at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    let entry = usize::from(u16_at(&bytes, 0x3a));
    let count = usize::from(u16_at(&bytes, 0x3c));
    let headers = bytes[shoff..shoff + entry * count].to_vec();
    let note = headers
        .chunks(entry)
        .find(|header| u32::from_le_bytes(header[4..8].try_into().unwrap()) == 7)
        .expect("the workload has a note section")
        .to_vec();
    let added = 65_000;
    // Below SHN_LORESERVE (0xff00): no extended numbering needed.
    assert!(count + added < 0xff00);
    let new_shoff = bytes.len().next_multiple_of(8);
    bytes.resize(new_shoff, 0);
    bytes.extend_from_slice(&headers);
    for _ in 0..added {
        bytes.extend_from_slice(&note);
    }
    bytes[0x28..0x30].copy_from_slice(&(new_shoff as u64).to_le_bytes());
    bytes[0x3c..0x3e].copy_from_slice(&((count + added) as u16).to_le_bytes());
    let exe = dir.join("hostile_notes");
    fs::write(&exe, &bytes).unwrap();
    fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut running = spawn_copy(&exe);
    assert_unharmed_recording(
        &mut running,
        &dir.join("notes.folded"),
        "65,000 note sections",
    );
}

/// A stripped binary whose `.gnu_debuglink` names a FIFO by absolute path:
/// opening it would wait for a writer forever.
#[test]
fn debuglink_to_an_absolute_fifo() {
    require_root();
    let dir = TempDir::new("hostile-abslink");
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let exe = stripped_with_debuglink(&workload(&dir), dir.path(), "hostile_abslink", &fifo);
    let mut running = spawn_copy(&exe);
    assert_unharmed_recording(
        &mut running,
        &dir.join("abslink.folded"),
        "debuglink to /…/fifo",
    );
}

/// A stripped binary whose `.gnu_debuglink` names a plain file name, a
/// FIFO in its own directory, where debug files are looked for.
#[test]
fn debuglink_to_a_fifo_beside_the_binary() {
    require_root();
    let dir = TempDir::new("hostile-rellink");
    mkfifo(&dir.join("hostile_rellink.debug"));
    let exe = stripped_with_debuglink(
        &workload(&dir),
        dir.path(),
        "hostile_rellink",
        Path::new("hostile_rellink.debug"),
    );
    let mut running = spawn_copy(&exe);
    assert_unharmed_recording(
        &mut running,
        &dir.join("rellink.folded"),
        "debuglink to a FIFO beside it",
    );
}

/// A 240 MB executable file (below the 256 MB that stoke compiles tables
/// of, so it is read), mapped, then shrunk to 4 KB and grown back every
/// second while stoke reads it. Reading it whole took 240 MB.
#[test]
fn file_truncated_while_read() {
    require_root();
    let dir = TempDir::new("hostile-truncate");
    let workload = workload(&dir);
    let big = dir.join("big");
    fs::copy(workload.exe(), &big).unwrap();
    fs::File::options()
        .write(true)
        .open(&big)
        .unwrap()
        .set_len(240 << 20)
        .unwrap();
    let mut running = workload.spawn(&["60".as_ref(), "truncate".as_ref(), big.as_os_str()]);
    assert_unharmed_recording(
        &mut running,
        &dir.join("truncate.folded"),
        "file truncated while read",
    );
}
