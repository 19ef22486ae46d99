//! How a recording went: the counts and settings each stage reports, which
//! the summary writers and `stoke report` read.

use std::{
    collections::BTreeMap,
    time::{Duration, SystemTime},
};

use serde::{Serialize, Serializer};

/// Counts and settings of a recording, for the reader of its output.
/// Durations are written as seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecordingSummary {
    /// How long samples were taken.
    #[serde(serialize_with = "seconds")]
    pub duration: Duration,
    /// When samples began to be taken, if known.
    #[serde(skip)]
    pub started: Option<SystemTime>,
    /// The sampling frequency asked for, per CPU.
    pub frequency_hz: u64,
    /// CPUs sampled.
    pub cpus: usize,
    /// Samples in the profile.
    pub samples: u64,
    /// Samples dropped because the ring buffer to userspace was full.
    pub lost_ring_full: u64,
    /// Ring records that did not parse, each a sample lost.
    pub malformed_records: u64,
    /// Samples whose kernel stack could not be read (kept, without it).
    pub partial_kernel_stacks: u64,
    /// Samples whose user stack could not be read (kept, without it).
    pub partial_user_stacks: u64,
    /// Exec/exit notices dropped; samples after one may be misattributed.
    pub lost_lifecycle_records: u64,
    /// Samples of idle CPUs, left out unless `--idle` was given.
    pub idle_skipped: u64,
    /// Off-CPU waits long enough to count but left out because their CPU
    /// had sent its budget of off-CPU records that second.
    pub over_budget: u64,
    /// Off-CPU waits still going on when the recording ended, counted
    /// until then, with their kernel stack and one user address.
    pub waits_in_progress: u64,
    /// How the user stacks of off-CPU waits were taken, if recorded.
    pub offcpu_user_stacks: Option<OffCpuUserStacks>,
    /// What an older kernel kept the recording from, if anything.
    pub kernel_limits: Option<String>,
    /// Process images sampled (an exec starts a new one).
    pub processes: usize,
    /// Mean run time of the BPF sampler per sample, when the kernel's BPF
    /// statistics were on (`--bpf-stats` or `kernel.bpf_stats_enabled`).
    #[serde(serialize_with = "optional_seconds")]
    pub bpf_time_per_sample: Option<Duration>,
    /// Most JVM threads sampled at once by perf events of their own, whose
    /// SIGTRAP asks for the Java stack with no inter-processor interrupt.
    pub timed_threads: usize,
    /// Distinct addresses named after the recording.
    pub symbolized_addresses: usize,
    /// How long naming them took.
    #[serde(serialize_with = "seconds")]
    pub symbolize_time: Duration,
    /// How Java profiling went.
    pub java: JavaSummary,
    /// How Python profiling went.
    pub python: PythonSummary,
    /// What loading unwind tables cost.
    pub unwind: UnwindSummary,
    /// How far user stacks got.
    pub stack_quality: StackQuality,
}

/// How far native user stacks got (samples with Java frames left out: their
/// native part ends at the first Java frame by design).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StackQuality {
    /// Samples with a native user stack.
    pub samples: u64,
    /// Of those, the ones whose outermost frame is a process or thread
    /// start: marked so by the unwind tables, or named `_start`,
    /// `__libc_start_main`, `start_thread`, `clone3`...
    pub reached_root: u64,
    /// The others, by why the unwinder stopped.
    pub truncated: BTreeMap<&'static str, u64>,
}

/// How Java profiling went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JavaSummary {
    /// JVMs whose agent answered.
    pub jvms: usize,
    /// Time each attach took, in milliseconds, by JVM pid, slowest first.
    pub attach_ms: Vec<(u32, u64)>,
    /// Why each JVM whose agent did not answer keeps native stacks only,
    /// by pid (the first ones).
    pub not_attached: Vec<(u32, String)>,
    /// `--no-jvm`: no JVM was asked.
    pub disabled: bool,
    /// For each JVM started during the recording, the milliseconds from
    /// its start to its first sample with Java frames, by JVM pid.
    pub java_after_start_ms: Vec<(u32, u64)>,
    /// Samples of JVM threads with Java frames.
    pub java_samples: u64,
    /// Samples of JVM threads that run no Java (GC, compiler, native).
    pub non_java_samples: u64,
    /// Samples of JVM threads in their JVM's code cache, whose native
    /// stack the sampler left at the pc (no mapping to search there).
    pub samples_in_code_cache: u64,
    /// Samples of JVM threads that kept only their native stack, by reason.
    pub native_only: BTreeMap<&'static str, u64>,
    /// Java stacks the agents sent that were dropped on arrival, by reason.
    pub dropped_stacks: BTreeMap<&'static str, u64>,
    /// Code events of the agents' logs beyond the code maps' bounds.
    pub dropped_code_events: u64,
}

/// A duration as seconds, for machine-readable outputs.
pub fn seconds<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

fn optional_seconds<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => seconds(duration, serializer),
        None => serializer.serialize_none(),
    }
}

impl RecordingSummary {
    /// Samples taken but missing from the profile.
    pub fn lost(&self) -> u64 {
        self.lost_ring_full + self.malformed_records + self.over_budget
    }
}

/// How Python profiling went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PythonSummary {
    /// CPython processes whose frames were read, by version ("3.11").
    pub processes: BTreeMap<String, usize>,
    /// Processes that run a CPython whose frames are not read, and why
    /// (the first ones).
    pub not_read: Vec<(u32, String)>,
    /// Python frames whose code object could not be read (it was freed
    /// before it was named, or is no code object).
    pub unnamed_frames: u64,
}

/// What loading tables cost, for the summary and the bench.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UnwindSummary {
    /// Files whose tables were compiled and loaded.
    pub files: usize,
    /// Files that shared the table of another copy of the same build.
    pub shared_files: usize,
    /// Of those, the files whose separate debug file was read.
    pub debug_files: usize,
    /// Files without usable CFI (their frames walk frame pointers).
    pub files_without_table: usize,
    /// Files left out because the rows map was full, even without the
    /// tables of files no process mapped any more.
    pub files_without_room: usize,
    /// Tables removed from the maps to make room, their files mapped by no
    /// process any more.
    pub files_removed: usize,
    /// Rows loaded, all files together.
    pub rows: usize,
    /// CFI entries the compiler could not read, left out of the tables.
    pub skipped_fdes: usize,
    /// Bytes the loaded rows take in the map.
    pub bytes: usize,
    /// Time spent compiling tables.
    #[serde(serialize_with = "seconds")]
    pub compile_time: Duration,
    /// Processes whose tables were loaded.
    pub processes: usize,
    /// Processes left out because the mappings map was full.
    pub processes_without_room: usize,
    /// Processes with more executable mappings than the unwinder holds for
    /// one ([`profiler_common::unwind::MAX_MAPPINGS`]), each time it loaded them.
    pub processes_over_mapping_cap: usize,
    /// Their mappings past the cap, left out: stacks end at their code.
    pub mappings_left_out: usize,
}

/// Where the user stack of an off-CPU wait is taken, in the thread's own
/// context as it leaves the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OffCpuUserStacks {
    /// By task work the switch schedules for the waits it records (Linux
    /// 6.18): nothing for the others.
    TaskWork,
    /// At the next syscall exit, a hook that every syscall of the host runs.
    SyscallExits,
}

impl std::fmt::Display for OffCpuUserStacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OffCpuUserStacks::TaskWork => "by task work, as the thread returns to user mode",
            OffCpuUserStacks::SyscallExits => "at syscall exits",
        })
    }
}
