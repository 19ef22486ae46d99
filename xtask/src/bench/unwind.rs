//! Part 7, unwinding: what stoke's table unwinder costs against frame
//! pointers (`--frame-pointers`, the kernel's `bpf_get_stack`), per sample
//! and per frame, and what its tables take: memory per file and in total,
//! and time to compile.
//!
//! The cost per frame is that of the frames a deeper recursion adds: the
//! same program, built with frame pointers so that both unwinders walk the
//! same frames, at two depths; the difference in time per sample over the
//! difference in frames.
//!
//! The BPF time per sample is the kernel's statistics of the sampler
//! (`--bpf-stats`), read twice during the recording, once the tables of the
//! workload's files are loaded and at the end: the difference is steady
//! state. Frames per sample and the share of stacks reaching a root come from
//! the same recording's folded output. Table sizes and compile times come
//! from `stoke tables FILE...`, and from the summary of a whole-host
//! recording.

use std::{
    collections::BTreeMap, fs::File, io::Write, path::Path, process::Command, time::Duration,
};

use anyhow::{bail, ensure, Context, Result};
use profiler_common::unwind::ROOT_FUNCTIONS;
use stoke_tests::{json::UnwindSummary, JDKS};

use super::{
    bpf_stats::{per_run_us, sampler_stats, ProgramStats},
    process::Process,
    profiler::{Options, Recording, Tool},
    python,
    report::{Section, Table, Target},
    rotated,
    stacks::{is_kernel, Stack},
    stats::{self, Spread},
    Bench, Part,
};

/// The target: BPF run time per sample at typical depth.
const TARGET_US: f64 = 10.0;

/// The two depths of the per-frame cost: the shallower gives about 20 user
/// frames, a typical stack.
const PER_FRAME_DEPTHS: [u32; 2] = [16, 48];

/// Targets against the frame-pointer walk, on the same frames: per frame,
/// and per sample at the shallower depth (at most that many µs, too).
const PER_FRAME_RATIO: f64 = 2.0;
const PER_SAMPLE_RATIO: f64 = 1.5;
const PER_SAMPLE_US: f64 = 3.0;

/// Recursion depth of the frame-pointer-less C workload: with the thread's
/// own frames, about 18 user frames, a typical depth.
const CHAIN_DEPTH: u32 = 12;

/// Time the unwinder gets to load the tables of the workload's files before
/// the measured window.
const SETTLE: Duration = Duration::from_millis(1000);

/// Random input for xz, more than it compresses in a recording.
const XZ_INPUT_BYTES: usize = 64 << 20;

/// The files whose tables `stoke tables` compiles: libc, and the libjvm.so
/// of every JDK under test that is installed.
const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

/// What runs while stoke records.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Workload {
    /// `xz -9 -T1` per CPU: liblzma, no frame pointers.
    Xz,
    /// `deep_recursion` built `-O2 -fomit-frame-pointer`.
    Chain,
    /// `fixed_work`, frame pointers everywhere.
    FixedWork,
    /// `deep_recursion DEPTH` built with frame pointers: the per-frame cost.
    Depth(u32),
}

impl Workload {
    const ALL: [Workload; 5] = [
        Workload::Xz,
        Workload::Chain,
        Workload::FixedWork,
        Workload::Depth(PER_FRAME_DEPTHS[0]),
        Workload::Depth(PER_FRAME_DEPTHS[1]),
    ];

    fn label(self) -> String {
        match self {
            Workload::Xz => "`xz -9 -T1` per CPU (liblzma, no frame pointers)".into(),
            Workload::Chain => {
                format!("`deep_recursion {CHAIN_DEPTH}` built -O2 -fomit-frame-pointer")
            }
            Workload::FixedWork => "`fixed_work` (frame pointers)".into(),
            Workload::Depth(depth) => format!("`deep_recursion {depth}` (frame pointers)"),
        }
    }

    /// Samples per second per CPU: the per-frame cost is a difference of two
    /// medians, steadier with ten times the samples in the window.
    fn frequency(self) -> u64 {
        match self {
            Workload::Depth(_) => 999,
            _ => 99,
        }
    }

    /// Whether the table unwinder's time is held to the target here.
    fn without_frame_pointers(self) -> bool {
        matches!(self, Workload::Xz | Workload::Chain)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Unwinder {
    Tables,
    FramePointers,
}

impl Unwinder {
    fn label(self) -> &'static str {
        match self {
            Unwinder::Tables => "unwind tables",
            Unwinder::FramePointers => "--frame-pointers",
        }
    }
}

/// One recording of a workload.
struct Run {
    /// The sampler's counters over the measured window.
    sampler: ProgramStats,
    /// Mean user frames per sample of the workload.
    user_frames: f64,
    /// Share of the workload's samples with a user stack that reach a root.
    root_share: f64,
}

/// The unwind tables of a whole-host recording's summary (`Unwind tables`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct HostTables {
    files: f64,
    rows: f64,
    megabytes: f64,
    compile_ms: f64,
    processes: f64,
}

/// One file's line of `stoke tables`.
#[derive(Debug, Clone, PartialEq)]
struct FileTables {
    file: String,
    rows: u64,
    bytes: u64,
    compile_ms: f64,
}

/// What `stoke tables` said, or why it could not.
enum TablesCommand {
    Missing,
    Lines(Vec<FileTables>),
}

pub fn run(bench: &Bench) -> Result<Section> {
    let xz_input = bench.scratch("xz-input");
    write_random(&xz_input, XZ_INPUT_BYTES)?;
    let mut configs = Vec::new();
    for workload in Workload::ALL {
        for unwinder in [Unwinder::Tables, Unwinder::FramePointers] {
            configs.push((workload, unwinder));
        }
    }
    let mut runs: Vec<Vec<Run>> = configs.iter().map(|_| Vec::new()).collect();
    let mut host = Vec::new();
    let libjvms: Vec<String> = JDKS
        .iter()
        .map(|jdk| format!("{}/lib/server/libjvm.so", jdk.home))
        .filter(|f| Path::new(f).exists())
        .collect();
    let table_files: Vec<&str> = std::iter::once(LIBC)
        .chain(libjvms.iter().map(String::as_str))
        .collect();
    let mut tables: Vec<Vec<FileTables>> = Vec::new();
    let mut tables_missing = false;
    let order: Vec<usize> = (0..configs.len()).collect();
    for round in 0..bench.settings.rounds {
        for index in rotated(&order, round) {
            let (workload, unwinder) = configs[index];
            let what = format!(
                "unwind round {}: {}, {}",
                round + 1,
                workload.label(),
                unwinder.label()
            );
            let run = bench
                .measure(&what, || run_once(bench, workload, unwinder, &xz_input))?
                .value;
            bench.log(&format!(
                "{what}: {:.2} µs per sample, {:.1} user frames, {:.1}% reach a root",
                per_run_us(run.sampler).unwrap_or(0.0),
                run.user_frames,
                run.root_share * 100.0
            ));
            runs[index].push(run);
        }
        let what = format!("unwind round {}: whole-host tables", round + 1);
        host.push(
            bench
                .measure(&what, || host_tables(bench, &xz_input))?
                .value,
        );
        if !tables_missing {
            let what = format!("unwind round {}: stoke tables", round + 1);
            match bench
                .measure(&what, || stoke_tables(bench, &table_files))?
                .value
            {
                TablesCommand::Missing => tables_missing = true,
                TablesCommand::Lines(lines) => tables.push(lines),
            }
        }
    }
    let mut section = section(
        bench,
        &configs,
        &runs,
        &host,
        (!tables_missing).then_some(tables.as_slice()),
    );
    let (python, python_targets) = python::run(bench)?;
    section.body = format!("{}\n\n{python}", section.body.trim_end());
    section.targets.extend(python_targets);
    Ok(section)
}

fn run_once(bench: &Bench, workload: Workload, unwinder: Unwinder, xz_input: &Path) -> Result<Run> {
    let seconds = bench.settings.unwind_seconds;
    let mut processes = start_workload(bench, workload, xz_input, seconds)?;
    let pids: Vec<u32> = processes
        .iter()
        .map(|p| u32::try_from(p.pid()))
        .collect::<Result<_, _>>()?;
    // Only the workload: stoke loads the tables of its files alone, at once,
    // not those of every process on the host first.
    let options = Options {
        bpf_stats: true,
        frame_pointers: unwinder == Unwinder::FramePointers,
        pids: pids.clone(),
        ..Options::new(Tool::Stoke, workload.frequency(), "folded")
    };
    let recording = Recording::start(bench, &options, "unwind")?;
    std::thread::sleep(SETTLE);
    let before = sampler_stats(recording.pid())?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let after = sampler_stats(recording.pid())?;
    for process in &mut processes {
        // Still working (xz has more input, the others more seconds): an
        // early end would have left the CPUs idle in the measured window.
        process.signal(libc::SIGKILL);
        let exit = process.wait(Duration::from_secs(30))?;
        ensure!(
            !exit.success(),
            "{} ended before the measurement did",
            workload.label()
        );
    }
    let stopped = recording.stop()?;
    let stacks = stopped.stacks()?;
    stopped.remove_output();
    let sampler = after.since(before);
    ensure!(
        sampler.run_count > 0,
        "stoke's sample_cpu program did not run during the measured window"
    );
    let ours: Vec<&Stack> = stacks.iter().filter(|s| pids.contains(&s.pid)).collect();
    let (frames, samples, rooted, with_user) =
        ours.iter()
            .fold((0u64, 0u64, 0u64, 0u64), |(f, n, r, u), stack| {
                let user = stack.frames.iter().filter(|f| !is_kernel(f)).count() as u64;
                let rooted = u64::from(reaches_root(stack)) * stack.samples;
                let with_user = u64::from(user > 0) * stack.samples;
                (
                    f + user * stack.samples,
                    n + stack.samples,
                    r + rooted,
                    u + with_user,
                )
            });
    ensure!(
        samples > 0,
        "no samples of {} in stoke's output",
        workload.label()
    );
    Ok(Run {
        sampler,
        user_frames: frames as f64 / samples as f64,
        root_share: rooted as f64 / with_user.max(1) as f64,
    })
}

/// Whether a stack's user part reaches where a process or thread starts,
/// by stoke's rule (a stripped binary's nameless `_start` shows through the
/// libc function it calls).
fn reaches_root(stack: &Stack) -> bool {
    stack.frames.iter().any(|frame| {
        let function = frame.split(" (").next().unwrap_or(frame);
        ROOT_FUNCTIONS.contains(&function)
    })
}

/// Every CPU busy with `workload` for a little longer than the recording
/// needs (the caller kills it).
fn start_workload(
    bench: &Bench,
    workload: Workload,
    xz_input: &Path,
    seconds: f64,
) -> Result<Vec<Process>> {
    let workloads = &bench.workloads;
    let seconds = format!("{}", seconds + SETTLE.as_secs_f64() + 30.0);
    let cpus = bench.cpus.to_string();
    // deep_recursion's arguments: a thread per CPU at `depth`.
    let recursion = |depth: u32| [depth.to_string(), seconds.clone(), cpus.clone()];
    Ok(match workload {
        Workload::Xz => (0..bench.cpus)
            .map(|_| {
                let null = File::create("/dev/null")?;
                Process::spawn_to_file(
                    "xz",
                    Command::new("xz").args(["-9", "-T1", "-c"]).arg(xz_input),
                    null,
                )
            })
            .collect::<Result<_>>()?,
        Workload::Chain => vec![Process::spawn(
            "deep_recursion (no frame pointers)",
            Command::new(&workloads.deep_recursion_no_fp).args(recursion(CHAIN_DEPTH)),
        )?],
        Workload::FixedWork => vec![Process::spawn(
            "fixed_work",
            Command::new(&workloads.fixed_work)
                .args(["-s", &seconds])
                .arg(&cpus),
        )?],
        Workload::Depth(depth) => vec![Process::spawn(
            "deep_recursion",
            Command::new(&workloads.deep_recursion).args(recursion(depth)),
        )?],
    })
}

/// `bytes` of xorshift noise: xz finds nothing to compress and keeps
/// searching.
fn write_random(path: &Path, bytes: usize) -> Result<()> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut data = Vec::with_capacity(bytes);
    while data.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    let mut file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(&data)?;
    Ok(())
}

/// A whole-host JSON recording while xz runs: the tables of every process.
fn host_tables(bench: &Bench, xz_input: &Path) -> Result<HostTables> {
    let recording = Recording::start(bench, &Options::new(Tool::Stoke, 99, "json"), "tables")?;
    let seconds = bench.settings.unwind_seconds;
    let mut processes = start_workload(bench, Workload::Xz, xz_input, seconds)?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    for process in &mut processes {
        process.signal(libc::SIGKILL);
        process.wait(Duration::from_secs(30))?;
    }
    let stopped = recording.stop()?;
    let summary = stopped.summary()?;
    stopped.remove_output();
    Ok(HostTables::of(&summary.unwind))
}

impl HostTables {
    fn of(unwind: &UnwindSummary) -> Self {
        HostTables {
            files: unwind.files as f64,
            rows: unwind.rows as f64,
            megabytes: unwind.bytes as f64 / 1e6,
            compile_ms: unwind.compile_time * 1e3,
            processes: unwind.processes as f64,
        }
    }
}

/// `stoke tables FILE...`, or [`TablesCommand::Missing`] when this stoke has
/// no such subcommand (its argument parser refuses it).
fn stoke_tables(bench: &Bench, files: &[&str]) -> Result<TablesCommand> {
    let output = Command::new(&bench.stoke)
        .arg("tables")
        .args(files)
        .output()
        .with_context(|| format!("running {} tables", bench.stoke.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(2) && stderr.contains("unrecognized subcommand") {
        return Ok(TablesCommand::Missing);
    }
    ensure!(
        output.status.success(),
        "stoke tables failed ({}): {}",
        output.status,
        stderr.trim()
    );
    let lines = parse_tables(&String::from_utf8_lossy(&output.stdout))?;
    for file in files {
        ensure!(
            lines.iter().any(|line| line.file == *file),
            "stoke tables printed no line for {file}"
        );
    }
    Ok(TablesCommand::Lines(lines))
}

/// `stoke tables`' output: a tab-separated header naming the columns (at
/// least `file`, `rows`, `bytes`, `compile_ms`), a line per file, and a last
/// line whose file is `total`.
fn parse_tables(text: &str) -> Result<Vec<FileTables>> {
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .context("stoke tables printed nothing")?
        .split('\t')
        .map(str::trim)
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|&column| column == name)
            .with_context(|| format!("stoke tables' header has no `{name}` column: {header:?}"))
    };
    let (file, rows, bytes, compile_ms) = (
        column("file")?,
        column("rows")?,
        column("bytes")?,
        column("compile_ms")?,
    );
    let mut parsed = Vec::new();
    for line in lines {
        let cells: Vec<&str> = line.split('\t').map(str::trim).collect();
        let cell = |index: usize| {
            cells
                .get(index)
                .copied()
                .with_context(|| format!("stoke tables: short line {line:?}"))
        };
        let number = |index: usize| -> Result<f64> {
            let text = cell(index)?;
            text.parse()
                .with_context(|| format!("stoke tables: {text:?} is not a number in {line:?}"))
        };
        parsed.push(FileTables {
            file: cell(file)?.to_owned(),
            rows: number(rows)? as u64,
            bytes: number(bytes)? as u64,
            compile_ms: number(compile_ms)?,
        });
    }
    if parsed.last().is_none_or(|line| line.file != "total") {
        bail!("stoke tables' output does not end with a `total` line");
    }
    Ok(parsed)
}

fn section(
    bench: &Bench,
    configs: &[(Workload, Unwinder)],
    runs: &[Vec<Run>],
    host: &[HostTables],
    tables: Option<&[Vec<FileTables>]>,
) -> Section {
    let mut table = Table::new(&[
        "workload",
        "unwinder",
        "sample_cpu µs per sample",
        "user frames per sample",
        "stacks reaching a root",
    ]);
    let mut targets = Vec::new();
    // Per workload and unwinder: median µs per sample and user frames.
    let mut medians: BTreeMap<(String, &str), (f64, f64)> = BTreeMap::new();
    for ((workload, unwinder), runs) in configs.iter().zip(runs) {
        let us: Vec<f64> = runs.iter().filter_map(|r| per_run_us(r.sampler)).collect();
        let frames: Vec<f64> = runs.iter().map(|r| r.user_frames).collect();
        let roots: Vec<f64> = runs.iter().map(|r| r.root_share * 100.0).collect();
        table.row(vec![
            workload.label(),
            unwinder.label().to_owned(),
            stats::show(&us, 2, ""),
            stats::show(&frames, 1, ""),
            stats::show(&roots, 1, "%"),
        ]);
        if let (Some(us), Some(frames)) = (Spread::of(&us), Spread::of(&frames)) {
            medians.insert(
                (workload.label(), unwinder.label()),
                (us.median, frames.median),
            );
        }
    }
    for (workload, unwinder) in configs {
        if *unwinder != Unwinder::Tables || !workload.without_frame_pointers() {
            continue;
        }
        let Some(&(us, frames)) = medians.get(&(workload.label(), unwinder.label())) else {
            continue;
        };
        let (fp, fp_frames) = medians
            .get(&(workload.label(), Unwinder::FramePointers.label()))
            .copied()
            .unwrap_or_default();
        targets.push(Target::judge(
            format!(
                "BPF run time per sample at most {TARGET_US:.0} µs median at typical depth \
                 (table unwinder, {})",
                workload.label()
            ),
            format!("{us:.2} µs at {frames:.0} user frames (frame pointers: {fp:.2} µs at {fp_frames:.0})"),
            us <= TARGET_US,
            || {
                format!(
                    "the frame-pointer unwinder already takes {fp:.2} µs per sample here, \
                     at {fp_frames:.1} user frames: the sampler costs more on this workload \
                     whatever the unwinder; the tables add {:.2} µs for {:.0} more frames, \
                     {:.2} µs per frame",
                    us - fp,
                    frames - fp_frames,
                    (us - fp) / (frames - fp_frames).max(1.0)
                )
            },
        ));
    }
    let per_frame = per_frame_section(&medians, &mut targets);
    let mut body = format!(
        "`stoke record -p <workload> --bpf-stats` at 99 Hz (the per-frame rows below at \
         {per_frame_hz} Hz), every CPU busy with the \
         workload, which starts before stoke (so that stoke compiles the tables of its \
         files, and no other's, as it starts); the sampler's run time per sample is \
         `run_time_ns / run_cnt` over {seconds:.1} s that start {settle:.1} s after stoke \
         does (once the tables are loaded), median (min–max) over {rounds} rounds. The table unwinder (the default) walks `.eh_frame` \
         rows compiled for each file; `--frame-pointers` uses the kernel's \
         `bpf_get_stack` and stops where a function keeps no frame pointer. User frames \
         per sample and the share of stacks reaching a root (a frame in {roots}, as stoke's \
         `Native stacks reaching a root` counts) are of the workload's samples over the \
         whole recording.\n\n{}{per_frame}",
        table.markdown(),
        seconds = bench.settings.unwind_seconds,
        settle = SETTLE.as_secs_f64(),
        per_frame_hz = Workload::Depth(0).frequency(),
        rounds = bench.settings.rounds,
        roots = ROOT_FUNCTIONS
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    body += "\n### Unwind tables\n\n";
    match tables {
        None => {
            body += "Per file: stoke has no `tables` subcommand (`stoke tables FILE...`), \
                         so table sizes per file and compile times are not measured.\n"
        }
        Some(rounds) => {
            let mut per_file = Table::new(&["file", "rows", "MB", "compile ms"]);
            let files: Vec<String> = rounds
                .first()
                .map(|lines| lines.iter().map(|l| l.file.clone()).collect())
                .unwrap_or_default();
            for file in files {
                let lines: Vec<&FileTables> = rounds
                    .iter()
                    .filter_map(|lines| lines.iter().find(|l| l.file == file))
                    .collect();
                let Some(last) = lines.last() else { continue };
                let ms: Vec<f64> = lines.iter().map(|l| l.compile_ms).collect();
                per_file.row(vec![
                    file.clone(),
                    last.rows.to_string(),
                    format!("{:.2}", stats::megabytes(last.bytes as f64)),
                    stats::show(&ms, 1, ""),
                ]);
            }
            body += &format!(
                "Per file, from `stoke tables FILE...` (compile time median (min–max) over \
                 {} rounds, page cache warm):\n\n{}",
                rounds.len(),
                per_file.markdown()
            );
        }
    }
    let value = |f: fn(&HostTables) -> f64| host.iter().map(f).collect::<Vec<_>>();
    body += &format!(
        "\nWhole host (the summary's `Unwind tables` of a {:.1} s whole-host \
         recording while xz runs; every process the recording sampled): {} files, {} rows, \
         {} MB, compiled in {} ms, for {} processes.\n",
        bench.settings.unwind_seconds,
        stats::show(&value(|h| h.files), 0, ""),
        stats::show(&value(|h| h.rows), 0, ""),
        stats::show(&value(|h| h.megabytes), 1, ""),
        stats::show(&value(|h| h.compile_ms), 0, ""),
        stats::show(&value(|h| h.processes), 0, ""),
    );
    Section {
        part: Part::Unwind,
        body,
        targets,
        provenance: String::new(),
    }
}

/// Per frame: each unwinder's time per sample at the two depths, the
/// frames between them, and what each frame costs; with the targets against
/// the frame-pointer walk.
fn per_frame_section(
    medians: &BTreeMap<(String, &str), (f64, f64)>,
    targets: &mut Vec<Target>,
) -> String {
    let [shallow, deep] = PER_FRAME_DEPTHS.map(Workload::Depth);
    let mut table = Table::new(&[
        "unwinder",
        &format!("µs per sample, depth {}", PER_FRAME_DEPTHS[0]),
        &format!("µs per sample, depth {}", PER_FRAME_DEPTHS[1]),
        "more frames",
        "ns per frame",
    ]);
    // Per unwinder: (µs per sample at the shallow depth and its frames, ns
    // per frame).
    let mut costs = BTreeMap::new();
    for unwinder in [Unwinder::Tables, Unwinder::FramePointers] {
        let at = |workload: Workload| medians.get(&(workload.label(), unwinder.label()));
        let (Some(&(shallow_us, shallow_frames)), Some(&(deep_us, deep_frames))) =
            (at(shallow), at(deep))
        else {
            continue;
        };
        let frames = deep_frames - shallow_frames;
        let ns = (deep_us - shallow_us) * 1e3 / frames.max(1.0);
        table.row(vec![
            unwinder.label().to_owned(),
            format!("{shallow_us:.2} ({shallow_frames:.0} user frames)"),
            format!("{deep_us:.2} ({deep_frames:.0} user frames)"),
            format!("{frames:.0}"),
            format!("{ns:.0}"),
        ]);
        costs.insert(unwinder.label(), (shallow_us, shallow_frames, ns));
    }
    let (Some(&(tables_us, frames, tables_ns)), Some(&(fp_us, _, fp_ns))) = (
        costs.get(Unwinder::Tables.label()),
        costs.get(Unwinder::FramePointers.label()),
    ) else {
        return String::new();
    };
    let ratio = tables_ns / fp_ns.max(1.0);
    targets.push(Target::judge(
        format!("table unwinder per frame at most {PER_FRAME_RATIO}× the frame-pointer walk"),
        format!("{tables_ns:.0} ns against {fp_ns:.0} ns ({ratio:.1}×)"),
        ratio <= PER_FRAME_RATIO,
        || {
            format!(
                "{:.0} ns per frame over: a frame is a mapping check, a page of rows \
                 searched and one to three reads of user memory, where the kernel's walk \
                 reads 16 bytes",
                tables_ns - PER_FRAME_RATIO * fp_ns
            )
        },
    ));
    let ratio = tables_us / fp_us.max(0.001);
    targets.push(Target::judge(
        format!(
            "table unwinder per sample at ~{frames:.0} frames at most {PER_SAMPLE_RATIO}× \
             the frame-pointer walk and at most {PER_SAMPLE_US} µs"
        ),
        format!("{tables_us:.2} µs against {fp_us:.2} µs ({ratio:.2}×)"),
        ratio <= PER_SAMPLE_RATIO && tables_us <= PER_SAMPLE_US,
        || {
            if ratio > PER_SAMPLE_RATIO {
                format!("{ratio:.2}× the frame-pointer walk")
            } else {
                format!(
                    "{:.2} µs over, while the frame-pointer walk itself takes {fp_us:.2} µs \
                     per sample on this host",
                    tables_us - PER_SAMPLE_US
                )
            }
        },
    ));
    format!(
        "\n### Per frame\n\n`deep_recursion` built with frame pointers at depths {} and \
         {}, sampled at {} Hz: both unwinders walk the same frames; a frame's cost is the \
         difference in time per sample over the difference in user frames (medians).\n\n{}",
        PER_FRAME_DEPTHS[0],
        PER_FRAME_DEPTHS[1],
        shallow.frequency(),
        table.markdown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stoke_tables_by_header_names() {
        let text = "file\trows\tbytes\tcompile_ms\textra\n\
                    /lib/libc.so.6\t120000\t1920000\t35.5\tx\n\
                    total\t120000\t1920000\t35.5\tx\n";
        let lines = parse_tables(text).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].file, "/lib/libc.so.6");
        assert_eq!((lines[0].rows, lines[0].bytes), (120000, 1920000));
        assert_eq!(lines[1].compile_ms, 35.5);
        assert!(parse_tables("rows\tbytes\n1\t2\n").is_err());
        assert!(parse_tables("file\trows\tbytes\tcompile_ms\na\t1\t2\t3\n").is_err());
    }

    #[test]
    fn roots_by_name() {
        let stack = |frames: &[&str]| Stack {
            comm: "xz".into(),
            pid: 1,
            frames: frames.iter().map(|f| f.to_string()).collect(),
            samples: 1,
        };
        assert!(reaches_root(&stack(&[
            "xz+0x3ac0",
            "__libc_start_call_main",
            "main"
        ])));
        assert!(!reaches_root(&stack(&[
            "[unknown]",
            "liblzma.so.5+0x1692b"
        ])));
    }
}
