//! `cargo xtask bench`: Stoke's overhead, cost, accuracy and scale, measured
//! on this machine side by side with `perf record -a -g`, written to
//! `bench/RESULTS.md` (see `bench/README.md`).
//!
//! Each part is a module; they share the plumbing here: settings, the
//! binaries under test, and [`Bench::measure`], which every measurement goes
//! through. It waits for the host to be quiet first and repeats a
//! measurement during which other processes took CPU, because the machine
//! may be shared and a 0.5% overhead drowns in anyone else's compile.
//! Configurations are interleaved within a round, their order rotated
//! between rounds ([`rotated`]), so slow drift affects them all alike.

mod accuracy;
mod async_profiler;
mod bpf_cost;
mod bpf_stats;
mod build;
mod continuous;
mod cost;
mod events;
mod fuzz;
mod host;
mod html;
mod java;
mod jvm_phases;
mod jvm_share;
mod overhead;
mod process;
mod profiler;
mod python;
mod python_share;
mod report;
mod scale;
mod stacks;
mod stats;
mod timer_interrupt;
mod unwind;

use std::{
    cell::RefCell,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use clap::ValueEnum;

use self::{async_profiler::AsyncProfiler, host::HostInfo};
use super::workspace_root;

/// The parts of the bench, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum Part {
    /// Slowdown of fixed work under each profiler.
    Overhead,
    /// Run time of each BPF program per run, by stack depth.
    Bpf,
    /// Stoke's own CPU, memory and time to output.
    Cost,
    /// Measured against true split of a workload.
    Accuracy,
    /// Many processes and threads, and process churn.
    Scale,
    /// Attach time per JVM, Java frames on the JVM's Java threads.
    Java,
    /// The table unwinder against frame pointers; unwind table sizes.
    Unwind,
    /// The fuzz targets of the parsers of untrusted input, run longer than
    /// CI runs them.
    Fuzz,
    /// `stoke continuous` soaked under churn; one interval of 1,000
    /// processes.
    Continuous,
    /// What recording beyond CPU costs: off-CPU time per context switch
    /// beside perf's, Java allocations beside async-profiler's.
    Events,
    /// Load and first draw of a 100,000-stack HTML flame graph in Chromium.
    Html,
}

impl Part {
    pub const ALL: [Part; 11] = [
        Part::Overhead,
        Part::Bpf,
        Part::Cost,
        Part::Accuracy,
        Part::Scale,
        Part::Java,
        Part::Unwind,
        Part::Fuzz,
        Part::Continuous,
        Part::Events,
        Part::Html,
    ];

    /// The name used by `--parts` and in the report's markers.
    pub fn name(self) -> &'static str {
        match self {
            Part::Overhead => "overhead",
            Part::Bpf => "bpf",
            Part::Cost => "cost",
            Part::Accuracy => "accuracy",
            Part::Scale => "scale",
            Part::Java => "java",
            Part::Unwind => "unwind",
            Part::Fuzz => "fuzz",
            Part::Continuous => "continuous",
            Part::Events => "events",
            Part::Html => "html",
        }
    }

    /// The section heading.
    pub fn title(self) -> String {
        match self {
            Part::Overhead => "1. Overhead".into(),
            Part::Bpf => "2. BPF cost".into(),
            Part::Cost => "3. Stoke's own cost".into(),
            Part::Accuracy => "4. Accuracy".into(),
            Part::Scale => "5. Scale".into(),
            Part::Java => "6. Java".into(),
            Part::Unwind => "7. Unwinding".into(),
            Part::Fuzz => "8. Fuzzing".into(),
            Part::Continuous => "9. Continuous".into(),
            Part::Events => "10. Events beyond CPU".into(),
            Part::Html => "11. HTML flame graph".into(),
        }
    }
}

/// Arguments of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Parts to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Part::ALL)]
    parts: Vec<Part>,
    /// Rounds per part: each configuration is measured once per round
    /// (default 5, at least 5 for a full run; 2 with --smoke).
    #[arg(long)]
    rounds: Option<usize>,
    /// Overhead: seconds the fixed work takes without a profiler (default 3).
    #[arg(long, value_name = "SECONDS")]
    work_seconds: Option<f64>,
    /// Cost: length of each whole-host recording (default 60).
    #[arg(long, value_name = "SECONDS")]
    cost_seconds: Option<f64>,
    /// Scale: length of each recording of the synthetic host (default 8).
    #[arg(long, value_name = "SECONDS")]
    scale_seconds: Option<f64>,
    /// Accuracy: run time of the 70:30 workload (default 3).
    #[arg(long, value_name = "SECONDS")]
    accuracy_seconds: Option<f64>,
    /// BPF cost: run time of each workload (default 1).
    #[arg(long, value_name = "SECONDS")]
    bpf_seconds: Option<f64>,
    /// Java: length of each recording of a JVM (default 2).
    #[arg(long, value_name = "SECONDS")]
    java_seconds: Option<f64>,
    /// Unwind: length of each recording of a workload (default 3).
    #[arg(long, value_name = "SECONDS")]
    unwind_seconds: Option<f64>,
    /// Fuzz: seconds per fuzz target (default 180).
    #[arg(long, value_name = "SECONDS")]
    fuzz_seconds: Option<f64>,
    /// Continuous: minutes of the soak of `stoke continuous` (default 10;
    /// 0.5 with --smoke).
    #[arg(long, value_name = "MINUTES")]
    soak_minutes: Option<f64>,
    /// A quick check that every part works (seconds, 2 rounds), for CI:
    /// writes target/bench/RESULTS-smoke.md unless --output says otherwise.
    #[arg(long)]
    smoke: bool,
    /// Where to write the results (default bench/RESULTS.md).
    #[arg(long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Measure this stoke binary instead of building the working tree's
    /// (e.g. a release build, or a clean build of a commit while the tree
    /// has work in progress).
    #[arg(long, value_name = "PATH")]
    stoke: Option<PathBuf>,
    /// async-profiler's directory, built from its source outside this tree
    /// (tag v4.5, `make` with JAVA_HOME at JDK 17): adds its rows beside
    /// stoke's on the Java workload. Without it they say "not measured".
    #[arg(long, value_name = "DIR")]
    async_profiler: Option<PathBuf>,
}

/// The durations and counts a run uses, from the arguments and defaults.
#[derive(Debug, Clone)]
pub struct Settings {
    pub smoke: bool,
    pub rounds: usize,
    pub work_seconds: f64,
    pub cost_seconds: f64,
    pub scale_seconds: f64,
    pub accuracy_seconds: f64,
    pub bpf_seconds: f64,
    pub java_seconds: f64,
    pub unwind_seconds: f64,
    pub fuzz_seconds: f64,
    pub soak_minutes: f64,
    /// Cost: length of the recordings whose symbolization is timed with
    /// cold and warm page caches.
    pub symbolize_seconds: f64,
    /// Seconds the Java workload warms up (JIT) before its clock starts.
    pub java_warmup_seconds: f64,
    /// Longest wait for the host to become quiet before a measurement
    /// (zero: no wait, nor a look).
    pub quiet_wait: Duration,
    /// How often a disturbed measurement is tried in all.
    pub attempts: usize,
}

/// A full run needs this many rounds for its medians and ranges to mean
/// something.
const MIN_ROUNDS: usize = 5;

/// Other processes may use this share of one CPU during a measurement
/// before it counts as disturbed (the idle host's own daemons use ~1%).
const DISTURBED: f64 = 0.03;

impl Settings {
    fn from_args(args: &BenchArgs) -> Result<Self> {
        let smoke = args.smoke;
        let pick = |value: Option<f64>, full: f64, quick: f64, name: &str| -> Result<f64> {
            let value = value.unwrap_or(if smoke { quick } else { full });
            ensure!(
                value > 0.0 && value.is_finite(),
                "--{name} must be a positive number of seconds"
            );
            Ok(value)
        };
        let rounds = args.rounds.unwrap_or(if smoke { 2 } else { MIN_ROUNDS });
        ensure!(rounds >= 1, "--rounds must be at least 1");
        if !smoke && rounds < MIN_ROUNDS {
            bail!("a full run needs --rounds {MIN_ROUNDS} or more (or --smoke for a quick check)");
        }
        Ok(Self {
            smoke,
            rounds,
            work_seconds: pick(args.work_seconds, 3.0, 0.4, "work-seconds")?,
            cost_seconds: pick(args.cost_seconds, 60.0, 2.0, "cost-seconds")?,
            scale_seconds: pick(args.scale_seconds, 8.0, 2.0, "scale-seconds")?,
            accuracy_seconds: pick(args.accuracy_seconds, 3.0, 1.0, "accuracy-seconds")?,
            bpf_seconds: pick(args.bpf_seconds, 1.0, 0.5, "bpf-seconds")?,
            java_seconds: pick(args.java_seconds, 2.0, 1.0, "java-seconds")?,
            unwind_seconds: pick(args.unwind_seconds, 3.0, 1.0, "unwind-seconds")?,
            fuzz_seconds: pick(args.fuzz_seconds, 180.0, 2.0, "fuzz-seconds")?,
            // Minutes, not seconds: the message of `pick` would misname them.
            soak_minutes: {
                let minutes = args.soak_minutes.unwrap_or(if smoke { 0.5 } else { 10.0 });
                ensure!(
                    minutes > 0.0 && minutes.is_finite(),
                    "--soak-minutes must be a positive number of minutes"
                );
                minutes
            },
            symbolize_seconds: if smoke { 0.5 } else { 2.0 },
            // Less leaves the JIT compiling in the timed part: ±7% noise.
            java_warmup_seconds: if smoke { 0.3 } else { 3.0 },
            // A smoke run checks that the bench works, whatever the noise.
            quiet_wait: Duration::from_secs(if smoke { 0 } else { 300 }),
            attempts: if smoke { 1 } else { 3 },
        })
    }
}

/// The compiled workloads.
pub struct Workloads {
    pub fixed_work: PathBuf,
    pub deep_recursion: PathBuf,
    /// `deep_recursion` built without frame pointers.
    pub deep_recursion_no_fp: PathBuf,
    pub scale_host: PathBuf,
    pub spawner: PathBuf,
    pub short_lived: PathBuf,
    /// The directory of the compiled Java workload, if there is a JDK.
    pub java_fixed_work: Option<PathBuf>,
    pub fp_split: PathBuf,
    /// The tests' CPU burner: the work of the soak's containers.
    pub busy_other: PathBuf,
    /// Two threads passing a byte back and forth: the off-CPU part's.
    pub switch_storm: PathBuf,
    /// Page faults in a loop: the perf counters' row.
    pub fault_storm: PathBuf,
}

/// A measurement's value and how much other processes disturbed it.
pub struct Measured<T> {
    pub value: T,
    /// The share of one CPU that other processes used while it ran.
    pub foreign: f64,
}

impl<T> Measured<T> {
    /// Whether other processes disturbed it even on its last try.
    pub fn disturbed(&self) -> bool {
        self.foreign > DISTURBED
    }
}

/// How much other processes disturbed the measurements of a part.
#[derive(Default)]
struct Disturbance {
    measurements: usize,
    repeated: usize,
    worst_kept: f64,
    waited: Duration,
}

/// Everything the parts share.
pub struct Bench {
    pub settings: Settings,
    /// A copy of the stoke binary under test (another build in the same
    /// tree cannot replace it mid-run).
    pub stoke: PathBuf,
    pub workloads: Workloads,
    /// The JVM profiler to compare with, when given.
    pub async_profiler: Option<AsyncProfiler>,
    pub cpus: usize,
    scratch_dir: PathBuf,
    disturbance: RefCell<Disturbance>,
}

impl Bench {
    /// A path in the scratch directory (target/bench/run).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.scratch_dir.join(name)
    }

    /// A progress line on stderr.
    pub fn log(&self, message: &str) {
        eprintln!("bench: {message}");
    }

    /// Runs one measurement: waits for the host to be quiet, runs `run`
    /// (which must reap every process it starts), and repeats it, up to
    /// `settings.attempts` times in all, while other processes took more
    /// than [`DISTURBED`] of a CPU during it. Keeps the least disturbed try.
    pub fn measure<T>(
        &self,
        what: &str,
        mut run: impl FnMut() -> Result<T>,
    ) -> Result<Measured<T>> {
        let mut best: Option<Measured<T>> = None;
        for attempt in 1..=self.settings.attempts {
            if !self.settings.quiet_wait.is_zero() {
                let (waited, _) = host::wait_quiet(DISTURBED, self.settings.quiet_wait)?;
                self.disturbance.borrow_mut().waited += waited;
            }
            let probe = host::LoadProbe::start()?;
            let value = run().with_context(|| what.to_owned())?;
            let foreign = probe.foreign()?;
            let disturbed = foreign > DISTURBED;
            if disturbed {
                let next = if attempt < self.settings.attempts {
                    self.disturbance.borrow_mut().repeated += 1;
                    "measuring again"
                } else {
                    "keeping the least disturbed try"
                };
                self.log(&format!(
                    "{what}: other processes used {:.1}% of a CPU meanwhile; {next}",
                    foreign * 100.0
                ));
            }
            if best.as_ref().is_none_or(|kept| foreign < kept.foreign) {
                best = Some(Measured { value, foreign });
            }
            if !disturbed {
                break;
            }
        }
        let best = best.expect("at least one attempt");
        let mut disturbance = self.disturbance.borrow_mut();
        disturbance.measurements += 1;
        disturbance.worst_kept = disturbance.worst_kept.max(best.foreign);
        Ok(best)
    }

    /// A sentence on how quiet the host was during the part, for its section.
    fn take_disturbance(&self) -> String {
        let disturbance = std::mem::take(&mut *self.disturbance.borrow_mut());
        format!(
            "Host: {} measurements; {} repeated because other processes took CPU; \
             in those kept, other processes used at most {:.1}% of a CPU \
             (waited {:.0} s in all for the host to be quiet).",
            disturbance.measurements,
            disturbance.repeated,
            disturbance.worst_kept * 100.0,
            disturbance.waited.as_secs_f64()
        )
    }
}

/// `items` rotated left by `round`: round 0 runs A B C, round 1 B C A, ...
pub fn rotated<T: Clone>(items: &[T], round: usize) -> Vec<T> {
    let mut order = items.to_vec();
    if !order.is_empty() {
        let shift = round % order.len();
        order.rotate_left(shift);
    }
    order
}

/// `cargo xtask bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the bench loads BPF programs and runs perf -a: run `cargo xtask bench` as root");
    }
    let settings = Settings::from_args(args)?;
    let root = workspace_root();
    let output = args.output.clone().unwrap_or_else(|| {
        if settings.smoke {
            root.join("target/bench/RESULTS-smoke.md")
        } else {
            root.join("bench/RESULTS.md")
        }
    });
    let mut parts: Vec<Part> = Vec::new();
    for part in &args.parts {
        if !parts.contains(part) {
            parts.push(*part);
        }
    }

    // A directory per kind of run, locked: a smoke run (CI in this tree)
    // and a full run do not share files, and two of a kind take turns.
    let bench_dir = root.join(if settings.smoke {
        "target/bench/smoke"
    } else {
        "target/bench/full"
    });
    fs::create_dir_all(&bench_dir).with_context(|| format!("creating {}", bench_dir.display()))?;
    let _lock = lock(&bench_dir)?;
    let scratch_dir = bench_dir.join("run");
    // Leftovers of an interrupted run (perf.data files) are not wanted.
    let _ = fs::remove_dir_all(&scratch_dir);
    fs::create_dir_all(&scratch_dir)
        .with_context(|| format!("creating {}", scratch_dir.display()))?;
    let stoke = match &args.stoke {
        Some(given) => fs::canonicalize(given)
            .with_context(|| format!("--stoke {}: no such file", given.display()))?,
        None => build::stoke(&root, &bench_dir)?,
    };
    let workloads = build::workloads(&root, &bench_dir.join("bin"))?;
    build::check_perf()?;
    let async_profiler = args
        .async_profiler
        .as_deref()
        .map(AsyncProfiler::find)
        .transpose()?;

    let bench = Bench {
        settings,
        stoke,
        workloads,
        async_profiler,
        cpus: host::online_cpus(),
        scratch_dir: scratch_dir.clone(),
        disturbance: RefCell::default(),
    };
    let mut host = HostInfo::gather(args.stoke.is_some().then_some(bench.stoke.as_path()));
    let command = command_line();
    let started = Instant::now();
    let mut sections = Vec::new();
    for part in parts.iter().copied() {
        bench.log(&format!("{} ...", part.title()));
        let part_started = Instant::now();
        let part_date = host::utc_now();
        let mut section = match part {
            Part::Overhead => overhead::run(&bench)?,
            Part::Bpf => bpf_cost::run(&bench)?,
            Part::Cost => cost::run(&bench)?,
            Part::Accuracy => accuracy::run(&bench)?,
            Part::Scale => scale::run(&bench)?,
            Part::Java => java::run(&bench)?,
            Part::Unwind => unwind::run(&bench)?,
            Part::Fuzz => fuzz::run(&bench)?,
            Part::Continuous => continuous::run(&bench)?,
            Part::Events => events::run(&bench)?,
            Part::Html => html::run(&bench)?,
        };
        // Fuzzing measures no time against other processes, and the soak
        // only stoke's own CPU and memory: neither in rounds.
        let rounds = if matches!(part, Part::Fuzz | Part::Continuous) {
            String::new()
        } else {
            section.body = format!(
                "{}\n\n{}\n",
                section.body.trim_end(),
                bench.take_disturbance()
            );
            format!(", {} rounds", bench.settings.rounds)
        };
        section.provenance = format!(
            "Measured {} on stoke {}{rounds}, in {:.1} min (`{command}`).",
            part_date,
            host.commit,
            part_started.elapsed().as_secs_f64() / 60.0
        );
        sections.push(section);
        // Written after every part, so that an interrupted run keeps the
        // parts it finished (beside the file's earlier sections).
        host.date = host::utc_now();
        report::write(&output, &host, &sections, true, bench.settings.smoke)?;
    }
    // A run of every part leaves nothing of earlier runs.
    let all_parts = Part::ALL.iter().all(|part| parts.contains(part));
    report::write(&output, &host, &sections, !all_parts, bench.settings.smoke)?;
    let _ = fs::remove_dir_all(&scratch_dir);
    bench.log(&format!(
        "wrote {} in {:.1} min",
        display_relative(&output, &root),
        started.elapsed().as_secs_f64() / 60.0
    ));
    Ok(())
}

/// Holds `dir/lock` (flock) until dropped; waits while another bench holds it.
fn lock(dir: &Path) -> Result<fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("lock");
    let file = fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        eprintln!(
            "bench: another `cargo xtask bench` uses {}: waiting for it to finish",
            dir.display()
        );
        // SAFETY: as above; blocking this time.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).context("locking the bench directory");
        }
    }
    Ok(file)
}

/// The command that was run, for the report: `cargo xtask bench ...`.
fn command_line() -> String {
    let words: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", words.join(" "))
}

fn display_relative(path: &Path, root: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_shifts_the_order_each_round() {
        assert_eq!(rotated(&[1, 2, 3], 0), [1, 2, 3]);
        assert_eq!(rotated(&[1, 2, 3], 1), [2, 3, 1]);
        assert_eq!(rotated(&[1, 2, 3], 4), [2, 3, 1]);
    }

    fn args(extra: &[&str]) -> BenchArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let words = std::iter::once("bench").chain(extra.iter().copied());
        Cli::parse_from(words).bench
    }

    #[test]
    fn defaults_and_limits() {
        let full = Settings::from_args(&args(&[])).unwrap();
        assert_eq!((full.rounds, full.cost_seconds), (5, 60.0));
        assert!(!full.smoke);
        let smoke = Settings::from_args(&args(&["--smoke"])).unwrap();
        assert_eq!(smoke.rounds, 2);
        assert!(smoke.cost_seconds < 10.0);
        assert!(Settings::from_args(&args(&["--rounds", "3"])).is_err());
        assert!(Settings::from_args(&args(&["--work-seconds", "0"])).is_err());
        let parts = args(&["--parts", "cost,scale"]).parts;
        assert_eq!(parts, [Part::Cost, Part::Scale]);
        assert_eq!(args(&[]).parts, Part::ALL);
        assert_eq!((full.soak_minutes, smoke.soak_minutes), (10.0, 0.5));
        assert!(Settings::from_args(&args(&["--soak-minutes", "0"])).is_err());
    }
}
