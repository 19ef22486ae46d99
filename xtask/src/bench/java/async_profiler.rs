//! async-profiler beside stoke in the Java part: a new JVM per JDK and
//! round, warmed up alike, `asprof start` timed (its attach, load and
//! start, what a user waits for), then a recording of `java_seconds` with a
//! frame per thread, counted as stoke's is.

use std::{path::Path, time::Duration};

use anyhow::{ensure, Result};

use super::{share_cell, start_jvm, Jdk, JvmRun, THREAD_ROOT, WORKER_THREAD};
use crate::bench::{async_profiler::AsyncProfiler, report::Target, stats, Bench};

/// One JVM measured with async-profiler.
pub(super) fn run_once(
    bench: &Bench,
    profiler: &AsyncProfiler,
    jdk: &Jdk,
    classes: &Path,
) -> Result<JvmRun> {
    let (mut jvm, pid) = start_jvm(bench, jdk, classes)?;
    let measured = (|| -> Result<JvmRun> {
        let attach = profiler.start_cpu(pid, 99, true)?;
        std::thread::sleep(Duration::from_secs_f64(bench.settings.java_seconds));
        let stacks = profiler.stop_stacks(pid, &bench.scratch("java-async-profiler.collapsed"))?;
        let mut run = JvmRun {
            first_attach_ms: Some(attach.as_secs_f64() * 1000.0),
            ..JvmRun::default()
        };
        run.count(&stacks, pid);
        Ok(run)
    })();
    jvm.signal(libc::SIGKILL);
    jvm.wait(Duration::from_secs(30))?;
    let run = measured?;
    ensure!(
        run.samples > 0,
        "no samples of the {} JVM's {WORKER_THREAD}* threads in async-profiler's -t output",
        jdk.label
    );
    Ok(run)
}

/// async-profiler's row under stoke's for `jdk`.
pub(super) fn row(jdk: &Jdk, runs: &[JvmRun]) -> Vec<String> {
    let attach: Vec<f64> = runs.iter().filter_map(|r| r.first_attach_ms).collect();
    let samples: Vec<f64> = runs.iter().map(|r| r.samples as f64).collect();
    vec![
        format!("{}, async-profiler", jdk.label),
        format!("{} (`asprof start`)", stats::show(&attach, 0, "")),
        "–".into(),
        stats::show(&samples, 0, ""),
        share_cell(runs, |r| r.with_java),
        share_cell(runs, |r| r.to_root),
        "–".into(),
    ]
}

/// The target: stoke's Java stacks reach their root as often as
/// async-profiler's, both attached to a warm JVM.
pub(super) fn root_target(jdk: &Jdk, stoke: &[JvmRun], async_profiler: &[JvmRun]) -> Target {
    let share = |runs: &[JvmRun]| {
        let total: u64 = runs.iter().map(|r| r.samples).sum();
        runs.iter().map(|r| r.to_root).sum::<u64>() as f64 / total.max(1) as f64
    };
    let (ours, theirs) = (share(stoke), share(async_profiler));
    Target::judge(
        format!(
            "{}: Java stacks down to {THREAD_ROOT} as often as async-profiler's, attached \
             to a warm JVM",
            jdk.label
        ),
        format!(
            "stoke {:.1}% vs async-profiler {:.1}%",
            ours * 100.0,
            theirs * 100.0
        ),
        ours >= theirs,
        || {
            let sum = |count: fn(&JvmRun) -> u64| stoke.iter().map(count).sum::<u64>();
            let without_java = sum(|r| r.samples) - sum(|r| r.with_java);
            let cut_short = sum(|r| r.with_java) - sum(|r| r.to_root);
            format!(
                "{:.1} points fewer stacks reach the root: {without_java} samples without \
                 Java frames, {cut_short} cut short",
                (theirs - ours) * 100.0
            )
        },
    )
}
