//! What the tests need of the host: root, build tools, kernel settings.

use std::ffi::OsStr;
use std::fs;
use std::process::Command;
use std::time::Duration;

/// Runs `program` (a build tool: binutils' strip, objcopy, readelf...)
/// with `args` and returns its stdout.
///
/// # Panics
///
/// If it cannot be run or fails; the message carries its stderr.
pub fn run_tool(program: &str, args: &[&OsStr]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program} (binutils): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Panics unless the test process runs as root: every test here loads BPF
/// programs through `stoke`, so without root they cannot run, and they must
/// never be silently skipped.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the stoke end-to-end tests must run as root (they load BPF programs); euid is {euid}"
    );
}

/// The kernel's `pid_max`.
pub fn pid_max() -> u32 {
    fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("reading /proc/sys/kernel/pid_max")
        .trim()
        .parse()
        .expect("parsing /proc/sys/kernel/pid_max")
}

/// The CPU time (user + system) process `pid` has used so far, from
/// `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/stat: {e}"));
    // utime and stime are the 12th and 13th fields after `(comm)`, which
    // may hold spaces.
    let after_comm = &stat[stat.rfind(')').expect("a stat line has `(comm)`") + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

/// The time the threads of process `pid` have spent runnable but not
/// running (on a run queue, or throttled), as the scheduler accounts it:
/// the second field of each `/proc/PID/task/TID/schedstat`.
pub fn run_delay(pid: u32) -> Duration {
    let tasks = fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|e| panic!("listing the threads of {pid}: {e}"));
    let nanoseconds: u64 = tasks
        .filter_map(|task| fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .map(|line| {
            line.split_whitespace()
                .nth(1)
                .and_then(|field| field.parse::<u64>().ok())
                .expect("schedstat's second field is a number")
        })
        .sum();
    Duration::from_nanos(nanoseconds)
}

/// A port on 127.0.0.1 nothing listens on (yet).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}
