//! Java frames for the samples: pairs each sample that signalled a JVM
//! thread with the Java stack its agent took, counts what became of it,
//! and asks the agents for the names (and, with `--java-retransform`, the
//! recompiles) the merged samples need.

use std::borrow::Cow;

use foldhash::{HashMap, HashMapExt};
use profiler_common::jvm::{
    agct_failure, JavaFrame, AGCT_NO_JAVA_FRAME, AGCT_UNKNOWN_NOT_JAVA, NOT_A_JAVA_THREAD,
    RECOMPILE_REQUEST,
};

use super::{JavaProfiler, Jvm};
use crate::{
    jvm::{agent_memory::JavaSample, merge::Outcome},
    model::{ImageId, JavaStackFrame, MergedSample, Sample},
    process::{ProcessImage, ProcessRegistry},
};

/// Samples cut short after one method before its class is recompiled.
const RECOMPILE_AFTER: u32 = 1;

/// Most methods counted per JVM for recompiling (ids come from the JVM).
const MAX_CUT_SHORT: usize = 1 << 16;

impl JavaProfiler {
    /// Pairs the samples and Java stacks that can be paired, gives up on
    /// samples that waited too long (all of them, with `flush`), and asks
    /// the agents for what the merged samples need named or recompiled.
    pub(super) fn merge_ready(
        &mut self,
        now_ns: u64,
        flush: bool,
        processes: &mut ProcessRegistry,
    ) -> Vec<MergedSample> {
        let mut outcomes = Vec::new();
        self.merger
            .settle(now_ns, flush, |outcome| outcomes.push(outcome));
        let mut wanted: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut cut_short = Vec::new();
        let merged = outcomes
            .into_iter()
            .map(|outcome| {
                let (sample, frames) = self.java_frames_of(outcome, &mut cut_short);
                if let Some(jvm) = self.jvms.get(&sample.tgid) {
                    let ids = wanted.entry(sample.tgid).or_default();
                    ids.extend(frames.iter().map(|frame| frame.method_id));
                    ids.extend(jvm.symbols.compiled_methods_at(sample.user.iter().copied()));
                }
                let image = processes.image_of(&sample);
                with_java(processes.image(image), image, sample, frames)
            })
            .collect();
        self.request_recompiles(cut_short);
        self.request_names(wanted);
        merged
    }

    /// A sample's Java frames, counted in the summary by what became of
    /// them; a stack cut short after one method goes to `cut_short`.
    fn java_frames_of(
        &mut self,
        outcome: Outcome,
        cut_short: &mut Vec<(u32, u64)>,
    ) -> (Sample, Vec<JavaStackFrame>) {
        let summary = &mut self.summary;
        let in_code_cache = match &outcome {
            Outcome::Paired(sample, _) | Outcome::Unpaired(sample, _) => sample.in_code_cache,
        };
        summary.samples_in_code_cache += u64::from(in_code_cache);
        let (sample, java) = match outcome {
            Outcome::Paired(sample, java) => (sample, java),
            Outcome::Unpaired(sample, why) => {
                *summary.native_only.entry(why.reason()).or_default() += 1;
                return (sample, Vec::new());
            }
        };
        let Some(jvm) = self.jvms.get(&sample.tgid) else {
            return (sample, Vec::new());
        };
        let frames = java_frames(jvm, &java);
        match java.result {
            _ if !frames.is_empty() => {
                summary.java_samples += 1;
                self.coverage
                    .java_frames(sample.tgid, sample.time_ns, summary);
            }
            NOT_A_JAVA_THREAD => summary.non_java_samples += 1,
            // "No Java frame" and "unknown, not Java" are what JIT compiler
            // threads (JavaThreads to HotSpot) answer; with no Java code on
            // the native stack either, the thread ran no Java, and nothing
            // is missing.
            AGCT_NO_JAVA_FRAME | AGCT_UNKNOWN_NOT_JAVA
                if !jvm.symbols.in_java_code(&sample.user) =>
            {
                summary.non_java_samples += 1
            }
            code => *summary.native_only.entry(agct_failure(code)).or_default() += 1,
        }
        if let ([only], true) = (frames.as_slice(), self.retransform) {
            cut_short.push((sample.tgid, only.method_id));
        }
        (sample, frames)
    }

    /// Code compiled before the agent came lacks the debug information
    /// AsyncGetCallTrace needs to walk past it: one frame is all it finds.
    /// Has each such method's class recompiled, once.
    fn request_recompiles(&mut self, cut_short: Vec<(u32, u64)>) {
        for (pid, method_id) in cut_short {
            let Some(jvm) = self.jvms.get_mut(&pid) else {
                continue;
            };
            if jvm.cut_short.len() >= MAX_CUT_SHORT && !jvm.cut_short.contains_key(&method_id) {
                continue;
            }
            let count = jvm.cut_short.entry(method_id).or_default();
            *count += 1;
            if *count == RECOMPILE_AFTER {
                jvm.memory.request_methods(&[method_id | RECOMPILE_REQUEST]);
            }
        }
    }

    /// Asks each agent to name the methods of `wanted` it has not named yet.
    pub(super) fn request_names(&mut self, wanted: HashMap<u32, Vec<u64>>) {
        for (pid, ids) in wanted {
            if let Some(jvm) = self.jvms.get_mut(&pid) {
                let new = jvm.symbols.newly_wanted(ids);
                let taken = jvm.memory.request_methods(&new);
                jvm.symbols.unrequest(&new[taken..]);
            }
        }
    }
}

fn java_frames(jvm: &Jvm, java: &JavaSample) -> Vec<JavaStackFrame> {
    let mut frames = Cow::Borrowed(&java.frames);
    let mut pc = java.pc;
    if java.top_popped && !frames.is_empty() {
        // The agent walked from the caller of the code at `pc`; that code's
        // method is the innermost frame. Code that is no method (a stub,
        // the interpreter) leaves the caller innermost, and says nothing of
        // the caller's kind.
        match jvm.symbols.compiled_methods_at([pc]).next() {
            Some(method_id) => frames.to_mut().insert(0, JavaFrame::new(method_id, -1)),
            None => pc = 0,
        }
    }
    jvm.symbols.with_kinds(pc, &frames)
}

/// A sample of `image` with its Java frames: native frames above the
/// innermost Java frame stay; from the first frame in JIT code (memory no
/// file maps) on, the Java frames say it better.
fn with_java(
    image: &ProcessImage,
    id: ImageId,
    mut sample: Sample,
    java: Vec<JavaStackFrame>,
) -> MergedSample {
    if !java.is_empty() {
        let java_code = sample
            .user
            .iter()
            .position(|&address| !image.is_file_code(address))
            .unwrap_or(sample.user.len());
        sample.user.truncate(java_code);
    }
    MergedSample {
        image: id,
        sample,
        java,
        python: Vec::new(),
    }
}
