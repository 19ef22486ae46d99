//! Part 4, accuracy: the split of CPU time a profiler measures in a
//! workload that knows its true split. `fp_split` (from the end-to-end
//! tests) spends 70% of its CPU in hot_seventy() and 30% in hot_thirty(),
//! measures the split it actually ran with its thread CPU clock, and prints
//! it; the profile's split is the samples with each function on the stack.

use std::{process::Command, time::Duration};

use anyhow::{ensure, Context, Result};

use super::{
    process::Process,
    profiler::{Options, Recording, Tool},
    report::{Section, Table, Target, Verdict},
    rotated,
    stacks::samples_where,
    stats::{self, Spread},
    Bench, Part,
};

const RATES: [u64; 2] = [99, 999];

/// A deviation beyond this many standard errors of sampling is not chance.
const SIGMAS: f64 = 3.0;

/// One profiled run of fp_split.
struct Run {
    /// hot_seventy's share of the two, as fp_split measured it (0..1).
    true_share: f64,
    /// hot_seventy's share in the profile.
    measured_share: f64,
    /// Samples with either function on the stack.
    samples: u64,
    /// Samples expected from the CPU time fp_split spent in them.
    expected: f64,
}

impl Run {
    /// The standard error of a share measured from `samples` samples.
    fn standard_error(&self) -> f64 {
        (self.true_share * (1.0 - self.true_share) / self.samples.max(1) as f64).sqrt()
    }

    fn error(&self) -> f64 {
        self.measured_share - self.true_share
    }
}

pub fn run(bench: &Bench) -> Result<Section> {
    let configs: Vec<(Tool, u64)> = RATES
        .iter()
        .flat_map(|&hz| [(Tool::Stoke, hz), (Tool::Perf, hz)])
        .collect();
    let mut runs: Vec<((Tool, u64), Vec<Run>)> = configs.iter().map(|&c| (c, Vec::new())).collect();
    for round in 0..bench.settings.rounds {
        for (tool, hz) in rotated(&configs, round) {
            let what = format!("accuracy round {}: {tool} at {hz} Hz", round + 1);
            let run = bench.measure(&what, || run_once(bench, tool, hz))?.value;
            bench.log(&format!(
                "{what}: measured {:.1}% vs true {:.1}% ({} samples)",
                run.measured_share * 100.0,
                run.true_share * 100.0,
                run.samples
            ));
            runs.iter_mut()
                .find(|(c, _)| *c == (tool, hz))
                .expect("known")
                .1
                .push(run);
        }
    }
    Ok(section(bench, &runs))
}

fn run_once(bench: &Bench, tool: Tool, hz: u64) -> Result<Run> {
    let recording = Recording::start(bench, &Options::new(tool, hz, "folded"), "accuracy")?;
    let seconds = bench.settings.accuracy_seconds;
    let mut workload = Process::spawn(
        "fp_split",
        Command::new(&bench.workloads.fp_split).arg(format!("{seconds}")),
    )?;
    let exit = workload.wait(Duration::from_secs_f64(seconds + 60.0))?;
    ensure!(exit.success(), "fp_split failed: {}", exit.describe());
    let (seventy, thirty) = true_split(workload.stderr().all())?;
    let stopped = recording.stop()?;
    let stacks = stopped.stacks()?;
    stopped.remove_output();
    let pid = u32::try_from(workload.pid())?;
    let ours = |function: &'static str| {
        samples_where(&stacks, move |stack| {
            stack.pid == pid && stack.contains(function)
        })
    };
    let (hot_seventy, hot_thirty) = (ours("hot_seventy"), ours("hot_thirty"));
    let samples = hot_seventy + hot_thirty;
    ensure!(
        samples > 0,
        "{tool} recorded no samples of fp_split (pid {pid}) in hot_seventy or hot_thirty: \
         its unwinding or symbolization is broken"
    );
    Ok(Run {
        true_share: seventy / (seventy + thirty),
        measured_share: hot_seventy as f64 / samples as f64,
        samples,
        expected: (seventy + thirty) * hz as f64,
    })
}

/// fp_split's last stderr line: `fp_split: hot_seventy 3.501 s, hot_thirty
/// 1.500 s, share 70.01%` → CPU seconds of each.
fn true_split(stderr: &[String]) -> Result<(f64, f64)> {
    let line = stderr
        .iter()
        .find(|line| line.starts_with("fp_split: hot_seventy"))
        .with_context(|| format!("fp_split printed no split: {}", stderr.join(" / ")))?;
    let seconds_after = |name: &str| -> Option<f64> {
        let rest = line.split_once(name)?.1.trim_start();
        rest.split_whitespace().next()?.parse().ok()
    };
    let split = seconds_after("hot_seventy").zip(seconds_after("hot_thirty"));
    let (seventy, thirty) =
        split.with_context(|| format!("cannot parse fp_split's split: {line:?}"))?;
    ensure!(
        seventy + thirty > 0.0,
        "fp_split spent no time in its hot functions: {line:?}"
    );
    Ok((seventy, thirty))
}

fn section(bench: &Bench, runs: &[((Tool, u64), Vec<Run>)]) -> Section {
    let mut table = Table::new(&[
        "profiler",
        "true share of hot_seventy",
        "measured share",
        "error (points)",
        "sampling standard error (points)",
        "samples in the two functions",
        "samples / expected",
    ]);
    let mut targets = Vec::new();
    for ((tool, hz), runs) in runs {
        let pick = |f: &dyn Fn(&Run) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let label = match tool {
            Tool::Stoke => format!("stoke record -a, {hz} Hz"),
            Tool::Perf => format!("perf record -a -g, {hz} Hz"),
        };
        table.row(vec![
            label.clone(),
            stats::show(&pick(&|r| r.true_share * 100.0), 1, "%"),
            stats::show(&pick(&|r| r.measured_share * 100.0), 1, "%"),
            stats::show(&pick(&|r| r.error() * 100.0), 1, ""),
            stats::show(&pick(&|r| r.standard_error() * 100.0), 1, ""),
            stats::show(&pick(&|r| r.samples as f64), 0, ""),
            stats::show(&pick(&|r| r.samples as f64 / r.expected), 3, ""),
        ]);
        if *tool == Tool::Stoke {
            targets.push(target(bench, *hz, runs));
        }
    }
    let body = format!(
        "`fp_split` (tests/workloads, one thread) runs {:.0} s under each whole-host \
         recording; {} rounds. True share: hot_seventy's part of the CPU time the \
         workload measured in the two functions itself (thread CPU clock). Measured \
         share: samples of its process with hot_seventy on the stack over samples with \
         either. The sampling standard error is √(p(1−p)/n): a measurement within about \
         2–3 of them of the truth is as good as sampling allows. Samples / expected \
         compares the samples with the CPU time × the rate (1.0 = no sample missing).\n\n{}",
        bench.settings.accuracy_seconds,
        bench.settings.rounds,
        table.markdown()
    );
    Section {
        part: Part::Accuracy,
        body,
        targets,
        provenance: String::new(),
    }
}

/// A check of the bench's own (the issue sets no number): stoke's measured
/// split is within sampling error of the truth in every round.
fn target(bench: &Bench, hz: u64, runs: &[Run]) -> Target {
    let worst = runs
        .iter()
        .map(|r| r.error().abs() / r.standard_error().max(1e-9))
        .fold(0.0, f64::max);
    let median_error =
        Spread::of(&runs.iter().map(Run::error).collect::<Vec<_>>()).map_or(0.0, |s| s.median);
    let goal = format!(
        "stoke's split at {hz} Hz within {SIGMAS:.0} standard errors of the true one (bench check)"
    );
    let measured = format!(
        "median error {:+.1} points, worst round {worst:.1} standard errors",
        median_error * 100.0
    );
    if bench.settings.smoke {
        return Target {
            goal,
            measured,
            verdict: Verdict::NotJudged("smoke run".into()),
        };
    }
    Target::judge(goal, measured, worst <= SIGMAS, || {
        if median_error.abs() * 100.0 < 1.0 {
            "one round strayed; the median is within a point".into()
        } else {
            "a systematic bias, beyond sampling noise".into()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_true_split() {
        let lines =
            vec!["fp_split: hot_seventy 3.501 s, hot_thirty 1.500 s, share 70.01%".to_owned()];
        assert_eq!(true_split(&lines).unwrap(), (3.501, 1.5));
        assert!(true_split(&["something else".to_owned()]).is_err());
    }
}
