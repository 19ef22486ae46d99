//! Java allocation profiling: how much longer the Java fixed work (which
//! allocates its orders, strings and maps all along) takes while stoke
//! records `-a -e alloc` at its default interval, and, given
//! `--async-profiler`, while async-profiler's agent profiles allocations
//! at the same interval from the JVM's start.

use anyhow::Result;

use super::super::{
    overhead::{calibrate, work_after, Workload},
    profiler::{Options, Recording, Tool},
    report::{Table, Target, Verdict},
    rotated,
    stats::{percent, percent_signed, show, Spread},
    AsyncProfiler, Bench,
};

/// stoke's and async-profiler's default: a sample every 512 KiB on average.
const INTERVAL: u64 = 512 << 10;

/// The least warm-up: stoke must have found the JVM, attached its agent and
/// turned its allocation sampling on before the clock starts, even in a
/// smoke run.
const LEAST_WARMUP_SECONDS: f64 = 1.5;

/// The target for stoke's slowdown.
const TARGET: f64 = 0.02;

/// Who profiles the JVM's allocations.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Recorder {
    Nobody,
    Stoke,
    AsyncProfiler,
}

impl Recorder {
    fn label(self) -> &'static str {
        match self {
            Recorder::Nobody => "none",
            Recorder::Stoke => "stoke record -a -e alloc (512 KiB)",
            Recorder::AsyncProfiler => "async-profiler alloc=512k (in the JVM)",
        }
    }
}

/// One run of the Java fixed work.
struct Run {
    elapsed: f64,
    /// stoke: CPU it used while the work ran, in seconds.
    profiler_cpu: f64,
    /// stoke: bytes estimated; async-profiler: samples.
    recorded: u64,
}

/// The allocation section's text and targets.
pub fn run(bench: &Bench) -> Result<(String, Vec<Target>)> {
    if bench.workloads.java_fixed_work.is_none() {
        return Ok((
            "### Java allocations\n\nLeft out: this machine has no JDK (`java`, `javac`).\n".into(),
            Vec::new(),
        ));
    }
    let units = calibrate(bench, Workload::Java)?;
    let mut profilers = vec![Recorder::Nobody, Recorder::Stoke];
    if bench.async_profiler.is_some() {
        profilers.push(Recorder::AsyncProfiler);
    }
    let mut runs: Vec<Vec<Run>> = profilers.iter().map(|_| Vec::new()).collect();
    for round in 0..bench.settings.rounds {
        for profiler in rotated(&profilers, round) {
            let what = format!("allocations round {}: {}", round + 1, profiler.label());
            let run = bench
                .measure(&what, || run_once(bench, units, profiler))?
                .value;
            bench.log(&format!("{what}: {:.3} s", run.elapsed));
            let index = profilers.iter().position(|&p| p == profiler);
            runs[index.expect("a known profiler")].push(run);
        }
    }
    Ok(section(bench, units, &profilers, &runs))
}

fn run_once(bench: &Bench, units: u64, profiler: Recorder) -> Result<Run> {
    let warmup = bench.settings.java_warmup_seconds.max(LEAST_WARMUP_SECONDS);
    let work = |options: &[String]| work_after(bench, Workload::Java, units, options, warmup);
    match profiler {
        Recorder::Nobody => Ok(Run {
            elapsed: work(&[])?,
            profiler_cpu: 0.0,
            recorded: 0,
        }),
        Recorder::Stoke => {
            let options = Options {
                stoke_args: vec!["-e".into(), "alloc".into()],
                may_be_empty: true,
                ..Options::new(Tool::Stoke, 99, "folded")
            };
            let recording = Recording::start(bench, &options, "alloc")?;
            let cpu_before = recording.cpu_now()?;
            let elapsed = work(&[])?;
            let profiler_cpu = (recording.cpu_now()? - cpu_before).as_secs_f64();
            let stopped = recording.stop()?;
            stopped.remove_output();
            Ok(Run {
                elapsed,
                profiler_cpu,
                recorded: stopped.samples,
            })
        }
        Recorder::AsyncProfiler => {
            let async_profiler = bench
                .async_profiler
                .as_ref()
                .expect("async-profiler rows only with --async-profiler");
            let output = bench.scratch("alloc-async-profiler.collapsed");
            let _ = std::fs::remove_file(&output);
            let option = async_profiler.alloc_agent_option(INTERVAL, &output);
            let elapsed = work(&[option])?;
            let recorded = AsyncProfiler::samples(&output)?;
            let _ = std::fs::remove_file(&output);
            Ok(Run {
                elapsed,
                profiler_cpu: 0.0,
                recorded,
            })
        }
    }
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    Spread::of(&values.collect::<Vec<_>>()).map_or(0.0, |spread| spread.median)
}

fn section(
    bench: &Bench,
    units: u64,
    profilers: &[Recorder],
    runs: &[Vec<Run>],
) -> (String, Vec<Target>) {
    // stoke's runs where its agent was not in measured sampling alone.
    let kept = |index: usize| {
        runs[index]
            .iter()
            .filter(move |run| profilers[index] != Recorder::Stoke || run.recorded > 0)
    };
    let elapsed = |index: usize| median(kept(index).map(|run| run.elapsed));
    let base = elapsed(0);
    let times = |index: usize| kept(index).map(|run| run.elapsed).collect::<Vec<_>>();
    let noise = Spread::of(&times(0)).map_or(0.0, |spread| spread.relative_range());
    let stoke_index = profilers
        .iter()
        .position(|&profiler| profiler == Recorder::Stoke);
    let stoke_runs = stoke_index.map_or(0, |index| runs[index].len());
    let attached = stoke_index.map_or(0, |index| kept(index).count());
    let unattached = stoke_runs - attached;
    let mut body = format!(
        "### Java allocations\n\n`FixedWork` (the overhead part's Java workload: orders, \
         strings and maps allocated all along), {units} units on each of {cpus} threads after \
         {warmup} s of warm-up, during which stoke attaches its agent. Allocations sampled \
         every 512 KiB on average by both. Slowdown = median / median(none) − 1. \
         **Noise** (range of `none`): {noise}. Recorded: stoke's estimate of the bytes \
         allocated (JVM start-up and warm-up included), async-profiler's samples.\n\n",
        cpus = bench.cpus,
        warmup = bench.settings.java_warmup_seconds.max(LEAST_WARMUP_SECONDS),
        noise = percent(noise),
    );
    let mut table = Table::new(&[
        "profiler",
        "elapsed",
        "slowdown",
        "profiler CPU, % of all CPUs",
        "recorded",
    ]);
    let mut slowdowns = Vec::new();
    for (index, &profiler) in profilers.iter().enumerate() {
        let slowdown = elapsed(index) / base - 1.0;
        slowdowns.push((profiler, slowdown));
        let cpu =
            median(kept(index).map(|run| run.profiler_cpu / (run.elapsed * bench.cpus as f64)));
        let recorded = median(kept(index).map(|run| run.recorded as f64));
        table.row(vec![
            profiler.label().into(),
            show(&times(index), 3, " s"),
            match profiler {
                _ if profiler == Recorder::Nobody || times(index).is_empty() => "–".into(),
                _ => percent_signed(slowdown),
            },
            match profiler {
                Recorder::Stoke => percent(cpu),
                Recorder::Nobody => "–".into(),
                Recorder::AsyncProfiler => "in the JVM's threads".into(),
            },
            match profiler {
                Recorder::Nobody => "–".into(),
                Recorder::Stoke => format!("{:.0} MB", recorded / 1e6),
                Recorder::AsyncProfiler => format!("{recorded:.0} samples"),
            },
        ]);
    }
    body += &table.markdown();
    if unattached > 0 {
        body += &format!(
            "\n**In {unattached} of {stoke_runs} stoke runs no allocation was recorded**: \
             the JVM ended before stoke's agent was in, and the run, which measured \
             sampling alone, is left out of stoke's row.\n"
        );
    }
    if bench.async_profiler.is_none() {
        body += "\nasync-profiler: not measured in this run (`--async-profiler DIR`).\n";
    }
    let of = |wanted| {
        slowdowns
            .iter()
            .find(|&&(profiler, _)| profiler == wanted)
            .map(|&(_, slowdown)| slowdown)
    };
    let stoke = of(Recorder::Stoke).unwrap_or(0.0);
    let judged = |goal: String, measured: String, limit: f64| {
        let mut target = Target::at_most(goal, measured, (stoke, limit, noise), percent);
        if bench.settings.smoke {
            target.verdict = Verdict::NotJudged("smoke run".into());
        } else if attached == 0 {
            target.verdict = Verdict::NotJudged("stoke's agent was in no run".into());
        }
        target
    };
    let mut targets = vec![judged(
        format!(
            "Java allocation profiling at 512 KiB slows the work by ≤{}",
            percent(TARGET)
        ),
        format!("{} (noise {})", percent_signed(stoke), percent(noise)),
        TARGET,
    )];
    if let Some(other) = of(Recorder::AsyncProfiler) {
        targets.push(judged(
            "Java allocation profiling: stoke's slowdown at most async-profiler's".into(),
            format!(
                "stoke {} vs async-profiler {}",
                percent_signed(stoke),
                percent_signed(other)
            ),
            other,
        ));
    }
    (body, targets)
}
