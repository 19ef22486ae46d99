//! Part 5, scale: a synthetic busy host (200 processes × 10 threads that
//! mostly sleep and wake for short bursts) plus 150 exec/s of short-lived
//! processes, recorded whole at 99 Hz: lost samples, the profiler's CPU and
//! memory, and how many of the short-lived processes it could still name.

use std::{collections::BTreeMap, process::Command, time::Duration};

use anyhow::{ensure, Result};

use super::{
    process::Process,
    profiler::{explain_peak_rss, CpuSplit, Options, Recording, Stopped, Tool},
    report::{Section, Table, Target, Verdict},
    rotated,
    stacks::{is_unnamed, Stack},
    stats::{self, megabytes, percent, Spread},
    Bench, Part,
};

const HZ: u64 = 99;
const PROCESSES: u32 = 200;
const THREADS_PER_PROCESS: u32 = 10;
/// Each thread wakes every 75–225 ms (150 ms ± 50%) for a 30 µs burst.
const BURST_US: u32 = 30;
const PERIOD_MS: u32 = 150;
const EXEC_RATE: u32 = 150;
/// CPU each short-lived process burns in short_lived_work().
const SHORT_LIVED_MS: u32 = 3;
const CPU_TARGET: f64 = 0.01;
const RSS_TARGET_MB: f64 = 100.0;

/// The short-lived processes as one profile shows them. A sample is named
/// when its innermost user frame (the user-space instruction pointer, always
/// a valid address) has a function name: a profiler that lost the process's
/// memory map cannot name it. Frames further out may be unwinding garbage
/// (code without frame pointers, such as the dynamic loader's), which says
/// nothing about symbolization, so they are not judged.
#[derive(Debug, Default, PartialEq)]
struct ShortLived {
    /// Processes with at least one sample.
    sampled: usize,
    /// Processes with user frames in their samples.
    with_user_frames: usize,
    /// ... every one of whose samples is named.
    named: usize,
    /// ... with short_lived_work() on a stack.
    in_work: usize,
    /// Samples with user frames.
    user_samples: u64,
    /// ... that are named.
    named_samples: u64,
    /// Unnamed samples taken inside execve: their user frames still belong
    /// to the image being replaced.
    unnamed_in_exec: u64,
}

struct Run {
    stopped: Stopped,
    processes: u32,
    threads: u32,
    spawned: u64,
    exec_rate: f64,
    short_lived: ShortLived,
}

pub fn run(bench: &Bench) -> Result<Section> {
    let tools = [Tool::Stoke, Tool::Perf];
    let mut runs = Vec::new();
    for round in 0..bench.settings.rounds {
        for tool in rotated(&tools, round) {
            let what = format!("scale round {}: {tool}", round + 1);
            let run = bench.measure(&what, || run_once(bench, tool))?.value;
            bench.log(&format!(
                "{what}: {} samples, {} lost, {:.1} exec/s, {} of {} short-lived processes named",
                run.stopped.samples,
                run.stopped.lost,
                run.exec_rate,
                run.short_lived.named,
                run.short_lived.with_user_frames
            ));
            runs.push(run);
        }
    }
    Ok(section(bench, &runs))
}

/// A synthetic host `scale_host` runs: processes of threads that wake every
/// `period_ms` (± 50%) for a burst of `burst_us`.
pub struct Host {
    pub processes: u32,
    pub threads_per_process: u32,
    pub lifetime: Duration,
    pub burst_us: u32,
    pub period_ms: u32,
}

/// Starts `scale_host` and waits, at most `ready_timeout`, until all of
/// `host` runs; returns it with the processes and threads it started.
pub fn start_host(
    bench: &Bench,
    host: &Host,
    ready_timeout: Duration,
) -> Result<(Process, u32, u32)> {
    let mut process = Process::spawn(
        "scale_host",
        Command::new(&bench.workloads.scale_host)
            .arg(host.processes.to_string())
            .arg(host.threads_per_process.to_string())
            .arg(host.lifetime.as_secs_f64().to_string())
            .arg(host.burst_us.to_string())
            .arg(host.period_ms.to_string()),
    )?;
    process.wait_for_stdout("ready", ready_timeout)?;
    let processes = process.printed("processes")?;
    let threads = process.printed("threads")?;
    Ok((process, processes, threads))
}

fn run_once(bench: &Bench, tool: Tool) -> Result<Run> {
    let seconds = bench.settings.scale_seconds;
    let workloads = &bench.workloads;
    // The host lives longer than the recording; it is stopped at the end.
    let (mut host, processes, threads) = start_host(
        bench,
        &Host {
            processes: PROCESSES,
            threads_per_process: THREADS_PER_PROCESS,
            lifetime: Duration::from_secs_f64(seconds + 120.0),
            burst_us: BURST_US,
            period_ms: PERIOD_MS,
        },
        Duration::from_secs(60),
    )?;

    let recording = Recording::start(bench, &Options::new(tool, HZ, "folded"), "scale")?;
    let mut spawner = Process::spawn(
        "spawner",
        Command::new(&workloads.spawner)
            .arg(&workloads.short_lived)
            .arg(EXEC_RATE.to_string())
            .arg(format!("{seconds}"))
            .arg(SHORT_LIVED_MS.to_string()),
    )?;
    let exit = spawner.wait(Duration::from_secs_f64(seconds + 60.0))?;
    ensure!(exit.success(), "spawner failed: {}", exit.describe());
    let spawned: f64 = spawner.printed("spawned")?;
    let spawn_seconds: f64 = spawner.printed("seconds")?;
    let stopped = recording.stop()?;
    // SIGTERM: scale_host kills and reaps its children, so that their CPU
    // reaches the bench's children usage and does not read as someone
    // else's load.
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(60))?;
    let stacks = stopped.stacks()?;
    stopped.remove_output();
    Ok(Run {
        processes,
        threads,
        spawned: spawned as u64,
        exec_rate: spawned / spawn_seconds,
        short_lived: short_lived(&stacks),
        stopped,
    })
}

/// Counts the short-lived processes in a profile and how well they are named.
fn short_lived(stacks: &[Stack]) -> ShortLived {
    #[derive(Default)]
    struct Seen {
        user_frames: bool,
        unnamed: bool,
        in_work: bool,
    }
    let mut by_pid: BTreeMap<u32, Seen> = BTreeMap::new();
    let mut counts = ShortLived::default();
    for stack in stacks.iter().filter(|stack| stack.comm == "short_lived") {
        let seen = by_pid.entry(stack.pid).or_default();
        // Frames are root first: the innermost user frame is the last one.
        if let Some(leaf) = stack.user_frames().last() {
            seen.user_frames = true;
            counts.user_samples += stack.samples;
            if !is_unnamed(leaf) {
                counts.named_samples += stack.samples;
            } else {
                seen.unnamed = true;
                if stack.frames.iter().any(|frame| frame.contains("execve")) {
                    counts.unnamed_in_exec += stack.samples;
                }
            }
        }
        seen.in_work |= stack.contains("short_lived_work");
    }
    ShortLived {
        sampled: by_pid.len(),
        with_user_frames: by_pid.values().filter(|s| s.user_frames).count(),
        named: by_pid
            .values()
            .filter(|s| s.user_frames && !s.unnamed)
            .count(),
        in_work: by_pid.values().filter(|s| s.in_work).count(),
        ..counts
    }
}

/// `part` as a percentage of `whole` (0 when there is no whole).
fn share_u64(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64 * 100.0
    }
}

fn section(bench: &Bench, runs: &[Run]) -> Section {
    let of = |tool: Tool| runs.iter().filter(move |r| r.stopped.tool == tool);
    let show = |f: &dyn Fn(&Run) -> f64, decimals: usize, unit: &str| {
        [Tool::Stoke, Tool::Perf]
            .map(|tool| stats::show(&of(tool).map(f).collect::<Vec<_>>(), decimals, unit))
    };
    let lost_share =
        |r: &Run| r.stopped.lost as f64 / (r.stopped.samples + r.stopped.lost) as f64 * 100.0;
    let core =
        |cpu: Duration, r: &Run| cpu.as_secs_f64() / r.stopped.recorded.as_secs_f64() * 100.0;
    let share = |part: usize, whole: usize| share_u64(part as u64, whole as u64);

    let mut table = Table::new(&["", "stoke record -a", "perf record -a -g"]);
    let mut row = |label: &str, cells: [String; 2]| {
        let [stoke, perf] = cells;
        table.row(vec![label.to_owned(), stoke, perf]);
    };
    row(
        "scale_host: processes started",
        show(&|r| f64::from(r.processes), 0, ""),
    );
    row(
        "scale_host: threads started",
        show(&|r| f64::from(r.threads), 0, ""),
    );
    row(
        "short-lived processes started per second",
        show(&|r| r.exec_rate, 1, ""),
    );
    row("samples", show(&|r| r.stopped.samples as f64, 0, ""));
    row("lost samples", show(&|r| r.stopped.lost as f64, 0, ""));
    row("lost samples, % of all", show(&lost_share, 2, "%"));
    let [stoke_processes, _] = show(&|r| r.stopped.processes.unwrap_or(0) as f64, 0, "");
    row(
        "processes seen (perf does not say)",
        [stoke_processes, "–".into()],
    );
    row(
        "profiler CPU while recording, % of one CPU",
        show(&|r| core(r.stopped.cpu_recording, r), 2, "%"),
    );
    row(
        "profiler CPU before sampling (startup), s",
        show(&|r| r.stopped.cpu_startup.as_secs_f64(), 2, ""),
    );
    row(
        "profiler CPU after SIGINT (naming, writing), s",
        show(&|r| r.stopped.cpu_output().as_secs_f64(), 2, ""),
    );
    row(
        "profiler CPU in all, % of one CPU over the recording",
        show(&|r| core(r.stopped.exit.cpu, r), 2, "%"),
    );
    row(
        "peak RSS in all",
        show(&|r| megabytes(r.stopped.exit.max_rss as f64), 1, " MB"),
    );
    row(
        "SIGINT to exit (output written)",
        show(&|r| r.stopped.stop_latency.as_secs_f64(), 2, " s"),
    );
    row(
        "short-lived processes spawned",
        show(&|r| r.spawned as f64, 0, ""),
    );
    row("… sampled", show(&|r| r.short_lived.sampled as f64, 0, ""));
    row(
        "… sampled in user space",
        show(&|r| r.short_lived.with_user_frames as f64, 0, ""),
    );
    row(
        "… all of whose samples are named, % of those",
        show(
            &|r| share(r.short_lived.named, r.short_lived.with_user_frames),
            1,
            "%",
        ),
    );
    row(
        "samples of short-lived processes in user space that are named, %",
        show(
            &|r| share_u64(r.short_lived.named_samples, r.short_lived.user_samples),
            1,
            "%",
        ),
    );
    row(
        "unnamed samples taken inside execve",
        show(&|r| r.short_lived.unnamed_in_exec as f64, 0, ""),
    );
    row(
        "… with short_lived_work() on a stack, % of those",
        show(
            &|r| share(r.short_lived.in_work, r.short_lived.with_user_frames),
            1,
            "%",
        ),
    );
    let body = format!(
        "`scale_host`: {PROCESSES} processes × {THREADS_PER_PROCESS} threads, each thread \
         waking every {}–{} ms for a {BURST_US} µs burst; `spawner`: {EXEC_RATE} exec/s of \
         `short_lived`, which burns {SHORT_LIVED_MS} ms in short_lived_work() and exits. \
         Each profiler records the whole host at {HZ} Hz for the spawner's {:.0} s, {} rounds. \
         perf counts idle CPUs' samples too; stoke leaves them out. A sample counts as \
         named when its innermost user frame (the user-space instruction pointer) has a \
         function name: a profiler that lost a process's memory map shows `[unknown]` or \
         `module+0x…` there. Frames further out can be unwinding garbage where code has no \
         frame pointers (the dynamic loader's), which is not symbolization's doing. stoke reads a \
         process's memory map when it first samples it (the ring wakes it at once), so a \
         process that ends before stoke gets to it, or a sample taken inside execve (whose \
         user frames belong to the image being replaced), stays unnamed; perf records \
         every mmap, fork and exec in its event stream and names those after the fact.\n\n{}",
        PERIOD_MS / 2,
        PERIOD_MS * 3 / 2,
        bench.settings.scale_seconds,
        bench.settings.rounds,
        table.markdown()
    );
    Section {
        part: Part::Scale,
        body,
        targets: targets(bench, runs),
        provenance: String::new(),
    }
}

fn targets(bench: &Bench, runs: &[Run]) -> Vec<Target> {
    let stoke: Vec<&Run> = runs
        .iter()
        .filter(|r| r.stopped.tool == Tool::Stoke)
        .collect();
    let spread =
        |f: &dyn Fn(&Run) -> f64| Spread::of(&stoke.iter().map(|r| f(r)).collect::<Vec<_>>());
    let share = |cpu: Duration, r: &Run| cpu.as_secs_f64() / r.stopped.recorded.as_secs_f64();
    let (Some(cpu), Some(rss), Some(rate)) = (
        spread(&|r| share(r.stopped.exit.cpu, r)),
        spread(&|r| megabytes(r.stopped.exit.max_rss as f64)),
        spread(&|r| r.exec_rate),
    ) else {
        return Vec::new();
    };
    let lost: u64 = stoke.iter().map(|r| r.stopped.lost).sum();
    let samples: u64 = stoke.iter().map(|r| r.stopped.samples).sum();
    let processes = stoke.first().map_or(0, |r| r.processes);
    let threads = stoke.first().map_or(0, |r| r.threads);
    let mut targets = vec![
        Target::judge(
            "synthetic host: ≥ 200 processes, ≥ 2,000 threads, ≥ 100 exec/s (bench check)",
            format!(
                "{processes} processes, {threads} threads, {:.0} exec/s",
                rate.median
            ),
            processes >= 200 && threads >= 2000 && rate.min >= 100.0,
            || "the workload could not start them all or keep the exec rate".into(),
        ),
        Target::judge(
            format!("no lost samples at {HZ} Hz (synthetic host)"),
            format!(
                "{lost} of {} ({})",
                samples + lost,
                percent(lost as f64 / (samples + lost).max(1) as f64)
            ),
            lost == 0,
            || "the ring buffer filled up between two drains".into(),
        ),
    ];
    // A recording of seconds pays stoke's startup once: judged while
    // sampling, the whole shown beside it.
    let stopped: Vec<&Stopped> = stoke.iter().map(|r| &r.stopped).collect();
    let Some(split) = CpuSplit::of(&stopped) else {
        return targets;
    };
    let cpu_goal = format!(
        "stoke's CPU while sampling at most {} of a core (synthetic host)",
        percent(CPU_TARGET)
    );
    let cpu_measured = format!(
        "{} while sampling; {} in all over {:.0} s (startup {:.2} s, output {:.2} s of CPU)",
        percent(split.sampling_share),
        percent(cpu.median),
        bench.settings.scale_seconds,
        split.startup_seconds,
        split.output_seconds
    );
    targets.push(if bench.settings.smoke {
        Target {
            goal: cpu_goal,
            measured: cpu_measured,
            verdict: Verdict::NotJudged("smoke run: recordings of seconds".into()),
        }
    } else {
        Target::judge(
            cpu_goal,
            cpu_measured,
            split.sampling_share <= CPU_TARGET,
            || {
                format!(
                    "{EXEC_RATE} new processes a second: stoke reads the memory map of each \
                     one it samples (opening /proc/PID/maps has the kernel create the new \
                     pid's /proc entries), loads its mappings into the unwinder's maps and \
                     builds unwind tables for files it has not seen, and the samples spread \
                     over more distinct stacks; `perf record -p` on stoke in this scene \
                     says which weighs most"
                )
            },
        )
    });
    targets.push(Target::judge(
        format!("stoke's peak RSS at most {RSS_TARGET_MB:.0} MB (synthetic host)"),
        format!("{:.1} MB (max {:.1})", rss.median, rss.max),
        rss.max <= RSS_TARGET_MB,
        || explain_peak_rss(&stopped),
    ));
    targets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_named_short_lived_processes() {
        let stack = |pid, frames: &[&str]| Stack {
            comm: "short_lived".into(),
            pid,
            frames: frames.iter().map(|&f| f.to_owned()).collect(),
            samples: 1,
        };
        let stacks = [
            stack(1, &["main", "short_lived_work", "short_lived_leaf"]),
            stack(
                1,
                &["[unknown]", "main", "clock_gettime", "do_syscall_64_[k]"],
            ),
            stack(2, &["short_lived+0x1139"]),
            stack(3, &["asm_exc_page_fault_[k]"]),
            stack(4, &["[unknown]", "_dl_start"]),
            stack(4, &["[unknown]"]),
            stack(6, &["[unknown]", "__x64_sys_execve_[k]"]),
            Stack {
                comm: "other".into(),
                ..stack(5, &["main"])
            },
        ];
        assert_eq!(
            short_lived(&stacks),
            ShortLived {
                sampled: 5,
                with_user_frames: 4,
                named: 1,
                in_work: 1,
                user_samples: 6,
                named_samples: 3,
                unnamed_in_exec: 1,
            }
        );
    }
}
