//! One interval of 1,000 processes: `stoke continuous` over a synthetic
//! host of 1,000 mostly sleeping processes, the time each interval takes
//! to be named and encoded and stoke's CPU time per interval.
//!
//! At 99 Hz two CPUs give at most 1,980 samples in 10 s, too few for each
//! of 1,000 mostly idle processes to be in every interval: this runs at
//! 999 Hz, where each has a few samples in each.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::daemon::{self, Daemon, Interval};
use crate::bench::{scale, Bench};

pub const HZ: u64 = 999;
pub const INTERVAL: Duration = Duration::from_secs(10);
pub const PROCESSES: u32 = 1000;
pub const THREADS_PER_PROCESS: u32 = 3;
/// Each thread wakes every 250–750 ms (500 ms ± 50%) for a 100 µs burst:
/// 0.6 ms of CPU a second per process, 60% of one CPU in all.
pub const BURST_US: u32 = 100;
pub const PERIOD_MS: u32 = 500;

/// What the run measured.
pub struct Thousand {
    pub processes: u32,
    pub threads: u32,
    /// Every interval, the first (which reads every process for the first
    /// time) included, with stoke's CPU time during it.
    pub intervals: Vec<(Interval, Duration)>,
}

pub fn run(bench: &Bench) -> Result<Thousand> {
    // The first interval is cold; the steady ones after it are measured.
    let steady_intervals = if bench.settings.smoke { 1 } else { 4 };
    let intervals_wanted = 1 + steady_intervals;
    let lifetime = INTERVAL * (intervals_wanted + 30);
    let (mut host, processes, threads) = scale::start_host(
        bench,
        &scale::Host {
            processes: PROCESSES,
            threads_per_process: THREADS_PER_PROCESS,
            lifetime,
            burst_us: BURST_US,
            period_ms: PERIOD_MS,
        },
        Duration::from_secs(180),
    )?;
    let mut daemon = Daemon::start(
        bench,
        &daemon::Options {
            hz: HZ,
            interval: INTERVAL,
            output_dir: "thousand-profiles",
            keep: 2,
        },
    )?;
    let mut cpu_before = daemon.usage()?.cpu;
    let mut intervals = Vec::new();
    let deadline = Instant::now() + lifetime;
    for _ in 0..intervals_wanted {
        let left = deadline.saturating_duration_since(Instant::now());
        let interval = daemon.next_interval(left)?;
        let cpu = daemon.usage()?.cpu;
        intervals.push((interval, cpu.saturating_sub(cpu_before)));
        cpu_before = cpu;
        bench.log(&format!(
            "1,000 processes: interval of {} processes named and encoded in {:.0} ms",
            interval.processes, interval.encode_ms
        ));
    }
    daemon.stop()?;
    // SIGTERM: scale_host kills and reaps its children.
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(60))?;
    Ok(Thousand {
        processes,
        threads,
        intervals,
    })
}
