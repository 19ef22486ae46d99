//! Java allocation profiling: how much longer the Java fixed work (which
//! allocates its orders, strings and maps all along) takes while stoke
//! records `-a -e alloc` at its default interval, and, given
//! `--async-profiler`, while async-profiler attached profiles allocations
//! at the same interval: in phases of one JVM (`jvm_phases`), unprofiled,
//! profiled, unprofiled.

use anyhow::Result;

use super::super::{
    jvm_phases::{
        self, against_async_profiler, lead_in_seconds, profiler_cpu, slowdowns, Family, JvmRun,
        Phases, Profiling,
    },
    overhead::{calibrate, Workload},
    report::{Table, Target, Verdict},
    stats::{percent, percent_signed, Spread},
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
    Ok(section(bench, units, &runs))
}

fn label(family: Family) -> &'static str {
    match family {
        Family::Stoke => "stoke record -a -e alloc (512 KiB)",
        Family::AsyncProfiler => "async-profiler --alloc 512k (attached)",
    }
}

fn section(bench: &Bench, units: u64, runs: &[JvmRun]) -> (String, Vec<Target>) {
    let phases = Phases::of(runs);
    let noise = phases.noise;
    let mut table = Table::new(&[
        "profiler",
        "slowdown vs the phases around it",
        "profiler CPU, % of all CPUs",
        "recorded per phase",
        "JVMs",
    ]);
    for family in Family::all(bench) {
        let profiled = phases.of_family(family, ALLOC);
        let Some(slowdown) = phases.slowdown(family, ALLOC) else {
            continue;
        };
        let median = |values: Vec<f64>| Spread::of(&values).map_or(0.0, |s| s.median);
        let recorded = median(profiled.iter().map(|p| p.samples as f64).collect());
        table.row(vec![
            label(family).into(),
            slowdowns(&slowdown),
            profiler_cpu(family, &profiled),
            match family {
                Family::Stoke => format!("{:.0} MB", recorded / 1e6),
                Family::AsyncProfiler => format!("{recorded:.0} samples"),
            },
            profiled.len().to_string(),
        ]);
    }
    let stoke_phases = phases.of_family(Family::Stoke, ALLOC);
    let unrecorded = stoke_phases.iter().filter(|p| p.samples == 0).count();
    let mut body = format!(
        "### Java allocations\n\n`FixedWork` (the overhead part's Java workload: orders, \
         strings and maps allocated all along), {units} units on each of {cpus} threads per \
         phase, in phases of one JVM as part 1's Java targets: per round a JVM for each \
         profiler, warmed up {warmup} s, runs the work unprofiled, profiled, unprofiled, each \
         phase's clock starting after {lead:.1} s of the same work untimed, in which the \
         profiler started for the phase attaches. Allocations sampled every 512 KiB on \
         average by both. Slowdown: against the mean of the unprofiled phases on either side, \
         in the same JVM; medians over the JVMs (min to max). **Noise** (how far apart a \
         JVM's unprofiled phases were, median over the JVMs): {noise}; {disturbed} JVMs left \
         out as disturbed by other processes. Recorded: stoke's estimate of the bytes \
         allocated, async-profiler's samples.\n\n{}",
        table.markdown(),
        cpus = bench.cpus,
        warmup = bench.settings.java_warmup_seconds,
        lead = lead_in_seconds(bench),
        noise = percent(noise),
        disturbed = phases.disturbed,
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
            "Java allocation profiling at 512 KiB slows the work by ≤{}",
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
            "Java allocation profiling: stoke's slowdown at most async-profiler's".into(),
            (stoke, other.median),
            phases.rounds_faster(ALLOC),
            noise,
            bench.settings.smoke,
        ));
    }
    (body, targets)
}
