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

use std::{collections::BTreeMap, fs, process::Command, time::Duration};

use anyhow::{ensure, Context, Result};

use super::{
    build::java_command,
    process::Process,
    profiler::{Options, Recording, Tool},
    report::{Section, Table},
    rotated,
    stacks::{samples_where, Stack},
    stats::{self, Spread},
    Bench, Part,
};

/// Recursion depths of `deep_recursion`: from shallow to past stoke's limit
/// of 127 user frames (where the cost should stop growing).
const DEPTHS: [u32; 5] = [1, 32, 64, 120, 250];
const SMOKE_DEPTHS: [u32; 2] = [1, 250];

/// What the profiled host runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Workload {
    /// `fixed_work`: realistic stacks.
    FixedWork,
    /// `deep_recursion DEPTH` on every CPU.
    Deep(u32),
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
            Workload::Churn => "spawner, 150 exec/s".into(),
            Workload::Java => "Java FixedWork (JVM threads signalled)".into(),
        }
    }
}

/// The counters of one BPF program over one recording.
#[derive(Debug, Clone, Copy, Default)]
struct ProgramStats {
    run_time_ns: u64,
    run_count: u64,
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
    workloads.push(Workload::Churn);
    if bench.workloads.java_fixed_work.is_some() {
        workloads.push(Workload::Java);
    }
    let mut runs: Vec<(Workload, Vec<Run>)> = workloads.iter().map(|&w| (w, Vec::new())).collect();
    for round in 0..bench.settings.rounds {
        for workload in rotated(&workloads, round) {
            let what = format!("bpf round {}: {}", round + 1, workload.label());
            let run = bench.measure(&what, || run_once(bench, workload))?.value;
            let sampler = run.programs.get("sample_cpu").copied().unwrap_or_default();
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
    let options = Options {
        bpf_stats: true,
        ..Options::new(Tool::Stoke, 99, "folded")
    };
    let recording = Recording::start(bench, &options, "bpf")?;
    let seconds = bench.settings.bpf_seconds;
    let mut process = start_workload(bench, workload, seconds)?;
    process.wait_for_stdout("ready", Duration::from_secs(30))?;
    let exit = process.wait(Duration::from_secs_f64(seconds + 60.0))?;
    ensure!(
        exit.success(),
        "{} failed: {}",
        workload.label(),
        exit.describe()
    );
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
    let sampler = programs.get("sample_cpu").copied().unwrap_or_default();
    ensure!(
        sampler.run_count > 0,
        "stoke's sample_cpu program has no run count with --bpf-stats: {programs:?}"
    );
    let ours = |stack: &Stack| stack.pid == pid;
    let java = samples_where(&stacks, |stack| {
        ours(stack) && stack.frames.iter().any(|f| is_java(f))
    });
    let java_share = java as f64 / samples_where(&stacks, ours).max(1) as f64;
    Ok(Run {
        programs,
        frames,
        java_share,
    })
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
        Workload::Deep(depth) => Process::spawn(
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
                java_command(classes)
                    .args(["-s", &seconds])
                    .arg(bench.cpus.to_string())
                    .arg(bench.settings.java_warmup_seconds.to_string()),
            )
        }
    }
}

/// Mean frames per sample (kernel and user) over the stacks `keep` accepts.
fn mean_frames(stacks: &[Stack], keep: impl Fn(&Stack) -> bool) -> Option<f64> {
    let (frames, samples) =
        stacks
            .iter()
            .filter(|stack| keep(stack))
            .fold((0u64, 0u64), |(frames, samples), stack| {
                (
                    frames + stack.frames.len() as u64 * stack.samples,
                    samples + stack.samples,
                )
            });
    (samples > 0).then(|| frames as f64 / samples as f64)
}

/// A Java frame in stoke's naming: JIT-compiled, interpreted or inlined.
fn is_java(frame: &str) -> bool {
    frame.ends_with("_[j]") || frame.ends_with("_[0]") || frame.ends_with("_[i]")
}

/// The counters of every BPF program a process holds, by program name.
fn program_stats(pid: libc::pid_t) -> Result<BTreeMap<String, ProgramStats>> {
    let mut programs = BTreeMap::new();
    let fd_dir = format!("/proc/{pid}/fd");
    for entry in fs::read_dir(&fd_dir).with_context(|| format!("reading {fd_dir}"))? {
        let entry = entry?;
        let is_program = fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy() == "anon_inode:bpf-prog");
        if !is_program {
            continue;
        }
        let fdinfo = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
        let Ok(text) = fs::read_to_string(&fdinfo) else {
            continue; // closed meanwhile
        };
        let field = |name: &str| -> Option<u64> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.trim().parse().ok())
        };
        let id = field("prog_id").with_context(|| format!("no prog_id in {fdinfo}"))?;
        let stats = ProgramStats {
            run_time_ns: field("run_time_ns").unwrap_or(0),
            run_count: field("run_cnt").unwrap_or(0),
        };
        let entry = programs
            .entry(program_name(id)?)
            .or_insert_with(ProgramStats::default);
        entry.run_time_ns += stats.run_time_ns;
        entry.run_count += stats.run_count;
    }
    ensure!(
        !programs.is_empty(),
        "stoke (pid {pid}) holds no BPF programs"
    );
    Ok(programs)
}

/// A BPF program's name, from `bpftool prog show id ID --json`.
fn program_name(id: u64) -> Result<String> {
    let output = Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string(), "--json"])
        .output()
        .context("running bpftool (cargo xtask setup installs it)")?;
    ensure!(
        output.status.success(),
        "bpftool prog show id {id} failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    json_string(&String::from_utf8_lossy(&output.stdout), "name")
        .with_context(|| format!("no name in bpftool's description of program {id}"))
}

/// The string value of `"key":"value"` in flat JSON (bpftool's), without a
/// JSON dependency for one field.
fn json_string(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = json[start..].trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

fn per_run_us(stats: ProgramStats) -> Option<f64> {
    (stats.run_count > 0).then(|| stats.run_time_ns as f64 / stats.run_count as f64 / 1e3)
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
            let per_run: Vec<f64> = runs
                .iter()
                .filter_map(|r| per_run_us(*r.programs.get(program)?))
                .collect();
            let count = runs
                .iter()
                .filter_map(|r| Some(r.programs.get(program)?.run_count as f64))
                .collect::<Vec<_>>();
            let count = Spread::of(&count).map_or(0.0, |s| s.median);
            cells.push(if program == "sample_cpu" {
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
    let java_note = runs
        .iter()
        .find(|(w, _)| *w == Workload::Java)
        .map(|(_, runs)| {
            let share = Spread::of(
                &runs
                    .iter()
                    .map(|r| r.java_share * 100.0)
                    .collect::<Vec<_>>(),
            );
            match share {
                Some(share) if share.max > 0.0 => format!(
                    " In the Java row, {} of the JVM's samples had Java frames: stoke \
                     attaches its agent while the JVM runs, and signals its threads only \
                     once the agent is ready, so a low share means few signals were sent.",
                    share.show(0, "%")
                ),
                _ => " In the Java row, **no sample had Java frames**: stoke's agent was not \
                      attached, so no signal was sent either."
                    .to_owned(),
            }
        })
        .unwrap_or_default();
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
         Java frames the agent adds, which BPF does not copy); the JVM's warm-up is \
         recorded too.\n\n{}\n\
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
        targets: Vec::new(),
        provenance: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_json_string_field() {
        let json = r#"{"id":42,"type":"perf_event","name":"sample_cpu","tag":"ab"}"#;
        assert_eq!(json_string(json, "name").as_deref(), Some("sample_cpu"));
        assert_eq!(json_string(json, "missing"), None);
    }

    #[test]
    fn mean_frames_weights_by_samples() {
        let stack = |pid, frames: usize, samples| Stack {
            comm: "w".into(),
            pid,
            frames: vec!["f".into(); frames],
            samples,
        };
        let stacks = [stack(1, 10, 1), stack(1, 20, 3), stack(2, 100, 5)];
        assert_eq!(mean_frames(&stacks, |s| s.pid == 1), Some(17.5));
        assert_eq!(mean_frames(&stacks, |s| s.pid == 3), None);
    }
}
