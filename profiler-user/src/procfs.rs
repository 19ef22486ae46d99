//! The one reader of small `/proc` files (`status`, `stat`, `cmdline`,
//! `environ`, sysctls): read whole up to a bound, as bytes, because a
//! process writes what it likes into some of them (its name, its arguments
//! and environment); and the fields of `status` files, found by name.

use std::{
    fs::File,
    io::{self, Read},
    path::Path,
    time::Duration,
};

/// Most bytes of a `comm` file read: the kernel's names are 15 bytes.
const MAX_COMM: u64 = 64;

/// The largest `status` file read.
pub const MAX_STATUS: u64 = 64 * 1024;

/// At most `limit` bytes of the file at `path`, and whether there was more.
pub fn read_bounded(path: impl AsRef<Path>, limit: u64) -> io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    let cut = bytes.len() as u64 > limit;
    bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((bytes, cut))
}

/// The pids in `/proc`, at most `limit` of them.
pub fn pids(limit: usize) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .take(limit)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// A status file (`/proc/PID/status`, `/proc/self/status`...) as text:
/// at most [`MAX_STATUS`] bytes, made UTF-8 lossily, since the process's
/// name in it is any 15 bytes.
pub fn read_status(path: impl AsRef<Path>) -> io::Result<String> {
    let (bytes, _) = read_bounded(path, MAX_STATUS)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The values of the status line `name` (colon included: `Uid:`), split at
/// whitespace; `None` if there is no such line.
pub fn status_field<'a>(status: &'a str, name: &str) -> Option<std::str::SplitWhitespace<'a>> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .map(str::split_whitespace)
}

/// The running kernel's release (`6.18.44-fc`), if it can be read.
pub fn kernel_release() -> Option<String> {
    let (bytes, _) = read_bounded("/proc/sys/kernel/osrelease", 256).ok()?;
    Some(String::from_utf8_lossy(&bytes).trim().to_owned())
}

/// The signals a status file's process has a handler for (`SigCgt:`), a
/// bit each ([`signal_bit`]).
pub fn caught_signals(status: &str) -> Option<u64> {
    u64::from_str_radix(status_field(status, "SigCgt:")?.next()?, 16).ok()
}

/// Signal `signal`'s bit in a status file's signal masks.
pub const fn signal_bit(signal: libc::c_int) -> u64 {
    1 << (signal - 1)
}

/// The last field of a status file's `NSpid:` line: the id in the
/// innermost pid namespace.
pub fn innermost_pid(status: &str) -> Option<u32> {
    status_field(status, "NSpid:")?.last()?.parse().ok()
}

/// The id of a thread or process in its innermost pid namespace, from its
/// status file. The file is read as bytes: the thread's name in it is any
/// 15 bytes, not always UTF-8.
pub fn innermost_ns_id(status: &Path) -> Option<u32> {
    innermost_pid(&read_status(status).ok()?)
}

/// Most bytes of `/proc/PID/stat` read: its 52 numeric fields and a
/// command name of at most 64 bytes take well under 1 KiB.
const MAX_STAT: u64 = 4096;

/// Field `number` (1-based, as proc(5) counts) of `/proc/PID/stat`, a
/// number; `None` if the process is gone. Fields from 3 on are read after
/// the command name, which holds any bytes, spaces and parentheses
/// included.
fn stat_field(pid: u32, number: usize) -> Option<u64> {
    field_of(stat_after_name(&format!("/proc/{pid}/stat"))?, number)
}

/// The CPU time process `pid` and its threads have used (user and
/// system, fields 14 and 15 of its stat file); `None` if it is gone.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let after_name = stat_after_name(&format!("/proc/{pid}/stat"))?;
    let ticks = field_of(after_name.clone(), 14)?.saturating_add(field_of(after_name, 15)?);
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(Duration::from_secs_f64(ticks as f64 / per_second))
}

/// Field `number` (from 1) of a stat file, given from field 3 on.
fn field_of(after_name: String, number: usize) -> Option<u64> {
    after_name
        .split_whitespace()
        .nth(number.checked_sub(3)?)?
        .parse()
        .ok()
}

/// A stat file (`/proc/PID/stat`, a thread's) from field 3 on, after the
/// command name; `None` if the process is gone.
fn stat_after_name(path: &str) -> Option<String> {
    let (mut stat, _) = read_bounded(path, MAX_STAT).ok()?;
    stat.drain(..=stat.iter().rposition(|&byte| byte == b')')?);
    String::from_utf8(stat).ok()
}

/// Whether process `pid` has ended: gone, or a zombie its parent has not
/// reaped yet (whose /proc entry stays, though no thread of it runs). A
/// main thread that ended before the others is a zombie too, but the
/// process still counts them (field 20).
pub fn has_exited(pid: u32) -> bool {
    let Some(stat) = stat_after_name(&format!("/proc/{pid}/stat")) else {
        return true;
    };
    let mut fields = stat.split_whitespace();
    let state = fields.next();
    let threads: Option<u64> = fields.nth(16).and_then(|threads| threads.parse().ok());
    matches!(state, Some("Z" | "X")) && threads.is_some_and(|threads| threads <= 1)
}

/// The kernel's flag of its own threads, in `/proc/PID/stat`'s flags.
const PF_KTHREAD: u64 = 0x0020_0000;

/// The ids of process `pid`'s threads now (`/proc/PID/task`), at most
/// `limit`; none if it is gone.
pub fn thread_ids(pid: u32, limit: usize) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| task.file_name().to_str()?.parse().ok())
        .take(limit)
        .collect()
}

/// The name in a `comm` file (`/proc/PID/comm` or a thread's), less its
/// line break; `None` if the process or thread is gone.
pub fn read_comm(path: impl AsRef<Path>) -> Option<Vec<u8>> {
    let (mut comm, _) = read_bounded(path, MAX_COMM).ok()?;
    comm.truncate(comm.trim_ascii_end().len());
    Some(comm)
}

/// A process's name for a message, `?` if it is gone.
pub fn process_name(pid: u32) -> String {
    read_comm(format!("/proc/{pid}/comm")).map_or_else(
        || "?".to_owned(),
        |name| String::from_utf8_lossy(&name).into_owned(),
    )
}

/// A thread's name (which the kernel cuts to 15 bytes), `?` if it is gone.
pub fn thread_name(pid: u32, tid: u32) -> String {
    read_comm(format!("/proc/{pid}/task/{tid}/comm")).map_or_else(
        || "?".to_owned(),
        |name| String::from_utf8_lossy(&name).into_owned(),
    )
}

/// The first of process `pid`'s first `limit` threads named `name` (its
/// `comm`, which the kernel cuts to 15 bytes); `None` if none is, or the
/// process is gone.
pub fn thread_named(pid: u32, name: &[u8], limit: usize) -> Option<u32> {
    thread_ids(pid, limit).into_iter().find(|tid| {
        read_comm(format!("/proc/{pid}/task/{tid}/comm")).is_some_and(|comm| comm == name)
    })
}

/// Whether process `pid` is one of the kernel's threads (kworker, ksoftirqd
/// and the like); false if it is gone.
pub fn is_kernel_thread(pid: u32) -> bool {
    stat_field(pid, 9).is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// The system call thread `tid` of process `pid` is blocked in (its
/// number); `None` if it runs, or is gone.
pub fn thread_syscall(pid: u32, tid: u32) -> Option<i64> {
    let (text, _) = read_bounded(format!("/proc/{pid}/task/{tid}/syscall"), MAX_STAT).ok()?;
    std::str::from_utf8(&text)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How long process `pid` has been running; `None` if it is gone.
pub fn age(pid: u32) -> Option<Duration> {
    age_of(&format!("/proc/{pid}/stat"))
}

/// How long thread `tid` of process `pid` has been running; `None` if it
/// is gone.
pub fn thread_age(pid: u32, tid: u32) -> Option<Duration> {
    age_of(&format!("/proc/{pid}/task/{tid}/stat"))
}

/// The age of the task whose `stat` file is at `path`.
fn age_of(path: &str) -> Option<Duration> {
    // Start time in clock ticks after boot.
    let started_ticks = field_of(stat_after_name(path)?, 22)?;
    // SAFETY: sysconf and clock_gettime with a valid out-pointer.
    let (ticks_per_second, now) = unsafe {
        let mut now: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now);
        (libc::sysconf(libc::_SC_CLK_TCK), now)
    };
    let started = Duration::from_secs_f64(started_ticks as f64 / ticks_per_second.max(1) as f64);
    let now = Duration::new(now.tv_sec as u64, now.tv_nsec as u32);
    Some(now.saturating_sub(started))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded_and_say_when_cut() {
        let (bytes, cut) = read_bounded("/proc/self/cmdline", 4).unwrap();
        assert_eq!((bytes.len(), cut), (4, true));
        let (whole, cut) = read_bounded("/proc/self/cmdline", 1 << 20).unwrap();
        assert!(!cut && whole.starts_with(&bytes));
    }

    #[test]
    fn status_fields_are_found_by_name() {
        let status = "Name:\tjava\nNSpid:\t4242\t17\nCapEff:\t000001ffffffffff\n";
        let mut capabilities = status_field(status, "CapEff:").unwrap();
        assert_eq!(capabilities.next(), Some("000001ffffffffff"));
        assert!(status_field(status, "Uid:").is_none());
        assert_eq!(innermost_pid(status), Some(17));
        assert_eq!(innermost_pid("NSpid:\n"), None);
        let own = read_status("/proc/self/status").unwrap();
        assert_eq!(innermost_pid(&own), Some(std::process::id()));
    }

    #[test]
    fn age_is_how_long_a_process_has_run() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawning sleep");
        std::thread::sleep(Duration::from_millis(300));
        let young = age(child.id()).expect("the child runs");
        child.kill().expect("killing sleep");
        child.wait().expect("reaping sleep");
        assert!(
            (Duration::from_millis(250)..Duration::from_secs(2)).contains(&young),
            "a process started 0.3 s ago is {young:?} old"
        );
        // pid 1 started with the machine, long before this test.
        assert!(age(1).expect("init runs") > young);
        assert_eq!(age(u32::MAX), None);
    }

    #[test]
    fn threads_are_found_by_name() {
        let named = std::thread::Builder::new()
            .name("stoke-test-named".to_owned())
            .spawn(|| std::thread::sleep(Duration::from_millis(500)))
            .expect("spawning a thread");
        std::thread::sleep(Duration::from_millis(50));
        let pid = std::process::id();
        // The kernel keeps 15 bytes of the name.
        let tid = thread_named(pid, b"stoke-test-name", 4096).expect("the named thread");
        let age = thread_age(pid, tid).expect("the named thread's age");
        assert!(age < Duration::from_secs(5), "{age:?}");
        assert_eq!(
            thread_syscall(pid, tid),
            Some(libc::SYS_clock_nanosleep),
            "asleep"
        );
        assert!(thread_named(pid, b"stoke-test-named", 4096).is_none());
        assert!(thread_named(pid, b"stoke-test", 4096).is_none());
        assert!(thread_named(u32::MAX, b"stoke-test-name", 4096).is_none());
        named.join().expect("the thread ends");
    }

    #[test]
    fn kernel_threads_are_told_from_processes() {
        // kthreadd is pid 2 in the initial pid namespace.
        assert!(is_kernel_thread(2));
        assert!(!is_kernel_thread(std::process::id()));
        assert!(!is_kernel_thread(u32::MAX));
    }

    #[test]
    fn a_zombie_has_exited_and_a_running_process_has_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawning sleep");
        let pid = child.id();
        assert!(!has_exited(pid), "a sleeping process is alive");
        child.kill().expect("killing sleep");
        // Waited for without reaping: it stays a zombie, /proc entry and all.
        // SAFETY: waitid with a valid out-pointer, on our own child.
        let waited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        assert_eq!(waited, 0);
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        assert!(has_exited(pid), "a zombie has exited");
        child.wait().expect("reaping sleep");
        assert!(has_exited(pid));
        // This process's main thread runs (it may wait for the test's).
        assert!(!has_exited(std::process::id()));
    }
}
