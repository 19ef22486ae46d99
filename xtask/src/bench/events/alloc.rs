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
    jvm_share,
    overhead::{calibrate, Workload},
    report::{Target, Verdict},
    stats::{percent, percent_signed},
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
    let (text, target) = jvm_share::section(
        bench,
        &shares,
        ("#### Where the JVM's CPU goes, by perf", true),
        "Java allocation profiling, by where the JVM's CPU goes (perf): stoke's cost at most \
         async-profiler's",
        label,
    );
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

/// A profiler's row in the section's tables.
fn label(family: Family) -> String {
    match family {
        Family::Stoke => "stoke record -p JVM -e alloc (512 KiB)".into(),
        Family::AsyncProfiler => "async-profiler --alloc 512k (attached)".into(),
    }
}
