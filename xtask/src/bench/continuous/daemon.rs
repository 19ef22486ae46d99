//! `stoke continuous` as the bench runs it: writing its profiles to a
//! directory, its RSS and CPU time read from /proc while it runs, its
//! interval lines parsed, stopped with SIGTERM as a service manager would.

use std::{
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

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
    pub output_dir: &'a Path,
    /// `--keep`: files kept per service.
    pub keep: usize,
}

/// A running `stoke continuous`.
pub struct Daemon {
    process: Process,
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
    /// RssAnon, in bytes: the heap; the rest of VmRSS is stoke's binary,
    /// libraries and the BPF maps it maps.
    pub anon: u64,
    /// utime + stime of all its threads, ended ones included.
    pub cpu: Duration,
}

/// One interval as stoke logs it: `interval: 197 samples (0 lost), 1
/// processes, 1 services, named and encoded in 129 ms; output-dir: ...`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub samples: u64,
    pub lost: u64,
    pub processes: u64,
    pub services: u64,
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
        let mut command = Command::new(&bench.stoke);
        command
            .args(["continuous", "-a", "-F", &options.hz.to_string()])
            .arg("--interval")
            .arg(options.interval.as_secs_f64().to_string())
            .arg("--output-dir")
            .arg(options.output_dir)
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
            started: Instant::now(),
            taken: 0,
        })
    }

    /// Its RSS and CPU time now.
    pub fn usage(&self) -> Result<Usage> {
        let pid = self.process.pid();
        let status_path = format!("/proc/{pid}/status");
        let status = fs::read_to_string(&status_path)
            .with_context(|| format!("reading {status_path} (did stoke end?)"))?;
        let kib = |field: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|value| {
                    value
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .with_context(|| format!("no {field} in {status_path}"))
        };
        let stat_path = format!("/proc/{pid}/stat");
        let stat =
            fs::read_to_string(&stat_path).with_context(|| format!("reading {stat_path}"))?;
        Ok(Usage {
            at: self.started.elapsed(),
            rss: kib("VmRSS:")? * 1024,
            anon: kib("RssAnon:")? * 1024,
            cpu: cpu_of_stat(&stat).with_context(|| format!("parsing {stat_path}"))?,
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

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line. The
/// command name (field 2) may hold spaces: fields are counted after it.
fn cpu_of_stat(stat: &str) -> Option<Duration> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // fields[0] is field 3 (the state).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&hz| hz > 0)?;
    Some(Duration::from_secs_f64(ticks as f64 / per_second as f64))
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
            lost: count(" lost)")?,
            processes: count(" processes")?,
            services: count(" services")?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_interval_and_stopped_lines() {
        let interval = "2026-11-23T19:33:53.724038Z  INFO interval: 197 samples (3 lost), \
                        12 processes, 4 services, named and encoded in 129 ms; output-dir: 2 \
                        delivered, 0 refused, 0 failed attempts, 0 batches dropped";
        assert_eq!(
            Interval::parse(interval),
            Some(Interval {
                samples: 197,
                lost: 3,
                processes: 12,
                services: 4,
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
    fn cpu_time_counts_fields_after_the_command_name() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let cpu = cpu_of_stat(stat).unwrap().as_secs_f64();
        assert!((cpu - 300.0 / hz).abs() < 1e-9, "{cpu}");
    }
}
