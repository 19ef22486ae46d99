//! Part 1, overhead: how much longer a fixed amount of CPU work takes while
//! a profiler records the whole host, stoke and perf at 99 and 999 Hz, and on
//! the Java workload async-profiler in the JVM when the bench is given it.
//!
//! The workloads (`fixed_work` in C, `FixedWork` in Java) keep every CPU
//! busy with one thread each and time themselves, so whatever a profiler
//! takes (its own CPU, the sampling interrupt and the BPF program or perf's
//! handler, for Java stoke's signal and AsyncGetCallTrace, cache misses)
//! shows as a longer elapsed time.

mod in_one_jvm;

use std::{path::Path, process::Command, time::Duration};

use anyhow::{ensure, Context, Result};

use super::{
    async_profiler::AsyncProfiler,
    build::java_command,
    jvm_phases,
    jvm_share::JvmShare,
    process::Process,
    profiler::{Options, Recording, Tool},
    report::{Section, Table, Target, Verdict},
    rotated,
    stats::{self, percent, percent_signed, Spread},
    Bench, Part,
};

const RATES: [u64; 2] = [99, 999];

/// The slowdown targets for stoke: (rate, at most this share).
const TARGETS: [(u64, f64); 2] = [(99, 0.005), (999, 0.02)];

/// async-profiler 4.5 on this machine, Java CPU workload (from the issue),
/// for runs without `--async-profiler`.
const ASYNC_PROFILER: &str = "async-profiler 4.5, measured earlier on this machine: 0.5% \
                              at 100 Hz, 5–7% at 1000 Hz on a Java CPU workload";

/// Which fixed-work program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Workload {
    Native,
    Java,
}

impl Workload {
    pub(super) fn label(self) -> &'static str {
        match self {
            Workload::Native => "C",
            Workload::Java => "Java",
        }
    }
}

/// Who records while the workload runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Profiler {
    Nobody,
    Recording(Tool, u64),
    /// async-profiler's agent in the workload's JVM, at this rate.
    JvmAgent(u64),
}

impl Profiler {
    fn label(self) -> String {
        match self {
            Profiler::Nobody => "none".into(),
            Profiler::Recording(Tool::Stoke, hz) => format!("stoke record -a, {hz} Hz"),
            Profiler::Recording(Tool::Perf, hz) => format!("perf record -a -g, {hz} Hz"),
            Profiler::JvmAgent(hz) => format!("async-profiler (in the JVM), {hz} Hz"),
        }
    }
}

/// What one run of a workload gave.
struct Run {
    /// The workload's own elapsed time.
    elapsed: f64,
    /// CPU the profiler used while the workload ran, in seconds.
    profiler_cpu: f64,
    samples: u64,
    lost: u64,
    /// stoke: samples with Java frames (its summary), when it says.
    java_samples: Option<u64>,
    /// Other processes took CPU during it, on every try.
    disturbed: bool,
}

/// Every run of one workload under one profiler.
struct Series {
    workload: Workload,
    profiler: Profiler,
    runs: Vec<Run>,
}

pub fn run(bench: &Bench) -> Result<Section> {
    let mut workloads = vec![(Workload::Native, calibrate(bench, Workload::Native)?)];
    if bench.workloads.java_fixed_work.is_some() {
        workloads.push((Workload::Java, calibrate(bench, Workload::Java)?));
    }
    let mut profilers = vec![Profiler::Nobody];
    for hz in RATES {
        profilers.push(Profiler::Recording(Tool::Stoke, hz));
        profilers.push(Profiler::Recording(Tool::Perf, hz));
        if bench.async_profiler.is_some() {
            profilers.push(Profiler::JvmAgent(hz));
        }
    }
    let configs: Vec<(Workload, u64, Profiler)> = workloads
        .iter()
        .flat_map(|&(workload, units)| profilers.iter().map(move |&p| (workload, units, p)))
        // A JVM profiler profiles JVMs only.
        .filter(|&(workload, _, profiler)| {
            workload == Workload::Java || !matches!(profiler, Profiler::JvmAgent(_))
        })
        .collect();
    let mut series: Vec<Series> = configs
        .iter()
        .map(|&(workload, _, profiler)| Series {
            workload,
            profiler,
            runs: Vec::new(),
        })
        .collect();
    for round in 0..bench.settings.rounds {
        for (workload, units, profiler) in rotated(&configs, round) {
            let what = format!(
                "overhead round {}: {} workload, {}",
                round + 1,
                workload.label(),
                profiler.label()
            );
            let measured = bench.measure(&what, || run_once(bench, workload, units, profiler))?;
            let disturbed = measured.disturbed();
            let run = Run {
                disturbed,
                ..measured.value
            };
            bench.log(&format!("{what}: {:.3} s", run.elapsed));
            series
                .iter_mut()
                .find(|s| s.workload == workload && s.profiler == profiler)
                .expect("known configuration")
                .runs
                .push(run);
        }
    }
    let (in_jvm, shares) = match workloads.iter().find(|(w, _)| *w == Workload::Java) {
        Some(&(_, units)) => (
            jvm_phases::run(bench, "overhead", units, &in_one_jvm::PROFILED)?,
            in_one_jvm::shares(bench, units)?,
        ),
        None => (Vec::new(), Vec::new()),
    };
    Ok(section(bench, &workloads, &series, &in_jvm, &shares))
}

/// Picks the number of work units that take about `work_seconds` without a
/// profiler: times a short run (the faster of two, as a disturbance only
/// slows) and scales.
pub(super) fn calibrate(bench: &Bench, workload: Workload) -> Result<u64> {
    let probe_units: u64 = match (workload, bench.settings.smoke) {
        (Workload::Native, false) => 20_000,
        (Workload::Native, true) => 3_000,
        (Workload::Java, false) => 100_000,
        (Workload::Java, true) => 20_000,
    };
    let mut fastest = f64::MAX;
    for _ in 0..2 {
        let what = format!("overhead: calibrating the {} workload", workload.label());
        let seconds = bench
            .measure(&what, || work(bench, workload, probe_units, &[]))?
            .value;
        fastest = fastest.min(seconds);
    }
    let units = (probe_units as f64 * bench.settings.work_seconds / fastest).ceil() as u64;
    bench.log(&format!(
        "overhead: {units} units of the {} workload per thread take about {:.1} s",
        workload.label(),
        bench.settings.work_seconds
    ));
    Ok(units.max(1))
}

/// Runs the fixed work once (a JVM with `jvm_options`) and returns its own
/// elapsed time.
pub(super) fn work(
    bench: &Bench,
    workload: Workload,
    units: u64,
    jvm_options: &[String],
) -> Result<f64> {
    let threads = bench.cpus.to_string();
    let mut command = match workload {
        Workload::Native => Command::new(&bench.workloads.fixed_work),
        Workload::Java => java_command(java_classes(bench)?, jvm_options),
    };
    command.arg(units.to_string()).arg(threads);
    if workload == Workload::Java {
        command.arg(bench.settings.java_warmup_seconds.to_string());
    }
    let mut process = Process::spawn(workload.label(), &mut command)?;
    // Generous: a profiler slows it by percents, not by tens of times.
    let timeout = Duration::from_secs_f64(60.0 + bench.settings.work_seconds * 20.0);
    let exit = process.wait(timeout)?;
    ensure!(
        exit.success(),
        "the {} workload failed: {}: {}",
        workload.label(),
        exit.describe(),
        process.stderr().all().join(" / ")
    );
    process
        .stdout()
        .field("elapsed_s")
        .and_then(|value| value.parse().ok())
        .with_context(|| {
            format!(
                "the {} workload printed no elapsed_s=SECONDS",
                workload.label()
            )
        })
}

fn java_classes(bench: &Bench) -> Result<&Path> {
    bench
        .workloads
        .java_fixed_work
        .as_deref()
        .context("no JDK: the Java workload was not built")
}

fn run_once(bench: &Bench, workload: Workload, units: u64, profiler: Profiler) -> Result<Run> {
    let (tool, hz) = match profiler {
        Profiler::Recording(tool, hz) => (tool, hz),
        Profiler::Nobody => {
            return Ok(Run {
                elapsed: work(bench, workload, units, &[])?,
                profiler_cpu: 0.0,
                samples: 0,
                lost: 0,
                java_samples: None,
                disturbed: false,
            })
        }
        Profiler::JvmAgent(hz) => return run_async_profiler(bench, units, hz),
    };
    let recording = Recording::start(bench, &Options::new(tool, hz, "json"), "overhead")?;
    let cpu_before = recording.cpu_now()?;
    let elapsed = work(bench, workload, units, &[])?;
    let profiler_cpu = (recording.cpu_now()? - cpu_before).as_secs_f64();
    let stopped = recording.stop()?;
    let java_samples = match tool {
        // Counted only when stoke profiled a JVM, as the txt report shows it.
        Tool::Stoke => stopped
            .summary()
            .ok()
            .filter(|summary| summary.java.jvms > 0)
            .map(|summary| summary.java.java_samples),
        Tool::Perf => None,
    };
    stopped.remove_output();
    Ok(Run {
        elapsed,
        profiler_cpu,
        samples: stopped.samples,
        lost: stopped.lost,
        java_samples,
        disturbed: false,
    })
}

/// The Java workload with async-profiler's agent recording CPU from the
/// JVM's start; its cost is in the workload's own time.
fn run_async_profiler(bench: &Bench, units: u64, hz: u64) -> Result<Run> {
    let profiler = bench
        .async_profiler
        .as_ref()
        .context("async-profiler rows without --async-profiler")?;
    let output = bench.scratch("overhead-async-profiler.collapsed");
    let _ = std::fs::remove_file(&output);
    let option = profiler.cpu_agent_option(hz, &output);
    let elapsed = work(bench, Workload::Java, units, &[option])?;
    let samples = AsyncProfiler::samples(&output)?;
    let _ = std::fs::remove_file(&output);
    Ok(Run {
        elapsed,
        profiler_cpu: 0.0,
        samples,
        lost: 0,
        java_samples: None,
        disturbed: false,
    })
}

/// The runs the elapsed times are taken from: those that other processes
/// did not disturb, when at least 3 are left; all of them otherwise. A
/// disturbed run only ever reads slower, and one would set the noise alone.
fn kept(runs: &[Run]) -> Vec<&Run> {
    let quiet: Vec<&Run> = runs.iter().filter(|r| !r.disturbed).collect();
    if quiet.len() >= 3 {
        quiet
    } else {
        runs.iter().collect()
    }
}

fn elapsed(runs: &[Run]) -> Spread {
    Spread::of(&kept(runs).iter().map(|r| r.elapsed).collect::<Vec<_>>())
        .expect("at least one round")
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    Spread::of(&values.collect::<Vec<_>>()).map_or(0.0, |s| s.median)
}

/// The section: a table per workload, and the targets.
fn section(
    bench: &Bench,
    units: &[(Workload, u64)],
    series: &[Series],
    in_jvm: &[jvm_phases::JvmRun],
    shares: &[(u64, Vec<JvmShare>)],
) -> Section {
    let mut body = format!(
        "Each workload runs a fixed amount of work on {cpus} threads, one per CPU, so that \
         every CPU is busy and anything a profiler takes lengthens the run; it times itself. \
         Every configuration ran once per round, {rounds} rounds, the order rotated. \
         Slowdown = median / median(none) − 1; a run during which other processes still \
         took CPU after 3 tries is left out when 3 others remain. **Noise** is the min–max \
         range of `none` \
         over the rounds: a slowdown smaller than it is not resolved. Stoke against \
         async-profiler is a one-sided sign test over the rounds (both run in each): \
         resolved when one was the faster in so many rounds that chance gives it at most \
         once in 32 (5 of 5, 9 of 10, 12 of 15). Profiler CPU is \
         what the profiler process itself used while the work ran, as a share of all CPUs.\n\n\
         - C: `fixed_work` (bench/workloads), encode, checksum, merge sort and score \
         batches of records, stacks about 8 frames deep, built with frame pointers.\n\
         - Java: `FixedWork` (bench/workloads, `java -XX:+UseSerialGC -Xms256m -Xmx256m`), \
         orders built, aggregated in a HashMap, sorted and scored; {warmup} s of warm-up \
         (JIT) before its clock starts, during which stoke attaches its agent to the JVM; \
         timed part at steady state, stoke signalling the JVM's threads at each sample for \
         their Java stacks.\n",
        cpus = bench.cpus,
        rounds = bench.settings.rounds,
        warmup = bench.settings.java_warmup_seconds
    );
    if bench.workloads.java_fixed_work.is_none() {
        body += "- Java: left out, this machine has no JDK (`java`, `javac`).\n";
    }
    let mut targets = Vec::new();
    for &(workload, units) in units {
        let of = |profiler| {
            series
                .iter()
                .find(|s| s.workload == workload && s.profiler == profiler)
                .map(|s| s.runs.as_slice())
        };
        let Some(none) = of(Profiler::Nobody).map(elapsed) else {
            continue;
        };
        let noise = none.relative_range();
        let slowdown = |runs: &[Run]| elapsed(runs).median / none.median - 1.0;
        let mut table = Table::new(&[
            "profiler",
            "elapsed",
            "slowdown vs none",
            "profiler CPU, % of all CPUs",
            "samples per run (lost in all)",
        ]);
        for s in series.iter().filter(|s| s.workload == workload) {
            let spread = elapsed(&s.runs);
            let (slow, cpu, samples) = match s.profiler {
                Profiler::Nobody => (format!("noise {}", percent(noise)), "–".into(), "–".into()),
                Profiler::JvmAgent(_) => (
                    percent_signed(slowdown(&s.runs)),
                    "in the JVM's threads".into(),
                    format!("{:.0}", median(s.runs.iter().map(|r| r.samples as f64))),
                ),
                Profiler::Recording(..) => (
                    percent_signed(slowdown(&s.runs)),
                    stats::show(
                        &s.runs
                            .iter()
                            .map(|r| r.profiler_cpu / (r.elapsed * bench.cpus as f64) * 100.0)
                            .collect::<Vec<_>>(),
                        2,
                        "%",
                    ),
                    format!(
                        "{:.0} ({})",
                        median(s.runs.iter().map(|r| r.samples as f64)),
                        s.runs.iter().map(|r| r.lost).sum::<u64>()
                    ),
                ),
            };
            let left_out = s.runs.len() - kept(&s.runs).len();
            let shown = if left_out == 0 {
                spread.show(3, " s")
            } else {
                format!("{} ({left_out} disturbed left out)", spread.show(3, " s"))
            };
            table.row(vec![s.profiler.label(), shown, slow, cpu, samples]);
        }
        let side_by_side: Vec<String> = RATES
            .iter()
            .filter_map(|&hz| {
                let stoke = slowdown(of(Profiler::Recording(Tool::Stoke, hz))?);
                let perf = slowdown(of(Profiler::Recording(Tool::Perf, hz))?);
                let async_profiler = of(Profiler::JvmAgent(hz))
                    .map(|runs| format!(" vs async-profiler {}", percent_signed(slowdown(runs))))
                    .unwrap_or_default();
                Some(format!(
                    "at {hz} Hz stoke {} vs perf {}{async_profiler}",
                    percent_signed(stoke),
                    percent_signed(perf)
                ))
            })
            .collect();
        body += &format!(
            "\n### {} workload\n\n{units} work units per thread.\n\n{}\nSide by side: {}.\n",
            workload.label(),
            table.markdown(),
            side_by_side.join("; ")
        );
        if workload == Workload::Java {
            body += &java_frames_note(series);
            if bench.async_profiler.is_none() {
                body += &format!(
                    "async-profiler: not measured in this run (`--async-profiler DIR`); \
                     {ASYNC_PROFILER}.\n"
                );
            }
            // Judged in one JVM, where the JIT's choices do not drown them.
            let (text, java_targets) = in_one_jvm::report(bench, in_jvm, shares);
            body += &text;
            targets.extend(java_targets);
            continue;
        }
        for (hz, limit) in TARGETS {
            let Some(runs) = of(Profiler::Recording(Tool::Stoke, hz)) else {
                continue;
            };
            let measured = slowdown(runs);
            let cpu = median(
                runs.iter()
                    .map(|r| r.profiler_cpu / (r.elapsed * bench.cpus as f64)),
            );
            let goal = format!(
                "{} workload: slowdown at {hz} Hz at most {}",
                workload.label(),
                percent(limit)
            );
            let shown = format!("{} (noise {})", percent_signed(measured), percent(noise));
            targets.push(judge(
                goal,
                shown,
                (measured, limit, noise, cpu),
                bench.settings.smoke,
            ));
        }
    }
    let lost: u64 = series
        .iter()
        .filter(|s| s.profiler == Profiler::Recording(Tool::Stoke, 99))
        .flat_map(|s| s.runs.iter().map(|r| r.lost))
        .sum();
    targets.push(Target::judge(
        "no lost samples at 99 Hz",
        format!("{lost} lost"),
        lost == 0,
        || "the ring buffer filled up".into(),
    ));
    Section {
        part: Part::Overhead,
        body,
        targets,
        provenance: String::new(),
    }
}

/// Whether stoke saw Java frames in the Java workload's recordings: without
/// its agent attached, stoke's cost there is that of native sampling only.
fn java_frames_note(series: &[Series]) -> String {
    let stoke_runs = series.iter().filter(|s| {
        s.workload == Workload::Java && matches!(s.profiler, Profiler::Recording(Tool::Stoke, _))
    });
    let (mut java, mut samples) = (0, 0);
    for run in stoke_runs.flat_map(|s| &s.runs) {
        java += run.java_samples.unwrap_or(0);
        samples += run.samples;
    }
    if java == 0 {
        format!(
            "**stoke showed no Java frames** in these recordings ({samples} samples): its \
             agent was not attached to the JVMs, so the figures are those of native \
             sampling only, without signals to the JVM.\n"
        )
    } else {
        format!(
            "stoke's recordings had Java frames in {java} of {samples} samples (the JVM's \
             startup and warm-up included): its agent was attached.\n"
        )
    }
}

/// A slowdown target: met or missed, and whether the noise lets the
/// measurement tell (a smoke run's is not judged); stoke's own CPU explains
/// a miss.
fn judge(
    goal: String,
    measured: String,
    (slowdown, limit, noise, cpu): (f64, f64, f64, f64),
    smoke: bool,
) -> Target {
    let verdict = if smoke {
        Verdict::NotJudged("smoke run".into())
    } else if slowdown > limit {
        Verdict::Missed(explain_miss(slowdown, noise, cpu))
    } else if noise > limit {
        Verdict::MetBut(format!(
            "not resolved: the noise ({}) is wider than the target",
            percent(noise)
        ))
    } else {
        Verdict::Met
    };
    Target {
        goal,
        measured,
        verdict,
    }
}

/// Why a slowdown target was missed, from what was measured.
fn explain_miss(slowdown: f64, noise: f64, stoke_cpu: f64) -> String {
    if slowdown <= noise {
        format!(
            "within noise: the noise ({}) is wider than the {} measured",
            percent(noise),
            percent_signed(slowdown)
        )
    } else {
        format!(
            "stoke's own process accounts for {} of the CPUs; the remaining {} is spent in \
             the workload's threads: sampling interrupts, the BPF program (part 2), signal \
             handling where there is one, and the cache lines they evict",
            percent(stoke_cpu),
            percent((slowdown - stoke_cpu).max(0.0))
        )
    }
}
