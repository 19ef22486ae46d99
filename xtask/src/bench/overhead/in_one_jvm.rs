//! Part 1's Java targets, judged in phases of one JVM (`jvm_phases`):
//! unprofiled, CPU at one rate, unprofiled, the other rate, unprofiled.

use super::{judge, RATES, TARGETS};
use crate::bench::{
    jvm_phases::{
        against_async_profiler, lead_in_seconds, profiler_cpu, slowdowns, Family, JvmRun, Phases,
        Profiling,
    },
    report::{Table, Target},
    stats::{percent, percent_signed, Spread},
    Bench,
};

/// The profiled phases of part 1.
pub(super) const PROFILED: [Profiling; 2] = [Profiling::Cpu(RATES[0]), Profiling::Cpu(RATES[1])];

/// The section's text on these runs, and part 1's Java targets judged on
/// them.
pub(super) fn report(bench: &Bench, runs: &[JvmRun]) -> (String, Vec<Target>) {
    let summed = Phases::of(runs);
    let noise = summed.noise;
    let phases = |family: Family, hz: u64| summed.of_family(family, Profiling::Cpu(hz));
    let slowdown = |family: Family, hz: u64| summed.slowdown(family, Profiling::Cpu(hz));
    let mut table = Table::new(&[
        "profiler",
        "slowdown vs the phases around it",
        "profiler CPU, % of all CPUs",
        "samples per phase",
        "JVMs",
    ]);
    for family in Family::all(bench) {
        for hz in RATES {
            let phases = phases(family, hz);
            let Some(spread) = slowdown(family, hz) else {
                continue;
            };
            let cpu = profiler_cpu(family, &phases);
            let samples = Spread::of(&phases.iter().map(|p| p.samples as f64).collect::<Vec<_>>())
                .map_or_else(String::new, |s| format!("{:.0}", s.median));
            table.row(vec![
                format!("{}, {hz} Hz", label(family)),
                slowdowns(&spread),
                cpu,
                samples,
                phases.len().to_string(),
            ]);
        }
    }
    let disturbed = summed.disturbed;
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
            slowdown(Family::Stoke, hz),
            slowdown(Family::AsyncProfiler, hz),
        ) else {
            continue;
        };
        targets.push(against_async_profiler(
            format!("Java workload at {hz} Hz: stoke's slowdown at most async-profiler's"),
            (stoke.median, other.median),
            summed.rounds_faster(Profiling::Cpu(hz)),
            noise,
            bench.settings.smoke,
        ));
    }
    for (hz, limit) in TARGETS {
        let stoke = phases(Family::Stoke, hz);
        let Some(spread) = slowdown(Family::Stoke, hz) else {
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

/// A profiler's row.
fn label(family: Family) -> &'static str {
    match family {
        Family::Stoke => "stoke record -a",
        Family::AsyncProfiler => "async-profiler (attached)",
    }
}
