//! The machine the bench runs on: what it is (for the report's header), and
//! how busy other processes keep it (to wait for quiet, and to notice a
//! measurement that someone else's work disturbed).

use std::{
    fs,
    path::Path,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

use super::workspace_root;

/// What the report's header says about the machine and the code measured.
pub struct HostInfo {
    pub date: String,
    pub kernel: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub commit: String,
    pub perf_version: String,
}

impl HostInfo {
    /// Gathers the facts; none of them is worth failing the bench for.
    /// `given_stoke` is the binary passed with `--stoke`, if any.
    pub fn gather(given_stoke: Option<&Path>) -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Self {
            date: utc_now(),
            kernel: command_output("uname", &["-r"]).unwrap_or_else(|| "unknown".into()),
            cpus: online_cpus(),
            cpu_model: cpuinfo
                .lines()
                .find_map(|line| line.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map_or_else(|| "unknown".into(), |(_, model)| model.trim().to_owned()),
            memory_gib: meminfo
                .lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|value| {
                    value
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<f64>()
                        .ok()
                })
                .map_or(0.0, |kib| kib / (1024.0 * 1024.0)),
            commit: match given_stoke {
                None => commit(),
                Some(path) => format!(
                    "binary {} (given with --stoke; the work tree is at {})",
                    path.display(),
                    commit()
                ),
            },
            perf_version: command_output("perf", &["--version"])
                .unwrap_or_else(|| "not found".into()),
        }
    }
}

/// The commit measured, `abc1234`, with `+ local changes` when the sources
/// stoke is built from differ from it (read-only git commands only).
fn commit() -> String {
    let root = workspace_root();
    let Some(hash) = command_output_in(&root, "git", &["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let clean = Command::new("git")
        .current_dir(&root)
        .args(["diff", "--quiet", "HEAD", "--"])
        .args([
            "profiler-user",
            "profiler-ebpf",
            "profiler-common",
            "Cargo.lock",
        ])
        .status()
        .is_ok_and(|status| status.success());
    if clean {
        hash
    } else {
        format!("{hash} + local changes to stoke's sources")
    }
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    command_output_in(&workspace_root(), program, args)
}

fn command_output_in(dir: &Path, program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program)
        .current_dir(dir)
        .args(args)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The number of online CPUs.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let count = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(count).unwrap_or(1).max(1)
}

/// The current time in UTC, `2025-01-31 14:05 UTC`.
pub fn utc_now() -> String {
    // SAFETY: time with a null pointer and gmtime_r with valid pointers.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::gmtime_r(&now, &mut tm).is_null() {
            return "unknown".into();
        }
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02} UTC",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min
        )
    }
}

/// `/proc/stat`'s clock ticks per second (USER_HZ), the same on every
/// Linux architecture the bench runs on.
const TICKS_PER_SECOND: f64 = 100.0;

/// Busy CPU time of the whole host so far (all CPUs, in seconds):
/// user, nice, system, irq and softirq of `/proc/stat`'s `cpu` line, and
/// steal: time the hypervisor gave this virtual machine's CPUs to others,
/// which slows a run as much as a process here would.
fn host_busy_seconds() -> Result<f64> {
    let stat = fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|line| line.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let fields: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().unwrap_or(0.0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .map(|&index| fields.get(index).copied().unwrap_or(0.0))
        .sum::<f64>();
    Ok(busy / TICKS_PER_SECOND)
}

/// CPU time of this process and every child it has reaped (seconds).
fn own_cpu_seconds() -> f64 {
    let mut total = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: an all-zero rusage is valid; getrusage fills it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer for the call.
        if unsafe { libc::getrusage(who, &mut usage) } == 0 {
            for time in [usage.ru_utime, usage.ru_stime] {
                total += time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
            }
        }
    }
    total
}

/// Measures the CPU that processes other than the bench's own use over an
/// interval: the host's busy time minus the bench's and its reaped
/// children's. Every child must be reaped before [`LoadProbe::foreign`].
pub struct LoadProbe {
    busy: f64,
    own: f64,
    started: Instant,
}

impl LoadProbe {
    pub fn start() -> Result<Self> {
        Ok(Self {
            busy: host_busy_seconds()?,
            own: own_cpu_seconds(),
            started: Instant::now(),
        })
    }

    /// The share of one CPU used by other processes since the start
    /// (0.05 = 5% of a core). `/proc/stat` counts in 10 ms ticks, so short
    /// intervals read a little noisy; never negative.
    pub fn foreign(&self) -> Result<f64> {
        let busy = host_busy_seconds()? - self.busy;
        let own = own_cpu_seconds() - self.own;
        let wall = self.started.elapsed().as_secs_f64().max(1e-3);
        Ok(((busy - own) / wall).max(0.0))
    }
}

/// Waits until the host is quiet: less than `threshold` of one CPU busy
/// over a short window, at most `longest`. Returns how long it waited and
/// the last load seen (share of one CPU).
pub fn wait_quiet(threshold: f64, longest: Duration) -> Result<(Duration, f64)> {
    const WINDOW: Duration = Duration::from_millis(300);
    let started = Instant::now();
    let mut announced = false;
    loop {
        let probe = LoadProbe::start()?;
        thread::sleep(WINDOW);
        let load = probe.foreign()?;
        let waited = started.elapsed();
        if load < threshold || waited >= longest {
            return Ok((waited, load));
        }
        if !announced {
            eprintln!(
                "bench: other processes use {:.0}% of a CPU; waiting up to {:.0} s for quiet",
                load * 100.0,
                longest.as_secs_f64()
            );
            announced = true;
        }
    }
}

/// Drops the page cache (and dentries and inodes), so that the next reads
/// of files come from disk: the cold-cache symbolization measurement.
/// `vm.drop_caches` is a trigger, not a setting: there is nothing to restore.
pub fn drop_page_cache() -> Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").context("writing /proc/sys/vm/drop_caches")
}

/// perf opens tracepoints (`events`, for the error) through tracefs,
/// which a fresh host does not mount (stoke needs none). Mounted only if
/// it was not, and unmounted when the returned guard drops: the bench
/// leaves the host as it found it (tests of a fresh host run after it).
pub fn mount_tracefs(events: &str) -> Result<Tracefs> {
    let tracing = Path::new(TRACING);
    if tracing.join("events").is_dir() {
        return Ok(Tracefs { mounted: false });
    }
    let status = Command::new("mount")
        .args(["-t", "tracefs", "nodev"])
        .arg(tracing)
        .status()
        .context("running mount")?;
    ensure!(
        status.success(),
        "could not mount tracefs on {} for perf's {events}",
        tracing.display()
    );
    Ok(Tracefs { mounted: true })
}

const TRACING: &str = "/sys/kernel/tracing";

/// tracefs, for perf's tracepoints, while this lives.
#[must_use = "tracefs is unmounted when this drops"]
pub struct Tracefs {
    /// The bench mounted it (and unmounts it).
    mounted: bool,
}

impl Drop for Tracefs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(TRACING).status();
        }
    }
}
