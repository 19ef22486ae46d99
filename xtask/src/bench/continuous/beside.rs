//! Part 9's consumers side by side: what two stokes recording one JVM at
//! 99 Hz each (a fleet daemon and an incident's `record`) cost it, against
//! one alone, by where the JVM's CPU goes, as part 1 measures a profiler
//! (`jvm_share`): each stoke samples the JVM's threads and has the agent
//! take their Java stacks, into a ring of its own.

use anyhow::Result;

use crate::bench::{
    jvm_phases::Profiling,
    jvm_share::{self, JvmShare, PERF_HZ},
    overhead::{calibrate, Workload},
    report::{Table, Target, Verdict},
    stats::{percent, percent_signed, Spread},
    Bench,
};

pub const HZ: u64 = 99;

/// Stokes side by side.
const STOKES: usize = 2;

/// JVMs profiled by one stoke and by `STOKES`, a pair per round.
pub fn run(bench: &Bench) -> Result<Vec<(usize, JvmShare)>> {
    let units = calibrate(bench, Workload::Java)?;
    jvm_share::side_by_side(bench, units, Profiling::Cpu(HZ), STOKES)
}

/// The section's text, and its target: side by side, the stokes cost the
/// JVM at most the sum of each alone (not judged in a smoke run).
pub fn text(bench: &Bench, runs: &[(usize, JvmShare)]) -> (String, Option<Target>) {
    let kept = |count: usize| -> Vec<&JvmShare> {
        runs.iter()
            .filter(|(n, run)| *n == count && !run.disturbed)
            .map(|(_, run)| run)
            .collect()
    };
    let cost = |count: usize| {
        let costs: Vec<f64> = kept(count).into_iter().map(JvmShare::cost).collect();
        Spread::of(&costs)
    };
    let mut table = Table::new(&[
        "stoke record -p JVM",
        "outside compiled code, unprofiled",
        "outside compiled code, profiled",
        "own: stokes' processes and BPF, % of the JVM's CPU",
        "cost: added share + own",
        "JVMs",
    ]);
    for count in [1, STOKES] {
        let label = if count == 1 {
            format!("one, {HZ} Hz")
        } else {
            format!("{count} side by side, {HZ} Hz each")
        };
        if let Some(row) = jvm_share::row(label, &kept(count), None) {
            table.row(row);
        }
    }
    let noise = jvm_share::noise(runs.iter().map(|(_, run)| run));
    let body = format!(
        "### Stokes side by side on one JVM\n\nA fleet daemon and an incident's `record` on the \
         same JVM: per round a new JVM (`FixedWork -p`) profiled by one `stoke record -p JVM \
         -F {HZ}` and another by {STOKES} at once, each with a ring of its own in the agent's \
         memory, through three phases (unprofiled, profiled, unprofiled) under `perf record \
         -F {PERF_HZ} -g -p`, as part 1 measures a profiler by where the JVM's CPU goes: \
         **cost** = the profiled phase's share outside compiled Java code over the unprofiled \
         phases', plus the stokes' own CPU (processes and BPF run time) as a share of the \
         JVM's. Noise, how far apart a JVM's unprofiled shares were (median): {:.2} points. \
         Medians over the JVMs (min to max).\n\n{}",
        noise * 100.0,
        table.markdown()
    );
    let target = cost(1).zip(cost(STOKES)).map(|(one, several)| {
        let sum = one.median * STOKES as f64;
        Target::at_most(
            format!(
                "{STOKES} stokes on one JVM at {HZ} Hz each cost it at most the sum of each alone"
            ),
            format!(
                "{} side by side, one alone {} (sum {})",
                percent_signed(several.median),
                percent_signed(one.median),
                percent_signed(sum)
            ),
            (several.median, sum, noise),
            percent,
        )
    });
    let target = target.map(|target| {
        if bench.settings.smoke {
            Target {
                verdict: Verdict::NotJudged("smoke run: rounds of seconds".into()),
                ..target
            }
        } else {
            target
        }
    });
    (body, target)
}
