//! Part 3, stoke's own cost: the CPU and memory stoke itself uses while
//! recording the whole host at 99 Hz with every CPU busy, the time from
//! stopping it to its output written, and how fast it names frames with
//! cold and warm page caches; perf record (plus perf script, where perf
//! names frames) side by side.

use std::{process::Command, thread, time::Duration};

use anyhow::{ensure, Result};
use stoke_tests::json::Summary;

use super::{
    host,
    process::Process,
    profiler::{self, CpuSplit, Options, Recording, Stopped, Tool},
    report::{Section, Table, Target, Verdict},
    rotated,
    stats::{self, megabytes, percent, Spread},
    Bench, Part,
};

const HZ: u64 = 99;
/// The targets for stoke at 99 Hz.
const CPU_TARGET: f64 = 0.01; // of one core
const RSS_TARGET_MB: f64 = 100.0;

/// One long recording.
struct Long {
    stopped: Stopped,
    /// Stoke: symbolization (addresses, seconds) from its summary.
    symbolization: Option<(u64, f64)>,
    /// Stoke: unwind tables (MB, seconds to compile); None for perf.
    unwind_tables: Option<(f64, f64)>,
    /// Perf: what naming the frames with perf script cost.
    script: Option<ScriptCost>,
}

/// What one `perf script` run cost.
#[derive(Debug, Clone, Copy)]
struct ScriptCost {
    wall_seconds: f64,
    cpu_seconds: f64,
    max_rss: u64,
}

/// How long naming the frames of a short recording took, cold and warm.
#[derive(Debug, Clone, Copy, Default)]
struct Timing {
    /// What was named: stoke's distinct addresses, perf script's frames.
    count: u64,
    cold_seconds: f64,
    warm_seconds: f64,
}

/// One round's symbolization timings.
#[derive(Default)]
struct Naming {
    stoke: Option<Timing>,
    perf: Option<Timing>,
}

pub fn run(bench: &Bench) -> Result<Section> {
    let tools = [Tool::Stoke, Tool::Perf];
    let mut longs: Vec<Long> = Vec::new();
    let mut namings: Vec<Naming> = Vec::new();
    for round in 0..bench.settings.rounds {
        for tool in rotated(&tools, round) {
            let what = format!(
                "cost round {}: {tool}, {:.0} s at {HZ} Hz",
                round + 1,
                bench.settings.cost_seconds
            );
            let long = bench.measure(&what, || long_recording(bench, tool))?.value;
            bench.log(&format!(
                "{what}: CPU {:.2} s, peak RSS {:.1} MB, stop {:.2} s",
                long.stopped.exit.cpu.as_secs_f64(),
                megabytes(long.stopped.exit.max_rss as f64),
                long.stopped.stop_latency.as_secs_f64()
            ));
            longs.push(long);
        }
        let mut naming = Naming::default();
        for tool in rotated(&tools, round) {
            let what = format!(
                "cost round {}: {tool} symbolization, cold and warm",
                round + 1
            );
            match tool {
                Tool::Stoke => {
                    naming.stoke = Some(bench.measure(&what, || stoke_naming(bench))?.value)
                }
                Tool::Perf => {
                    naming.perf = Some(bench.measure(&what, || perf_naming(bench))?.value)
                }
            }
        }
        namings.push(naming);
    }
    Ok(section(bench, &longs, &namings))
}

/// Keeps every CPU busy for as long as a recording needs (killed after).
fn busy_load(bench: &Bench, seconds: f64) -> Result<Process> {
    let mut load = Process::spawn(
        "fixed_work",
        Command::new(&bench.workloads.fixed_work)
            .args(["-s", &format!("{}", seconds + 120.0)])
            .arg(bench.cpus.to_string()),
    )?;
    load.wait_for_stdout("ready", Duration::from_secs(30))?;
    Ok(load)
}

/// A whole-host recording of `cost_seconds` with every CPU busy.
fn long_recording(bench: &Bench, tool: Tool) -> Result<Long> {
    let seconds = bench.settings.cost_seconds;
    let _load = busy_load(bench, seconds)?;
    let recording = Recording::start(bench, &Options::new(tool, HZ, "json"), "cost")?;
    thread::sleep(Duration::from_secs_f64(seconds));
    let stopped = recording.stop()?;
    let mut unwind_tables = None;
    let (symbolization, script) = match tool {
        Tool::Stoke => {
            let summary = stopped.summary()?;
            unwind_tables = Some((
                summary.unwind.bytes as f64 / 1e6,
                summary.unwind.compile_time,
            ));
            (Some(symbolization(&summary)), None)
        }
        Tool::Perf => {
            let script = profiler::perf_script(&stopped.output)?;
            let frames = script.frames()?;
            ensure!(frames > 0, "perf script named no frames");
            (
                None,
                Some(ScriptCost {
                    wall_seconds: script.wall.as_secs_f64(),
                    cpu_seconds: script.exit.cpu.as_secs_f64(),
                    max_rss: script.exit.max_rss,
                }),
            )
        }
    };
    stopped.remove_output();
    Ok(Long {
        stopped,
        symbolization,
        unwind_tables,
        script,
    })
}

/// Two short stoke recordings, the first stopped right after the page
/// cache was dropped. The count is the warm run's distinct addresses (the
/// cold run's differ a little, being another recording).
fn stoke_naming(bench: &Bench) -> Result<Timing> {
    let mut timings = Vec::new();
    for cold in [true, false] {
        let _load = busy_load(bench, bench.settings.symbolize_seconds)?;
        let recording = Recording::start(bench, &Options::new(Tool::Stoke, HZ, "json"), "naming")?;
        thread::sleep(Duration::from_secs_f64(bench.settings.symbolize_seconds));
        if cold {
            host::drop_page_cache()?;
        }
        let stopped = recording.stop()?;
        timings.push(symbolization(&stopped.summary()?));
        stopped.remove_output();
    }
    Ok(Timing {
        count: timings[1].0,
        cold_seconds: timings[0].1,
        warm_seconds: timings[1].1,
    })
}

/// Stoke's symbolization: distinct addresses named, and seconds taken.
fn symbolization(summary: &Summary) -> (u64, f64) {
    (summary.symbolized_addresses, summary.symbolize_time)
}

/// One short perf recording, named by perf script twice: right after the
/// page cache was dropped, then again.
fn perf_naming(bench: &Bench) -> Result<Timing> {
    let _load = busy_load(bench, bench.settings.symbolize_seconds)?;
    let recording = Recording::start(bench, &Options::new(Tool::Perf, HZ, "json"), "naming")?;
    thread::sleep(Duration::from_secs_f64(bench.settings.symbolize_seconds));
    let stopped = recording.stop()?;
    host::drop_page_cache()?;
    let cold = profiler::perf_script(&stopped.output)?;
    let warm = profiler::perf_script(&stopped.output)?;
    stopped.remove_output();
    let frames = warm.frames()?;
    ensure!(frames > 0, "perf script named no frames");
    Ok(Timing {
        count: frames as u64,
        cold_seconds: cold.wall.as_secs_f64(),
        warm_seconds: warm.wall.as_secs_f64(),
    })
}

fn section(bench: &Bench, longs: &[Long], namings: &[Naming]) -> Section {
    let of = |tool: Tool| longs.iter().filter(move |l| l.stopped.tool == tool);
    let values = |tool: Tool, f: &dyn Fn(&Long) -> f64| of(tool).map(f).collect::<Vec<f64>>();
    let core_share = |cpu: Duration, long: &Long| {
        cpu.as_secs_f64() / long.stopped.recorded.as_secs_f64() * 100.0
    };

    let mut table = Table::new(&["", "stoke record -a", "perf record -a -g"]);
    let mut row = |label: &str, f: &dyn Fn(&Long) -> f64, decimals: usize, unit: &str| {
        table.row(vec![
            label.to_owned(),
            stats::show(&values(Tool::Stoke, f), decimals, unit),
            stats::show(&values(Tool::Perf, f), decimals, unit),
        ]);
    };
    row("recorded", &|l| l.stopped.recorded.as_secs_f64(), 1, " s");
    row(
        "CPU before sampling (startup)",
        &|l| l.stopped.cpu_startup.as_secs_f64(),
        3,
        " s",
    );
    row(
        "CPU while recording (user+sys)",
        &|l| l.stopped.cpu_recording.as_secs_f64(),
        3,
        " s",
    );
    row(
        "… as a share of one CPU",
        &|l| core_share(l.stopped.cpu_recording, l),
        2,
        "%",
    );
    row(
        "CPU after SIGINT (naming frames, writing)",
        &|l| l.stopped.cpu_output().as_secs_f64(),
        3,
        " s",
    );
    row(
        "CPU in all (wait4)",
        &|l| l.stopped.exit.cpu.as_secs_f64(),
        3,
        " s",
    );
    row(
        "… as a share of one CPU",
        &|l| core_share(l.stopped.exit.cpu, l),
        2,
        "%",
    );
    row(
        "peak RSS while recording (VmHWM)",
        &|l| megabytes(l.stopped.rss_recording as f64),
        1,
        " MB",
    );
    row(
        "peak RSS in all (VmHWM at exit)",
        &|l| megabytes(l.stopped.exit.max_rss as f64),
        1,
        " MB",
    );
    row(
        "SIGINT to exit (output written)",
        &|l| l.stopped.stop_latency.as_secs_f64(),
        2,
        " s",
    );
    row("samples", &|l| l.stopped.samples as f64, 0, "");
    row("lost samples", &|l| l.stopped.lost as f64, 0, "");
    let script = |f: &dyn Fn(&ScriptCost) -> f64| {
        stats::show(
            &of(Tool::Perf)
                .filter_map(|l| l.script.as_ref().map(f))
                .collect::<Vec<_>>(),
            2,
            "",
        )
    };
    table.row(vec![
        "perf script (names the frames): wall s".into(),
        "–".into(),
        script(&|s| s.wall_seconds),
    ]);
    table.row(vec![
        "perf script: CPU s".into(),
        "–".into(),
        script(&|s| s.cpu_seconds),
    ]);
    table.row(vec![
        "perf script: peak RSS MB".into(),
        "–".into(),
        script(&|s| megabytes(s.max_rss as f64)),
    ]);
    let to_named: Vec<f64> = of(Tool::Perf)
        .filter_map(|l| Some(l.stopped.stop_latency.as_secs_f64() + l.script?.wall_seconds))
        .collect();
    table.row(vec![
        "stop to named stacks (perf: record exit + perf script)".into(),
        stats::show(
            &values(Tool::Stoke, &|l| l.stopped.stop_latency.as_secs_f64()),
            2,
            " s",
        ),
        stats::show(&to_named, 2, " s"),
    ]);
    let stoke_symbolization: Vec<(u64, f64)> =
        of(Tool::Stoke).filter_map(|l| l.symbolization).collect();
    let symbolized = |f: &dyn Fn(&(u64, f64)) -> f64| {
        stats::show(
            &stoke_symbolization.iter().map(f).collect::<Vec<_>>(),
            0,
            "",
        )
    };
    table.row(vec![
        "symbolization (stoke's summary): distinct addresses".into(),
        symbolized(&|s| s.0 as f64),
        "–".into(),
    ]);
    table.row(vec![
        "symbolization (stoke's summary): ms".into(),
        symbolized(&|s| s.1 * 1e3),
        "–".into(),
    ]);
    let tables: Vec<(f64, f64)> = of(Tool::Stoke).filter_map(|l| l.unwind_tables).collect();
    let tabled = |f: &dyn Fn(&(f64, f64)) -> f64, decimals| {
        stats::show(&tables.iter().map(f).collect::<Vec<_>>(), decimals, "")
    };
    table.row(vec![
        "unwind tables for code without frame pointers (stoke's summary): MB".into(),
        tabled(&|t| t.0, 1),
        "–".into(),
    ]);
    table.row(vec![
        "… compiled in, ms".into(),
        tabled(&|t| t.1 * 1e3, 0),
        "–".into(),
    ]);

    let mut naming = Table::new(&["", "cold page cache", "warm page cache"]);
    for (tool, what) in [
        (Tool::Stoke, "stoke: distinct addresses"),
        (Tool::Perf, "perf script: frames"),
    ] {
        let timings: Vec<Timing> = namings
            .iter()
            .filter_map(|n| if tool == Tool::Stoke { n.stoke } else { n.perf })
            .collect();
        let pick = |f: &dyn Fn(&Timing) -> f64, decimals| {
            stats::show(&timings.iter().map(f).collect::<Vec<_>>(), decimals, "")
        };
        let count = pick(&|t| t.count as f64, 0);
        naming.row(vec![what.into(), count.clone(), count]);
        naming.row(vec![
            format!("{tool}: time, ms"),
            pick(&|t| t.cold_seconds * 1e3, 0),
            pick(&|t| t.warm_seconds * 1e3, 0),
        ]);
        naming.row(vec![
            format!("{what} per second"),
            pick(&|t| t.count as f64 / t.cold_seconds, 0),
            pick(&|t| t.count as f64 / t.warm_seconds, 0),
        ]);
    }

    let body = format!(
        "Whole host at {HZ} Hz for {:.0} s, every CPU busy with `fixed_work` (one thread per \
         CPU), {} rounds, stoke and perf alternating. \"While recording\" is the CPU time \
         from the start of sampling to SIGINT (`/proc/PID/task/*/schedstat`) and VmHWM \
         just before SIGINT; \"in all\" is the whole process, startup, symbolization \
         and output included: CPU from `wait4`, peak RSS the last VmHWM before it \
         ended (`wait4`'s ru_maxrss counts the bench's own memory, copied into the \
         child before its exec). stoke \
         writes named stacks when stopped; perf record writes raw samples (and collects \
         build-ids), and `perf script` names them, so its time and CPU are shown apart.\n\n{}\n\
         Symbolization with cold and warm page caches: per round, two {:.1} s stoke \
         recordings, the first stopped right after `echo 3 > /proc/sys/vm/drop_caches`, \
         so that stoke reads the ELF files and kallsyms anew; and one perf recording named \
         by perf script twice, first after dropping the caches. stoke names each distinct \
         address once; perf script names every frame of every sample (with its own \
         per-address cache), so the two rates count different things.\n\n{}",
        bench.settings.cost_seconds,
        bench.settings.rounds,
        table.markdown(),
        bench.settings.symbolize_seconds,
        naming.markdown()
    );
    Section {
        part: Part::Cost,
        body,
        targets: targets(bench, longs),
        provenance: String::new(),
    }
}

fn targets(bench: &Bench, longs: &[Long]) -> Vec<Target> {
    let stoke: Vec<&Long> = longs
        .iter()
        .filter(|l| l.stopped.tool == Tool::Stoke)
        .collect();
    let share = |cpu: Duration, l: &Long| cpu.as_secs_f64() / l.stopped.recorded.as_secs_f64();
    let cpu_all = Spread::of(
        &stoke
            .iter()
            .map(|l| share(l.stopped.exit.cpu, l))
            .collect::<Vec<_>>(),
    );
    let cpu_recording = Spread::of(
        &stoke
            .iter()
            .map(|l| share(l.stopped.cpu_recording, l))
            .collect::<Vec<_>>(),
    );
    let rss = Spread::of(
        &stoke
            .iter()
            .map(|l| megabytes(l.stopped.exit.max_rss as f64))
            .collect::<Vec<_>>(),
    );
    let lost: u64 = stoke.iter().map(|l| l.stopped.lost).sum();
    let (Some(cpu_all), Some(cpu_recording), Some(rss)) = (cpu_all, cpu_recording, rss) else {
        return Vec::new();
    };
    let cpu_goal = format!(
        "stoke's CPU at most {} of a core at {HZ} Hz",
        percent(CPU_TARGET)
    );
    let cpu_measured = format!(
        "{} in all, {} while recording",
        percent(cpu_all.median),
        percent(cpu_recording.median)
    );
    let cpu_target = if bench.settings.smoke {
        // Startup and output dominate a recording of seconds.
        Target {
            goal: cpu_goal,
            measured: cpu_measured,
            verdict: Verdict::NotJudged("smoke run: recordings of seconds".into()),
        }
    } else {
        let stopped: Vec<&Stopped> = stoke.iter().map(|l| &l.stopped).collect();
        Target::judge(cpu_goal, cpu_measured, cpu_all.median <= CPU_TARGET, || {
            CpuSplit::of(&stopped).map_or_else(String::new, |split| {
                split.explain(CPU_TARGET, bench.settings.cost_seconds)
            })
        })
    };
    vec![
        cpu_target,
        Target::judge(
            format!("stoke's peak RSS at most {RSS_TARGET_MB:.0} MB at {HZ} Hz"),
            format!("{:.1} MB (max {:.1})", rss.median, rss.max),
            rss.max <= RSS_TARGET_MB,
            || profiler::explain_peak_rss(&stoke.iter().map(|l| &l.stopped).collect::<Vec<_>>()),
        ),
        Target::judge(
            format!("no lost samples at {HZ} Hz"),
            format!("{lost} lost"),
            lost == 0,
            || "the ring buffer filled up".into(),
        ),
    ]
}
