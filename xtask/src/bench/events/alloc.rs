//! Java allocation profiling: how much longer the Java fixed work (which
//! allocates its orders, strings and maps all along) takes while stoke
//! records `-a -e alloc` at its default interval, and, given
//! `--async-profiler`, while async-profiler attached profiles allocations
//! at the same interval: in phases of one JVM (`jvm_phases`), unprofiled,
//! profiled, unprofiled. Then, as costs of a few percent hide in this
//! machine's noise, the same again with perf sampling the JVM
//! (`jvm_share`): what the profiler adds to the share of the JVM's CPU
//! outside its compiled code.

use anyhow::Result;

use super::super::{
    jvm_phases::{self, against_async_profiler, Family, JvmRun, Measure, Phases, Profiling},
    jvm_share::{self, JvmShare},
    overhead::{calibrate, Workload},
    report::{Table, Target, Verdict},
    stats::{percent, percent_signed, show},
    Bench,
};

/// stoke's and async-profiler's default: a sample every 512 KiB on average.
const ALLOC: Profiling = Profiling::Alloc(512 << 10);

/// The target for stoke's slowdown.
const TARGET: f64 = 0.02;

/// The allocation section's text and targets.
pub fn run(bench: &Bench) -> Result<(String, Vec<Target>)> {
    if bench.workloads.java_fixed_work.is_none() {
        return Ok((
            "### Java allocations\n\nLeft out: this machine has no JDK (`java`, `javac`).\n".into(),
            Vec::new(),
        ));
    }
    let units = calibrate(bench, Workload::Java)?;
    let runs = jvm_phases::run(bench, "allocations", units, &[ALLOC])?;
    let shares = jvm_share::run(bench, units, ALLOC)?;
    let (mut body, mut targets) = section(bench, units, &runs);
    let (text, target) = share_section(bench, &shares);
    body += &text;
    targets.extend(target);
    Ok((body, targets))
}

fn section(bench: &Bench, units: u64, runs: &[JvmRun]) -> (String, Vec<Target>) {
    let phases = Phases::of(runs, Measure::Cpu);
    let noise = phases.noise;
    let table = jvm_phases::table(
        bench,
        runs,
        &[ALLOC],
        |family, _| label(family),
        |family, recorded| match family {
            Family::Stoke => format!("{:.0} MB", recorded / 1e6),
            Family::AsyncProfiler => format!("{recorded:.0} samples"),
        },
    );
    let stoke_phases = phases.of_family(Family::Stoke, ALLOC);
    let unrecorded = stoke_phases.iter().filter(|p| p.samples == 0).count();
    let mut body = format!(
        "### Java allocations\n\n`FixedWork` (the overhead part's Java workload: orders, \
         strings and maps allocated all along), {units} units on each of {cpus} threads per \
         phase, allocations sampled every 512 KiB on average by both profilers. {}\n{}\
         Recorded: stoke's estimate of the bytes allocated, async-profiler's samples.\n",
        jvm_phases::method(bench, runs, "unprofiled, profiled, unprofiled"),
        table.markdown(),
        cpus = bench.cpus,
    );
    if unrecorded > 0 {
        body += &format!(
            "\n**In {unrecorded} of {} stoke phases no allocation was recorded**: its agent \
             was not in before the phase ended.\n",
            stoke_phases.len()
        );
    }
    if bench.async_profiler.is_none() {
        body += "\nasync-profiler: not measured in this run (`--async-profiler DIR`).\n";
    }
    let stoke = phases
        .slowdown(Family::Stoke, ALLOC)
        .map_or(0.0, |s| s.median);
    let mut target = Target::at_most(
        format!(
            "Java allocation profiling at 512 KiB costs the work ≤{} of CPU",
            percent(TARGET)
        ),
        format!("{} (noise {})", percent_signed(stoke), percent(noise)),
        (stoke, TARGET, noise),
        percent,
    );
    if bench.settings.smoke {
        target.verdict = Verdict::NotJudged("smoke run".into());
    } else if stoke_phases.len() == unrecorded {
        target.verdict = Verdict::NotJudged("stoke's agent was in no phase".into());
    }
    let mut targets = vec![target];
    if let Some(other) = phases.slowdown(Family::AsyncProfiler, ALLOC) {
        targets.push(against_async_profiler(
            "Java allocation profiling: stoke's CPU cost at most async-profiler's".into(),
            (stoke, other.median),
            phases.rounds_faster(ALLOC),
            noise,
            bench.settings.smoke,
        ));
    }
    (body, targets)
}

/// The phases under perf: their table, and stoke against async-profiler
/// by them.
fn share_section(bench: &Bench, shares: &[JvmShare]) -> (String, Option<Target>) {
    let mut table = Table::new(&[
        "profiler",
        "outside compiled code, unprofiled",
        "outside compiled code, profiled",
        "stoke's process, % of the JVM's CPU",
        "cost: added share + stoke's process",
        "JVMs",
    ]);
    let points = |values: Vec<f64>| show(&values, 2, "%");
    for family in Family::all(bench) {
        let runs = jvm_share::kept(shares, family);
        let Some(cost) = jvm_share::costs(shares, family) else {
            continue;
        };
        table.row(vec![
            label(family),
            points(
                runs.iter()
                    .flat_map(|run| run.unprofiled)
                    .map(|s| s * 100.0)
                    .collect(),
            ),
            points(runs.iter().map(|run| run.profiled * 100.0).collect()),
            match family {
                Family::Stoke => points(runs.iter().map(|run| run.own_process * 100.0).collect()),
                Family::AsyncProfiler => "in the JVM's threads".into(),
            },
            jvm_phases::spread_shown(&cost),
            runs.len().to_string(),
        ]);
    }
    let noise = jvm_share::noise(shares);
    let noise_points = noise * 100.0;
    let disturbed = shares.iter().filter(|run| run.disturbed).count();
    let body = format!(
        "\n#### Where the JVM's CPU goes, by perf\n\nThe CPU cost above moves with this \
         machine's speed from phase to phase. Here a new JVM per profiler and round runs three \
         phases (unprofiled, profiled, unprofiled) with `perf record -F 499 -g -p` sampling \
         its threads while the clock runs (started before the lead-in, paused in it: a new \
         process during the phase would cost stoke its naming and tables): the share of \
         their samples outside the compiled Java code (libjvm, the agents, libc, the \
         kernel) is a ratio within the phase, which the machine's speed \
         does not move. **Cost** = the profiled phase's share outside compiled code minus \
         the unprofiled phases' (the work's own GC and runtime calls), plus stoke's own \
         process as a share of the JVM's CPU. Not in it: the timer interrupt, where perf \
         cannot sample and stoke's BPF program runs (its 99 Hz CPU sampling, about 10 µs a \
         sample: ~0.1% of a CPU), and compiled code slowed by the profiler's use of the \
         caches. **Noise**: how far apart a JVM's two unprofiled shares were (median), \
         {noise_points:.2} points. Medians over the JVMs (min to max); {disturbed} JVMs left \
         out as disturbed by other processes.\n\n{}",
        table.markdown(),
    );
    let stoke = jvm_share::costs(shares, Family::Stoke);
    let other = jvm_share::costs(shares, Family::AsyncProfiler);
    let target = stoke.zip(other).map(|(stoke, other)| {
        against_async_profiler(
            "Java allocation profiling, by where the JVM's CPU goes (perf): stoke's cost at \
             most async-profiler's"
                .into(),
            (stoke.median, other.median),
            jvm_share::rounds_cheaper(shares),
            noise,
            bench.settings.smoke,
        )
    });
    (body, target)
}

/// A profiler's row in the section's tables.
fn label(family: Family) -> String {
    match family {
        Family::Stoke => "stoke record -a -e alloc (512 KiB)".into(),
        Family::AsyncProfiler => "async-profiler --alloc 512k (attached)".into(),
    }
}
