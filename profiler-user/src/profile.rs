//! The finished profile: what aggregation produces and the writers consume.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, SystemTime},
};

use serde::{Serialize, Serializer};

use crate::{
    event::Event, interpreter::python::PythonSummary, sample::sampler::OffCpuUserStacks,
    unwind::loader::UnwindSummary,
};

/// One distinct symbolized stack and the samples that hit it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FoldedStack {
    /// Frame names, root first: the context frames (the container or
    /// service frame with `--group-by`, the process frame, the thread frame
    /// with `-t`), then code from the outermost caller to the sampled
    /// function. Names never contain `;` or a line break; kernel frames end
    /// in `_[k]`.
    pub frames: Vec<Arc<str>>,
    /// How many leading frames name where the code ran rather than code.
    pub context_frames: usize,
    /// The stack's value in its profile's event's unit ([`Event::unit`]):
    /// samples for CPU, nanoseconds for off-CPU and locks, bytes for
    /// allocations.
    pub samples: u64,
    /// Who the samples belong to, for writers that keep labels.
    #[serde(serialize_with = "label_map")]
    pub labels: Labels,
    /// For each code frame (`frames[context_frames..]`), the index in
    /// [`Profile::modules`] of the file it is code of; `None` for kernel,
    /// Java and unknown code. Frames past its end have none.
    #[serde(skip)]
    pub modules: FrameModules,
}

/// Per code frame, the index of its file in [`Profile::modules`], if any.
pub type FrameModules = Box<[Option<u32>]>;

/// Labels of a stack's samples, as (key, value), keys in a fixed order:
/// `pid`, `comm`, `exe`, `service`, `hostname`, then where the process runs
/// (`container_*`, `pod`, `namespace`, `pod_container`, `systemd_unit`),
/// then `tid` and `thread` with `-t`.
pub type Labels = Arc<[(&'static str, Arc<str>)]>;

fn label_map<S: Serializer>(labels: &Labels, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(labels.iter().map(|(key, value)| (key, value)))
}

/// `name` as a frame every writer can take: no `;` (the folded format's
/// separator) and no line break or other control character. Processes name
/// themselves, their threads, their files and their Java classes as they
/// like, so every frame passes through here.
pub fn clean_frame(name: Arc<str>) -> Arc<str> {
    if name.chars().any(|c| c == ';' || c.is_control()) {
        name.chars()
            .map(|c| match c {
                ';' => ':',
                c if c.is_control() => ' ',
                c => c,
            })
            .collect::<String>()
            .into()
    } else {
        name
    }
}

/// A recording, symbolized and counted.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// What its stacks count, and so the unit of their
    /// [`FoldedStack::samples`].
    pub event: Event,
    /// Every distinct stack once, in no particular order.
    pub stacks: Vec<FoldedStack>,
    /// The files native frames are code of, each once.
    pub modules: Vec<Module>,
    /// How the recording went.
    pub summary: RecordingSummary,
}

/// A file native code was sampled in, for writers that name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Its path, as the first process seen mapping it named it (its base
    /// name if that is unknown).
    pub path: Arc<str>,
    /// Its GNU build ID in lowercase hex, if it has one.
    pub build_id: Option<Arc<str>>,
}

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

/// Which code frames `--all-user` or `--all-kernel` keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameFilter {
    /// User frames only: a sample in the kernel counts in the user
    /// function that entered it.
    User,
    /// Kernel frames only: a sample in user code counts in its context
    /// frames (the process, the thread) alone.
    Kernel,
}

impl Profile {
    /// Leaves out the code frames `filter` does not keep, and merges the
    /// stacks that become the same.
    pub fn filter_frames(&mut self, filter: FrameFilter) {
        let mut merged: HashMap<Vec<Arc<str>>, usize> = HashMap::new();
        let mut stacks: Vec<FoldedStack> = Vec::with_capacity(self.stacks.len());
        for mut stack in std::mem::take(&mut self.stacks) {
            let context = stack.context_frames.min(stack.frames.len());
            let mut modules = Vec::with_capacity(stack.frames.len() - context);
            let mut frames = stack.frames[..context].to_vec();
            for (index, frame) in stack.frames[context..].iter().enumerate() {
                if frame.ends_with("_[k]") == (filter == FrameFilter::Kernel) {
                    frames.push(frame.clone());
                    modules.push(stack.modules.get(index).copied().flatten());
                }
            }
            match merged.get(&frames) {
                Some(&at) => stacks[at].samples = stacks[at].samples.saturating_add(stack.samples),
                None => {
                    merged.insert(frames.clone(), stacks.len());
                    stack.frames = frames;
                    stack.modules = modules.into();
                    stacks.push(stack);
                }
            }
        }
        self.stacks = stacks;
    }
}

impl RecordingSummary {
    /// Samples taken but missing from the profile.
    pub fn lost(&self) -> u64 {
        self.lost_ring_full + self.malformed_records + self.over_budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_never_carry_separators_or_control_characters() {
        assert_eq!(
            &*clean_frame("ev;il\nx\r\t\u{1b}[31m".into()),
            "ev:il x   [31m"
        );
        let clean: Arc<str> = "main (a.c:3)".into();
        assert!(
            Arc::ptr_eq(&clean_frame(clean.clone()), &clean),
            "clean names are kept as they are"
        );
    }

    fn lines(profile: &Profile) -> Vec<String> {
        let mut lines: Vec<String> = profile
            .stacks
            .iter()
            .map(|stack| format!("{} {}", stack.frames.join(";"), stack.samples))
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn frame_filters_keep_user_or_kernel_frames_and_merge_stacks() {
        let profile = crate::write::tests::profile(&[
            ("app [1];main;read;sys_read_[k];vfs_read_[k]", 5),
            ("app [1];main;read;sys_read_[k]", 2),
            ("app [1];main;read", 3),
            ("app [1];main;work", 4),
        ]);
        let mut user = profile.clone();
        user.filter_frames(FrameFilter::User);
        assert_eq!(
            lines(&user),
            ["app [1];main;read 10", "app [1];main;work 4"]
        );
        let mut kernel = profile;
        kernel.filter_frames(FrameFilter::Kernel);
        assert_eq!(
            lines(&kernel),
            [
                "app [1] 7",
                "app [1];sys_read_[k] 2",
                "app [1];sys_read_[k];vfs_read_[k] 5"
            ]
        );
    }
}
