//! Part 9, continuous: `stoke continuous` soaked for minutes under process
//! and container churn (its RSS after warm-up, its slope, its CPU, its
//! intervals), the CPU one interval of 1,000 processes costs, and what
//! two stokes side by side cost a JVM.
//!
//! It measures stoke's own CPU time and RSS from /proc, which other
//! processes' load hardly changes: one long run, not rounds, and no wait
//! for a quiet host (the load average is reported instead).

mod beside;
mod containers;
mod daemon;
mod soak;
mod thousand;

use std::time::Duration;

use anyhow::Result;

use self::{soak::Soak, thousand::Thousand};
use super::{
    report::{Section, Table, Target, Verdict},
    stats::{self, megabytes, percent, Spread},
    Bench, Part,
};

const CPU_TARGET: f64 = 0.005;
const RSS_TARGET_MB: f64 = 64.0;
/// "Flat" made a number: under 1 MB an hour, 24 MB a day.
const SLOPE_TARGET_MB_PER_HOUR: f64 = 1.0;

pub fn run(bench: &Bench) -> Result<Section> {
    bench.log(&format!(
        "soak of {:.1} min (stoke continuous under churn) ...",
        bench.settings.soak_minutes
    ));
    let soak = soak::run(bench)?;
    bench.log("one interval of 1,000 processes ...");
    let thousand = thousand::run(bench)?;
    let mut body = format!("{}\n\n{}", soak_text(&soak), thousand_text(&thousand));
    let mut targets = targets(bench, &soak, &thousand);
    if bench.workloads.java_fixed_work.is_some() {
        bench.log("stokes side by side on one JVM ...");
        let (text, target) = beside::text(bench, &beside::run(bench)?);
        body = format!("{}\n\n{text}", body.trim_end());
        targets.extend(target);
    }
    Ok(Section {
        part: Part::Continuous,
        body,
        targets,
        provenance: String::new(),
    })
}

/// The numbers of the soak the targets judge.
struct Steady {
    rss_warm_mb: f64,
    rss_end_mb: f64,
    rss_max_mb: f64,
    slope_mb_per_hour: Option<f64>,
    cpu_share: f64,
}

impl Steady {
    fn of(soak: &Soak) -> Option<Self> {
        let steady = soak.steady();
        let (first, last) = (steady.first()?, steady.last()?);
        let hours = |at: Duration| at.as_secs_f64() / 3600.0;
        let points: Vec<(f64, f64)> = steady
            .iter()
            .map(|usage| (hours(usage.at), megabytes(usage.rss as f64)))
            .collect();
        let wall = (last.at - first.at).as_secs_f64();
        Some(Self {
            rss_warm_mb: megabytes(first.rss as f64),
            rss_end_mb: megabytes(last.rss as f64),
            rss_max_mb: megabytes(steady.iter().map(|u| u.rss).max()? as f64),
            slope_mb_per_hour: stats::slope(&points),
            cpu_share: (last.cpu - first.cpu).as_secs_f64() / wall.max(1e-3),
        })
    }
}

fn soak_text(soak: &Soak) -> String {
    let intervals = &soak.stopped.intervals;
    let steady_intervals = intervals.get(soak.warm_up_intervals()..).unwrap_or(&[]);
    let ms: Vec<f64> = steady_intervals.iter().map(|i| i.encode_ms).collect();
    let loads = Spread::of(&soak.loads);
    let mut table = Table::new(&["", "stoke continuous"]);
    let mut row = |label: &str, value: String| table.row(vec![label.to_owned(), value]);
    row(
        "soak, of which warm-up",
        format!(
            "{:.1} min, {:.1} min",
            soak.length.as_secs_f64() / 60.0,
            soak.warm_up.as_secs_f64() / 60.0
        ),
    );
    row(
        "short-lived processes started per second",
        format!("{:.1}", soak.exec_rate),
    );
    row(
        "containers started and removed",
        match &soak.containers {
            Ok(churned) => format!(
                "{} ({} failed to start{})",
                churned.started,
                churned.failed,
                churned
                    .first_failure
                    .as_ref()
                    .map_or(String::new(), |why| format!(": {why}"))
            ),
            Err(why) => format!("none: docker could not be used: {why}"),
        },
    );
    row(
        "load average (1 min) during the soak",
        loads.map_or("–".into(), |l| {
            format!("{:.2} (min {:.2}, max {:.2})", l.median, l.min, l.max)
        }),
    );
    let total = |f: fn(&daemon::Interval) -> u64| intervals.iter().map(f).sum::<u64>();
    row(
        "intervals logged; samples; lost samples",
        format!(
            "{}; {}; {}",
            intervals.len(),
            total(|i| i.samples),
            total(|i| i.lost)
        ),
    );
    let spread = |f: fn(&daemon::Interval) -> u64| {
        stats::show(
            &steady_intervals
                .iter()
                .map(|i| f(i) as f64)
                .collect::<Vec<_>>(),
            0,
            "",
        )
    };
    row(
        "processes per interval (after warm-up)",
        spread(|i| i.processes),
    );
    row(
        "profiles per interval, one per service and event (after warm-up)",
        spread(|i| i.profiles),
    );
    row(
        "named and encoded in: first interval",
        intervals
            .first()
            .map_or("–".into(), |i| format!("{:.0} ms", i.encode_ms)),
    );
    row(
        "named and encoded in: after warm-up, median (min–max)",
        stats::show(&ms, 0, " ms"),
    );
    if let Some(steady) = Steady::of(soak) {
        row(
            "RSS at the end of warm-up; at the end; peak after warm-up",
            format!(
                "{:.1} MB; {:.1} MB; {:.1} MB",
                steady.rss_warm_mb, steady.rss_end_mb, steady.rss_max_mb
            ),
        );
        row(
            "RSS slope after warm-up (least squares)",
            steady
                .slope_mb_per_hour
                .map_or("–".into(), |s| format!("{s:+.2} MB/h")),
        );
        row(
            "CPU after warm-up, % of one core",
            percent(steady.cpu_share),
        );
    }
    let resident = &soak.resident;
    row(
        "RSS at the end: heap; BPF maps mapped; memfds (file copies, agents); the rest \
         (binary, libraries)",
        format!(
            "{:.1} MB; {:.1} MB; {:.1} MB; {:.1} MB",
            megabytes(resident.heap as f64),
            megabytes(resident.bpf_maps as f64),
            megabytes(resident.memfds as f64),
            megabytes(resident.rest() as f64)
        ),
    );
    if let Some(last) = soak.usage.last() {
        row(
            "CPU over the whole soak, % of one core",
            percent(last.cpu.as_secs_f64() / last.at.as_secs_f64().max(1e-3)),
        );
    }
    row(
        "peak RSS (kernel's high-water mark, startup included)",
        format!("{:.1} MB", megabytes(soak.stopped.exit.max_rss as f64)),
    );
    row(
        "delivered; refused; failed attempts; batches dropped",
        soak.stopped
            .delivery
            .map_or("– (no `stopped:` line)".into(), |d| {
                format!(
                    "{}; {}; {}; {}",
                    d.delivered, d.refused, d.failed_attempts, d.batches_dropped
                )
            }),
    );
    row(
        "incident records beside: records; the JVM's samples with Java frames (lowest record)",
        records_beside(&soak.records),
    );
    row(
        "left in --output-dir: service directories; most files in one",
        format!(
            "{}; {} (--keep {})",
            soak.service_dirs,
            soak.most_files,
            soak::KEEP
        ),
    );
    format!(
        "**Soak.** `stoke continuous -a -F {} --interval {} --output-dir DIR --keep {}` for \
         {:.1} min while `spawner` execs `short_lived` ({} ms of CPU, then exit) {} times a \
         second and, every {} s, a docker container runs the tests' `busy_other` for a moment \
         and is removed. Stoke's VmRSS (`/proc/PID/status`) and utime + stime \
         (`/proc/PID/stat`) are read every {} s; the first {:.1} min are warm-up, left out of \
         the steady state. Each interval's \"named and encoded in\" is from stoke's own log \
         line. Services are named by container, so every container adds a service \
         directory to DIR, each holding at most --keep files. Beside it a JVM (`FixedWork \
         -s`, one thread) runs the whole soak, and every {} s an incident's `stoke record -p \
         JVM -F {}` records it for {} s, the daemon still holding it.\n\n{}",
        soak::HZ,
        soak::INTERVAL.as_secs(),
        soak::KEEP,
        soak.length.as_secs_f64() / 60.0,
        soak::SHORT_LIVED_MS,
        soak::EXEC_RATE,
        soak::CONTAINER_EVERY.as_secs(),
        soak::SAMPLE_EVERY.as_secs(),
        soak.warm_up.as_secs_f64() / 60.0,
        soak::RECORD_EVERY.as_secs(),
        soak::HZ,
        soak::SAMPLE_EVERY.as_secs(),
        table.markdown()
    )
}

/// The records beside the daemon: how many, and the share of the JVM's
/// samples with Java frames, in all and in the lowest record.
fn records_beside(records: &[(u64, u64)]) -> String {
    let total = records
        .iter()
        .fold((0, 0), |(all, java), (a, j)| (all + a, java + j));
    match lowest_java_share(records) {
        Some(lowest) => format!(
            "{}; {} of {}, {} ({})",
            records.len(),
            total.1,
            total.0,
            percent(java_share(total)),
            percent(lowest)
        ),
        None => "– (no JDK, or a soak too short)".into(),
    }
}

/// The share of a record's JVM samples, `(all, with Java frames)`, that
/// had Java frames.
fn java_share((all, java): (u64, u64)) -> f64 {
    java as f64 / all.max(1) as f64
}

/// The lowest [`java_share`] of the records; `None` without any.
fn lowest_java_share(records: &[(u64, u64)]) -> Option<f64> {
    records.iter().copied().map(java_share).reduce(f64::min)
}

fn thousand_text(thousand: &Thousand) -> String {
    let mut table = Table::new(&[
        "interval",
        "processes",
        "samples",
        "profiles",
        "named and encoded in",
        "stoke CPU in the interval",
    ]);
    for (index, (interval, cpu)) in thousand.intervals.iter().enumerate() {
        let label = if index == 0 {
            "1 (cold: every process read for the first time)".to_owned()
        } else {
            (index + 1).to_string()
        };
        table.row(vec![
            label,
            interval.processes.to_string(),
            interval.samples.to_string(),
            interval.profiles.to_string(),
            format!("{:.0} ms", interval.encode_ms),
            format!("{:.2} s", cpu.as_secs_f64()),
        ]);
    }
    format!(
        "**One interval of 1,000 processes.** `scale_host` started {} processes ({} threads; \
         each thread wakes every {}–{} ms for a {} µs burst), then `stoke continuous -a -F {} \
         --interval {}` ran over them. At 99 Hz two CPUs take at most 1,980 samples in \
         10 s, too few for every one of 1,000 mostly idle processes to be sampled in each \
         interval: {} Hz gives each a few. Stoke's CPU per interval is the difference of \
         its utime + stime between two interval lines: sampling, naming, folding and \
         encoding.\n\n{}",
        thousand.processes,
        thousand.threads,
        thousand::PERIOD_MS / 2,
        thousand::PERIOD_MS * 3 / 2,
        thousand::BURST_US,
        thousand::HZ,
        thousand::INTERVAL.as_secs(),
        thousand::HZ,
        table.markdown()
    )
}

/// "X% under the target" or "N× the target".
fn margin(measured: f64, target: f64) -> String {
    if measured <= target {
        format!("{:.0}% under the target", (1.0 - measured / target) * 100.0)
    } else {
        format!("{:.1}× the target", measured / target)
    }
}

fn targets(bench: &Bench, soak: &Soak, thousand: &Thousand) -> Vec<Target> {
    let smoke = |goal: String, measured: String, judged: Target| {
        if bench.settings.smoke {
            Target {
                goal,
                measured,
                verdict: Verdict::NotJudged("smoke run: a soak of seconds".into()),
            }
        } else {
            judged
        }
    };
    let (containers, docker_ok) = match &soak.containers {
        Ok(churned) => (
            format!("{} containers", churned.started),
            churned.started > 0,
        ),
        Err(why) => (format!("no containers ({why})"), false),
    };
    let mut targets = vec![Target::judge(
        "soak churn: ≥ 100 exec/s and containers starting and stopping (bench check)",
        format!("{:.0} exec/s, {containers}", soak.exec_rate),
        soak.exec_rate >= 100.0 && docker_ok,
        || {
            if docker_ok {
                "the spawner could not keep the exec rate".into()
            } else {
                "docker could not be used: the soak had process churn only".into()
            }
        },
    )];
    if let Some(steady) = Steady::of(soak) {
        let slope = steady.slope_mb_per_hour.unwrap_or(0.0);
        let goal =
            format!("RSS flat after warm-up (slope under {SLOPE_TARGET_MB_PER_HOUR:.0} MB/h)");
        let measured = format!(
            "{slope:+.2} MB/h ({:.1} MB at the end of warm-up, {:.1} MB at the end)",
            steady.rss_warm_mb, steady.rss_end_mb
        );
        targets.push(smoke(
            goal.clone(),
            measured.clone(),
            Target::judge(goal, measured, slope < SLOPE_TARGET_MB_PER_HOUR, || {
                format!(
                    "at this rate RSS grows {:.0} MB a day (a fit over minutes, while the \
                     copies of files kept indexed for naming fill their budget: a longer \
                     --soak-minutes tells a leak from that and the allocator settling)",
                    slope * 24.0
                )
            }),
        ));
        let goal = format!(
            "stoke's CPU in steady state ≤ {} of one core",
            percent(CPU_TARGET)
        );
        let measured = format!(
            "{} ({})",
            percent(steady.cpu_share),
            margin(steady.cpu_share, CPU_TARGET)
        );
        targets.push(smoke(
            goal.clone(),
            measured.clone(),
            Target::judge(goal, measured, steady.cpu_share <= CPU_TARGET, || {
                format!(
                    "{:.2} points over: each process sampled for the first time wakes \
                     stoke (the ring forces it, so that its memory map is read before it \
                     ends) and has its memory map read: the first touch of /proc/PID, \
                     which creates its entries, is most of it; each interval names the \
                     addresses new in it, in files kept indexed from one interval to the \
                     next (symbolize/prepared.rs), and encodes its pprof profiles; \
                     `perf record -p` on stoke in a soak says which weighs most",
                    (steady.cpu_share - CPU_TARGET) * 100.0
                )
            }),
        ));
        let goal = format!("stoke's RSS ≤ {RSS_TARGET_MB:.0} MB in steady state");
        let measured = format!(
            "peak {:.1} MB after warm-up ({})",
            steady.rss_max_mb,
            margin(steady.rss_max_mb, RSS_TARGET_MB)
        );
        targets.push(smoke(
            goal.clone(),
            measured.clone(),
            Target::judge(goal, measured, steady.rss_max_mb <= RSS_TARGET_MB, || {
                format!(
                    "{:.1} MB over; at the end the heap was {:.1} MB, the BPF maps mapped \
                     {:.1} MB (the unwind tables' maps, allocated whole, and the sample \
                     ring), its memfds {:.1} MB (the sealed copies of the files it names, \
                     the agent's memory), the rest {:.1} MB (the binary and libraries)",
                    steady.rss_max_mb - RSS_TARGET_MB,
                    megabytes(soak.resident.heap as f64),
                    megabytes(soak.resident.bpf_maps as f64),
                    megabytes(soak.resident.memfds as f64),
                    megabytes(soak.resident.rest() as f64)
                )
            }),
        ));
    }
    if let Some(lowest) = lowest_java_share(&soak.records) {
        targets.push(Target::judge(
            "an incident's record beside the daemon: ≥ 90% of the JVM's samples with Java \
             frames in every record (bench check)",
            records_beside(&soak.records),
            lowest >= 0.9,
            || {
                format!(
                    "a record had Java frames in {} of the JVM's samples",
                    percent(lowest)
                )
            },
        ));
    }
    let steady: Vec<_> = thousand.intervals.iter().skip(1).collect();
    let cpu = Spread::of(
        &steady
            .iter()
            .map(|(_, cpu)| cpu.as_secs_f64())
            .collect::<Vec<_>>(),
    );
    let ms = Spread::of(&steady.iter().map(|(i, _)| i.encode_ms).collect::<Vec<_>>());
    let processes = steady.iter().map(|(i, _)| i.processes).min().unwrap_or(0);
    if let (Some(cpu), Some(ms)) = (cpu, ms) {
        targets.push(Target {
            goal: "CPU to build and encode one interval for 1,000 processes".into(),
            measured: format!(
                "{:.0} ms named and encoded, {:.2} s of stoke's CPU per {} s interval \
                 (≥ {processes} processes, {} Hz; medians)",
                ms.median,
                cpu.median,
                thousand::INTERVAL.as_secs(),
                thousand::HZ
            ),
            verdict: Verdict::NotJudged("the issue asks for the number, with no limit".into()),
        });
    }
    targets
}
