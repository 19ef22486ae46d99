//! Command-line interface.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::{
    aggregate::GroupBy,
    duration,
    event::Event,
    export::ExportArgs,
    model::FrameFilter,
    write::{Format, GraphOptions},
};

/// Stoke: a system-wide CPU profiler. Samples every CPU with eBPF and shows
/// kernel and native frames merged into one stack, for every process.
#[derive(Debug, Parser)]
#[command(name = "stoke", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Stoke's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sample CPUs and write a profile.
    Record(RecordArgs),
    /// Sample CPUs until stopped, and every interval hand one profile per
    /// service to Pyroscope or to a directory.
    Continuous(ContinuousArgs),
    /// Record the host for a while and write an incident report: one HTML
    /// file with CPU by container and by process, the flame graph, the
    /// hottest functions, recording quality, and what changed against a
    /// baseline.
    Report(ReportArgs),
    /// Write a folded file (from Stoke or any tool that writes collapsed
    /// stacks) or a pprof profile as any output format, e.g. an HTML or SVG
    /// flame graph.
    Convert(ConvertArgs),
    /// Compare two profiles (folded or pprof files): a differential flame
    /// graph (.html) or both counts per stack (.folded), BEFORE scaled to
    /// AFTER's total samples.
    Diff(DiffArgs),
    /// Write the embedded JVM agent to a file, for `-agentpath:` at JVM
    /// startup.
    Agent {
        /// Where to write `libstoke_agent.so`.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
    },
    /// Compile ELF files' unwind tables as `stoke record` does, and print
    /// their cost.
    ///
    /// Separate debug files are looked up as a recording looks them up, by
    /// build ID and `.gnu_debuglink`, on this host. Prints a header, then one tab-separated line per file: `file`,
    /// `rows`, `bytes` (what the rows take in the BPF map), `compile_ms`
    /// (reading and compiling), FDE counts, unsupported rows and the debug
    /// file read (`-` if none); then a `total` line. A file that cannot be
    /// read or is no x86_64 ELF file gets a `stoke: error:` line on stderr
    /// instead; the other files are still listed, and stoke exits with
    /// status 1.
    Tables(TablesArgs),
    /// List the events -e takes, and whether this host has each: a counter
    /// the CPU or kernel does not count says why.
    List,
    /// Run one attach-protocol command in a running HotSpot JVM, as jattach
    /// does, and print its answer.
    ///
    /// Attaches as `stoke record` does (in containers too, as the JVM's
    /// user, without signalling a process that is not a ready JVM). Commands
    /// include `properties`, `threaddump`, `jcmd` (with one argument, e.g.
    /// `"VM.flags -all"`) and `load PATH true [OPTIONS]`, whose agent
    /// must return 0. A failure is one `stoke: error:` line, exit status 1.
    Attach(AttachArgs),
}

/// Arguments of `stoke attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The JVM's pid, as this host sees it.
    #[arg(value_name = "PID")]
    pub pid: u32,

    /// The attach command.
    #[arg(value_name = "COMMAND", default_value = "properties")]
    pub command: String,

    /// The command's arguments (at most 3).
    #[arg(
        value_name = "ARG",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub args: Vec<String>,

    /// Instead of a command, copy FILE (a library on this host) into the
    /// JVM's /tmp as stoke installs its agent there (as the JVM's user, never
    /// overwriting another file), and print its path as the JVM sees it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["command", "args"])]
    pub install: Option<PathBuf>,

    /// How long the JVM gets to connect, then to answer.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = duration::parse)]
    pub timeout: Duration,
}

/// Arguments of `stoke tables`.
#[derive(Debug, Args)]
pub struct TablesArgs {
    /// ELF files (executables, shared libraries).
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
}

/// What to sample and how: the arguments `stoke record` and `stoke
/// continuous` share.
#[derive(Debug, Args)]
pub struct SamplingArgs {
    /// Profile the whole host (the default).
    #[arg(short = 'a', long = "all", conflicts_with = "pids")]
    pub all: bool,

    /// Profile only these processes (comma-separated pids), sampled by
    /// events on their threads: no other CPU is interrupted.
    #[arg(short = 'p', long = "pid", value_delimiter = ',', value_name = "PID")]
    pub pids: Vec<u32>,

    /// Samples per second on each CPU (with `-p`, per second of each
    /// thread's CPU time).
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = 99)]
    pub frequency: u64,

    /// What to count (comma-separated or repeated): cpu (samples), offcpu
    /// (nanoseconds off the CPU), wall (nanoseconds of every thread, running
    /// or not), runqueue (nanoseconds runnable but not running), alloc (Java
    /// bytes allocated), lock (Java
    /// nanoseconds waited), or a perf counter event by its perf name
    /// (page-faults, context-switches, cycles, cache-misses...; `stoke
    /// list` shows the events this host has), sampled at -F or every
    /// --period events. One profile per event; with several, each output
    /// file gets the event's name before its extension (stoke.offcpu.svg).
    #[arg(
        short = 'e',
        long = "event",
        value_parser = Event::parse,
        value_delimiter = ',',
        value_name = "EVENT",
        default_value = "cpu"
    )]
    pub events: Vec<Event>,

    /// Sample perf counter events every N events (each sample weighs N)
    /// instead of about -F times a second on each CPU.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub period: Option<u64>,

    /// With -e offcpu, the shortest wait counted, in nanoseconds. The
    /// default, 100 µs, keeps the waits on disks, networks and timers,
    /// and leaves out the microsecond hand-offs of context-switch storms
    /// before any stack is taken.
    #[arg(long, value_name = "NS", default_value_t = 100_000)]
    pub offcpu_min: u64,

    /// Add a frame for the thread under each process frame.
    #[arg(short = 't', long = "threads")]
    pub threads: bool,

    /// What frame goes above each process frame: its container (the
    /// default; host processes get none), its service (Kubernetes
    /// namespace/container, container name or systemd unit), or none.
    #[arg(long, value_enum, value_name = "GROUP", default_value_t = GroupBy::Container)]
    pub group_by: GroupBy,

    /// Add the source file and line to frames: `(file.c:LINE)` to native
    /// frames with debug info, with inlined functions as frames of their
    /// own, and `(File.java:LINE)` to Java frames.
    #[arg(long)]
    pub lines: bool,

    /// Keep samples of idle CPUs (the kernel's idle task, pid 0).
    #[arg(long)]
    pub idle: bool,

    /// Walk user stacks by frame pointers only, without compiling
    /// `.eh_frame` unwind tables: less memory and CPU, shorter stacks in
    /// code built without frame pointers.
    #[arg(long)]
    pub frame_pointers: bool,

    /// Leave JVMs alone: no agent, native stacks only.
    #[arg(long)]
    pub no_jvm: bool,

    /// Native stacks only for Python processes: their Python frames are
    /// not read.
    #[arg(long)]
    pub no_python: bool,

    /// Have the agent retransform (unchanged) the classes of Java methods
    /// compiled before it came, whose stacks stop at the innermost method:
    /// HotSpot then recompiles them with the debug information that whole
    /// stacks need. Deoptimizes that code for a moment: off by default.
    #[arg(long)]
    pub java_retransform: bool,

    /// With `-e alloc`: the mean bytes a JVM allocates between two sampled
    /// allocations (HotSpot's heap sampling interval; at least 1024).
    #[arg(long, value_name = "BYTES", default_value_t = 512 << 10, value_parser = parse_alloc_interval)]
    pub alloc_interval: u64,

    /// With `-e lock`: the shortest wait for a contended Java monitor or
    /// java.util.concurrent lock that is recorded, in nanoseconds.
    #[arg(long, value_name = "NS", default_value_t = 10_000)]
    pub lock_threshold: u64,

    /// Measure the BPF sampler's own run time per sample and report it (turns
    /// on the kernel's BPF statistics, for every BPF program, while recording).
    #[arg(long)]
    pub bpf_stats: bool,

    /// Load the BPF programs of kernels without bpf_loop (before 5.17)
    /// whatever the kernel: tests and the bench compare them on one kernel.
    #[arg(long, hide = true)]
    pub legacy_bpf: bool,
}

/// Arguments of `stoke record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// What to sample and how.
    #[command(flatten)]
    pub sampling: SamplingArgs,

    /// Stop after this many seconds (fractions allowed); without it, record
    /// until Ctrl-C or SIGTERM.
    #[arg(short = 'd', long = "duration", value_name = "SECONDS", value_parser = duration::parse)]
    pub duration: Option<Duration>,

    /// Where to write the profile; its extension picks the format (.svg,
    /// .html, .folded, .txt, .json, .pb.gz, .jfr). Give it several times to write
    /// several files from one recording.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "stoke.svg"
    )]
    pub outputs: Vec<PathBuf>,

    /// Output format, overriding the extension of a single -o.
    #[arg(long, value_enum)]
    pub format: Option<Format>,

    /// Which frames to keep and how to draw flame graphs.
    #[command(flatten)]
    pub view: ViewArgs,
}

/// Which frames outputs keep, and how flame graphs are drawn.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Keep only user frames: a sample in the kernel counts in the user
    /// function that entered it.
    #[arg(long, conflicts_with = "all_kernel")]
    pub all_user: bool,

    /// Keep only kernel frames (`_[k]`), under the process and thread
    /// frames: a sample in user code counts in those alone.
    #[arg(long)]
    pub all_kernel: bool,

    /// The title of SVG and HTML flame graphs.
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,

    /// Leave out of SVG and HTML flame graphs the frames narrower than this
    /// percent of the graph's width.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent, default_value = "0")]
    pub minwidth: f64,

    /// Draw SVG and HTML flame graphs reversed: each leaf function a root,
    /// its callers below it, top down (an icicle graph).
    #[arg(long)]
    pub reverse: bool,
}

impl ViewArgs {
    /// The frames `--all-user` or `--all-kernel` keep, if either is given.
    pub fn frame_filter(&self) -> Option<FrameFilter> {
        match (self.all_user, self.all_kernel) {
            (true, _) => Some(FrameFilter::User),
            (_, true) => Some(FrameFilter::Kernel),
            _ => None,
        }
    }

    /// How flame graphs are drawn.
    pub fn graph(&self) -> GraphOptions {
        GraphOptions {
            title: self.title.clone(),
            min_width: self.minwidth,
            reverse: self.reverse,
        }
    }
}

/// Arguments of `stoke report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// What to sample and how.
    #[command(flatten)]
    pub sampling: SamplingArgs,

    /// How long to record (fractions allowed).
    #[arg(short = 'd', long = "duration", value_name = "SECONDS", value_parser = duration::parse, default_value = "10")]
    pub duration: Duration,

    /// A profile of the host when healthy (folded stacks from Stoke or any
    /// tool, or pprof): the report adds the functions whose share of the
    /// CPU changed most.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// Where to write the report (HTML).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "stoke-report.html"
    )]
    pub output: PathBuf,
}

/// Arguments of `stoke convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The profile: a folded file (`root;...;leaf COUNT` lines) or a
    /// gzipped pprof profile.
    #[arg(value_name = "IN")]
    pub input: PathBuf,

    /// Where to write it; its extension picks the format (.svg, .html,
    /// .folded, .txt, .json, .pb.gz, .jfr). Give it several times for several
    /// files.
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true)]
    pub outputs: Vec<PathBuf>,

    /// Output format, overriding the extension of a single -o.
    #[arg(long, value_enum)]
    pub format: Option<Format>,

    /// Which frames to keep and how to draw flame graphs.
    #[command(flatten)]
    pub view: ViewArgs,
}

/// Arguments of `stoke diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The profile before: folded or pprof (.pb.gz).
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,

    /// The profile after: folded or pprof (.pb.gz).
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,

    /// Where to write the comparison: FILE.html (a differential flame
    /// graph) or FILE.folded (`stack BEFORE AFTER` lines). Give it several
    /// times for several files.
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true)]
    pub outputs: Vec<PathBuf>,

    /// Output format, overriding the extension of a single -o.
    #[arg(long, value_enum)]
    pub format: Option<DiffFormat>,
}

/// What `stoke diff` writes: of the formats, the two that can show two
/// profiles' counts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffFormat {
    /// A differential flame graph page.
    Html,
    /// `stack BEFORE AFTER` lines, as difffolded.pl writes them.
    Folded,
}

impl From<DiffFormat> for Format {
    fn from(format: DiffFormat) -> Self {
        match format {
            DiffFormat::Html => Self::Html,
            DiffFormat::Folded => Self::Folded,
        }
    }
}

/// Arguments of `stoke continuous`.
#[derive(Debug, Args)]
pub struct ContinuousArgs {
    /// What to sample and how.
    #[command(flatten)]
    pub sampling: SamplingArgs,

    /// Seconds between two profiles (fractions allowed).
    #[arg(long, value_name = "SECONDS", value_parser = duration::parse, default_value = "10")]
    pub interval: Duration,

    /// What names the service each profile is of.
    #[arg(long, value_enum, value_name = "FROM", default_value_t = ServiceFrom::Auto)]
    pub service_from: ServiceFrom,

    /// Where the profiles go.
    #[command(flatten)]
    pub export: ExportArgs,

    /// Serve stoke's own counters (samples, losses, unwinding, JVMs
    /// attached, deliveries, CPU and memory) to Prometheus on
    /// http://ADDR/metrics, updated at each interval's end, e.g.
    /// 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_addr: Option<String>,
}

/// What names a process's service in `stoke continuous`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceFrom {
    /// The Kubernetes namespace/container, else the container's name, else
    /// the systemd unit, else the process name.
    Auto,
    /// The Kubernetes namespace/workload (Deployment, StatefulSet...: the
    /// pod's name less what its controller added), else the container's
    /// name, else the process name.
    Workload,
    /// The container's name, else the process name.
    Container,
    /// The systemd unit, else the process name.
    Unit,
    /// The process name.
    Comm,
}

/// An allocation sampling interval: bytes, at least 1024 (a smaller one
/// would make the JVM report nearly every object).
fn parse_alloc_interval(text: &str) -> Result<u64, String> {
    let bytes: u64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of bytes"))?;
    if bytes < 1024 {
        return Err(format!(
            "{bytes} bytes is too small: sampling that often would slow the JVM; give at least 1024"
        ));
    }
    Ok(bytes)
}

fn parse_percent(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(percent) if (0.0..=100.0).contains(&percent) => Ok(percent),
        _ => Err(format!("'{text}' is not a percentage between 0 and 100")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_split_on_commas_and_exclude_all() {
        let cli = Cli::try_parse_from(["stoke", "record", "-p", "1,22,333"]).unwrap();
        let Command::Record(args) = cli.command else {
            panic!("not a recording")
        };
        assert_eq!(args.sampling.pids, [1, 22, 333]);
        assert_eq!(args.outputs, [PathBuf::from("stoke.svg")]);
        assert!(Cli::try_parse_from(["stoke", "record", "-a", "-p", "1"]).is_err());
    }

    #[test]
    fn outputs_replace_the_default_and_add_up() {
        let cli =
            Cli::try_parse_from(["stoke", "record", "-o", "a.svg", "--output", "b.pb.gz"]).unwrap();
        let Command::Record(args) = cli.command else {
            panic!("not a recording")
        };
        assert_eq!(args.outputs, [PathBuf::from("a.svg"), "b.pb.gz".into()]);
    }

    #[test]
    fn convert_and_diff_need_their_inputs_and_an_output() {
        let parse = |line: &[&str]| Cli::try_parse_from(line).map(|cli| cli.command);
        assert!(matches!(
            parse(&["stoke", "convert", "a.folded", "-o", "a.html"]),
            Ok(Command::Convert(_))
        ));
        assert!(parse(&["stoke", "convert", "a.folded"]).is_err());
        let Ok(Command::Diff(args)) = parse(&["stoke", "diff", "a", "b", "-o", "d.html"]) else {
            panic!("not a diff")
        };
        assert_eq!((args.before, args.after), ("a".into(), "b".into()));
        assert!(parse(&["stoke", "diff", "a", "-o", "d.html"]).is_err());
    }

    #[test]
    fn attach_takes_a_command_with_arguments_or_a_file_to_install() {
        let parse = |line: &[&str]| match Cli::try_parse_from(line).map(|cli| cli.command) {
            Ok(Command::Attach(args)) => Some(args),
            _ => None,
        };
        let args = parse(&["stoke", "attach", "42"]).unwrap();
        assert_eq!((args.pid, args.command.as_str()), (42, "properties"));
        let args = parse(&["stoke", "attach", "42", "jcmd", "VM.flags", "-all"]).unwrap();
        assert_eq!(
            (args.command.as_str(), &args.args[..]),
            ("jcmd", &["VM.flags".to_owned(), "-all".to_owned()][..])
        );
        let args = parse(&["stoke", "attach", "--install", "a.so", "42"]).unwrap();
        assert_eq!(args.install, Some(PathBuf::from("a.so")));
        assert!(parse(&["stoke", "attach", "--install", "a.so", "42", "properties"]).is_none());
        assert!(parse(&["stoke", "attach", "not-a-pid"]).is_none());
    }
}
