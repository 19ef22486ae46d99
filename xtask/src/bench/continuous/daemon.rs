//! `stoke continuous` as the bench runs it: writing its profiles to a
//! directory, its RSS and CPU time read from /proc while it runs, its
//! interval lines parsed, stopped with SIGTERM as a service manager would.

use std::{
    fs,
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use stoke_tests::cpu_time;

use super::super::{
    process::{Exit, Process},
    Bench,
};

/// Longest wait for stoke to start sampling (it loads its BPF programs and
/// may read a thousand processes first).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// What the bench asks of `stoke continuous`.
pub struct Options<'a> {
    pub hz: u64,
    pub interval: Duration,
    /// The bench's scratch directory it writes its profiles to.
    pub output_dir: &'a str,
    /// `--keep`: files kept per service.
    pub keep: usize,
}

/// A running `stoke continuous`.
pub struct Daemon {
    process: Process,
    /// Where it writes its profiles.
    pub output_dir: PathBuf,
    started: Instant,
    /// Interval lines already returned by [`Daemon::next_interval`].
    taken: usize,
}

/// Stoke's resources at one moment, from /proc.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Since stoke started sampling.
    pub at: Duration,
    /// VmRSS, in bytes.
    pub rss: u64,
    /// utime + stime of all its threads, ended ones included.
    pub cpu: Duration,
}

/// What stoke's resident memory holds at one moment, in bytes, from
/// /proc/PID/status and /proc/PID/smaps.
#[derive(Debug, Clone, Copy)]
pub struct Resident {
    /// VmRSS.
    pub rss: u64,
    /// RssAnon: the heap.
    pub heap: u64,
    /// The resident part of its mappings of BPF maps (the unwind tables'
    /// maps, allocated whole, and the sample ring).
    pub bpf_maps: u64,
    /// The resident part of its memfds (the sealed copies of the files it
    /// names, the agents' memory).
    pub memfds: u64,
}

impl Resident {
    /// The rest of VmRSS: stoke's binary and libraries.
    pub fn rest(&self) -> u64 {
        self.rss
            .saturating_sub(self.heap + self.bpf_maps + self.memfds)
    }
}

/// One interval as stoke logs it: `interval: 197 samples (0 lost; 0
/// exec/exit records lost), 1 processes, 1 profiles, named and encoded in
/// 129 ms; output-dir: ...`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub samples: u64,
    pub lost: u64,
    pub processes: u64,
    /// A profile per service and event.
    pub profiles: u64,
    /// Milliseconds from the interval's end to its profiles handed to the
    /// exporter: naming the frames, folding, encoding one pprof per service.
    pub encode_ms: f64,
}

/// The exporter's counts, as stoke logs them when it stops: `output-dir: 8
/// delivered, 0 refused, 0 failed attempts, 0 batches dropped`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Delivery {
    pub delivered: u64,
    pub refused: u64,
    pub failed_attempts: u64,
    pub batches_dropped: u64,
}

/// What a stopped `stoke continuous` left.
pub struct Stopped {
    pub exit: Exit,
    pub intervals: Vec<Interval>,
    /// `None` if it logged no `stopped:` line.
    pub delivery: Option<Delivery>,
}

impl Daemon {
    /// Starts `stoke continuous -a` and returns once it samples.
    pub fn start(bench: &Bench, options: &Options) -> Result<Self> {
        let output_dir = bench.scratch(options.output_dir);
        fs::create_dir_all(&output_dir)
            .with_context(|| format!("creating {}", output_dir.display()))?;
        let mut command = Command::new(&bench.stoke);
        command
            .args(["continuous", "-a", "-F", &options.hz.to_string()])
            // The bench's workloads are native; a JVM of another user of the
            // host (a test running meanwhile) is left alone.
            .arg("--no-jvm")
            .arg("--interval")
            .arg(options.interval.as_secs_f64().to_string())
            .arg("--output-dir")
            .arg(&output_dir)
            .args(["--keep", &options.keep.to_string()]);
        let mut process = Process::spawn("stoke continuous", &mut command)?;
        let announced = process
            .stderr()
            .wait_for(|line| line.starts_with("stoke: sampling"), START_TIMEOUT)?;
        if announced.is_none() {
            let exit = process.wait(Duration::from_secs(5))?;
            bail!(
                "stoke continuous ended ({}) before sampling: {}",
                exit.describe(),
                process.stderr().all().join(" / ")
            );
        }
        Ok(Self {
            process,
            output_dir,
            started: Instant::now(),
            taken: 0,
        })
    }

    /// Its RSS and CPU time now.
    pub fn usage(&self) -> Result<Usage> {
        let pid = u32::try_from(self.process.pid()).context("a child's pid")?;
        Ok(Usage {
            at: self.started.elapsed(),
            rss: self.process.status_bytes("VmRSS")?,
            cpu: cpu_time(pid),
        })
    }

    /// What its resident memory holds now: smaps, read once, as reading it
    /// walks stoke's page tables under its memory map's lock.
    pub fn resident(&self) -> Result<Resident> {
        let pid = u32::try_from(self.process.pid()).context("a child's pid")?;
        let (bpf_maps, memfds) = mapped_rss(pid)?;
        Ok(Resident {
            rss: self.process.status_bytes("VmRSS")?,
            heap: self.process.status_bytes("RssAnon")?,
            bpf_maps,
            memfds,
        })
    }

    /// Waits, at most `timeout`, for the next interval stoke logs.
    pub fn next_interval(&mut self, timeout: Duration) -> Result<Interval> {
        // Lines already received: wait_for only looks at those still to come.
        if let Some(interval) = self.intervals().get(self.taken).copied() {
            self.taken += 1;
            return Ok(interval);
        }
        let line = self
            .process
            .stderr()
            .wait_for(|line| Interval::parse(line).is_some(), timeout)?;
        let Some(line) = line else {
            bail!(
                "stoke continuous ended: {}",
                self.process.stderr().all().join(" / ")
            );
        };
        self.taken += 1;
        Interval::parse(&line).context("parsing stoke's interval line")
    }

    /// The intervals logged so far.
    pub fn intervals(&mut self) -> Vec<Interval> {
        self.process
            .stderr()
            .seen_so_far()
            .iter()
            .filter_map(|line| Interval::parse(line))
            .collect()
    }

    /// Sends SIGTERM and waits for stoke to flush its last interval and end.
    pub fn stop(mut self) -> Result<Stopped> {
        self.process.signal(libc::SIGTERM);
        let exit = self.process.wait(Duration::from_secs(60))?;
        let lines = self.process.stderr().all();
        if !exit.success() {
            bail!(
                "stoke continuous failed ({}): {}",
                exit.describe(),
                lines.join(" / ")
            );
        }
        Ok(Stopped {
            exit,
            intervals: lines.iter().filter_map(|l| Interval::parse(l)).collect(),
            delivery: lines.iter().rev().find_map(|l| Delivery::parse(l)),
        })
    }
}

/// The number just before `label` in `text` (`197` in `197 samples`, `0`
/// in `(0 lost)`).
fn number_before(text: &str, label: &str) -> Option<f64> {
    let end = text.find(label)?;
    text[..end].rsplit([' ', '(']).next()?.parse().ok()
}

impl Interval {
    fn parse(line: &str) -> Option<Self> {
        let (_, text) = line.split_once("INFO interval: ")?;
        let count = |label| number_before(text, label).map(|n| n as u64);
        Some(Self {
            samples: count(" samples")?,
            lost: count(" lost;")?,
            processes: count(" processes")?,
            profiles: count(" profiles")?,
            encode_ms: number_before(text, " ms;")?,
        })
    }
}

impl Delivery {
    fn parse(line: &str) -> Option<Self> {
        let (_, text) = line.split_once("INFO stopped: ")?;
        let count = |label| number_before(text, label).map(|n| n as u64);
        Some(Self {
            delivered: count(" delivered")?,
            refused: count(" refused")?,
            failed_attempts: count(" failed attempts")?,
            batches_dropped: count(" batches dropped")?,
        })
    }
}

/// The resident bytes of process `pid`'s mappings of BPF maps and of its
/// memfds named `stoke-*`, from /proc/PID/smaps.
fn mapped_rss(pid: u32) -> Result<(u64, u64)> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .with_context(|| format!("reading /proc/{pid}/smaps"))?;
    let (mut bpf_maps, mut memfds) = (0, 0);
    let mut counted: Option<&mut u64> = None;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or_default();
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            counted = if line.contains("anon_inode:bpf-map") {
                Some(&mut bpf_maps)
            } else if line.contains("/memfd:stoke-") {
                Some(&mut memfds)
            } else {
                None
            };
        } else if let (Some(kb), Some(sum)) = (line.strip_prefix("Rss:"), counted.as_deref_mut()) {
            let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse()?;
            *sum += kb << 10;
        }
    }
    Ok((bpf_maps, memfds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_interval_and_stopped_lines() {
        let interval = "2026-11-23T19:33:53.724038Z  INFO interval: 197 samples (3 lost; 0 \
                        exec/exit records lost), \
                        12 processes, 4 profiles, named and encoded in 129 ms; output-dir: 2 \
                        delivered, 0 refused, 0 failed attempts, 0 batches dropped";
        assert_eq!(
            Interval::parse(interval),
            Some(Interval {
                samples: 197,
                lost: 3,
                processes: 12,
                profiles: 4,
                encode_ms: 129.0
            })
        );
        let stopped = "2026-11-23T19:47:22.146502Z  INFO stopped: output-dir: 8 delivered, \
                       1 refused, 2 failed attempts, 3 batches dropped";
        assert_eq!(
            Delivery::parse(stopped),
            Some(Delivery {
                delivered: 8,
                refused: 1,
                failed_attempts: 2,
                batches_dropped: 3
            })
        );
        assert_eq!(Interval::parse(stopped), None);
        assert_eq!(Delivery::parse(interval), None);
    }

    #[test]
    fn memfds_named_stoke_count_what_is_resident() {
        // SAFETY: a NUL-terminated name; the descriptor is checked.
        let fd = unsafe { libc::memfd_create(c"stoke-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        let size = 64 << 10;
        // SAFETY: our own fresh descriptor, then a shared mapping of it.
        let mapped = unsafe {
            assert_eq!(libc::ftruncate(fd, size as libc::off_t), 0);
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(mapped, libc::MAP_FAILED);
        // SAFETY: the first 32 KiB of the mapping, written.
        unsafe { std::ptr::write_bytes(mapped.cast::<u8>(), 1, 32 << 10) };
        let (bpf_maps, memfds) = mapped_rss(std::process::id()).unwrap();
        assert_eq!(bpf_maps, 0);
        assert!((32 << 10..=64 << 10).contains(&memfds), "{memfds} bytes");
        // SAFETY: the mapping and descriptor made above.
        unsafe {
            libc::munmap(mapped, size);
            libc::close(fd);
        }
    }
}
