//! Part 1's Java targets, measured in phases of one JVM: each round starts
//! a JVM for stoke and one for async-profiler (when the bench has it), and
//! each JVM, once warm, runs the same fixed work five times: unprofiled,
//! profiled at one rate, unprofiled, profiled at the other rate,
//! unprofiled. A profiled phase's slowdown is against the mean of the
//! unprofiled phases on either side of it.
//!
//! Why: from one JVM to the next the JIT's choices (what it inlines, where
//! it puts the code) change the speed of this work by several percent, more
//! than the slowdowns measured, so a JVM per run (the rows above) cannot
//! tell them apart; in one JVM the compiled code is the same for every
//! phase. What stays in a JVM after its profiled phase (stoke's agent or
//! async-profiler's, loaded and idle) is in the later unprofiled phases.

use std::time::Duration;

use anyhow::{ensure, Context, Result};

use super::{against_async_profiler, judge, Workload, RATES, TARGETS};
use crate::bench::{
    async_profiler::AsyncProfiler,
    build::java_command,
    process::Process,
    profiler::{Options, Recording, Tool},
    report::{Table, Target},
    stats::{self, percent, percent_signed, Spread},
    Bench,
};

/// Whose agent a JVM's profiled phases measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Family {
    Stoke,
    AsyncProfiler,
}

impl Family {
    pub(super) fn label(self) -> &'static str {
        match self {
            Family::Stoke => "stoke record -a",
            Family::AsyncProfiler => "async-profiler (attached)",
        }
    }
}

/// One profiled phase of a JVM.
pub(super) struct Phase {
    pub hz: u64,
    /// Its elapsed time against the mean of the unprofiled phases around
    /// it, minus 1.
    pub slowdown: f64,
    /// Stoke's own CPU during the phase, as a share of all CPUs (0 for
    /// async-profiler, whose CPU is the JVM's).
    pub profiler_cpu: f64,
    pub samples: u64,
    /// Stoke: samples with Java frames.
    pub java_samples: u64,
}

/// One JVM's phases.
pub(super) struct JvmRun {
    pub round: usize,
    pub family: Family,
    /// The unprofiled phases' elapsed times, in order.
    pub unprofiled: Vec<f64>,
    pub profiled: Vec<Phase>,
    /// Other processes took CPU during it, on every try.
    pub disturbed: bool,
}

impl JvmRun {
    /// How far apart its unprofiled phases were (max / min − 1).
    pub fn noise(&self) -> f64 {
        Spread::of(&self.unprofiled).map_or(0.0, |spread| spread.max / spread.min - 1.0)
    }

    /// Its profiled phase at `hz`.
    pub fn at(&self, hz: u64) -> Option<&Phase> {
        self.profiled.iter().find(|phase| phase.hz == hz)
    }
}

/// Every round: a JVM per family, the order of families and rates turned
/// each round.
pub(super) fn run(bench: &Bench, units: u64) -> Result<Vec<JvmRun>> {
    let mut families = vec![Family::Stoke];
    if bench.async_profiler.is_some() {
        families.push(Family::AsyncProfiler);
    }
    let mut runs = Vec::new();
    for round in 0..bench.settings.rounds {
        let mut rates = RATES.to_vec();
        if round % 2 == 1 {
            rates.reverse();
        }
        for family in crate::bench::rotated(&families, round) {
            let what = format!(
                "overhead in one JVM, round {}: {}",
                round + 1,
                family.label()
            );
            let measured = bench.measure(&what, || one_jvm(bench, family, units, &rates))?;
            let disturbed = measured.disturbed();
            let run = JvmRun {
                round,
                disturbed,
                ..measured.value
            };
            bench.log(&format!(
                "{what}: unprofiled {}; {}",
                run.unprofiled
                    .iter()
                    .map(|s| format!("{s:.3} s"))
                    .collect::<Vec<_>>()
                    .join(", "),
                run.profiled
                    .iter()
                    .map(|p| format!("{} Hz {:+.2}%", p.hz, p.slowdown * 100.0))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            runs.push(run);
        }
    }
    Ok(runs)
}

/// A new JVM, warmed up, through its phases: unprofiled, then for each rate
/// a profiled phase and an unprofiled one.
fn one_jvm(bench: &Bench, family: Family, units: u64, rates: &[u64]) -> Result<JvmRun> {
    let classes = bench
        .workloads
        .java_fixed_work
        .as_deref()
        .context("the Java workload was not built")?;
    let mut command = java_command(classes, &[]);
    command
        .arg("-p")
        .arg(units.to_string())
        .arg(bench.cpus.to_string())
        .arg(bench.settings.java_warmup_seconds.to_string());
    let mut jvm = Process::spawn_with_input(Workload::Java.label(), &mut command)?;
    let warm = Duration::from_secs_f64(30.0 + bench.settings.java_warmup_seconds * 5.0);
    jvm.wait_for_stdout("ready", warm)?;
    let pid = u32::try_from(jvm.pid()).context("pid out of range")?;
    let mut unprofiled = vec![phase(bench, &mut jvm)?];
    let mut profiled = Vec::new();
    for &hz in rates {
        profiled.push(match family {
            Family::Stoke => stoke_phase(bench, &mut jvm, hz)?,
            Family::AsyncProfiler => async_profiler_phase(bench, &mut jvm, pid, hz)?,
        });
        unprofiled.push(phase(bench, &mut jvm)?);
    }
    jvm.close_input();
    let exit = jvm.wait(Duration::from_secs(30))?;
    ensure!(
        exit.success(),
        "the Java workload failed: {}: {}",
        exit.describe(),
        jvm.stderr().all().join(" / ")
    );
    let elapsed: Vec<f64> = profiled.iter().map(|(_, elapsed)| *elapsed).collect();
    for ((phase, _), slowdown) in profiled
        .iter_mut()
        .zip(against_neighbours(&unprofiled, &elapsed))
    {
        phase.slowdown = slowdown;
    }
    Ok(JvmRun {
        round: 0,
        family,
        unprofiled,
        profiled: profiled.into_iter().map(|(phase, _)| phase).collect(),
        disturbed: false,
    })
}

/// The slowdown of each profiled phase (`profiled[i]` ran between
/// `unprofiled[i]` and `unprofiled[i + 1]`) against the mean of those two.
fn against_neighbours(unprofiled: &[f64], profiled: &[f64]) -> Vec<f64> {
    profiled
        .iter()
        .zip(unprofiled.windows(2))
        .map(|(elapsed, around)| elapsed / ((around[0] + around[1]) / 2.0) - 1.0)
        .collect()
}

/// Runs one phase of the JVM (its lead-in, untimed, then the fixed work)
/// and returns the fixed work's elapsed time.
fn phase(bench: &Bench, jvm: &mut Process) -> Result<f64> {
    start_phase(bench, jvm)?;
    end_phase(bench, jvm)
}

/// Starts a phase and returns as its clock starts, after the lead-in.
fn start_phase(bench: &Bench, jvm: &mut Process) -> Result<()> {
    jvm.send_line(&lead_in_seconds(bench).to_string())?;
    let timeout = Duration::from_secs_f64(30.0 + lead_in_seconds(bench) * 5.0);
    jvm.wait_for_stdout("timing", timeout)
}

/// Waits for the phase started to end and returns its elapsed time.
fn end_phase(bench: &Bench, jvm: &mut Process) -> Result<f64> {
    let timeout = Duration::from_secs_f64(60.0 + bench.settings.work_seconds * 20.0);
    let line = jvm
        .stdout()
        .wait_for(|line| line.starts_with("elapsed_s="), timeout)?
        .context("the Java workload ended before its phase did")?;
    line.trim_start_matches("elapsed_s=")
        .parse()
        .with_context(|| format!("the Java workload printed {line:?}"))
}

/// The untimed work before a phase's clock starts: long enough for stoke
/// to see the JVM's threads and attach its agent (50 ms on this machine),
/// and the same before every phase.
fn lead_in_seconds(bench: &Bench) -> f64 {
    if bench.settings.smoke {
        0.3
    } else {
        1.0
    }
}

/// A phase under a whole-host stoke recording at `hz`.
fn stoke_phase(bench: &Bench, jvm: &mut Process, hz: u64) -> Result<(Phase, f64)> {
    let recording = Recording::start(
        bench,
        &Options::new(Tool::Stoke, hz, "json"),
        "overhead-in-jvm",
    )?;
    start_phase(bench, jvm)?;
    // Its CPU while the clock runs: the agent's attach is in the lead-in.
    let cpu_before = recording.cpu_now()?;
    let elapsed = end_phase(bench, jvm)?;
    let cpu = (recording.cpu_now()? - cpu_before).as_secs_f64();
    let stopped = recording.stop()?;
    let java_samples = stopped
        .summary()
        .map(|summary| summary.java.java_samples)
        .unwrap_or(0);
    stopped.remove_output();
    Ok((
        Phase {
            hz,
            slowdown: 0.0,
            profiler_cpu: cpu / (elapsed * bench.cpus as f64),
            samples: stopped.samples,
            java_samples,
        },
        elapsed,
    ))
}

/// A phase with async-profiler attached to the JVM, sampling CPU at `hz`.
fn async_profiler_phase(
    bench: &Bench,
    jvm: &mut Process,
    pid: u32,
    hz: u64,
) -> Result<(Phase, f64)> {
    let profiler: &AsyncProfiler = bench
        .async_profiler
        .as_ref()
        .context("async-profiler phases without --async-profiler")?;
    profiler.start_cpu(pid, hz, false)?;
    let elapsed = phase(bench, jvm)?;
    let samples = profiler.stop_samples(pid, &bench.scratch("overhead-in-jvm.collapsed"))?;
    Ok((
        Phase {
            hz,
            slowdown: 0.0,
            profiler_cpu: 0.0,
            samples,
            java_samples: 0,
        },
        elapsed,
    ))
}

/// The section's text on these runs, and part 1's Java targets judged on
/// them.
pub(super) fn report(bench: &Bench, runs: &[JvmRun]) -> (String, Vec<Target>) {
    let kept: Vec<&JvmRun> = runs.iter().filter(|run| !run.disturbed).collect();
    let noises: Vec<f64> = kept.iter().map(|run| run.noise()).collect();
    let noise = Spread::of(&noises).map_or(0.0, |spread| spread.median);
    let phases = |family: Family, hz: u64| -> Vec<&Phase> {
        kept.iter()
            .filter(|run| run.family == family)
            .filter_map(|run| run.at(hz))
            .collect()
    };
    let slowdown =
        |phases: &[&Phase]| Spread::of(&phases.iter().map(|p| p.slowdown).collect::<Vec<_>>());
    let mut table = Table::new(&[
        "profiler",
        "slowdown vs the phases around it",
        "profiler CPU, % of all CPUs",
        "samples per phase",
        "JVMs",
    ]);
    let mut families = vec![Family::Stoke];
    if bench.async_profiler.is_some() {
        families.push(Family::AsyncProfiler);
    }
    for &family in &families {
        for hz in RATES {
            let phases = phases(family, hz);
            let Some(spread) = slowdown(&phases) else {
                continue;
            };
            let cpu = match family {
                Family::Stoke => stats::show(
                    &phases
                        .iter()
                        .map(|p| p.profiler_cpu * 100.0)
                        .collect::<Vec<_>>(),
                    2,
                    "%",
                ),
                Family::AsyncProfiler => "in the JVM's threads".into(),
            };
            let samples = Spread::of(&phases.iter().map(|p| p.samples as f64).collect::<Vec<_>>())
                .map_or_else(String::new, |s| format!("{:.0}", s.median));
            table.row(vec![
                format!("{}, {hz} Hz", family.label()),
                format!(
                    "{} ({} to {})",
                    percent_signed(spread.median),
                    percent_signed(spread.min),
                    percent_signed(spread.max)
                ),
                cpu,
                samples,
                phases.len().to_string(),
            ]);
        }
    }
    let disturbed = runs.len() - kept.len();
    let (java, samples) = phases(Family::Stoke, RATES[0])
        .iter()
        .chain(&phases(Family::Stoke, RATES[1]))
        .fold((0, 0), |(java, all), p| {
            (java + p.java_samples, all + p.samples)
        });
    let body = format!(
        "\n### Java workload, in one JVM\n\n\
         Per round a new JVM (the same `FixedWork`, flags and work) for each profiler, \
         warmed up alike, runs the work five times in phases: unprofiled, profiled at one \
         rate, unprofiled, profiled at the other rate (the order of the rates turned each \
         round), unprofiled; each phase's clock starts after {lead:.1} s of the same work \
         untimed, during which the profiler started for it attaches. A profiled phase's \
         slowdown is against the mean of the unprofiled phases on either side of it, in \
         the same JVM: from one JVM to the next the JIT's choices alone move this work's \
         speed by several percent (the noise of `none` above), within one JVM by \
         **{noise}** (the median over the JVMs of how far apart its unprofiled phases \
         were; the noise here). Stoke's agent, or async-profiler's, stays loaded and \
         idle in its JVM's later unprofiled phases. Medians over the JVMs (min to max); \
         {disturbed} JVMs left out as disturbed by other processes.\n\n{}\n\
         Stoke's phases had Java frames in {java} of {samples} samples.\n",
        table.markdown(),
        lead = lead_in_seconds(bench),
        noise = percent(noise),
    );
    let mut targets = Vec::new();
    for hz in RATES {
        let (Some(stoke), Some(other)) = (
            slowdown(&phases(Family::Stoke, hz)),
            slowdown(&phases(Family::AsyncProfiler, hz)),
        ) else {
            continue;
        };
        targets.push(against_async_profiler(
            hz,
            (stoke.median, other.median),
            rounds_faster(&kept, hz),
            noise,
            bench.settings.smoke,
        ));
    }
    for (hz, limit) in TARGETS {
        let stoke = phases(Family::Stoke, hz);
        let Some(spread) = slowdown(&stoke) else {
            continue;
        };
        let cpu = Spread::of(&stoke.iter().map(|p| p.profiler_cpu).collect::<Vec<_>>())
            .map_or(0.0, |s| s.median);
        let goal = format!(
            "Java workload: slowdown at {hz} Hz at most {} (in one JVM)",
            percent(limit)
        );
        let shown = format!(
            "{} (noise {})",
            percent_signed(spread.median),
            percent(noise)
        );
        targets.push(judge(
            goal,
            shown,
            (spread.median, limit, noise, cpu),
            bench.settings.smoke,
        ));
    }
    (body, targets)
}

/// In how many rounds stoke's phase at `hz` slowed its JVM less than
/// async-profiler's slowed its own, and of how many rounds with both.
fn rounds_faster(kept: &[&JvmRun], hz: u64) -> (usize, usize) {
    let at = |family: Family, round: usize| {
        kept.iter()
            .find(|run| run.family == family && run.round == round)
            .and_then(|run| run.at(hz))
    };
    let rounds = kept
        .iter()
        .map(|run| run.round)
        .max()
        .map_or(0, |last| last + 1);
    let pairs: Vec<(f64, f64)> = (0..rounds)
        .filter_map(|round| {
            Some((
                at(Family::Stoke, round)?.slowdown,
                at(Family::AsyncProfiler, round)?.slowdown,
            ))
        })
        .collect();
    let faster = pairs.iter().filter(|(stoke, other)| stoke < other).count();
    (faster, pairs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jvm(round: usize, family: Family, unprofiled: &[f64], slowdowns: [f64; 2]) -> JvmRun {
        JvmRun {
            round,
            family,
            unprofiled: unprofiled.to_vec(),
            profiled: RATES
                .iter()
                .zip(slowdowns)
                .map(|(&hz, slowdown)| Phase {
                    hz,
                    slowdown,
                    profiler_cpu: 0.0,
                    samples: 0,
                    java_samples: 0,
                })
                .collect(),
            disturbed: false,
        }
    }

    #[test]
    fn a_phase_is_measured_against_the_unprofiled_ones_around_it() {
        let slowdowns = against_neighbours(&[3.0, 3.2, 2.8], &[3.3, 3.0]);
        assert!((slowdowns[0] - 0.0645).abs() < 1e-3, "{slowdowns:?}");
        assert!(slowdowns[1].abs() < 1e-12, "{slowdowns:?}");
        let run = jvm(0, Family::Stoke, &[3.0, 3.3, 3.15], [0.0, 0.0]);
        assert!((run.noise() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn rounds_pair_the_two_jvms_of_a_round() {
        let runs = [
            jvm(0, Family::Stoke, &[3.0], [0.01, 0.05]),
            jvm(0, Family::AsyncProfiler, &[3.0], [0.02, 0.04]),
            jvm(1, Family::AsyncProfiler, &[3.0], [0.03, 0.06]),
            jvm(1, Family::Stoke, &[3.0], [0.00, 0.05]),
            // Its pair was left out as disturbed.
            jvm(2, Family::Stoke, &[3.0], [0.00, 0.00]),
        ];
        let kept: Vec<&JvmRun> = runs.iter().collect();
        assert_eq!(rounds_faster(&kept, 99), (2, 2));
        assert_eq!(rounds_faster(&kept, 999), (1, 2));
    }
}
