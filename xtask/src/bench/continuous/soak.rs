//! The soak: `stoke continuous -a` at 99 Hz for many minutes while short-
//! lived processes are exec'd a hundred times a second and containers start
//! and stop, its RSS and CPU time read every few seconds; beside it a JVM
//! that an incident's `stoke record -p` profiles every minute.

use std::{
    fs,
    path::Path,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

use super::{
    containers::{self, Churned, ContainerChurn},
    daemon::{self, Daemon, Resident, Usage},
};
use crate::bench::{
    build::java_command,
    process::Process,
    profiler::{Options, Recording, Tool},
    stacks::is_java,
    Bench,
};

pub const HZ: u64 = 99;
pub const INTERVAL: Duration = Duration::from_secs(10);
/// `--keep`: what stays in the directory is bounded however long it runs.
pub const KEEP: usize = 5;
pub const EXEC_RATE: u32 = 120;
/// CPU each short-lived process burns before it exits.
pub const SHORT_LIVED_MS: u32 = 1;
/// How often stoke's RSS and CPU time are read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// How often a container starts.
pub const CONTAINER_EVERY: Duration = Duration::from_secs(5);
/// How often an incident's `stoke record -p` of the JVM runs beside the
/// daemon; each records until the next reading.
pub const RECORD_EVERY: Duration = Duration::from_secs(60);
/// The warm-up of a full run, left out of the steady state.
const WARM_UP: Duration = Duration::from_secs(120);

/// What the soak measured.
pub struct Soak {
    pub length: Duration,
    /// The first part, left out of the steady state.
    pub warm_up: Duration,
    /// Stoke's RSS and CPU, every [`SAMPLE_EVERY`] from its start.
    pub usage: Vec<Usage>,
    /// What its resident memory held at the end.
    pub resident: Resident,
    /// The 1-minute load average at each reading.
    pub loads: Vec<f64>,
    pub stopped: daemon::Stopped,
    pub exec_rate: f64,
    /// The containers run, or why docker could not be used.
    pub containers: Result<Churned, String>,
    /// Services with a directory of profiles at the end, and the most files
    /// one holds.
    pub service_dirs: usize,
    pub most_files: usize,
    /// The records beside the daemon: the JVM's samples in each, and how
    /// many had Java frames (none without a JDK).
    pub records: Vec<(u64, u64)>,
}

impl Soak {
    /// The readings after the warm-up.
    pub fn steady(&self) -> &[Usage] {
        let first = self
            .usage
            .iter()
            .position(|usage| usage.at >= self.warm_up)
            .unwrap_or(self.usage.len());
        &self.usage[first..]
    }

    /// How many of the first intervals fall into the warm-up.
    pub fn warm_up_intervals(&self) -> usize {
        (self.warm_up.as_secs_f64() / INTERVAL.as_secs_f64()).ceil() as usize
    }
}

pub fn run(bench: &Bench) -> Result<Soak> {
    let length = Duration::from_secs_f64(bench.settings.soak_minutes * 60.0);
    let warm_up = if bench.settings.smoke || length < 3 * WARM_UP {
        length / 3
    } else {
        WARM_UP
    };
    let image = containers::image(&bench.workloads.busy_other, &bench.scratch("soak-rootfs"));
    if let Err(why) = &image {
        bench.log(&format!("soak without containers: {why}"));
    }
    let mut daemon = Daemon::start(
        bench,
        &daemon::Options {
            hz: HZ,
            interval: INTERVAL,
            output_dir: "soak-profiles",
            keep: KEEP,
        },
    )?;
    let workloads = &bench.workloads;
    let mut spawner = Process::spawn(
        "spawner",
        Command::new(&workloads.spawner)
            .arg(&workloads.short_lived)
            .arg(EXEC_RATE.to_string())
            .arg(length.as_secs_f64().to_string())
            .arg(SHORT_LIVED_MS.to_string()),
    )?;
    let churn = image.map(|image| ContainerChurn::start(image, CONTAINER_EVERY));
    let mut jvm = match &workloads.java_fixed_work {
        Some(classes) => Some(Process::spawn(
            "FixedWork",
            java_command(classes, &[])
                .arg("-s")
                .arg((length.as_secs_f64() + 30.0).to_string())
                .arg("1"),
        )?),
        None => None,
    };
    let (mut records, mut record, mut next_record) =
        (Vec::new(), None, RECORD_EVERY.min(length / 2));

    let started = Instant::now();
    let (mut usage, mut loads) = (Vec::new(), Vec::new());
    let mut next_log = Duration::from_secs(60);
    for reading in 0u32.. {
        let due = started + SAMPLE_EVERY * reading;
        if due > started + length {
            break;
        }
        thread::sleep(due.saturating_duration_since(Instant::now()));
        let now = daemon.usage()?;
        usage.push(now);
        if let Some(recording) = record.take() {
            records.push(java_samples(recording, jvm.as_ref())?);
        } else if let Some(jvm) = jvm
            .as_ref()
            .filter(|_| now.at >= next_record && now.at + SAMPLE_EVERY <= length)
        {
            next_record += RECORD_EVERY;
            let options = Options {
                pids: vec![u32::try_from(jvm.pid())?],
                ..Options::new(Tool::Stoke, HZ, "folded")
            };
            record = Some(Recording::start(bench, &options, "soak-record")?);
        }
        loads.push(load_average()?);
        if now.at >= next_log {
            next_log += Duration::from_secs(60);
            let intervals = daemon.intervals();
            bench.log(&format!(
                "soak {:.0} min: RSS {:.1} MB, CPU {:.1} s, {} intervals",
                now.at.as_secs_f64() / 60.0,
                now.rss as f64 / 1e6,
                now.cpu.as_secs_f64(),
                intervals.len()
            ));
        }
    }

    if let Some(jvm) = jvm.as_mut() {
        jvm.signal(libc::SIGKILL);
        jvm.wait(Duration::from_secs(30))?;
    }
    let exit = spawner.wait(Duration::from_secs(120))?;
    ensure!(exit.success(), "spawner failed: {}", exit.describe());
    let exec_rate = spawner.printed::<f64>("spawned")? / spawner.printed::<f64>("seconds")?;
    let containers = churn.map(ContainerChurn::stop);
    let resident = daemon.resident()?;
    let output_dir = daemon.output_dir.clone();
    let stopped = daemon.stop()?;
    let (service_dirs, most_files) = files_left(&output_dir)?;
    Ok(Soak {
        length,
        warm_up,
        usage,
        resident,
        loads,
        stopped,
        exec_rate,
        containers,
        service_dirs,
        most_files,
        records,
    })
}

/// A record beside the daemon, stopped: the JVM's samples, and how many
/// had Java frames.
fn java_samples(recording: Recording, jvm: Option<&Process>) -> Result<(u64, u64)> {
    let stopped = recording.stop()?;
    let stacks = stopped.stacks()?;
    stopped.remove_output();
    let pid = jvm.and_then(|jvm| u32::try_from(jvm.pid()).ok());
    Ok(stacks
        .iter()
        .filter(|stack| Some(stack.pid) == pid)
        .fold((0, 0), |(all, java), stack| {
            let with_java = stack.frames.iter().any(|frame| is_java(frame));
            (
                all + stack.samples,
                java + if with_java { stack.samples } else { 0 },
            )
        }))
}

/// The 1-minute load average.
fn load_average() -> Result<f64> {
    let text = fs::read_to_string("/proc/loadavg").context("reading /proc/loadavg")?;
    text.split_whitespace()
        .next()
        .and_then(|first| first.parse().ok())
        .context("parsing /proc/loadavg")
}

/// The service directories under `dir` and the most files one holds.
fn files_left(dir: &Path) -> Result<(usize, usize)> {
    let (mut services, mut most) = (0, 0);
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            services += 1;
            most = most.max(fs::read_dir(&path)?.count());
        }
    }
    Ok((services, most))
}
