//! Part 6, Java: how long stoke takes to load its agent into a running JVM
//! (the first time in that JVM, and again when an earlier recording left it
//! loaded), and how many samples of the threads running Java get Java
//! frames, on each installed JDK.
//!
//! Each round starts a new JVM per JDK, with no special flags, running
//! `FixedWork` on every CPU; once it is warm, three whole-host recordings
//! follow: the first loads the agent (a JVM gets a fresh attach once in its
//! life), the second finds it loaded, the third (`-t`, folded) counts the
//! samples of the work threads and those with Java frames. Another new JVM
//! per JDK and round starts during a whole-host recording: how long after
//! its start its stacks have Java frames. With
//! `--async-profiler`, each round also gives a new JVM to async-profiler
//! ([`async_profiler`]), attached and measured alike.

mod async_profiler;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Result;
use stoke_tests::JDKS;

use super::{
    process::Process,
    profiler::{jvm_attach_ms, ms_of_jvm, Options, Recording, Tool},
    report::{Section, Table, Target},
    rotated,
    stacks::{is_java, Stack},
    stats::{self, Spread},
    Bench, Part,
};

/// The targets.
const ATTACH_TARGET_MS: f64 = 200.0;
const JAVA_SHARE_TARGET: f64 = 0.99;
const ASYNC_PROFILER: &str = "async-profiler takes 130 ms for its first start (measured \
                              earlier on this machine; `--async-profiler DIR` measures it here)";

/// FixedWork names its work threads `fixed-work-N`.
const WORKER_THREAD: &str = "fixed-work-";
/// The outermost Java frame of a thread started by `Thread.start`.
const THREAD_ROOT: &str = "java.lang.Thread.run";

pub(super) struct Jdk {
    label: &'static str,
    java: PathBuf,
}

/// One JVM's measurements.
#[derive(Default)]
pub(super) struct JvmRun {
    /// None: stoke did not attach within the recording.
    first_attach_ms: Option<f64>,
    /// None: not measured, the first recording did not attach.
    reuse_attach_ms: Option<f64>,
    /// Why stoke did not attach, when it did not (its warnings).
    attach_failure: Option<String>,
    /// Samples of the work threads.
    samples: u64,
    /// Of those, with at least one Java frame.
    with_java: u64,
    /// Of those, whose outermost Java frame is `Thread.run`.
    to_root: u64,
    /// Where the work threads' samples without Java frames start (their
    /// outermost frame), for the report of a missed target.
    without_java: HashMap<String, u64>,
    /// For a JVM started during a recording, how long after its start its
    /// stacks had Java frames; None: not measured, or never.
    java_after_start_ms: Option<f64>,
}

pub fn run(bench: &Bench) -> Result<Section> {
    // The JDKs of the end-to-end tests, each measured when installed, but
    // JDK 11, which cannot run the workload (it uses records, Java 16).
    let jdks: Vec<Jdk> = JDKS
        .iter()
        .filter(|jdk| **jdk != stoke_tests::JDK_11)
        .map(|jdk| Jdk {
            label: jdk.name,
            java: Path::new(jdk.home).join("bin/java"),
        })
        .filter(|jdk| jdk.java.exists())
        .collect();
    let classes = match &bench.workloads.java_fixed_work {
        Some(classes) if !jdks.is_empty() => classes,
        _ => {
            return Ok(Section {
                part: Part::Java,
                body: "Left out: this machine has no JDK (`javac`, and one of /usr/lib/jvm/\
                       java-17-openjdk-amd64 or temurin-25-jdk-amd64).\n"
                    .into(),
                targets: Vec::new(),
                provenance: String::new(),
            })
        }
    };
    let mut runs: Vec<Vec<JvmRun>> = jdks.iter().map(|_| Vec::new()).collect();
    let mut async_profiler_runs: Vec<Vec<JvmRun>> = jdks.iter().map(|_| Vec::new()).collect();
    let order: Vec<usize> = (0..jdks.len()).collect();
    for round in 0..bench.settings.rounds {
        for index in rotated(&order, round) {
            let jdk = &jdks[index];
            let what = format!("java round {}: {}", round + 1, jdk.label);
            let run = bench
                .measure(&what, || run_once(bench, jdk, classes))?
                .value;
            let ms = |value: Option<f64>| value.map_or("–".into(), |ms| format!("{ms:.0} ms"));
            bench.log(&format!(
                "{what}: attach {}, again {}; {} of {} work-thread samples with Java frames, \
                 {} reaching {THREAD_ROOT}{}",
                ms(run.first_attach_ms),
                ms(run.reuse_attach_ms),
                run.with_java,
                run.samples,
                run.to_root,
                run.attach_failure
                    .as_deref()
                    .map_or(String::new(), |why| format!("; not attached: {why}"))
            ));
            runs[index].push(run);
            if let Some(profiler) = &bench.async_profiler {
                let what = format!("{what}, async-profiler");
                let run = bench
                    .measure(&what, || {
                        async_profiler::run_once(bench, profiler, jdk, classes)
                    })?
                    .value;
                bench.log(&format!(
                    "{what}: attach {}; {} of {} work-thread samples with Java frames, {} \
                     reaching {THREAD_ROOT}",
                    ms(run.first_attach_ms),
                    run.with_java,
                    run.samples,
                    run.to_root,
                ));
                async_profiler_runs[index].push(run);
            }
        }
    }
    Ok(section(bench, &jdks, &runs, &async_profiler_runs))
}

/// A new JVM running `FixedWork` on every CPU, warmed up, and its pid. No
/// flags: the JVM as users start it. Killed once measured: the time given
/// is only an upper bound.
fn start_jvm(bench: &Bench, jdk: &Jdk, classes: &Path) -> Result<(Process, u32)> {
    let mut jvm = Process::spawn(
        &format!("{} FixedWork", jdk.label),
        Command::new(&jdk.java)
            .arg("-cp")
            .arg(classes)
            .args(["FixedWork", "-s", "600"])
            .arg(bench.cpus.to_string())
            .arg(bench.settings.java_warmup_seconds.to_string()),
    )?;
    jvm.wait_for_stdout("ready", Duration::from_secs(60))?;
    let pid = u32::try_from(jvm.pid())?;
    Ok((jvm, pid))
}

fn run_once(bench: &Bench, jdk: &Jdk, classes: &Path) -> Result<JvmRun> {
    let java_after_start_ms = java_after_start_ms(bench, jdk, classes)?;
    let (mut jvm, pid) = start_jvm(bench, jdk, classes)?;
    // A first recording that did not attach is a missed target, not a
    // broken bench: the second then attaches first, and is no reuse.
    let (first_attach_ms, reuse_attach_ms, attach_failure) =
        match attach_ms(bench, pid, "java-first")? {
            Ok(first) => {
                let again = attach_ms(bench, pid, "java-again")?.map_err(|why| {
                    anyhow::anyhow!("a JVM attached before was not found again: {why}")
                })?;
                (Some(first), Some(again), None)
            }
            Err(why) => {
                let _ = attach_ms(bench, pid, "java-again")?;
                (None, None, Some(why))
            }
        };
    let options = Options {
        threads: true,
        ..Options::new(Tool::Stoke, 99, "folded")
    };
    let recording = Recording::start(bench, &options, "java-frames")?;
    std::thread::sleep(Duration::from_secs_f64(bench.settings.java_seconds));
    let stopped = recording.stop()?;
    let stacks = stopped.stacks()?;
    stopped.remove_output();
    jvm.signal(libc::SIGKILL);
    jvm.wait(Duration::from_secs(30))?;
    let mut run = JvmRun {
        first_attach_ms,
        reuse_attach_ms,
        attach_failure,
        java_after_start_ms,
        ..JvmRun::default()
    };
    run.count(&stacks, pid);
    anyhow::ensure!(
        run.samples > 0,
        "no samples of the {} JVM's {WORKER_THREAD}* threads in stoke's -t output",
        jdk.label
    );
    Ok(run)
}

impl JvmRun {
    /// Counts the samples of the work threads of the JVM `pid` in
    /// `stacks` (a frame per thread first), with and without Java frames.
    fn count(&mut self, stacks: &[Stack], pid: u32) {
        let run = self;
        for stack in stacks.iter().filter(|stack| is_worker(stack, pid)) {
            run.samples += stack.samples;
            let code = &stack.frames[1..];
            match code.iter().find(|frame| is_java(frame)) {
                Some(outermost) => {
                    run.with_java += stack.samples;
                    if java_method(outermost) == THREAD_ROOT {
                        run.to_root += stack.samples;
                    }
                }
                None => {
                    let outermost = code.first().map_or("(no frame)", String::as_str);
                    *run.without_java.entry(outermost.to_owned()).or_default() += stack.samples;
                }
            }
        }
    }
}

/// A new JVM started during a whole-host JSON recording, which ends once
/// the JVM is warm: how long after its start its stacks had Java frames,
/// as stoke's summary says.
fn java_after_start_ms(bench: &Bench, jdk: &Jdk, classes: &Path) -> Result<Option<f64>> {
    let recording = Recording::start(bench, &Options::new(Tool::Stoke, 99, "json"), "java-early")?;
    let started = start_jvm(bench, jdk, classes);
    let stopped = recording.stop()?;
    let (mut jvm, pid) = started?;
    jvm.signal(libc::SIGKILL);
    jvm.wait(Duration::from_secs(30))?;
    let summary = stopped.summary()?;
    stopped.remove_output();
    Ok(ms_of_jvm(&summary.java.java_after_start_ms, pid))
}

/// A whole-host JSON recording of `java_seconds`: how long stoke took to
/// attach to the JVM `pid`, or, if it did not, what stoke said.
fn attach_ms(bench: &Bench, pid: u32, name: &str) -> Result<Result<f64, String>> {
    let recording = Recording::start(bench, &Options::new(Tool::Stoke, 99, "json"), name)?;
    std::thread::sleep(Duration::from_secs_f64(bench.settings.java_seconds));
    let stopped = recording.stop()?;
    let summary = stopped.summary()?;
    stopped.remove_output();
    Ok(jvm_attach_ms(&summary, pid).ok_or_else(|| {
        let warnings: Vec<&str> = stopped
            .stderr
            .iter()
            .filter(|line| line.contains("JVM") || line.contains("warning"))
            .map(String::as_str)
            .collect();
        if warnings.is_empty() {
            format!(
                "no attach within the {:.1} s recording, and no warning",
                bench.settings.java_seconds
            )
        } else {
            warnings.join(" / ")
        }
    }))
}

/// The share of the work threads' samples that `part` counts, over all
/// rounds, and in the worst round.
fn share_cell(runs: &[JvmRun], part: fn(&JvmRun) -> u64) -> String {
    let total: u64 = runs.iter().map(|r| r.samples).sum();
    let all: u64 = runs.iter().map(part).sum();
    let worst = runs
        .iter()
        .map(|r| part(r) as f64 / r.samples.max(1) as f64)
        .fold(f64::INFINITY, f64::min);
    format!(
        "{:.1}% (worst round {:.1}%)",
        all as f64 / total.max(1) as f64 * 100.0,
        worst * 100.0
    )
}

/// Median (min–max) of the JVMs' time to Java frames after their start,
/// and how many never had any in their recording.
fn after_start_cell(runs: &[JvmRun]) -> String {
    let measured: Vec<f64> = runs.iter().filter_map(|r| r.java_after_start_ms).collect();
    let never = runs.len() - measured.len();
    let never = if never == 0 {
        String::new()
    } else {
        format!("; {never} without Java frames")
    };
    stats::show(&measured, 0, "") + &never
}

/// A sample of one of FixedWork's work threads (the frame under the
/// process's names the thread with `-t`).
fn is_worker(stack: &Stack, pid: u32) -> bool {
    stack.pid == pid
        && stack
            .frames
            .first()
            .is_some_and(|thread| thread.starts_with(WORKER_THREAD))
}

/// `java.lang.Thread.run_[j]` without its kind.
fn java_method(frame: &str) -> &str {
    frame.rsplit_once("_[").map_or(frame, |(method, _)| method)
}

/// The section; `async_profiler_runs` are empty without `--async-profiler`.
fn section(
    bench: &Bench,
    jdks: &[Jdk],
    runs: &[Vec<JvmRun>],
    async_profiler_runs: &[Vec<JvmRun>],
) -> Section {
    let mut table = Table::new(&[
        "JDK",
        "first attach, ms",
        "attach again, ms",
        "work-thread samples per round",
        "with Java frames",
        "Java frames down to Thread.run",
        "JVM started while recording: Java frames after its start, ms",
    ]);
    let mut targets = Vec::new();
    for ((jdk, runs), others) in jdks.iter().zip(runs).zip(async_profiler_runs) {
        let first: Vec<f64> = runs.iter().filter_map(|r| r.first_attach_ms).collect();
        let again: Vec<f64> = runs.iter().filter_map(|r| r.reuse_attach_ms).collect();
        let failures: Vec<&str> = runs
            .iter()
            .filter_map(|r| r.attach_failure.as_deref())
            .collect();
        let samples: Vec<f64> = runs.iter().map(|r| r.samples as f64).collect();
        let total: u64 = runs.iter().map(|r| r.samples).sum();
        let with_java: u64 = runs.iter().map(|r| r.with_java).sum();
        let share = |part: u64| part as f64 / total.max(1) as f64;
        let not_attached = if failures.is_empty() {
            String::new()
        } else {
            format!("; {} not attached", failures.len())
        };
        table.row(vec![
            jdk.label.to_owned(),
            stats::show(&first, 0, "") + &not_attached,
            stats::show(&again, 0, ""),
            stats::show(&samples, 0, ""),
            share_cell(runs, |r| r.with_java),
            share_cell(runs, |r| r.to_root),
            after_start_cell(runs),
        ]);
        if !others.is_empty() {
            table.row(async_profiler::row(jdk, others));
            targets.push(async_profiler::root_target(jdk, runs, others));
        }
        let again = Spread::of(&again).map_or(0.0, |s| s.median);
        let over = runs
            .iter()
            .filter(|r| r.first_attach_ms.is_none_or(|ms| ms > ATTACH_TARGET_MS))
            .count();
        let slowest = first.iter().copied().fold(0.0, f64::max);
        let median = Spread::of(&first).map_or(0.0, |s| s.median);
        targets.push(Target::judge(
            format!(
                "{}: attach at most {ATTACH_TARGET_MS:.0} ms per JVM (first attach)",
                jdk.label
            ),
            format!("{median:.0} ms, slowest {slowest:.0} ms{not_attached}"),
            over == 0,
            || match failures.first() {
                Some(why) => format!(
                    "{} of {} JVMs not attached within a {:.1} s recording ({why})",
                    failures.len(),
                    runs.len(),
                    bench.settings.java_seconds
                ),
                None => format!(
                    "{over} of {} JVMs took longer, while their work threads kept every \
                     CPU busy; attaching again takes {again:.0} ms, so the time goes to \
                     starting the JVM's attach listener and loading the agent",
                    runs.len()
                ),
            },
        ));
        let mut without: HashMap<&str, u64> = HashMap::new();
        for run in runs {
            for (frame, samples) in &run.without_java {
                *without.entry(frame.as_str()).or_default() += samples;
            }
        }
        let commonest = without.into_iter().max_by_key(|&(frame, n)| (n, frame));
        targets.push(Target::judge(
            format!(
                "{}: Java frames for at least {:.0}% of samples of JVM threads running Java",
                jdk.label,
                JAVA_SHARE_TARGET * 100.0
            ),
            format!(
                "{:.1}% of {total} work-thread samples",
                share(with_java) * 100.0
            ),
            share(with_java) >= JAVA_SHARE_TARGET,
            || match commonest {
                Some((frame, samples)) => format!(
                    "{} samples had no Java frame; most ({samples}) start in `{frame}`",
                    total - with_java
                ),
                None => "no samples".into(),
            },
        ));
    }
    let mut body = format!(
        "Per JDK and round, a new JVM (`java -cp … FixedWork`, no other flags) runs \
         `FixedWork` on {cpus} threads, one per CPU, warms up for {warmup:.1} s, then \
         three whole-host recordings of {seconds:.1} s at 99 Hz follow: the first loads \
         stoke's agent into the JVM (`JVM <pid> attach` in the summary: from stoke \
         asking, once it samples the JVM, to the agent being ready), the second finds it \
         loaded (stoke finds the agent's shared memory: no attach), the third (`-t`, folded) counts the samples of the work threads \
         (`{WORKER_THREAD}N`; not GC or compiler threads), those with at least one Java \
         frame (`_[j]`, `_[i]`, `_[0]`), and those whose outermost Java frame is \
         `{THREAD_ROOT}`, where every such thread starts. Before it, another new JVM \
         starts during a whole-host JSON recording, stopped once the JVM is warm: the last \
         column is how long after the JVM's start its first sample with Java frames \
         came (`JVM <pid> Java frames` in the summary: its start, its attach listener's, \
         stoke finding it and loading the agent). Attach times are median \
         (min–max) over {rounds} rounds; shares are of all rounds' samples together. \
         {comparison}\n\n{}",
        table.markdown(),
        comparison = if async_profiler_runs.iter().all(Vec::is_empty) {
            format!("For comparison: {ASYNC_PROFILER}.")
        } else {
            "The async-profiler rows: per JDK and round another new JVM, warmed up alike, \
             `asprof start -e cpu -i 10ms -t` timed (attach, load and start), then \
             `asprof stop -a -o collapsed` after a recording as long, counted alike."
                .to_owned()
        },
        cpus = bench.cpus,
        warmup = bench.settings.java_warmup_seconds,
        seconds = bench.settings.java_seconds,
        rounds = bench.settings.rounds,
    );
    let missing: Vec<&str> = JDKS
        .iter()
        .filter(|known| !jdks.iter().any(|jdk| jdk.label == known.name))
        .map(|known| known.home)
        .collect();
    if !missing.is_empty() {
        body += &format!("\nNot installed, left out: {}.\n", missing.join(", "));
    }
    Section {
        part: Part::Java,
        body,
        targets,
        provenance: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_java_methods_and_work_threads() {
        assert_eq!(java_method("java.lang.Thread.run_[0]"), THREAD_ROOT);
        assert_eq!(java_method("FixedWork.main"), "FixedWork.main");
        let stack = Stack {
            comm: "java".into(),
            pid: 7,
            frames: vec!["fixed-work-1 [tid 9]".into(), "x_[j]".into()],
            samples: 1,
        };
        assert!(is_worker(&stack, 7));
        assert!(!is_worker(&stack, 8));
    }
}
