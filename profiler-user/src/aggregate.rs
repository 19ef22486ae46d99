//! Stage 4, aggregation: counts samples by their raw stacks while recording,
//! then names each distinct address once and folds the named stacks into a
//! [`Profile`].

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Instant,
};

use profiler_common::unwind::{StopReason, ROOT_FUNCTIONS};

use crate::{
    jvm::{symbols::JavaSymbols, JavaStackFrame},
    profile::{clean_frame, FoldedStack, Profile, RecordingSummary, StackQuality},
    sample::ring_record::Sample,
    symbolize::{
        maps::{ImageId, MappedFile, MappingTarget, ProcessImage, ProcessTable},
        Frames, Symbolizer,
    },
};

/// What aggregation keeps apart.
#[derive(Clone, Copy, Debug, Default)]
pub struct AggregateOptions {
    /// Keep threads apart, under a frame of their own.
    pub threads: bool,
    /// Keep Java frames apart by line (else only by method).
    pub lines: bool,
}

/// A sample's stack before symbolization, with what names its context.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RawStack {
    image: ImageId,
    /// The thread, with `-t`; 0 otherwise.
    tid: u32,
    /// Return addresses, innermost first.
    kernel: Box<[u64]>,
    user: Box<[u64]>,
    /// Java frames from the JVM agent, innermost first.
    java: Box<[JavaStackFrame]>,
    /// Why the user stack ends there.
    stop: StopReason,
}

/// Counts samples during a recording.
#[derive(Debug, Default)]
pub struct Aggregator {
    options: AggregateOptions,
    processes: ProcessTable,
    stacks: HashMap<RawStack, u64>,
    thread_names: HashMap<(ImageId, u32), String>,
    samples: u64,
}

impl Aggregator {
    /// An empty aggregation.
    pub fn new(options: AggregateOptions) -> Self {
        Self {
            options,
            ..Self::default()
        }
    }

    /// Counts one sample, snapshotting its process on first sight. A
    /// sample of a Java thread comes with its Java frames.
    pub fn add(&mut self, sample: Sample, mut java: Vec<JavaStackFrame>) {
        let image = self.processes.image_for(sample.tgid, &sample.comm);
        let mut user = sample.user;
        if !java.is_empty() {
            // Native frames above the innermost Java frame stay; from the
            // first frame in JIT code on, the Java frames say it better.
            let process = self.processes.image(image);
            let java_code = user
                .iter()
                .position(|&address| !process.is_file_code(address))
                .unwrap_or(user.len());
            user.truncate(java_code);
            if !self.options.lines {
                java.iter_mut().for_each(|frame| frame.bci = 0);
            }
        }
        let tid = if self.options.threads { sample.tid } else { 0 };
        if self.options.threads {
            self.thread_names.entry((image, tid)).or_insert(sample.comm);
        }
        let stack = RawStack {
            image,
            tid,
            kernel: sample.kernel.into(),
            user: user.into(),
            java: java.into(),
            stop: sample.stop,
        };
        *self.stacks.entry(stack).or_default() += 1;
        self.samples += 1;
    }

    /// Process `pid` exec'd or exited: later samples belong to a new image.
    pub fn process_ended(&mut self, pid: u32) {
        self.processes.forget(pid);
    }

    /// Samples counted so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// A process image by its index (0 up to [`Self::processes`]).
    pub fn image(&self, id: ImageId) -> &ProcessImage {
        self.processes.image(id)
    }

    /// The image of live process `pid`, if it was sampled.
    pub fn live_image(&self, pid: u32) -> Option<&ProcessImage> {
        self.processes.live_image(pid)
    }

    /// Process images seen so far.
    pub fn processes(&self) -> usize {
        self.processes.len()
    }

    /// Names every frame and folds the stacks into a profile; `java` has
    /// what the JVM agents told, by pid.
    pub fn finish(
        self,
        symbolizer: &Symbolizer,
        java: &HashMap<u32, JavaSymbols>,
        mut summary: RecordingSummary,
    ) -> Profile {
        let started = Instant::now();
        let names = Names::resolve(&self, symbolizer, java);
        summary.symbolize_time = started.elapsed();
        summary.symbolized_addresses = names.kernel.len() + names.files.len();
        let mut folded: HashMap<Vec<Arc<str>>, u64> = HashMap::new();
        let quality = &mut summary.stack_quality;
        for (stack, samples) in &self.stacks {
            let image = self.processes.image(stack.image);
            let mut frames: Vec<Arc<str>> = vec![format!("{} [{}]", image.name, image.pid).into()];
            if self.options.threads {
                let thread = self
                    .thread_names
                    .get(&(stack.image, stack.tid))
                    .map_or("?", String::as_str);
                frames.push(format!("{thread} [tid {}]", stack.tid).into());
            }
            if let Some(symbols) = java.get(&image.pid) {
                frames.extend(stack.java.iter().rev().map(|frame| {
                    symbols.frame_name(&frame.frame(), frame.kind, self.options.lines)
                }));
            }
            let outermost_user = frames.len();
            for (index, &address) in stack.user.iter().enumerate().rev() {
                frames.extend(names.user(image, call_site(index, address)).iter().cloned());
            }
            if stack.java.is_empty() && !stack.user.is_empty() {
                quality.count(&frames[outermost_user], stack.stop, *samples);
            }
            for (index, &address) in stack.kernel.iter().enumerate().rev() {
                frames.extend(names.kernel[&call_site(index, address)].iter().cloned());
            }
            let frames = frames.into_iter().map(clean_frame).collect();
            *folded.entry(frames).or_default() += samples;
        }
        summary.samples = self.samples;
        summary.processes = self.processes.len();
        Profile {
            stacks: folded
                .into_iter()
                .map(|(frames, samples)| FoldedStack { frames, samples })
                .collect(),
            context_frames: 1 + usize::from(self.options.threads),
            summary,
        }
    }
}

impl StackQuality {
    fn count(&mut self, outermost: &str, stop: StopReason, samples: u64) {
        self.samples += samples;
        let function = outermost.split(" (").next().unwrap_or(outermost);
        // Unwind tables mark the outermost frame themselves, which also
        // knows a stripped binary's entry point, nameless as it is.
        if stop == StopReason::End || ROOT_FUNCTIONS.contains(&function) {
            self.reached_root += samples;
        } else {
            *self.truncated.entry(describe(stop)).or_default() += samples;
        }
    }
}

/// Why a stack ended short, in a few words for the summary.
fn describe(stop: StopReason) -> &'static str {
    match stop {
        StopReason::FramePointers => "frame pointers ended (no unwind table)",
        StopReason::End => "outermost frame",
        StopReason::NoCfi => "code without unwind info",
        StopReason::Unsupported => "unwind info the unwinder cannot follow",
        StopReason::ReadFailed => "stack memory unreadable",
        StopReason::Depth => "frame limit",
        StopReason::UnknownCode => "code outside any file (JIT)",
        StopReason::BadFrame => "frame pointer led nowhere",
    }
}

/// A return address points after its call instruction, which may already be
/// the next function; one byte back is inside the call. The innermost frame
/// is the interrupted instruction itself.
fn call_site(index: usize, address: u64) -> u64 {
    if index == 0 {
        address
    } else {
        address.saturating_sub(1)
    }
}

/// Every distinct address of the recording, named.
struct Names<'a> {
    kernel: HashMap<u64, Frames>,
    /// By mapped file (its address as identity) and file offset.
    files: HashMap<(*const MappedFile, u64), Frames>,
    java: &'a HashMap<u32, JavaSymbols>,
}

impl<'a> Names<'a> {
    fn resolve(
        aggregator: &Aggregator,
        symbolizer: &Symbolizer,
        java: &'a HashMap<u32, JavaSymbols>,
    ) -> Self {
        let mut kernel_addresses = HashSet::new();
        let mut file_offsets: HashMap<*const MappedFile, (Arc<MappedFile>, HashSet<u64>)> =
            HashMap::new();
        for stack in aggregator.stacks.keys() {
            kernel_addresses.extend(
                stack
                    .kernel
                    .iter()
                    .enumerate()
                    .map(|(index, &a)| call_site(index, a)),
            );
            let image = aggregator.processes.image(stack.image);
            for (index, &address) in stack.user.iter().enumerate() {
                if let Some((mapping, offset)) = image.locate(call_site(index, address)) {
                    if let MappingTarget::File(file) = &mapping.target {
                        file_offsets
                            .entry(Arc::as_ptr(file))
                            .or_insert_with(|| (file.clone(), HashSet::new()))
                            .1
                            .insert(offset);
                    }
                }
            }
        }
        let kernel_addresses: Vec<u64> = kernel_addresses.into_iter().collect();
        let kernel = kernel_addresses
            .iter()
            .copied()
            .zip(symbolizer.kernel(&kernel_addresses))
            .collect();
        let mut files = HashMap::new();
        for (key, (file, offsets)) in file_offsets {
            let offsets: Vec<u64> = offsets.into_iter().collect();
            for (offset, frames) in offsets.iter().zip(symbolizer.file(&file, &offsets)) {
                files.insert((key, *offset), frames);
            }
        }
        Self {
            kernel,
            files,
            java,
        }
    }

    fn user(&self, image: &ProcessImage, address: u64) -> Frames {
        let located = image.locate(address);
        if let Some((mapping, offset)) = located {
            if let MappingTarget::File(file) = &mapping.target {
                return self.files[&(Arc::as_ptr(file), offset)].clone();
            }
        }
        let jit = self
            .java
            .get(&image.pid)
            .and_then(|java| java.code_name(address));
        let name = match (jit, located) {
            (Some(name), _) => name,
            (None, Some((mapping, offset))) => match &mapping.target {
                MappingTarget::Named(name) => format!("{name}+{offset:#x}").into(),
                MappingTarget::File(_) => unreachable!("file frames returned above"),
            },
            (None, None) => "[unknown]".into(),
        };
        Frames::from([name])
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::unwind::StopReason;

    use super::*;

    fn sample(tgid: u32, tid: u32, user: Vec<u64>) -> Sample {
        Sample {
            tgid,
            tid,
            cpu: 0,
            time_ns: 0,
            comm: format!("t{tid}"),
            kernel: vec![],
            user,
            signalled: false,
            stop: StopReason::End,
        }
    }

    #[test]
    fn samples_fold_by_process_and_optionally_thread() {
        let gone = u32::MAX - 3;
        for (threads, expected) in [
            (false, vec![(vec!["t1 [4294967292]", "[unknown]"], 3)]),
            (
                true,
                vec![
                    (vec!["t1 [4294967292]", "t1 [tid 1]", "[unknown]"], 2),
                    (vec!["t1 [4294967292]", "t2 [tid 2]", "[unknown]"], 1),
                ],
            ),
        ] {
            let mut aggregator = Aggregator::new(AggregateOptions {
                threads,
                lines: false,
            });
            aggregator.add(sample(gone, 1, vec![0x10]), vec![]);
            aggregator.add(sample(gone, 1, vec![0x10]), vec![]);
            aggregator.add(sample(gone, 2, vec![0x20]), vec![]);
            let profile = aggregator.finish(
                &Symbolizer::new(false),
                &HashMap::new(),
                RecordingSummary::default(),
            );
            let mut stacks: Vec<(Vec<String>, u64)> = profile
                .stacks
                .iter()
                .map(|stack| {
                    (
                        stack.frames.iter().map(|f| f.to_string()).collect(),
                        stack.samples,
                    )
                })
                .collect();
            stacks.sort();
            let expected: Vec<(Vec<String>, u64)> = expected
                .into_iter()
                .map(|(frames, n)| (frames.into_iter().map(String::from).collect(), n))
                .collect();
            assert_eq!(stacks, expected);
            assert_eq!(profile.summary.samples, 3);
            assert_eq!(profile.context_frames, 1 + usize::from(threads));
        }
    }

    #[test]
    fn an_ended_process_with_a_reused_pid_is_a_new_image() {
        let mut aggregator = Aggregator::new(AggregateOptions::default());
        let pid = u32::MAX - 4;
        aggregator.add(sample(pid, 1, vec![]), vec![]);
        aggregator.process_ended(pid);
        aggregator.add(sample(pid, 2, vec![]), vec![]);
        assert_eq!(aggregator.processes(), 2);
        assert_eq!(aggregator.samples(), 2);
    }

    #[test]
    fn only_return_addresses_step_back_into_the_call() {
        assert_eq!(call_site(0, 0x100), 0x100);
        assert_eq!(call_site(1, 0x100), 0xff);
        assert_eq!(call_site(3, 0), 0);
    }
}
