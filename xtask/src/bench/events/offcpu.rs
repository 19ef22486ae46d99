//! Off-CPU time: what recording where threads wait costs a workload
//! that does nothing but switch, `stoke record -a -e offcpu` (its default
//! minimum, and none; user stacks by task work, and at syscall exits as on
//! kernels before 6.18), `-e wall` and `-e runqueue` (the same program in
//! their modes) beside `perf record -a -g -e sched:sched_switch`.
//!
//! The workload (`switch_storm`) passes a byte back and forth between two
//! threads for a fixed number of round trips and counts its context
//! switches: its slowdown over its switches is the cost per switch, paid in
//! the sched_switch hook, the stack reads and the profiler's own CPU.
//! bcc's `offcputime` is in the table as libbpf-tools builds it (Debian's
//! `libbpf-tools`, a BTF tracepoint on sched_switch): the Python bcc one
//! compiles its program against kernel headers and hooks
//! `finish_task_switch` with a kprobe, and this kernel has neither.

use std::{
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{ensure, Result};

use super::super::{
    host::mount_tracefs,
    process::Process,
    profiler::{Options, Recording, Tool},
    report::{Table, Target, Verdict},
    rotated,
    stats::{percent, percent_signed, show, Spread},
    Bench,
};

/// Who records while the storm runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Profiler {
    Nobody,
    /// stoke with `--offcpu-min` in nanoseconds (`None`: its default).
    Stoke(Option<u64>),
    /// stoke at its default minimum, user stacks taken at syscall exits.
    StokeAtSyscallExits,
    /// stoke recording another event of its off-CPU program (`wall`,
    /// `runqueue`).
    StokeEvent(&'static str),
    Perf,
    /// libbpf-tools' offcputime with the same minimum as stoke's default.
    Offcputime,
}

const PROFILERS: [Profiler; 8] = [
    Profiler::Nobody,
    Profiler::Stoke(None),
    Profiler::StokeAtSyscallExits,
    Profiler::Stoke(Some(0)),
    Profiler::StokeEvent("wall"),
    Profiler::StokeEvent("runqueue"),
    Profiler::Perf,
    Profiler::Offcputime,
];

/// Where Debian's libbpf-tools puts offcputime (`cargo xtask setup`
/// installs it).
const OFFCPUTIME: &str = "/usr/sbin/offcputime";

/// How long offcputime may take to load and attach its programs.
const OFFCPUTIME_START: Duration = Duration::from_secs(10);

/// The slowdown stoke's default off-CPU recording may cost the storm.
const DEFAULT_TARGET: f64 = 0.05;

/// Storms run under each start of a profiler. This host's pace swings by
/// a third from one storm to the next with nothing else running (other
/// guests of the hypervisor): each profiler is judged by its fastest
/// storm, the least disturbed, and several short storms per start give
/// every profiler as many chances at a quiet moment.
const STORMS_PER_RUN: usize = 3;

impl Profiler {
    fn label(self) -> String {
        match self {
            Profiler::Nobody => "none".into(),
            Profiler::Stoke(None) => "stoke record -a -e offcpu (minimum 100 µs)".into(),
            Profiler::Stoke(Some(min)) => {
                format!("stoke record -a -e offcpu --offcpu-min {min}")
            }
            Profiler::StokeAtSyscallExits => {
                "... minimum 100 µs, STOKE_OFFCPU_AT_SYSCALL_EXIT=1 (kernels before 6.18)".into()
            }
            Profiler::StokeEvent(event) => format!("stoke record -a -e {event}"),
            Profiler::Perf => "perf record -a -g -e sched:sched_switch".into(),
            Profiler::Offcputime => "offcputime -m 100 (libbpf-tools, bcc's tool)".into(),
        }
    }
}

/// One start of a profiler, its storms run under it.
struct Run {
    /// The fastest of its storms.
    elapsed: f64,
    switches: f64,
    /// CPU the profiler used while its storms ran, a share of one CPU.
    profiler_cpu: f64,
    /// stoke: waits recorded; perf: switches recorded (all its storms).
    records: u64,
    /// stoke: waits left out past the budget.
    over_budget: u64,
}

/// The off-CPU section's text and targets.
pub fn run(bench: &Bench) -> Result<(String, Vec<Target>)> {
    let _tracefs = mount_tracefs("sched:sched_switch")?;
    let round_trips = calibrate(bench)?;
    let mut runs: Vec<Vec<Run>> = PROFILERS.iter().map(|_| Vec::new()).collect();
    for round in 0..bench.settings.rounds {
        for profiler in rotated(&PROFILERS, round) {
            let what = format!("off-CPU round {}: {}", round + 1, profiler.label());
            let run = bench
                .measure(&what, || run_once(bench, round_trips, profiler))?
                .value;
            bench.log(&format!(
                "{what}: {:.3} s, {:.0} switches",
                run.elapsed, run.switches
            ));
            let index = PROFILERS.iter().position(|&p| p == profiler);
            runs[index.expect("a known profiler")].push(run);
        }
    }
    Ok(section(round_trips, &runs, bench.settings.smoke))
}

/// The round trips that take about `work_seconds` without a profiler
/// over a run's storms together (the faster of two probes, as a
/// disturbance only slows).
fn calibrate(bench: &Bench) -> Result<u64> {
    let probe = if bench.settings.smoke {
        20_000
    } else {
        100_000
    };
    let mut fastest = f64::MAX;
    for _ in 0..2 {
        let run = bench.measure("off-CPU: calibrating the storm", || storm(bench, probe))?;
        fastest = fastest.min(run.value.0);
    }
    let seconds = bench.settings.work_seconds / STORMS_PER_RUN as f64;
    let round_trips = (probe as f64 * seconds / fastest).ceil() as u64;
    bench.log(&format!(
        "off-CPU: {round_trips} round trips take about {seconds:.1} s"
    ));
    Ok(round_trips.max(1))
}

/// Runs the storm STORMS_PER_RUN times: the fastest one's elapsed time
/// and context switches, and all of their elapsed times together.
fn storms(bench: &Bench, round_trips: u64) -> Result<((f64, f64), f64)> {
    let mut fastest = (f64::MAX, 0.0);
    let mut total = 0.0;
    for _ in 0..STORMS_PER_RUN {
        let run = storm(bench, round_trips)?;
        total += run.0;
        if run.0 < fastest.0 {
            fastest = run;
        }
    }
    Ok((fastest, total))
}

/// Runs the storm once: its elapsed time and its context switches.
fn storm(bench: &Bench, round_trips: u64) -> Result<(f64, f64)> {
    let mut command = Command::new(&bench.workloads.switch_storm);
    command.arg(round_trips.to_string());
    let mut process = Process::spawn("switch_storm", &mut command)?;
    // Generous: even a costly profiler slows it by times, not by tens.
    let timeout = Duration::from_secs_f64(60.0 + bench.settings.work_seconds * 20.0);
    let exit = process.wait(timeout)?;
    ensure!(
        exit.success(),
        "switch_storm failed: {}: {}",
        exit.describe(),
        process.stderr().all().join(" / ")
    );
    Ok((process.printed("elapsed_s")?, process.printed("switches")?))
}

fn run_once(bench: &Bench, round_trips: u64, profiler: Profiler) -> Result<Run> {
    let options = match profiler {
        Profiler::Nobody => {
            let ((elapsed, switches), _) = storms(bench, round_trips)?;
            return Ok(Run {
                elapsed,
                switches,
                profiler_cpu: 0.0,
                records: 0,
                over_budget: 0,
            });
        }
        Profiler::Stoke(min) => {
            let mut args = vec!["-e".to_owned(), "offcpu".to_owned()];
            if let Some(min) = min {
                args.extend(["--offcpu-min".to_owned(), min.to_string()]);
            }
            Options {
                stoke_args: args,
                ..Options::new(Tool::Stoke, 99, "json")
            }
        }
        Profiler::StokeEvent(event) => Options {
            stoke_args: vec!["-e".to_owned(), event.to_owned()],
            ..Options::new(Tool::Stoke, 99, "json")
        },
        Profiler::StokeAtSyscallExits => Options {
            stoke_args: vec!["-e".to_owned(), "offcpu".to_owned()],
            stoke_env: vec![("STOKE_OFFCPU_AT_SYSCALL_EXIT", "1")],
            ..Options::new(Tool::Stoke, 99, "json")
        },
        Profiler::Perf => Options {
            perf_event: Some("sched:sched_switch"),
            ..Options::new(Tool::Perf, 99, "json")
        },
        Profiler::Offcputime => return offcputime_run(bench, round_trips),
    };
    let recording = Recording::start(bench, &options, "offcpu")?;
    let cpu_before = recording.cpu_now()?;
    let ((elapsed, switches), total) = storms(bench, round_trips)?;
    let profiler_cpu = (recording.cpu_now()? - cpu_before).as_secs_f64() / total;
    let stopped = recording.stop()?;
    let (records, over_budget) = match stopped.tool {
        Tool::Stoke => {
            let summary = stopped.summary()?;
            (summary.samples, summary.over_budget)
        }
        Tool::Perf => (stopped.samples, 0),
    };
    stopped.remove_output();
    Ok(Run {
        elapsed,
        switches,
        profiler_cpu,
        records,
        over_budget,
    })
}

/// The storm under offcputime, which aggregates in the kernel and prints
/// its stacks when interrupted.
fn offcputime_run(bench: &Bench, round_trips: u64) -> Result<Run> {
    let mut command = Command::new(OFFCPUTIME);
    command.args(["-m", "100"]);
    let mut process = Process::spawn("offcputime", &mut command)?;
    wait_for_bpf_link(&process)?;
    let cpu_before = process.cpu_now()?;
    let ((elapsed, switches), total) = storms(bench, round_trips)?;
    let profiler_cpu = (process.cpu_now()? - cpu_before).as_secs_f64() / total;
    process.signal(libc::SIGINT);
    let exit = process.wait(Duration::from_secs(60))?;
    ensure!(exit.success(), "offcputime failed: {}", exit.describe());
    Ok(Run {
        elapsed,
        switches,
        profiler_cpu,
        records: 0,
        over_budget: 0,
    })
}

/// Waits until `process` holds a BPF link: its programs are attached (it
/// prints nothing before it ends).
fn wait_for_bpf_link(process: &Process) -> Result<()> {
    let fds = format!("/proc/{}/fd", process.pid());
    let deadline = Instant::now() + OFFCPUTIME_START;
    while Instant::now() < deadline {
        let linked = std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|target| target.to_string_lossy().contains("bpf_link"));
        if linked {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(20));
    }
    anyhow::bail!("offcputime attached nothing within {OFFCPUTIME_START:?}")
}

pub(super) fn median(values: impl Iterator<Item = f64>) -> f64 {
    Spread::of(&values.collect::<Vec<_>>()).map_or(0.0, |spread| spread.median)
}

/// The fastest of `values` (0 if none).
pub(super) fn fastest(values: impl Iterator<Item = f64>) -> f64 {
    values.min_by(f64::total_cmp).unwrap_or(0.0)
}

/// How sharp the floor of `none` is: how far its second fastest run
/// (each run the fastest of its storms) is from its fastest. Profiled
/// runs meet the same disturbances, so two estimates of one cost are
/// about this far apart.
fn floor_noise(none: &[Run]) -> f64 {
    let mut times: Vec<f64> = none.iter().map(|run| run.elapsed).collect();
    times.sort_by(f64::total_cmp);
    match times.as_slice() {
        [first, second, ..] if *first > 0.0 => second / first - 1.0,
        _ => 0.0,
    }
}

/// The text: a row per profiler; and the targets.
fn section(round_trips: u64, runs: &[Vec<Run>], smoke: bool) -> (String, Vec<Target>) {
    let elapsed = |index: usize| fastest(runs[index].iter().map(|run| run.elapsed));
    let base = elapsed(0);
    let noise = floor_noise(&runs[0]);
    let switches = median(runs[0].iter().map(|run| run.switches));
    let mut body = format!(
        "### Off-CPU time\n\n`switch_storm` (bench/workloads) passes a byte between two threads through two \
         pipes, both on the last CPU, {round_trips} round trips, {switches:.0} context switches \
         ({rate:.0} per second unprofiled); each profiler records the whole host. Each start \
         of a profiler (and each round of `none`) runs {STORMS_PER_RUN} storms: this host's \
         pace swings by a third from one storm to the next with nothing else running, and a \
         disturbance only slows, so each profiler is judged by its fastest storm over the \
         rounds, the least disturbed. Slowdown = fastest / fastest(none) − 1; cost per switch \
         = (fastest − fastest(none)) / switches, everything the profiler adds to a switch (its \
         hook, the stacks it reads, and its own work where it lands on the storm's CPU). \
         **Noise**: how far the second fastest run of `none` is from its fastest, {noise}. \
         Elapsed: each run's fastest storm, median (min–max) over the rounds. Records: waits \
         stoke sent per start (and left out past its budget of 2000 per CPU per second), or \
         switches perf wrote; offcputime counts in the kernel and writes its stacks at the \
         end. bcc's `offcputime` is libbpf-tools' here (Debian's `libbpf-tools`): the Python \
         one needs kernel headers and a kprobe on `finish_task_switch`, and this kernel has \
         neither.\n\n",
        rate = switches / base.max(f64::MIN_POSITIVE),
        noise = percent(noise),
    );
    let mut table = Table::new(&[
        "profiler",
        "elapsed",
        "slowdown",
        "cost per switch",
        "profiler CPU (of one CPU)",
        "records (over budget)",
    ]);
    let mut slowdowns = Vec::new();
    for (index, profiler) in PROFILERS.iter().enumerate() {
        let slowdown = elapsed(index) / base - 1.0;
        let cost_ns = (elapsed(index) - base) / switches * 1e9;
        slowdowns.push((*profiler, slowdown, cost_ns));
        let cpu = median(runs[index].iter().map(|run| run.profiler_cpu));
        let records = median(runs[index].iter().map(|run| run.records as f64));
        let over = median(runs[index].iter().map(|run| run.over_budget as f64));
        let times: Vec<f64> = runs[index].iter().map(|run| run.elapsed).collect();
        table.row(vec![
            profiler.label(),
            show(&times, 3, " s"),
            if index == 0 {
                "–".into()
            } else {
                percent_signed(slowdown)
            },
            if index == 0 {
                "–".into()
            } else {
                format!("{cost_ns:.0} ns")
            },
            if index == 0 {
                "–".into()
            } else {
                percent(cpu)
            },
            match profiler {
                Profiler::Nobody => "–".into(),
                Profiler::Stoke(_) | Profiler::StokeAtSyscallExits | Profiler::StokeEvent(_) => {
                    format!("{records:.0} ({over:.0})")
                }
                Profiler::Perf => format!("{records:.0}"),
                Profiler::Offcputime => "–".into(),
            },
        ]);
    }
    body += &table.markdown();
    let of = |wanted: Profiler| {
        slowdowns
            .iter()
            .find(|(profiler, _, _)| *profiler == wanted)
            .map(|&(_, slowdown, cost)| (slowdown, cost))
            .expect("every profiler measured")
    };
    let (default_slowdown, default_cost) = of(Profiler::Stoke(None));
    let (_, stoke_cost) = of(Profiler::Stoke(Some(0)));
    let (_, perf_cost) = of(Profiler::Perf);
    let (_, offcputime_cost) = of(Profiler::Offcputime);
    let noise_ns = noise * base / switches * 1e9;
    let mut targets = vec![
        Target::at_most(
            format!(
                "stoke -e offcpu (default minimum) slows a switch storm by ≤{}",
                percent(DEFAULT_TARGET)
            ),
            percent_signed(default_slowdown),
            (default_slowdown, DEFAULT_TARGET, noise),
            percent,
        ),
        Target::at_most(
            "stoke -e offcpu with no minimum costs a switch no more than perf's sched_switch -g",
            format!("{stoke_cost:.0} ns against {perf_cost:.0} ns"),
            (stoke_cost, perf_cost, noise_ns),
            |ns| format!("{ns:.0} ns"),
        ),
        Target::at_most(
            "stoke -e offcpu (default minimum) costs a switch no more than offcputime -m 100",
            format!("{default_cost:.0} ns against {offcputime_cost:.0} ns"),
            (default_cost, offcputime_cost, noise_ns),
            |ns| format!("{ns:.0} ns"),
        ),
    ];
    if smoke {
        for target in &mut targets {
            target.verdict = Verdict::NotJudged("smoke run".into());
        }
    }
    (body, targets)
}
