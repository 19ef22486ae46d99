//! Part 7's Python rows: what walking a Python thread's frames adds to the
//! sampler's run time. One Python process (Debian's python3.11) burns at
//! the bottom of a recursion that makes about 20 Python frames; stoke
//! records it with `--bpf-stats`, with its Python frames and with
//! `--no-python` (the same native walk without them), in rotated order;
//! the difference of the medians is the Python walk's cost per sample.
//! Then what stoke costs that process (`python_share`).

use std::{path::Path, process::Command, time::Duration};

use anyhow::{ensure, Result};

use super::{
    bpf_stats::{per_run_us, sampler_stats, ProgramStats},
    process::Process,
    profiler::{Options, Recording, Tool},
    python_share,
    report::{Table, Target},
    rotated,
    stats::{self, Spread},
    workspace_root, Bench,
};

/// The target: a Python sample's BPF cost at 20 Python frames,
/// beside the native walk.
const TARGET_US: f64 = 3.0;

const PYTHON: &str = "/usr/bin/python3.11";

/// Recursion depth: with `<module>` and the burning frame, 20 frames.
const DEPTH: u32 = 18;

const HZ: u64 = 99;

/// Time the unwinder gets to load the interpreter's tables first.
const SETTLE: Duration = Duration::from_millis(1000);

/// One recording: the sampler's statistics over the measured window, and
/// the Python frames per sample of the workload.
struct Run {
    sampler: ProgramStats,
    python_frames: f64,
}

/// The rows and targets of the Python walk's cost.
pub fn run(bench: &Bench) -> Result<(String, Vec<Target>)> {
    ensure!(
        Path::new(PYTHON).exists(),
        "{PYTHON} is missing (cargo xtask setup installs it)"
    );
    let script = workspace_root().join("bench/workloads/python_depth.py");
    let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
    for round in 0..bench.settings.rounds {
        for with_python in rotated(&[true, false], round) {
            let what = format!(
                "python round {}: {}",
                round + 1,
                if with_python {
                    "Python frames"
                } else {
                    "--no-python"
                }
            );
            let run = bench
                .measure(&what, || run_once(bench, &script, with_python))?
                .value;
            bench.log(&format!(
                "{what}: {:.2} µs per sample, {:.1} Python frames",
                per_run_us(run.sampler).unwrap_or(0.0),
                run.python_frames
            ));
            runs[usize::from(!with_python)].push(run);
        }
    }
    let (mut body, mut targets) = section(&runs);
    let (cost, target) = python_share::run(bench, PYTHON, &script, DEPTH)?;
    body += &cost;
    targets.push(target);
    Ok((body, targets))
}

fn run_once(bench: &Bench, script: &Path, with_python: bool) -> Result<Run> {
    let seconds = bench.settings.unwind_seconds;
    let total = seconds + SETTLE.as_secs_f64() + 30.0;
    let mut workload = Process::spawn(
        "python_depth.py",
        Command::new(PYTHON)
            .arg(script)
            .arg(DEPTH.to_string())
            .arg(total.to_string()),
    )?;
    let pid = u32::try_from(workload.pid())?;
    let options = Options {
        bpf_stats: true,
        pids: vec![pid],
        stoke_args: if with_python {
            Vec::new()
        } else {
            vec!["--no-python".into()]
        },
        ..Options::new(Tool::Stoke, HZ, "folded")
    };
    let recording = Recording::start(bench, &options, "python")?;
    std::thread::sleep(SETTLE);
    let before = sampler_stats(recording.pid())?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let after = sampler_stats(recording.pid())?;
    workload.signal(libc::SIGKILL);
    workload.wait(Duration::from_secs(30))?;
    let stopped = recording.stop()?;
    let stacks = stopped.stacks()?;
    stopped.remove_output();
    let (frames, samples) = stacks.iter().filter(|stack| stack.pid == pid).fold(
        (0u64, 0u64),
        |(frames, samples), stack| {
            let python = stack.frames.iter().filter(|f| f.ends_with("_[py]")).count() as u64;
            (frames + python * stack.samples, samples + stack.samples)
        },
    );
    ensure!(
        samples > 0,
        "no samples of python_depth.py in stoke's output"
    );
    Ok(Run {
        sampler: after.since(before),
        python_frames: frames as f64 / samples as f64,
    })
}

fn section(runs: &[Vec<Run>; 2]) -> (String, Vec<Target>) {
    let mut table = Table::new(&[
        "python3.11, recursion of 20 Python frames",
        "sample_cpu µs per sample",
        "Python frames per sample",
    ]);
    let mut medians = [0.0; 2];
    let mut noise = 0.0f64;
    for (index, (label, runs)) in ["Python frames", "`--no-python`"]
        .iter()
        .zip(runs)
        .enumerate()
    {
        let us: Vec<f64> = runs.iter().filter_map(|r| per_run_us(r.sampler)).collect();
        let frames: Vec<f64> = runs.iter().map(|r| r.python_frames).collect();
        if let Some(spread) = Spread::of(&us) {
            medians[index] = spread.median;
            noise = noise.max((spread.max - spread.min) / 2.0);
        }
        table.row(vec![
            (*label).to_owned(),
            stats::show(&us, 2, ""),
            stats::show(&frames, 1, ""),
        ]);
    }
    let added = medians[0] - medians[1];
    let target = Target::at_most(
        format!("Python walk at 20 frames ≤ {TARGET_US} µs per sample"),
        format!("{added:.2} µs"),
        (added, TARGET_US, noise),
        |v| format!("{v:.2} µs"),
    );
    let body = format!(
        "Python frames: `stoke record -p <python3.11> --bpf-stats -F {HZ}`, with and \
         without `--no-python` (the walk's cost is the difference).\n\n{}",
        table.markdown()
    );
    (body, vec![target])
}
