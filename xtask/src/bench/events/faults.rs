//! Perf counters: what sampling page faults by stack costs a workload that
//! does nothing but fault, `stoke record -a -e page-faults --period N`
//! beside `perf record -a -g -e page-faults/period=N/`, at the same period.

use std::{process::Command, time::Duration};

use anyhow::{ensure, Result};

use super::{
    super::{
        process::Process,
        profiler::{Options, Recording, Tool},
        report::{Table, Target, Verdict},
        rotated,
        stats::{percent, percent_signed, show},
        Bench,
    },
    offcpu::{fastest, median},
};

/// Faults per sample, for both profilers.
const PERIOD: u64 = 100;

/// perf's name of page faults every [`PERIOD`].
const PERF_EVENT: &str = "page-faults/period=100/";

/// Storms run under each start of a profiler; each is judged by its
/// fastest, the least disturbed.
const STORMS_PER_RUN: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Profiler {
    Nobody,
    Stoke,
    Perf,
}

const PROFILERS: [Profiler; 3] = [Profiler::Nobody, Profiler::Stoke, Profiler::Perf];

impl Profiler {
    fn label(self) -> String {
        match self {
            Profiler::Nobody => "none".into(),
            Profiler::Stoke => format!("stoke record -a -e page-faults --period {PERIOD}"),
            Profiler::Perf => format!("perf record -a -g -e {PERF_EVENT}"),
        }
    }
}

/// One start of a profiler: its fastest storm's seconds and faults, and
/// the samples it took.
struct Run {
    elapsed: f64,
    faults: f64,
    samples: u64,
}

/// The section's text and target.
pub fn run(bench: &Bench) -> Result<(String, Vec<Target>)> {
    let rounds = if bench.settings.smoke {
        20_000
    } else {
        200_000
    };
    let mut runs: Vec<Vec<Run>> = PROFILERS.iter().map(|_| Vec::new()).collect();
    for round in 0..bench.settings.rounds {
        for profiler in rotated(&PROFILERS, round) {
            let what = format!("page faults round {}: {}", round + 1, profiler.label());
            let run = bench
                .measure(&what, || run_once(bench, rounds, profiler))?
                .value;
            bench.log(&format!(
                "{what}: {:.3} s, {:.0} faults",
                run.elapsed, run.faults
            ));
            let index = PROFILERS.iter().position(|&p| p == profiler);
            runs[index.expect("a known profiler")].push(run);
        }
    }
    Ok(section(rounds, &runs, bench.settings.smoke))
}

/// Runs the storm [`STORMS_PER_RUN`] times: the fastest one's elapsed time
/// and faults.
fn storms(bench: &Bench, rounds: u64) -> Result<(f64, f64)> {
    let mut best = (f64::MAX, 0.0);
    for _ in 0..STORMS_PER_RUN {
        let mut command = Command::new(&bench.workloads.fault_storm);
        command.arg(rounds.to_string());
        let mut process = Process::spawn("fault_storm", &mut command)?;
        let exit = process.wait(Duration::from_secs(120))?;
        ensure!(exit.success(), "fault_storm failed: {}", exit.describe());
        let run = (process.printed("elapsed_s")?, process.printed("faults")?);
        if run.0 < best.0 {
            best = run;
        }
    }
    Ok(best)
}

fn run_once(bench: &Bench, rounds: u64, profiler: Profiler) -> Result<Run> {
    let options = match profiler {
        Profiler::Nobody => {
            let (elapsed, faults) = storms(bench, rounds)?;
            return Ok(Run {
                elapsed,
                faults,
                samples: 0,
            });
        }
        Profiler::Stoke => Options {
            stoke_args: ["-e", "page-faults", "--period", &PERIOD.to_string()]
                .map(str::to_owned)
                .to_vec(),
            ..Options::new(Tool::Stoke, 99, "json")
        },
        Profiler::Perf => Options {
            perf_event: Some(PERF_EVENT),
            ..Options::new(Tool::Perf, 99, "json")
        },
    };
    let recording = Recording::start(bench, &options, "faults")?;
    let (elapsed, faults) = storms(bench, rounds)?;
    let stopped = recording.stop()?;
    let samples = match stopped.tool {
        Tool::Stoke => stopped.summary()?.samples,
        Tool::Perf => stopped.samples,
    };
    stopped.remove_output();
    Ok(Run {
        elapsed,
        faults,
        samples,
    })
}

fn section(rounds: u64, runs: &[Vec<Run>], smoke: bool) -> (String, Vec<Target>) {
    let elapsed = |index: usize| fastest(runs[index].iter().map(|run| run.elapsed));
    let base = elapsed(0);
    let faults = median(runs[0].iter().map(|run| run.faults));
    let mut body = format!(
        "### Perf counters\n\n`fault_storm` (bench/workloads) writes to 16 pages and gives them \
         back, {rounds} rounds, {faults:.0} page faults; each profiler samples the whole host's \
         page faults every {PERIOD}, with stacks. Each start runs {STORMS_PER_RUN} storms and \
         is judged by its fastest. Slowdown = fastest / fastest(none) − 1; cost per fault = \
         (fastest − fastest(none)) / faults.\n\n"
    );
    let mut table = Table::new(&[
        "profiler",
        "elapsed",
        "slowdown",
        "cost per fault",
        "samples",
    ]);
    let mut slowdowns = Vec::new();
    for (index, profiler) in PROFILERS.iter().enumerate() {
        let slowdown = elapsed(index) / base - 1.0;
        slowdowns.push(slowdown);
        let times: Vec<f64> = runs[index].iter().map(|run| run.elapsed).collect();
        let samples = median(runs[index].iter().map(|run| run.samples as f64));
        let first = index == 0;
        table.row(vec![
            profiler.label(),
            show(&times, 3, " s"),
            if first {
                "–".into()
            } else {
                percent_signed(slowdown)
            },
            if first {
                "–".into()
            } else {
                format!("{:.0} ns", (elapsed(index) - base) / faults * 1e9)
            },
            if first {
                "–".into()
            } else {
                format!("{samples:.0}")
            },
        ]);
    }
    body += &table.markdown();
    let mut target = Target::at_most(
        format!("stoke -e page-faults slows a fault storm no more than perf at the same period ({PERIOD})"),
        format!(
            "{} against {}",
            percent_signed(slowdowns[1]),
            percent_signed(slowdowns[2])
        ),
        (slowdowns[1], slowdowns[2], 0.02),
        percent,
    );
    if smoke {
        target.verdict = Verdict::NotJudged("smoke run".into());
    }
    (body, vec![target])
}
