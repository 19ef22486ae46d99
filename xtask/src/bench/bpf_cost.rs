//! Part 2, BPF cost: the kernel's run time per run of each of stoke's BPF
//! programs (`run_time_ns / run_cnt` with BPF statistics on), and how the
//! sampler's grows with the depth of the stacks it copies.
//!
//! stoke runs with `--bpf-stats` (which turns the statistics on through a
//! BPF_ENABLE_STATS descriptor, released when stoke exits: no sysctl to
//! restore); the bench reads the counters from `/proc/<stoke>/fdinfo` of
//! its program descriptors just before stopping it, and the names from
//! bpftool. Each workload keeps every CPU busy, so that nearly every sample
//! has the stack depth of its row (idle samples are cheap and would dilute
//! the mean).

use std::{collections::BTreeMap, process::Command, time::Duration};

use anyhow::{bail, ensure, Context, Result};

use super::{
    bpf_stats::{per_run_us, program_stats, ProgramStats},
    build::java_command,
    process::Process,
    profiler::{jvm_attach_ms, Options, Recording, Tool},
    report::{Section, Table, Target},
    rotated,
    stacks::{is_java, mean_frames, samples_where, Stack},
    stats::{self, Spread},
    Bench, Part,
};

/// Recursion depths of `deep_recursion`: from shallow to past stoke's limit
/// of 127 user frames (where the cost should stop growing).
const DEPTHS: [u32; 5] = [1, 32, 64, 120, 250];
const SMOKE_DEPTHS: [u32; 2] = [1, 250];

/// Long enough for stoke to load its agent into a warm JVM (~0.1 s).
const ATTACH_RECORDING: Duration = Duration::from_millis(1500);
const ATTACH_TRIES: usize = 3;

/// Below this share of the JVM's samples with Java frames, the Java row did
/// not measure the signalled path (its work threads, signalled, have nearly
/// all the samples; GC and compiler threads have no Java frames).
const MIN_JAVA_SHARE: f64 = 0.5;

/// What the profiled host runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Workload {
    /// `fixed_work`: realistic stacks.
    FixedWork,
    /// `deep_recursion DEPTH` on every CPU.
    Deep(u32),
    /// The same, sampled by the programs of kernels without bpf_loop
    /// (`--legacy-bpf`: a tail-call chain of unwinder runs).
    Legacy(u32),
    /// `spawner`: 150 short-lived processes a second, for the exec and exit
    /// tracepoint programs.
    Churn,
    /// Java `FixedWork`: the sampler also signals the JVM's threads.
    Java,
}

impl Workload {
    fn label(self) -> String {
        match self {
            Workload::FixedWork => "fixed_work (realistic stacks)".into(),
            Workload::Deep(depth) => format!("deep_recursion, depth {depth}"),
            Workload::Legacy(depth) => {
                format!("deep_recursion, depth {depth}, programs for kernels before 5.17")
            }
            Workload::Churn => "spawner, 150 exec/s".into(),
            Workload::Java => "Java FixedWork (JVM threads signalled)".into(),
        }
    }

    /// The program that takes its samples.
    fn sampler(self) -> &'static str {
        match self {
            Workload::Legacy(_) => "sample_cpu_legacy",
            _ => "sample_cpu",
        }
    }
}

/// One recording: per program name, its counters; and the mean number of
/// frames per sample of the workload's processes.
struct Run {
    programs: BTreeMap<String, ProgramStats>,
    frames: f64,
    /// Share of the workload's samples with a Java frame (0..1).
    java_share: f64,
}

pub fn run(bench: &Bench) -> Result<Section> {
    let mut workloads = vec![Workload::FixedWork];
    let depths: &[u32] = if bench.settings.smoke {
        &SMOKE_DEPTHS
    } else {
        &DEPTHS
    };
    workloads.extend(depths.iter().map(|&depth| Workload::Deep(depth)));
    // Past the 127 frames both copy, beside the deepest row.
    workloads.push(Workload::Legacy(*depths.last().expect("depths")));
    workloads.push(Workload::Churn);
    if bench.workloads.java_fixed_work.is_some() {
        workloads.push(Workload::Java);
    }
    let mut runs: Vec<(Workload, Vec<Run>)> = workloads.iter().map(|&w| (w, Vec::new())).collect();
    for round in 0..bench.settings.rounds {
        for workload in rotated(&workloads, round) {
            let what = format!("bpf round {}: {}", round + 1, workload.label());
            let run = bench.measure(&what, || run_once(bench, workload))?.value;
            let sampler = run
                .programs
                .get(workload.sampler())
                .copied()
                .unwrap_or_default();
            bench.log(&format!(
                "{what}: {:.2} µs per sample, {:.0} frames",
                per_run_us(sampler).unwrap_or(0.0),
                run.frames
            ));
            runs.iter_mut()
                .find(|(w, _)| *w == workload)
                .expect("known")
                .1
                .push(run);
        }
    }
    Ok(section(bench, &runs))
}

fn run_once(bench: &Bench, workload: Workload) -> Result<Run> {
    let seconds = bench.settings.bpf_seconds;
    // The JVM runs, warm and with the agent loaded by an earlier recording,
    // before the measured one starts: that one re-attaches at once, and
    // signals the JVM's threads from its first samples.
    let jvm = match workload {
        Workload::Java => Some(attached_jvm(bench)?),
        _ => None,
    };
    let options = Options {
        bpf_stats: true,
        stoke_args: match workload {
            Workload::Legacy(_) => vec!["--legacy-bpf".into()],
            _ => Vec::new(),
        },
        ..Options::new(Tool::Stoke, 99, "folded")
    };
    let recording = Recording::start(bench, &options, "bpf")?;
    let process = match jvm {
        Some(mut jvm) => {
            std::thread::sleep(Duration::from_secs_f64(seconds));
            jvm.signal(libc::SIGKILL);
            jvm.wait(Duration::from_secs(30))?;
            jvm
        }
        None => {
            let mut process = start_workload(bench, workload, seconds)?;
            process.wait_for_stdout("ready", Duration::from_secs(30))?;
            let exit = process.wait(Duration::from_secs_f64(seconds + 60.0))?;
            ensure!(
                exit.success(),
                "{} failed: {}",
                workload.label(),
                exit.describe()
            );
            process
        }
    };
    let programs = program_stats(recording.pid())?;
    let stopped = recording.stop()?;
    let stacks = stopped.stacks()?;
    stopped.remove_output();
    let pid = u32::try_from(process.pid())?;
    let frames = mean_frames(&stacks, |stack| match workload {
        Workload::Churn => stack.comm == "short_lived",
        _ => stack.pid == pid,
    })
    .with_context(|| format!("no samples of {} in stoke's output", workload.label()))?;
    let sampler = programs
        .get(workload.sampler())
        .copied()
        .unwrap_or_default();
    ensure!(
        sampler.run_count > 0,
        "stoke's {} program has no run count with --bpf-stats: {programs:?}",
        workload.sampler()
    );
    let ours = |stack: &Stack| stack.pid == pid;
    let java = samples_where(&stacks, |stack| {
        ours(stack) && stack.frames.iter().any(|f| is_java(f))
    });
    let java_share = java as f64 / samples_where(&stacks, ours).max(1) as f64;
    // Without Java frames no thread was signalled: the row would measure
    // the native path and say it measured the Java one.
    ensure!(
        workload != Workload::Java || java > 0,
        "no sample of the JVM had Java frames although its agent was loaded: \
         the Java row did not measure the signalled path"
    );
    Ok(Run {
        programs,
        frames,
        java_share,
    })
}

/// A running Java `FixedWork`, warmed up, whose agent a short recording
/// has loaded (a few tries: on a busy host an attach may take longer).
fn attached_jvm(bench: &Bench) -> Result<Process> {
    // Killed once measured: the time given is only an upper bound.
    let mut jvm = start_workload(bench, Workload::Java, 600.0)?;
    jvm.wait_for_stdout("ready", Duration::from_secs(60))?;
    let pid = u32::try_from(jvm.pid())?;
    for _ in 0..ATTACH_TRIES {
        let recording =
            Recording::start(bench, &Options::new(Tool::Stoke, 99, "json"), "bpf-attach")?;
        std::thread::sleep(ATTACH_RECORDING);
        let stopped = recording.stop()?;
        let summary = stopped.summary()?;
        stopped.remove_output();
        if jvm_attach_ms(&summary, pid).is_some() {
            return Ok(jvm);
        }
    }
    bail!(
        "stoke did not load its agent into the JVM (pid {pid}) in {ATTACH_TRIES} recordings \
         of {ATTACH_RECORDING:?}"
    )
}

fn start_workload(bench: &Bench, workload: Workload, seconds: f64) -> Result<Process> {
    let workloads = &bench.workloads;
    let seconds = format!("{seconds}");
    match workload {
        Workload::FixedWork => Process::spawn(
            "fixed_work",
            Command::new(&workloads.fixed_work)
                .args(["-s", &seconds])
                .arg(bench.cpus.to_string()),
        ),
        Workload::Deep(depth) | Workload::Legacy(depth) => Process::spawn(
            "deep_recursion",
            Command::new(&workloads.deep_recursion)
                .arg(depth.to_string())
                .arg(&seconds)
                .arg(bench.cpus.to_string()),
        ),
        Workload::Churn => Process::spawn(
            "spawner",
            Command::new(&workloads.spawner)
                .arg(&workloads.short_lived)
                .args(["150", &seconds, "3"]),
        ),
        Workload::Java => {
            let classes = workloads.java_fixed_work.as_deref().context("no JDK")?;
            Process::spawn(
                "java FixedWork",
                java_command(classes, &[])
                    .args(["-s", &seconds])
                    .arg(bench.cpus.to_string())
                    .arg(bench.settings.java_warmup_seconds.to_string()),
            )
        }
    }
}

/// The section: per workload, frames per sample and each program's run time.
fn section(bench: &Bench, runs: &[(Workload, Vec<Run>)]) -> Section {
    const PROGRAMS: [&str; 3] = ["sample_cpu", "process_exec", "process_exit"];
    let mut table = Table::new(&[
        "workload",
        "frames per sample",
        "sample_cpu µs per sample",
        "process_exec µs per run (runs)",
        "process_exit µs per run (runs)",
    ]);
    let mut depth_points = Vec::new();
    for (workload, runs) in runs {
        let frames: Vec<f64> = runs.iter().map(|r| r.frames).collect();
        let mut cells = vec![workload.label(), stats::show(&frames, 0, "")];
        for program in PROGRAMS {
            // The legacy programs' sampler stands in the sample_cpu column.
            let program = match program {
                "sample_cpu" => workload.sampler(),
                other => other,
            };
            let per_run: Vec<f64> = runs
                .iter()
                .filter_map(|r| per_run_us(*r.programs.get(program)?))
                .collect();
            let count = runs
                .iter()
                .filter_map(|r| Some(r.programs.get(program)?.run_count as f64))
                .collect::<Vec<_>>();
            let count = Spread::of(&count).map_or(0.0, |s| s.median);
            cells.push(if program == workload.sampler() {
                stats::show(&per_run, 2, "")
            } else if per_run.is_empty() {
                format!("– ({count:.0})")
            } else {
                format!("{} ({count:.0})", stats::show(&per_run, 2, ""))
            });
            if program == "sample_cpu" && matches!(workload, Workload::Deep(_)) {
                let frames = Spread::of(&frames).map_or(0.0, |s| s.median);
                if let Some(spread) = Spread::of(&per_run) {
                    depth_points.push((frames, spread.median));
                }
            }
        }
        table.row(cells);
    }
    let mut targets = Vec::new();
    let mut java_note = String::new();
    if let Some((_, runs)) = runs.iter().find(|(w, _)| *w == Workload::Java) {
        let shares: Vec<f64> = runs.iter().map(|r| r.java_share).collect();
        if let Some(share) = Spread::of(&shares) {
            let shown = Spread::of(&shares.iter().map(|s| s * 100.0).collect::<Vec<_>>())
                .map_or_else(String::new, |s| s.show(1, "%"));
            java_note = format!(
                " In the Java row, {shown} of the JVM's samples had Java frames (the \
                 others: its GC and compiler threads, which run no Java, and work-thread \
                 samples in code without Java frames; see part 6)."
            );
            targets.push(Target::judge(
                format!(
                    "Java row: at least {:.0}% of the JVM's samples with Java frames \
                     (bench check: the row measures the signalled path)",
                    MIN_JAVA_SHARE * 100.0
                ),
                shown,
                share.min >= MIN_JAVA_SHARE,
                || {
                    format!(
                        "in the worst round {:.1}%: fewer JVM threads were signalled, so \
                         the row's cost is partly the native path's",
                        share.min * 100.0
                    )
                },
            ));
        }
    }
    let growth = stats::slope(&depth_points).map_or_else(
        || "not enough depths to fit".to_owned(),
        |slope| format!("{:.1} ns per frame", slope * 1e3),
    );
    let body = format!(
        "stoke at 99 Hz with `--bpf-stats`, {:.1} s per workload, every CPU busy with the \
         workload, {} rounds. Run time per run = `run_time_ns / run_cnt` of each program \
         (kernel BPF statistics), median (min–max) over the rounds; frames per sample = \
         kernel + user frames of the workload's samples in stoke's output. stoke copies at \
         most 127 user frames. The exec and exit programs run once per exec and per exit \
         of any process, whatever the sampling rate. In the Java row the sampler \
         also sends SIGURG to the sampled JVM thread (its frames per sample include the \
         Java frames the agent adds, which BPF does not copy). The JVM is warmed up and \
         its agent loaded by a short recording before the measured one, which finds \
         it loaded. The row of programs for kernels before 5.17 (`--legacy-bpf`, the \
         ones Linux 5.10-5.16 loads) shows `sample_cpu_legacy`, whose run time includes \
         the unwinder programs it tail-calls.\n\n{}\n\
         Growth with stack depth (least-squares slope over the deep_recursion rows): {}. \
         perf has no BPF program; its per-sample cost shows in part 1.{}\n",
        bench.settings.bpf_seconds,
        bench.settings.rounds,
        table.markdown(),
        growth,
        java_note
    );
    Section {
        part: Part::Bpf,
        body,
        targets,
        provenance: String::new(),
    }
}
