//! Part 1's Java targets, judged in phases of one JVM (`jvm_phases`):
//! unprofiled, CPU at one rate, unprofiled, the other rate, unprofiled;
//! and, as costs of a few percent hide in this machine's noise, at each
//! rate by where the JVM's CPU goes (`jvm_share`).

use anyhow::Result;

use super::{judge, RATES, TARGETS};
use crate::bench::{
    jvm_phases::{self, against_async_profiler, Family, JvmRun, Measure, Phases, Profiling},
    jvm_share::{self, JvmShare},
    report::Target,
    stats::{percent, percent_signed, Spread},
    Bench,
};

/// The profiled phases of part 1.
pub(super) const PROFILED: [Profiling; 2] = [Profiling::Cpu(RATES[0]), Profiling::Cpu(RATES[1])];

/// At each rate, JVMs through phases under perf (`jvm_share`).
pub(super) fn shares(bench: &Bench, units: u64) -> Result<Vec<(u64, Vec<JvmShare>)>> {
    RATES
        .iter()
        .map(|&hz| Ok((hz, jvm_share::run(bench, units, Profiling::Cpu(hz))?)))
        .collect()
}

/// The section's text on these runs, and part 1's Java targets judged on
/// them (by CPU cost, and by where the JVM's CPU goes).
pub(super) fn report(
    bench: &Bench,
    runs: &[JvmRun],
    shares: &[(u64, Vec<JvmShare>)],
) -> (String, Vec<Target>) {
    let by_cpu = Phases::of(runs, Measure::Cpu);
    let noise = by_cpu.noise;
    let table = jvm_phases::table(
        bench,
        runs,
        &PROFILED,
        |family, what| {
            let hz = match what {
                Profiling::Cpu(hz) => hz,
                Profiling::Alloc(_) => 0,
            };
            label(family, hz)
        },
        |_, samples| format!("{samples:.0} samples"),
    );
    let (java, samples) = PROFILED
        .iter()
        .flat_map(|&what| by_cpu.of_family(Family::Stoke, what))
        .fold((0, 0), |(java, all), p| {
            (java + p.java_samples, all + p.samples)
        });
    let mut body = format!(
        "\n### Java workload, in one JVM\n\n{}\n{}\nStoke's phases had Java frames in {java} \
         of {samples} samples.\n",
        jvm_phases::method(
            bench,
            runs,
            "unprofiled, profiled at one rate, unprofiled, at the other rate (the order of \
             the rates turned each round), unprofiled"
        ),
        table.markdown(),
    );
    let mut targets = Vec::new();
    for (index, (hz, shares)) in shares.iter().enumerate() {
        let (text, target) = jvm_share::section(
            bench,
            shares,
            (
                &format!("#### Where the JVM's CPU goes at {hz} Hz, by perf"),
                index == 0,
            ),
            &format!(
                "Java workload at {hz} Hz, by where the JVM's CPU goes (perf): stoke's cost \
                 at most async-profiler's"
            ),
            |family| label(family, *hz),
        );
        body += &text;
        targets.extend(target);
    }
    for what in PROFILED {
        let Profiling::Cpu(hz) = what else { continue };
        let (Some(stoke), Some(other)) = (
            by_cpu.slowdown(Family::Stoke, what),
            by_cpu.slowdown(Family::AsyncProfiler, what),
        ) else {
            continue;
        };
        targets.push(against_async_profiler(
            format!("Java workload at {hz} Hz: stoke's CPU cost at most async-profiler's"),
            (stoke.median, other.median),
            by_cpu.rounds_faster(what),
            noise,
            bench.settings.smoke,
        ));
    }
    for (hz, limit) in TARGETS {
        let what = Profiling::Cpu(hz);
        let Some(cost) = by_cpu.slowdown(Family::Stoke, what) else {
            continue;
        };
        let own: Vec<f64> = by_cpu
            .of_family(Family::Stoke, what)
            .iter()
            .map(|p| p.profiler_cpu)
            .collect();
        let own = Spread::of(&own).map_or(0.0, |s| s.median);
        targets.push(judge(
            format!(
                "Java workload: CPU cost at {hz} Hz at most {} (in one JVM)",
                percent(limit)
            ),
            format!("{} (noise {})", percent_signed(cost.median), percent(noise)),
            (cost.median, limit, noise, own),
            bench.settings.smoke,
        ));
    }
    (body, targets)
}

/// A profiler's row in the section's tables.
fn label(family: Family, hz: u64) -> String {
    match family {
        Family::Stoke => format!("stoke record -p JVM, {hz} Hz"),
        Family::AsyncProfiler => format!("async-profiler (attached), {hz} Hz"),
    }
}
