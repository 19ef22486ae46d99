//! Profilers measured in phases of one JVM: each round starts a JVM for
//! stoke and one for async-profiler (when the bench has it), and each JVM,
//! once warm, runs the same fixed work (`FixedWork -p`) in phases: one
//! unprofiled, then for each thing profiled (CPU at a rate, allocations) a
//! profiled phase and an unprofiled one. A profiled phase is measured
//! against the mean of the unprofiled phases on either side of it, by its
//! elapsed time and by its CPU time: that of the JVM's threads (from their
//! `schedstat`), plus stoke's own process for stoke. The CPU time leaves out
//! what elapsed times on a virtual machine carry and no profiler causes:
//! the time the hypervisor gives other guests (steal, which the kernel
//! keeps out of a thread's run time). It keeps what profiling costs the
//! JVM: the sampling interrupt and the BPF program run in the interrupted
//! thread's time on kernels without IRQ time accounting (ours), and the
//! signal handler and the agent's threads are the JVM's own.
//!
//! Why: from one JVM to the next the JIT's choices (what it inlines, where
//! it puts the code) change the speed of this work by several percent, more
//! than the slowdowns measured, so a JVM per run cannot tell them apart; in
//! one JVM the compiled code is the same for every phase. What stays in a
//! JVM after its profiled phase (stoke's agent or async-profiler's, loaded
//! and idle) is in the later unprofiled phases.

use std::time::Duration;

use anyhow::{ensure, Context, Result};

use super::{
    async_profiler::AsyncProfiler,
    build::java_command,
    overhead::Workload,
    process::Process,
    profiler::{Options, Recording, Tool},
    report::{Table, Target, Verdict},
    rotated,
    stats::{percent, percent_signed, show, Spread},
    Bench,
};

/// Whose agent a JVM's profiled phases measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Family {
    Stoke,
    AsyncProfiler,
}

impl Family {
    /// The families a run of the bench measures.
    pub fn all(bench: &Bench) -> Vec<Family> {
        let mut families = vec![Family::Stoke];
        if bench.async_profiler.is_some() {
            families.push(Family::AsyncProfiler);
        }
        families
    }
}

/// What a profiled phase profiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Profiling {
    /// CPU, sampled at this rate.
    Cpu(u64),
    /// Java allocations, sampled every this many bytes on average.
    Alloc(u64),
}

/// What one phase took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Took {
    /// The fixed work's elapsed time, in seconds.
    pub elapsed: f64,
    /// The CPU time of the JVM's threads meanwhile, plus the profiler's own
    /// process's, in seconds.
    pub cpu: f64,
}

/// Which of a phase's figures a comparison is on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Measure {
    Elapsed,
    Cpu,
}

impl Took {
    fn of(self, measure: Measure) -> f64 {
        match measure {
            Measure::Elapsed => self.elapsed,
            Measure::Cpu => self.cpu,
        }
    }
}

/// One profiled phase of a JVM.
pub struct Phase {
    pub what: Profiling,
    pub took: Took,
    /// Its elapsed time against the mean of the unprofiled phases around
    /// it, minus 1.
    pub slowdown: f64,
    /// Its CPU time against the mean of the unprofiled phases around it,
    /// minus 1.
    pub cost: f64,
    /// Stoke's own CPU during the phase, as a share of all CPUs (0 for
    /// async-profiler, whose CPU is the JVM's).
    pub profiler_cpu: f64,
    /// Samples (stoke's allocations: bytes estimated).
    pub samples: u64,
    /// Stoke's CPU phases: samples with Java frames.
    pub java_samples: u64,
}

impl Phase {
    /// Its slowdown or its CPU cost.
    pub fn relative(&self, measure: Measure) -> f64 {
        match measure {
            Measure::Elapsed => self.slowdown,
            Measure::Cpu => self.cost,
        }
    }
}

/// One JVM's phases.
pub struct JvmRun {
    pub round: usize,
    pub family: Family,
    /// What the unprofiled phases took, in order.
    pub unprofiled: Vec<Took>,
    pub profiled: Vec<Phase>,
    /// Other processes took CPU during it, on every try.
    pub disturbed: bool,
}

impl JvmRun {
    /// How far apart its unprofiled phases were by `measure` (max / min − 1).
    pub fn noise(&self, measure: Measure) -> f64 {
        let values: Vec<f64> = self.unprofiled.iter().map(|t| t.of(measure)).collect();
        Spread::of(&values).map_or(0.0, |spread| spread.max / spread.min - 1.0)
    }

    /// Its phase profiling `what`.
    pub fn at(&self, what: Profiling) -> Option<&Phase> {
        self.profiled.iter().find(|phase| phase.what == what)
    }
}

/// The JVMs' phases, compared by one measure: only the JVMs no other
/// process disturbed.
pub struct Phases<'a> {
    pub measure: Measure,
    pub kept: Vec<&'a JvmRun>,
    /// JVMs left out as disturbed.
    pub disturbed: usize,
    /// The median over the JVMs of how far apart its unprofiled phases
    /// were: the noise a slowdown has to beat.
    pub noise: f64,
}

impl<'a> Phases<'a> {
    pub fn of(runs: &'a [JvmRun], measure: Measure) -> Self {
        let kept: Vec<&JvmRun> = runs.iter().filter(|run| !run.disturbed).collect();
        let noises: Vec<f64> = kept.iter().map(|run| run.noise(measure)).collect();
        Self {
            measure,
            disturbed: runs.len() - kept.len(),
            noise: Spread::of(&noises).map_or(0.0, |spread| spread.median),
            kept,
        }
    }

    /// The phases of `family`'s JVMs profiling `what`.
    pub fn of_family(&self, family: Family, what: Profiling) -> Vec<&'a Phase> {
        self.kept
            .iter()
            .filter(|run| run.family == family)
            .filter_map(|run| run.at(what))
            .collect()
    }

    /// The spread of `family`'s slowdowns (or costs) profiling `what`, if
    /// any.
    pub fn slowdown(&self, family: Family, what: Profiling) -> Option<Spread> {
        let slowdowns: Vec<f64> = self
            .of_family(family, what)
            .iter()
            .map(|phase| phase.relative(self.measure))
            .collect();
        Spread::of(&slowdowns)
    }

    /// In how many rounds stoke's phase profiling `what` slowed its JVM
    /// less than async-profiler's slowed its own, and of how many rounds
    /// with both.
    pub fn rounds_faster(&self, what: Profiling) -> (usize, usize) {
        let at = |family: Family, round: usize| {
            self.kept
                .iter()
                .find(|run| run.family == family && run.round == round)
                .and_then(|run| run.at(what))
        };
        let rounds = self
            .kept
            .iter()
            .map(|run| run.round)
            .max()
            .map_or(0, |last| last + 1);
        let pairs: Vec<(f64, f64)> = (0..rounds)
            .filter_map(|round| {
                Some((
                    at(Family::Stoke, round)?.relative(self.measure),
                    at(Family::AsyncProfiler, round)?.relative(self.measure),
                ))
            })
            .collect();
        let faster = pairs.iter().filter(|(stoke, other)| stoke < other).count();
        (faster, pairs.len())
    }
}

/// The table of `runs`: a row per family and thing profiled, `label`
/// naming it and `recorded` showing the median of its phases' samples.
pub fn table(
    bench: &Bench,
    runs: &[JvmRun],
    profiled: &[Profiling],
    label: impl Fn(Family, Profiling) -> String,
    recorded: impl Fn(Family, f64) -> String,
) -> Table {
    let (by_cpu, by_elapsed) = (
        Phases::of(runs, Measure::Cpu),
        Phases::of(runs, Measure::Elapsed),
    );
    let mut table = Table::new(&[
        "profiler",
        "CPU cost vs the phases around it",
        "slowdown (elapsed)",
        "profiler's own CPU, % of all CPUs",
        "recorded per phase",
        "JVMs",
    ]);
    for family in Family::all(bench) {
        for &what in profiled {
            let (Some(cost), Some(slowdown)) = (
                by_cpu.slowdown(family, what),
                by_elapsed.slowdown(family, what),
            ) else {
                continue;
            };
            let phases = by_cpu.of_family(family, what);
            let samples: Vec<f64> = phases.iter().map(|p| p.samples as f64).collect();
            let own_cpu = match family {
                Family::Stoke => show(
                    &phases
                        .iter()
                        .map(|p| p.profiler_cpu * 100.0)
                        .collect::<Vec<_>>(),
                    2,
                    "%",
                ),
                Family::AsyncProfiler => "in the JVM's threads".into(),
            };
            table.row(vec![
                label(family, what),
                spread_shown(&cost),
                spread_shown(&slowdown),
                own_cpu,
                recorded(family, Spread::of(&samples).map_or(0.0, |s| s.median)),
                phases.len().to_string(),
            ]);
        }
    }
    table
}

/// How the phases of `runs` were measured, `phases` saying what a JVM ran.
pub fn method(bench: &Bench, runs: &[JvmRun], phases: &str) -> String {
    let (by_cpu, by_elapsed) = (
        Phases::of(runs, Measure::Cpu),
        Phases::of(runs, Measure::Elapsed),
    );
    format!(
        "Per round a new JVM (`FixedWork -p`, the same flags and work) for each profiler, \
         warmed up {warmup} s, runs the work in phases: {phases}; each phase's clock starts \
         after {lead:.1} s of the same work untimed, in which the profiler started for the \
         phase attaches. A profiled phase is measured against the mean of the unprofiled \
         phases on either side of it, in the same JVM (from one JVM to the next the JIT's \
         choices alone move this work by several percent). **CPU cost**: the CPU time of \
         the JVM's threads during the phase, plus stoke's own process for stoke (steal, the \
         time the hypervisor gives other guests, is not in it; the sampling interrupt, the \
         BPF program, signal handlers and the agents' threads are); the targets are judged \
         on it. Slowdown: the phase's elapsed time. **Noise**, how far apart a JVM's \
         unprofiled phases were (median over the JVMs): {cpu_noise} by CPU time, \
         {elapsed_noise} by elapsed time. Medians over the JVMs (min to max); {disturbed} \
         JVMs left out as disturbed by other processes.\n",
        warmup = bench.settings.java_warmup_seconds,
        lead = lead_in_seconds(bench),
        cpu_noise = percent(by_cpu.noise),
        elapsed_noise = percent(by_elapsed.noise),
        disturbed = by_cpu.disturbed,
    )
}

/// A table's cell for slowdowns: `median (min to max)`.
pub(super) fn spread_shown(spread: &Spread) -> String {
    format!(
        "{} ({} to {})",
        percent_signed(spread.median),
        percent_signed(spread.min),
        percent_signed(spread.max)
    )
}

/// Every round: a JVM per family profiling each of `profiled` in turn, the
/// order of families and of `profiled` turned each round. `what` names the
/// measurement in the log.
pub fn run(bench: &Bench, what: &str, units: u64, profiled: &[Profiling]) -> Result<Vec<JvmRun>> {
    let families = Family::all(bench);
    let mut runs = Vec::new();
    for round in 0..bench.settings.rounds {
        let mut order = profiled.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for family in rotated(&families, round) {
            let what = format!("{what} in one JVM, round {}: {family:?}", round + 1);
            let measured = bench.measure(&what, || one_jvm(bench, family, units, &order))?;
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
                    .map(|t| format!("{:.3} s ({:.3} s CPU)", t.elapsed, t.cpu))
                    .collect::<Vec<_>>()
                    .join(", "),
                run.profiled
                    .iter()
                    .map(|p| {
                        format!(
                            "{:?} {:+.2}% ({:+.2}% CPU)",
                            p.what,
                            p.slowdown * 100.0,
                            p.cost * 100.0
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            runs.push(run);
        }
    }
    Ok(runs)
}

/// A new JVM, warmed up, through its phases: unprofiled, then for each of
/// `profiled` a profiled phase and an unprofiled one.
fn one_jvm(bench: &Bench, family: Family, units: u64, profiled: &[Profiling]) -> Result<JvmRun> {
    let mut jvm = spawn_fixed_work(bench, units)?;
    let pid = u32::try_from(jvm.pid()).context("pid out of range")?;
    let mut unprofiled = vec![phase(bench, &mut jvm)?];
    let mut phases = Vec::new();
    for &what in profiled {
        phases.push(match family {
            Family::Stoke => stoke_phase(bench, &mut jvm, pid, what)?,
            Family::AsyncProfiler => async_profiler_phase(bench, &mut jvm, pid, what)?,
        });
        unprofiled.push(phase(bench, &mut jvm)?);
    }
    finish(jvm)?;
    let relative = |measure: Measure| {
        let around: Vec<f64> = unprofiled.iter().map(|t| t.of(measure)).collect();
        let took: Vec<f64> = phases.iter().map(|p: &Phase| p.took.of(measure)).collect();
        against_neighbours(&around, &took)
    };
    let (slowdowns, costs) = (relative(Measure::Elapsed), relative(Measure::Cpu));
    for ((phase, slowdown), cost) in phases.iter_mut().zip(slowdowns).zip(costs) {
        phase.slowdown = slowdown;
        phase.cost = cost;
    }
    Ok(JvmRun {
        round: 0,
        family,
        unprofiled,
        profiled: phases,
        disturbed: false,
    })
}

/// A new JVM running the fixed work in phases (`FixedWork -p`), warmed up.
pub(super) fn spawn_fixed_work(bench: &Bench, units: u64) -> Result<Process> {
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
    Ok(jvm)
}

/// Ends a JVM's phases: it exits once its input is closed.
pub(super) fn finish(mut jvm: Process) -> Result<()> {
    jvm.close_input();
    let exit = jvm.wait(Duration::from_secs(30))?;
    ensure!(
        exit.success(),
        "the Java workload failed: {}: {}",
        exit.describe(),
        jvm.stderr().all().join(" / ")
    );
    Ok(())
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

/// Runs one unprofiled phase of the JVM (its lead-in, untimed, then the
/// fixed work) and returns what the fixed work took.
fn phase(bench: &Bench, jvm: &mut Process) -> Result<Took> {
    timed(bench, jvm, || Ok(0.0)).map(|(took, _)| took)
}

/// Runs a phase of the JVM; `profiler_cpu` reads the profiler's own CPU
/// time, in seconds, which is added to the JVM's (all its threads'
/// `schedstat` run time, without steal) and returned apart.
fn timed(
    bench: &Bench,
    jvm: &mut Process,
    profiler_cpu: impl Fn() -> Result<f64>,
) -> Result<(Took, f64)> {
    timed_from(bench, jvm, || Ok(()), profiler_cpu)
}

/// [`timed`], with `clock_started` run as the phase's clock starts, before
/// the first reading.
pub(super) fn timed_from(
    bench: &Bench,
    jvm: &mut Process,
    clock_started: impl FnOnce() -> Result<()>,
    profiler_cpu: impl Fn() -> Result<f64>,
) -> Result<(Took, f64)> {
    start_phase(bench, jvm)?;
    clock_started()?;
    let (jvm_before, profiler_before) = (jvm.cpu_now()?, profiler_cpu()?);
    let elapsed = end_phase(bench, jvm)?;
    let (jvm_after, profiler_after) = (jvm.cpu_now()?, profiler_cpu()?);
    let profiler = profiler_after - profiler_before;
    let took = Took {
        elapsed,
        cpu: (jvm_after - jvm_before).as_secs_f64() + profiler,
    };
    Ok((took, profiler))
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

/// How unlikely by chance alone a one-sided sign test must find a result
/// to count it as told apart: as unlikely as 5 wins of 5 rounds.
const SIGN_TEST_LEVEL: f64 = 1.0 / 32.0;

/// The chance of `wins` or more of `rounds` when neither side is the
/// faster (each round a fair coin): a one-sided sign test's p-value.
fn sign_test_p(wins: usize, rounds: usize) -> f64 {
    let mut choose = 1.0; // C(rounds, k), from k = 0 up
    let mut tail = 0.0;
    for k in 0..=rounds {
        if k >= wins {
            tail += choose;
        }
        choose = choose * (rounds - k) as f64 / (k + 1) as f64;
    }
    tail / 2f64.powi(rounds as i32)
}

/// The fewest wins of `rounds` that the sign test tells apart, if any.
fn wins_needed(rounds: usize) -> Option<usize> {
    (0..=rounds).find(|&wins| sign_test_p(wins, rounds) <= SIGN_TEST_LEVEL)
}

/// A target of the issues on Java: stoke's slowdown (`goal`) no more than
/// async-profiler's, told apart by a sign test over the rounds (each round
/// measures both).
pub fn against_async_profiler(
    goal: String,
    (stoke, async_profiler): (f64, f64),
    (faster, rounds): (usize, usize),
    noise: f64,
    smoke: bool,
) -> Target {
    let measured = format!(
        "stoke {} vs async-profiler {}; stoke faster in {faster} of {rounds} rounds \
         (noise {})",
        percent_signed(stoke),
        percent_signed(async_profiler),
        percent(noise)
    );
    let needed = wins_needed(rounds).map_or_else(
        || "5 rounds or more".to_owned(),
        |wins| format!("{wins} of {rounds}"),
    );
    let verdict = if smoke {
        Verdict::NotJudged("smoke run".into())
    } else if stoke <= async_profiler && sign_test_p(faster, rounds) <= SIGN_TEST_LEVEL {
        Verdict::Met
    } else if stoke <= async_profiler {
        Verdict::MetBut(format!(
            "not resolved: stoke was the faster in {faster} of {rounds} rounds, the sign test \
             needs {needed}"
        ))
    } else if sign_test_p(rounds - faster, rounds) <= SIGN_TEST_LEVEL {
        Verdict::Missed(format!(
            "async-profiler was the faster in {} of {rounds} rounds, by {} in the medians",
            rounds - faster,
            percent(stoke - async_profiler)
        ))
    } else {
        Verdict::Missed(format!(
            "within noise: stoke was the faster in {faster} of {rounds} rounds (the sign test \
             needs {needed})"
        ))
    };
    Target {
        goal,
        measured,
        verdict,
    }
}

/// A stoke recording of `what` in JVM `pid` alone (`-p`), as
/// async-profiler's in the same JVM.
pub(super) fn stoke_options(what: Profiling, pid: u32) -> Options {
    let options = match what {
        Profiling::Cpu(hz) => Options::new(Tool::Stoke, hz, "json"),
        Profiling::Alloc(bytes) => Options {
            stoke_args: vec![
                "-e".into(),
                "alloc".into(),
                "--alloc-interval".into(),
                bytes.to_string(),
            ],
            ..Options::new(Tool::Stoke, 99, "json")
        },
    };
    Options {
        pids: vec![pid],
        ..options
    }
}

/// A phase under a stoke recording of `what` in JVM `pid`.
fn stoke_phase(bench: &Bench, jvm: &mut Process, pid: u32, what: Profiling) -> Result<Phase> {
    let recording = Recording::start(bench, &stoke_options(what, pid), "jvm-phases")?;
    // Its CPU while the clock runs: the agent's attach is in the lead-in.
    let stoke_cpu = || Ok(recording.cpu_now()?.as_secs_f64());
    let (took, stoke) = timed(bench, jvm, stoke_cpu)?;
    let stopped = recording.stop()?;
    let java_samples = stopped
        .summary()
        .map(|summary| summary.java.java_samples)
        .unwrap_or(0);
    stopped.remove_output();
    Ok(Phase {
        what,
        took,
        slowdown: 0.0,
        cost: 0.0,
        profiler_cpu: stoke / (took.elapsed * bench.cpus as f64),
        samples: stopped.samples,
        java_samples,
    })
}

/// A phase with async-profiler attached to the JVM, profiling `what`.
fn async_profiler_phase(
    bench: &Bench,
    jvm: &mut Process,
    pid: u32,
    what: Profiling,
) -> Result<Phase> {
    let profiler: &AsyncProfiler = bench
        .async_profiler
        .as_ref()
        .context("async-profiler phases without --async-profiler")?;
    profiler.start(pid, what)?;
    let took = phase(bench, jvm)?;
    let samples = profiler.stop_samples(pid, &bench.scratch("jvm-phases.collapsed"))?;
    Ok(Phase {
        what,
        took,
        slowdown: 0.0,
        cost: 0.0,
        profiler_cpu: 0.0,
        samples,
        java_samples: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sign_test_needs_all_of_5_rounds_and_12_of_15() {
        assert_eq!(sign_test_p(5, 5), 1.0 / 32.0);
        assert!((sign_test_p(0, 7) - 1.0).abs() < 1e-12);
        assert_eq!(wins_needed(4), None);
        assert_eq!(wins_needed(5), Some(5));
        assert_eq!(wins_needed(10), Some(9));
        assert_eq!(wins_needed(15), Some(12));
    }

    const CPU: [Profiling; 2] = [Profiling::Cpu(99), Profiling::Cpu(999)];

    /// A JVM whose phases' CPU times are twice their elapsed times (2
    /// threads), its CPU costs half its slowdowns.
    fn jvm(round: usize, family: Family, unprofiled: &[f64], slowdowns: [f64; 2]) -> JvmRun {
        JvmRun {
            round,
            family,
            unprofiled: unprofiled
                .iter()
                .map(|&elapsed| Took {
                    elapsed,
                    cpu: elapsed * 2.0,
                })
                .collect(),
            profiled: CPU
                .iter()
                .zip(slowdowns)
                .map(|(&what, slowdown)| Phase {
                    what,
                    took: Took {
                        elapsed: 3.0,
                        cpu: 6.0,
                    },
                    slowdown,
                    cost: slowdown / 2.0,
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
        assert!((run.noise(Measure::Elapsed) - 0.1).abs() < 1e-12);
        assert!((run.noise(Measure::Cpu) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn rounds_pair_the_two_jvms_of_a_round() {
        let mut disturbed = jvm(2, Family::AsyncProfiler, &[3.0, 3.6], [0.09, 0.09]);
        disturbed.disturbed = true;
        let runs = [
            jvm(0, Family::Stoke, &[3.0, 3.03], [0.01, 0.05]),
            jvm(0, Family::AsyncProfiler, &[3.0, 3.06], [0.02, 0.04]),
            jvm(1, Family::AsyncProfiler, &[3.0, 3.03], [0.03, 0.06]),
            jvm(1, Family::Stoke, &[3.0, 3.03], [0.00, 0.05]),
            // Its pair is left out as disturbed.
            jvm(2, Family::Stoke, &[3.0, 3.03], [0.00, 0.00]),
            disturbed,
        ];
        let phases = Phases::of(&runs, Measure::Elapsed);
        assert_eq!(phases.disturbed, 1);
        assert!((phases.noise - 0.01).abs() < 1e-9, "{}", phases.noise);
        assert_eq!(phases.rounds_faster(CPU[0]), (2, 2));
        assert_eq!(phases.rounds_faster(CPU[1]), (1, 2));
        let stoke = phases.slowdown(Family::Stoke, CPU[1]).unwrap();
        assert_eq!((stoke.median, stoke.count), (0.05, 3));
        let by_cpu = Phases::of(&runs, Measure::Cpu);
        let stoke = by_cpu.slowdown(Family::Stoke, CPU[1]).unwrap();
        assert_eq!(stoke.median, 0.025);
    }
}
