//! What a profiler costs inside a JVM, by where the JVM's CPU goes: perf
//! samples the JVM's threads (`perf record -p`) through three phases of
//! the same fixed work, unprofiled, profiled, unprofiled, and the share of
//! its samples outside the compiled Java code (in libjvm, the agents,
//! libc, the kernel) is compared. The work's own share outside (GC,
//! runtime calls) is that of the unprofiled phases; what the profiled
//! phase adds to it is the profiler's callbacks, stack walks and threads.
//!
//! Why: a share is a ratio within one phase, so it does not move with this
//! virtual machine's speed, which changes the CPU time of the same work by
//! several percent from one phase to the next (the noise that keeps
//! `jvm_phases` from telling costs of a few percent apart). What it does
//! not see: perf's clock cannot sample inside the timer interrupt, where
//! stoke's BPF programs run (their run time, the kernel's own count, is
//! added apart, as is stoke's own process) and async-profiler's perf events
//! overflow (traced apart, `timer_interrupt`), nor the compiled code
//! running slower for the profiler's sake (caches).

use std::path::Path;

use anyhow::{Context, Result};

use super::{
    jvm_phases::{
        against_async_profiler, finish, spawn_fixed_work, spread_shown, stoke_options, timed_from,
        Family, Profiling,
    },
    process::Process,
    profiler::{perf_report, Options, Recording, Tool},
    report::{Table, Target},
    rotated,
    stats::{show, Spread},
    timer_interrupt::{traced_phase, TimerCost},
    Bench,
};

/// perf's rate: thousands of samples per phase on 2 CPUs.
pub(super) const PERF_HZ: u64 = 499;

/// One JVM's three phases under perf.
pub struct JvmShare {
    pub round: usize,
    pub family: Family,
    /// The share of the JVM's samples outside compiled Java code in the
    /// unprofiled phases, before and after.
    pub unprofiled: [f64; 2],
    /// The same in the profiled phase.
    pub profiled: f64,
    /// The profiler's own CPU, as a share of the JVM's: stoke's process
    /// and BPF programs in the profiled phase; async-profiler's part of the
    /// sampling timer interrupt, when traced (`timer_interrupt`).
    pub own: f64,
    /// CPU sampling's timer callbacks on the JVM's threads, traced in a
    /// phase of their own (none for allocations).
    pub timer: Option<TimerCost>,
    /// Other processes took CPU during it, on every try.
    pub disturbed: bool,
}

impl JvmShare {
    /// What the profiler added to the JVM's CPU, as a share of it: the
    /// profiled phase's share outside compiled code over the unprofiled
    /// phases', plus stoke's own CPU.
    pub fn cost(&self) -> f64 {
        let around = (self.unprofiled[0] + self.unprofiled[1]) / 2.0;
        self.profiled - around + self.own
    }

    /// How far apart the unprofiled phases' shares were, in points.
    pub fn noise(&self) -> f64 {
        (self.unprofiled[0] - self.unprofiled[1]).abs()
    }
}

/// Every round, a JVM per family through its three phases profiling `what`.
pub fn run(bench: &Bench, units: u64, what: Profiling) -> Result<Vec<JvmShare>> {
    let families = Family::all(bench);
    let mut runs: Vec<JvmShare> = Vec::new();
    for round in 0..bench.settings.rounds {
        let first = runs.len();
        for family in rotated(&families, round) {
            let label = format!("{what:?} by perf, round {}: {family:?}", round + 1);
            let measured = bench.measure(&label, || one_jvm(bench, family, units, what))?;
            runs.push(JvmShare {
                round,
                disturbed: measured.disturbed(),
                ..measured.value
            });
        }
        count_interrupts(&mut runs[first..]);
        for run in &runs[first..] {
            bench.log(&format!(
                "{what:?} by perf, round {}: {:?}: outside compiled code {:.2}%, {:.2}% \
                 profiled, {:.2}%; own {:.2}%{}",
                round + 1,
                run.family,
                run.unprofiled[0] * 100.0,
                run.profiled * 100.0,
                run.unprofiled[1] * 100.0,
                run.own * 100.0,
                run.timer.map_or(String::new(), |timer| format!(
                    "; timer callbacks {:.0} per CPU second, {:.2} µs traced, sampler {}",
                    timer.per_cpu_second,
                    timer.traced_ns / 1e3,
                    timer
                        .bpf_ns
                        .map_or("–".into(), |ns| format!("{:.2} µs", ns / 1e3))
                ))
            ));
        }
    }
    Ok(runs)
}

/// Gives async-profiler's run of a round its time in the sampling
/// interrupt, less the tracing's own, as stoke's run of the same round
/// measured it.
fn count_interrupts(round: &mut [JvmShare]) {
    let tracing = round
        .iter()
        .find(|run| run.family == Family::Stoke)
        .and_then(|run| run.timer?.tracing_ns());
    for run in round {
        if let (Family::AsyncProfiler, Some(timer), Some(tracing)) =
            (run.family, run.timer, tracing)
        {
            run.own = timer.share(tracing);
        }
    }
}

/// `family`'s JVMs that no other process disturbed.
pub fn kept(runs: &[JvmShare], family: Family) -> Vec<&JvmShare> {
    runs.iter()
        .filter(|run| run.family == family && !run.disturbed)
        .collect()
}

/// The costs (`JvmShare::cost`) of `family`'s undisturbed JVMs.
pub fn costs(runs: &[JvmShare], family: Family) -> Option<Spread> {
    let costs: Vec<f64> = kept(runs, family).into_iter().map(JvmShare::cost).collect();
    Spread::of(&costs)
}

/// The median over the undisturbed JVMs of their unprofiled phases' gap.
pub fn noise<'a>(runs: impl IntoIterator<Item = &'a JvmShare>) -> f64 {
    let gaps: Vec<f64> = runs
        .into_iter()
        .filter(|run| !run.disturbed)
        .map(JvmShare::noise)
        .collect();
    Spread::of(&gaps).map_or(0.0, |spread| spread.median)
}

/// A table row of `runs` (undisturbed JVMs) labelled `label`: their
/// unprofiled and profiled shares outside compiled code, their own CPU
/// (or `own`, said instead), their cost and how many; `None` without any.
pub fn row(label: String, runs: &[&JvmShare], own: Option<String>) -> Option<Vec<String>> {
    let costs: Vec<f64> = runs.iter().map(|run| run.cost()).collect();
    let cost = Spread::of(&costs)?;
    let points = |values: Vec<f64>| show(&values, 2, "%");
    Some(vec![
        label,
        points(
            runs.iter()
                .flat_map(|run| run.unprofiled)
                .map(|s| s * 100.0)
                .collect(),
        ),
        points(runs.iter().map(|run| run.profiled * 100.0).collect()),
        own.unwrap_or_else(|| points(runs.iter().map(|run| run.own * 100.0).collect())),
        spread_shown(&cost),
        runs.len().to_string(),
    ])
}

/// In how many rounds stoke's cost was the lower, of the rounds with both.
pub fn rounds_cheaper(runs: &[JvmShare]) -> (usize, usize) {
    let at = |family: Family, round: usize| {
        runs.iter()
            .find(|run| run.family == family && run.round == round && !run.disturbed)
            .map(JvmShare::cost)
    };
    let rounds = runs.iter().map(|run| run.round + 1).max().unwrap_or(0);
    let pairs: Vec<(f64, f64)> = (0..rounds)
        .filter_map(|round| Some((at(Family::Stoke, round)?, at(Family::AsyncProfiler, round)?)))
        .collect();
    let cheaper = pairs.iter().filter(|(stoke, other)| stoke < other).count();
    (cheaper, pairs.len())
}

/// The phases under perf as a report section headed `heading` (a
/// markdown heading), each profiler's row labelled by `label`, and `goal`,
/// stoke's cost at most async-profiler's, judged on them. The method is
/// told when `explained`, else referred to above.
pub fn section(
    bench: &Bench,
    shares: &[JvmShare],
    (heading, explained): (&str, bool),
    goal: &str,
    label: impl Fn(Family) -> String,
) -> (String, Option<Target>) {
    // async-profiler's part in the timer interrupt is traced only for
    // CPU sampling; its allocation sampling runs in the JVM's threads.
    let own = if shares.iter().any(|run| run.timer.is_some()) {
        "own: stoke's process and BPF, async-profiler's timer interrupt, % of the JVM's CPU"
    } else {
        "own: stoke's process and BPF, % of the JVM's CPU"
    };
    let mut table = Table::new(&[
        "profiler",
        "outside compiled code, unprofiled",
        "outside compiled code, profiled",
        own,
        "cost: added share + own",
        "JVMs",
    ]);
    for family in Family::all(bench) {
        let runs = kept(shares, family);
        let own = (family == Family::AsyncProfiler && runs.iter().all(|run| run.timer.is_none()))
            .then(|| "in the JVM's threads".to_owned());
        if let Some(row) = row(label(family), &runs, own) {
            table.row(row);
        }
    }
    let noise = noise(shares);
    let disturbed = shares.iter().filter(|run| run.disturbed).count();
    let method = if explained {
        format!(
            "The CPU cost above moves with this machine's speed from phase to phase. Here a \
             new JVM per profiler and round runs three phases (unprofiled, profiled, \
             unprofiled) with `perf record -F {PERF_HZ} -g -p` sampling its threads while the \
             clock runs (started before the lead-in, paused in it: a new process during the \
             phase would cost stoke its naming and tables): the share of their samples \
             outside the compiled Java code (libjvm, the agents, libc, the kernel) is a ratio \
             within the phase, which the machine's speed does not move. **Cost** = the \
             profiled phase's share outside compiled code minus the unprofiled phases' (the \
             work's own GC and runtime calls), plus stoke's own CPU as a share of the JVM's: \
             its process's, and its BPF programs' run time (the kernel's count, \
             `--bpf-stats`), which runs in the timer interrupt, where perf cannot sample. \
             For CPU sampling async-profiler's part there (its perf events' timer \
             callbacks, which write its sample and queue its signal) is traced in a fourth \
             phase, the profiler still sampling: perf records the kernel's \
             `timer:hrtimer_expire_entry` and `_exit` tracepoints on every CPU, timing each \
             `perf_swevent_hrtimer` callback on the JVM's threads, for both profilers; what \
             stoke's callbacks last beyond its sampler's run time in the same round is the \
             tracing's own, taken off async-profiler's (perf's own handling of an overflow, \
             common to both, is then counted for neither). Not in it: the starting and \
             stopping of the per-thread timers at each context switch (both profilers \
             sample the JVM's threads by events of their own), and compiled code slowed \
             by either profiler's use of the caches. "
        )
    } else {
        "As above, by perf. ".to_owned()
    };
    let body = format!(
        "\n{heading}\n\n{method}**Noise**: how far apart a JVM's two unprofiled shares were \
         (median), {:.2} points. Medians over the JVMs (min to max); {disturbed} JVMs left \
         out as disturbed by other processes.\n\n{}{}",
        noise * 100.0,
        table.markdown(),
        timer_line(shares),
    );
    let stoke = costs(shares, Family::Stoke);
    let other = costs(shares, Family::AsyncProfiler);
    let target = stoke.zip(other).map(|(stoke, other)| {
        against_async_profiler(
            goal.into(),
            (stoke.median, other.median),
            rounds_cheaper(shares),
            noise,
            bench.settings.smoke,
        )
    });
    (body, target)
}

/// The traced timer callbacks, per callback, as a line under the table
/// (empty without them).
fn timer_line(shares: &[JvmShare]) -> String {
    let traced = |family: Family, value: fn(&TimerCost) -> Option<f64>| {
        let values: Vec<f64> = kept(shares, family)
            .iter()
            .filter_map(|run| value(run.timer.as_ref()?))
            .map(|ns| ns / 1e3)
            .collect();
        (!values.is_empty()).then(|| show(&values, 2, " µs"))
    };
    let Some(stoke) = traced(Family::Stoke, |t| Some(t.traced_ns)) else {
        return String::new();
    };
    let sampler = traced(Family::Stoke, |t| t.bpf_ns).unwrap_or_default();
    let other = traced(Family::AsyncProfiler, |t| Some(t.traced_ns))
        .map(|other| format!(", async-profiler's {other}"))
        .unwrap_or_default();
    format!(
        "\nTimer callbacks on the JVM's threads, as traced (the tracing's own included): \
         stoke's {stoke} (its sampler's run time {sampler}){other}.\n"
    )
}

/// A JVM through its three phases, profiled by `family` (stoke: one
/// recording).
fn one_jvm(bench: &Bench, family: Family, units: u64, what: Profiling) -> Result<JvmShare> {
    jvm_with(
        bench,
        family,
        units,
        what,
        Stokes {
            count: 1,
            traced: true,
        },
    )
}

/// Every round, a JVM profiled by one stoke and one profiled by `stokes`
/// side by side (each `stoke record -p` at `what`'s rate), through their
/// three phases, in rotated order. Neither's timer is traced: a traced
/// phase before the last one would be the one JVM's alone, and it changes
/// the last phase's share; both JVMs go through the same phases.
pub fn side_by_side(
    bench: &Bench,
    units: u64,
    what: Profiling,
    stokes: usize,
) -> Result<Vec<(usize, JvmShare)>> {
    let mut runs = Vec::new();
    for round in 0..bench.settings.rounds {
        for count in rotated(&[1, stokes], round) {
            let who = if count == 1 {
                "one stoke".to_owned()
            } else {
                format!("{count} stokes")
            };
            let label = format!("{what:?} by perf, round {}: {who}", round + 1);
            let measured = bench.measure(&label, || {
                let stokes = Stokes {
                    count,
                    traced: false,
                };
                jvm_with(bench, Family::Stoke, units, what, stokes)
            })?;
            let run = JvmShare {
                round,
                disturbed: measured.disturbed(),
                ..measured.value
            };
            bench.log(&format!(
                "{label}: outside compiled code {:.2}%, {:.2}% profiled, {:.2}%; own {:.2}%",
                run.unprofiled[0] * 100.0,
                run.profiled * 100.0,
                run.unprofiled[1] * 100.0,
                run.own * 100.0,
            ));
            runs.push((count, run));
        }
    }
    Ok(runs)
}

/// How many stoke recordings profile a JVM side by side, and whether the
/// timer of one alone is traced.
struct Stokes {
    count: usize,
    traced: bool,
}

/// A JVM through its three phases, profiled by `family` (stoke: `stokes`).
fn jvm_with(
    bench: &Bench,
    family: Family,
    units: u64,
    what: Profiling,
    stokes: Stokes,
) -> Result<JvmShare> {
    let mut jvm = spawn_fixed_work(bench, units)?;
    let pid = u32::try_from(jvm.pid()).context("pid out of range")?;
    let before = sampled_phase(bench, &mut jvm, &[])?.0;
    let ((profiled, own), timer) = match family {
        Family::Stoke => {
            let options = Options {
                bpf_stats: true,
                ..stoke_options(what, pid)
            };
            let recordings = (0..stokes.count)
                .map(|index| Recording::start(bench, &options, &format!("jvm-share-{index}")))
                .collect::<Result<Vec<_>>>()?;
            let measured = sampled_phase(bench, &mut jvm, &recordings)?;
            let timer = match recordings.as_slice() {
                [recording] if stokes.traced => traced(bench, &mut jvm, Some(recording), what)?,
                _ => None,
            };
            for recording in recordings {
                recording.stop()?.remove_output();
            }
            (measured, timer)
        }
        Family::AsyncProfiler => {
            let profiler = bench
                .async_profiler
                .as_ref()
                .context("async-profiler phases without --async-profiler")?;
            profiler.start(pid, what)?;
            let measured = sampled_phase(bench, &mut jvm, &[])?;
            let timer = traced(bench, &mut jvm, None, what)?;
            profiler.stop_samples(pid, &bench.scratch("jvm-share.collapsed"))?;
            (measured, timer)
        }
    };
    let after = sampled_phase(bench, &mut jvm, &[])?.0;
    finish(jvm)?;
    Ok(JvmShare {
        round: 0,
        family,
        unprofiled: [before, after],
        profiled,
        own,
        timer,
        disturbed: false,
    })
}

/// For CPU sampling, a phase with the profiler still sampling and its
/// timer callbacks traced.
fn traced(
    bench: &Bench,
    jvm: &mut Process,
    recording: Option<&Recording>,
    what: Profiling,
) -> Result<Option<TimerCost>> {
    match what {
        Profiling::Cpu(_) => Ok(Some(traced_phase(bench, jvm, recording)?)),
        Profiling::Alloc(_) => Ok(None),
    }
}

/// Runs a phase with perf sampling the JVM while its clock runs (started
/// before the lead-in, paused until the clock starts: a new process in the
/// phase would cost stoke its naming and tables); returns the share of
/// perf's samples outside compiled Java code and, given stoke's
/// `recordings` (with `--bpf-stats`), stoke's CPU meanwhile as a share of
/// the JVM's: their processes' and their BPF programs' run time, which the
/// kernel counts in the CPU time of the threads they interrupted.
fn sampled_phase(bench: &Bench, jvm: &mut Process, recordings: &[Recording]) -> Result<(f64, f64)> {
    let options = Options {
        pids: vec![u32::try_from(jvm.pid()).context("pid out of range")?],
        paused: true,
        ..Options::new(Tool::Perf, PERF_HZ, "")
    };
    let mut perf = Recording::start(bench, &options, "jvm-share")?;
    let stoke_cpu = || -> Result<f64> {
        recordings
            .iter()
            .try_fold(0.0, |sum, r| Ok(sum + r.own_cpu_now()?))
    };
    let (took, stoke) = timed_from(bench, jvm, || perf.resume(), stoke_cpu)?;
    let stopped = perf.stop()?;
    let outside = outside_compiled_code(&stopped.output)?;
    stopped.remove_output();
    let jvm_cpu = took.cpu - stoke;
    Ok((outside, if jvm_cpu > 0.0 { stoke / jvm_cpu } else { 0.0 }))
}

/// The share of `data`'s samples not in compiled Java code, which perf,
/// without a map of the JIT's code, names `[JIT] tid N`.
fn outside_compiled_code(data: &Path) -> Result<f64> {
    let report = perf_report(data, &["--no-children", "--sort", "dso", "-q"])?;
    let compiled = compiled_share(&report)
        .context("perf report named no compiled Java code: was the JVM running?")?;
    Ok(1.0 - compiled)
}

/// The share perf's `--sort dso` report gives compiled Java code, if any.
fn compiled_share(report: &str) -> Option<f64> {
    dso_share(report, "[JIT]")
}

/// The share perf's `--sort dso` report gives `dso`, if it names it.
pub(super) fn dso_share(report: &str, dso: &str) -> Option<f64> {
    let mut total = None;
    for line in report.lines() {
        let mut fields = line.split_whitespace();
        let (Some(percent), Some(name)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some(Ok(percent)) = percent.strip_suffix('%').map(str::parse::<f64>) else {
            continue;
        };
        if name == dso {
            *total.get_or_insert(0.0) += percent / 100.0;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_code_is_what_perf_names_jit() {
        let report = "    94.03%  [JIT] tid 22049\n     4.40%  libjvm.so\n     \
                      0.29%  libasyncProfiler.so\n     1.28%  [kernel.kallsyms]\n";
        assert_eq!(compiled_share(report), Some(0.9403));
        assert_eq!(compiled_share("     4.40%  libjvm.so\n"), None);
    }

    fn share(round: usize, family: Family, profiled: f64) -> JvmShare {
        JvmShare {
            round,
            family,
            unprofiled: [0.02, 0.022],
            profiled,
            own: 0.001,
            timer: None,
            disturbed: false,
        }
    }

    #[test]
    fn async_profilers_interrupt_is_counted_less_the_tracing_stoke_measured() {
        let timer = |traced_ns, bpf_ns| TimerCost {
            per_cpu_second: 1000.0,
            traced_ns,
            bpf_ns,
        };
        let mut round = [
            JvmShare {
                timer: Some(timer(9000.0, Some(6000.0))),
                ..share(0, Family::Stoke, 0.05)
            },
            JvmShare {
                timer: Some(timer(7500.0, None)),
                ..share(0, Family::AsyncProfiler, 0.05)
            },
        ];
        count_interrupts(&mut round);
        assert!((round[0].own - 0.001).abs() < 1e-12, "stoke's own is kept");
        assert!((round[1].own - 0.0045).abs() < 1e-12, "{}", round[1].own);
    }

    #[test]
    fn the_cost_is_the_share_added_and_stokes_process() {
        let run = share(0, Family::Stoke, 0.056);
        assert!((run.cost() - 0.036).abs() < 1e-12, "{}", run.cost());
        assert!((run.noise() - 0.002).abs() < 1e-12);
        let runs = [
            run,
            share(0, Family::AsyncProfiler, 0.06),
            share(1, Family::Stoke, 0.07),
            share(1, Family::AsyncProfiler, 0.06),
        ];
        assert_eq!(rounds_cheaper(&runs), (1, 2));
        assert_eq!(costs(&runs, Family::Stoke).unwrap().count, 2);
    }
}
