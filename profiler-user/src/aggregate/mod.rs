//! Stage 4, aggregation: counts samples by their raw stacks while recording;
//! after the recording, once symbolization has named every distinct address
//! ([`AddressNames`]), folds the named stacks into a [`Profile`].

pub mod diff;
mod python;

use std::{
    hash::{Hash, Hasher},
    sync::Arc,
};

use foldhash::{HashMap, HashMapExt};

use profiler_common::unwind::{StopReason, ROOT_FUNCTIONS};

use self::python::PythonMerge;
use crate::{
    event::Event,
    jvm::{java_events::JavaEventSample, park::contended_lock, symbols::JavaSymbols},
    model::{
        clean_frame, FoldedStack, FrameModules, ImageId, JavaStackFrame, Labels, MergedSample,
        NamedFrame, Profile, RecordingSummary, StackQuality,
    },
    module_table::ModuleTable,
    process::{identity::host_name, ProcessImage, ProcessRegistry},
    procfs,
    symbolize::names::{call_site, AddressNames, StackAddresses},
};

/// What aggregation keeps apart.
#[derive(Clone, Copy, Debug, Default)]
pub struct AggregateOptions {
    /// Keep threads apart, under a frame of their own.
    pub threads: bool,
    /// Keep Java frames apart by line (else only by method).
    pub lines: bool,
    /// What frame, if any, goes above the process frame.
    pub group_by: GroupBy,
}

/// What groups processes in the folded stacks, under a frame above theirs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// Nothing: the process frame is the root.
    None,
    /// A containerized process's container, as `NAME [container ID]`.
    #[default]
    Container,
    /// The service a process is part of (Kubernetes namespace/container,
    /// container name, systemd unit), as `SERVICE [service]`.
    Service,
}

/// A sample's stack before symbolization, with what names its context.
#[derive(Clone, Debug)]
struct RawStack {
    image: ImageId,
    /// The thread, with `-t`; 0 otherwise.
    tid: u32,
    /// Return addresses, innermost first.
    kernel: Box<[u64]>,
    user: Box<[u64]>,
    /// Java frames from the JVM agent, innermost first.
    java: Box<[JavaStackFrame]>,
    /// Python frames, named, innermost first.
    python: Box<[NamedFrame]>,
    /// A frame above all others: the class a Java event allocated or
    /// locked.
    top: Option<Arc<str>>,
    /// A Java thread's wait, counted if its Java frames, once named, say
    /// it parked on a java.util.concurrent lock (whose class goes on top).
    parked: bool,
    /// Why the user stack ends there.
    stop: StopReason,
}

/// Compared at every sample counted (the one it adds up with): the Java
/// frames first, which tell a JVM's stacks apart, and the short address
/// lists word by word, where a derived comparison calls memcmp for each
/// (12% of stoke's CPU on a JVM sampled at 999 Hz, most of them empty).
impl PartialEq for RawStack {
    fn eq(&self, other: &Self) -> bool {
        fn same(a: &[u64], b: &[u64]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a == b)
        }
        self.image == other.image
            && self.tid == other.tid
            && self.stop == other.stop
            && self.parked == other.parked
            && self.java == other.java
            && self.python == other.python
            && same(&self.user, &other.user)
            && same(&self.kernel, &other.kernel)
            && self.top == other.top
    }
}

impl Eq for RawStack {}

/// Every field [`PartialEq`] compares.
impl Hash for RawStack {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.image.hash(state);
        self.tid.hash(state);
        self.stop.hash(state);
        self.parked.hash(state);
        self.java.hash(state);
        self.python.hash(state);
        self.user.hash(state);
        self.kernel.hash(state);
        self.top.hash(state);
    }
}

/// Counts one event's stacks during a recording: CPU samples, or the
/// nanoseconds of off-CPU waits.
#[derive(Debug, Default)]
pub struct Aggregator {
    options: AggregateOptions,
    event: Event,
    /// Each stack's value in the event's unit, and its sample count.
    stacks: HashMap<RawStack, (u64, u64)>,
    thread_names: HashMap<(ImageId, u32), String>,
    samples: u64,
}

impl Aggregator {
    /// An empty aggregation of `event`.
    pub fn new(options: AggregateOptions, event: Event) -> Self {
        Self {
            options,
            event,
            ..Self::default()
        }
    }

    /// The event it counts.
    pub fn event(&self) -> Event {
        self.event
    }

    /// Counts one sample.
    pub fn add(&mut self, merged: MergedSample) {
        self.add_weighted(merged, 1);
    }

    /// Counts one sample worth `value` in the event's unit (an off-CPU
    /// wait's nanoseconds).
    pub fn add_weighted(&mut self, merged: MergedSample, value: u64) {
        let MergedSample {
            image,
            sample,
            mut java,
            python,
        } = merged;
        if !self.options.lines {
            java.iter_mut().for_each(|frame| frame.bci = 0);
        }
        let tid = if self.options.threads { sample.tid } else { 0 };
        if self.options.threads {
            self.thread_names
                .entry((image, tid))
                .or_insert_with(|| sample.comm.to_string());
        }
        let stack = RawStack {
            image,
            tid,
            kernel: sample.kernel.into(),
            user: sample.user.into(),
            java: java.into(),
            python: python.into(),
            top: None,
            parked: false,
            stop: sample.stop,
        };
        self.count(stack, value);
    }

    /// Counts a Java thread's off-CPU wait of `waited` nanoseconds by its
    /// Java frames alone, as a lock wait if it turns out to be a park on a
    /// java.util.concurrent lock (see [`contended_lock`]); else it is left
    /// out when the stacks are folded.
    pub fn add_parked(&mut self, merged: &MergedSample, waited: u64) {
        let mut java = merged.java.clone();
        if !self.options.lines {
            java.iter_mut().for_each(|frame| frame.bci = 0);
        }
        let tid = if self.options.threads {
            merged.sample.tid
        } else {
            0
        };
        if self.options.threads {
            self.thread_names
                .entry((merged.image, tid))
                .or_insert_with(|| merged.sample.comm.to_string());
        }
        let stack = RawStack {
            image: merged.image,
            tid,
            kernel: Box::default(),
            user: Box::default(),
            java: java.into(),
            python: Box::default(),
            top: None,
            parked: true,
            stop: StopReason::End,
        };
        self.count(stack, waited);
    }

    /// Counts one Java event (allocation, lock) of its weight (bytes,
    /// nanoseconds), its class on top of its Java frames.
    pub fn add_java_event(&mut self, event: JavaEventSample) {
        let JavaEventSample {
            image,
            pid,
            tid,
            class,
            mut java,
            weight,
            ..
        } = event;
        if !self.options.lines {
            java.iter_mut().for_each(|frame| frame.bci = 0);
        }
        let tid = if self.options.threads { tid } else { 0 };
        if self.options.threads {
            // Read once per thread: a Java event, unlike a BPF sample,
            // does not carry its thread's name.
            self.thread_names
                .entry((image, tid))
                .or_insert_with(|| procfs::thread_name(pid, tid));
        }
        let stack = RawStack {
            image,
            tid,
            kernel: Box::default(),
            user: Box::default(),
            java: java.into(),
            python: Box::default(),
            top: Some(class),
            parked: false,
            stop: StopReason::End,
        };
        self.count(stack, weight);
    }

    fn count(&mut self, stack: RawStack, value: u64) {
        let (total, count) = self.stacks.entry(stack).or_default();
        *total = total.saturating_add(value);
        *count += 1;
        self.samples += 1;
    }

    /// The addresses of every distinct stack, for symbolization.
    pub fn addresses<'a>(
        &'a self,
        processes: &'a ProcessRegistry,
    ) -> impl Iterator<Item = StackAddresses<'a>> {
        self.stacks.keys().map(|stack| StackAddresses {
            image: processes.image(stack.image),
            kernel: &stack.kernel,
            user: &stack.user,
        })
    }

    /// Folds the stacks, named by `names` (and `java`, what the JVM agent of
    /// a process told), into a profile; adds to
    /// `summary` what aggregation counted: the samples, and how far native
    /// stacks got.
    pub fn fold<'j>(
        self,
        processes: &ProcessRegistry,
        names: &AddressNames,
        java: &dyn Fn(u32) -> Option<&'j JavaSymbols>,
        mut summary: RecordingSummary,
    ) -> Profile {
        let mut folded: HashMap<Vec<Arc<str>>, (u64, usize, Labels, FrameModules)> = HashMap::new();
        let mut module_table = ModuleTable::default();
        let mut process_labels: HashMap<ImageId, Vec<(&'static str, Arc<str>)>> = HashMap::new();
        // Waits that turned out to be no lock's.
        let mut left_out = 0;
        for (stack, &(value, samples)) in &self.stacks {
            let image = processes.image(stack.image);
            let symbols = java(image.pid);
            let top = if stack.parked {
                let lock = symbols.and_then(|symbols| {
                    contended_lock(
                        stack
                            .java
                            .iter()
                            .map_while(|frame| symbols.method_name(frame.method_id)),
                    )
                });
                match lock {
                    Some(class) => Some(Arc::from(class)),
                    None => {
                        left_out += samples;
                        continue;
                    }
                }
            } else {
                stack.top.clone()
            };
            let mut frames = self.context_frames(stack, image);
            let context_frames = frames.len();
            if let Some(symbols) = symbols {
                frames.extend(stack.java.iter().rev().map(|frame| {
                    symbols.frame_name(&frame.frame(), frame.kind, self.options.lines)
                }));
            }
            let outermost_user = frames.len();
            let mut modules = vec![None; frames.len()];
            // Innermost first: call sites and their names.
            let user: Vec<_> = stack
                .user
                .iter()
                .enumerate()
                .map(|(index, &address)| call_site(index, address))
                .collect();
            let named: Vec<_> = user
                .iter()
                .map(|&address| names.user(image, address, symbols))
                .collect();
            let mut python = PythonMerge::new(&stack.python, &named);
            frames.extend(python.before_native());
            modules.resize(frames.len(), None);
            for (&address, named) in user.iter().zip(&named).rev() {
                match python.at(named, || !image.is_file_code(address)) {
                    Some(python_frames) => frames.extend(python_frames),
                    None => frames.extend(named.iter().cloned()),
                }
                modules.resize(frames.len(), module_table.index(image, address));
            }
            if stack.java.is_empty() && !stack.user.is_empty() {
                let reached = reached_root(stack.stop, &frames[outermost_user]);
                summary.stack_quality.count(reached, stack.stop, samples);
            }
            for (index, &address) in stack.kernel.iter().enumerate().rev() {
                frames.extend(names.kernel(call_site(index, address)).iter().cloned());
            }
            frames.extend(top);
            let frames = frames.into_iter().map(clean_frame).collect();
            let entry = folded.entry(frames).or_insert_with(|| {
                let mut labels = process_labels
                    .entry(stack.image)
                    .or_insert_with(|| labels_of(image))
                    .clone();
                if self.options.threads {
                    labels.push(("tid", stack.tid.to_string().into()));
                    labels.push(("thread", self.thread_name(stack).into()));
                }
                let modules = modules.split_off(context_frames).into();
                (0, context_frames, labels.into(), modules)
            });
            entry.0 += value;
        }
        summary.samples = self.samples - left_out;
        Profile {
            event: self.event,
            stacks: folded
                .into_iter()
                .map(
                    |(frames, (samples, context_frames, labels, modules))| FoldedStack {
                        frames,
                        context_frames,
                        samples,
                        labels,
                        modules,
                    },
                )
                .collect(),
            modules: module_table.into_modules(),
            summary,
        }
    }

    /// The frames that say where a stack ran: the group's (container or
    /// service), the process's, the thread's with `-t`.
    fn context_frames(&self, stack: &RawStack, image: &ProcessImage) -> Vec<Arc<str>> {
        let mut frames: Vec<Arc<str>> = Vec::new();
        let identity = &image.identity;
        match self.options.group_by {
            GroupBy::None => {}
            GroupBy::Container => {
                if let Some(container) = &identity.container {
                    let id = container.short_id();
                    frames.push(match &container.name {
                        Some(name) => format!("{name} [container {id}]").into(),
                        None => format!("[container {id}]").into(),
                    });
                }
            }
            GroupBy::Service => {
                if let Some(service) = identity.service() {
                    frames.push(format!("{service} [service]").into());
                }
            }
        }
        frames.push(format!("{} [{}]", image.name, image.pid).into());
        if self.options.threads {
            frames.push(format!("{} [tid {}]", self.thread_name(stack), stack.tid).into());
        }
        frames
    }

    fn thread_name(&self, stack: &RawStack) -> &str {
        self.thread_names
            .get(&(stack.image, stack.tid))
            .map_or("?", String::as_str)
    }
}

/// A process's labels: who it is and where it runs.
fn labels_of(image: &ProcessImage) -> Vec<(&'static str, Arc<str>)> {
    let identity = &image.identity;
    let comm: Arc<str> = image.name.as_str().into();
    let mut labels = vec![
        ("pid", image.pid.to_string().into()),
        ("comm", comm.clone()),
    ];
    if let Some(exe) = &image.exe {
        labels.push(("exe", exe.clone()));
    }
    // The kernel's threads are one service, not one per kworker's name.
    let service = match identity.service() {
        Some(service) => service.into(),
        None if image.kernel_thread => "kernel".into(),
        None => comm,
    };
    labels.push(("service", service));
    labels.push(("hostname", host_name()));
    labels.extend(identity.labels());
    labels
}

/// Whether a native stack got to its process's or thread's first function.
/// The unwind tables mark the outermost frame themselves (`End`), even a
/// stripped binary's nameless entry point; a frame-pointer chain cannot
/// tell its end from a broken link, so there the outermost function's name
/// says it (without the source location `--lines` adds).
fn reached_root(stop: StopReason, outermost: &str) -> bool {
    let function = outermost.split(" (").next().unwrap_or(outermost);
    stop == StopReason::End || ROOT_FUNCTIONS.contains(&function)
}

impl StackQuality {
    fn count(&mut self, reached_root: bool, stop: StopReason, samples: u64) {
        self.samples += samples;
        if reached_root {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model::Sample, symbolize::Symbolizer};

    fn sample(tgid: u32, tid: u32, user: Vec<u64>) -> Sample {
        Sample {
            comm: format!("t{tid}").as_str().into(),
            signalled: false,
            ..Sample::for_test(tgid, tid, 0, user)
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
            let mut processes = ProcessRegistry::default();
            let image = processes.image_for(gone, "t1");
            let mut aggregator = Aggregator::new(
                AggregateOptions {
                    threads,
                    ..AggregateOptions::default()
                },
                Event::Cpu,
            );
            for (tid, address) in [(1, 0x10), (1, 0x10), (2, 0x20)] {
                aggregator.add(MergedSample::native(
                    image,
                    sample(gone, tid, vec![address]),
                ));
            }
            let mut names = AddressNames::default();
            names.resolve(aggregator.addresses(&processes), &Symbolizer::new(false));
            let profile =
                aggregator.fold(&processes, &names, &|_| None, RecordingSummary::default());
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
            for stack in &profile.stacks {
                assert_eq!(stack.context_frames, 1 + usize::from(threads));
                assert_eq!(stack.labels[0], ("pid", Arc::from(gone.to_string())));
            }
        }
    }

    #[test]
    fn a_stack_reached_its_root_by_the_unwind_table_or_the_entry_function() {
        assert!(reached_root(StopReason::End, "whatever"));
        assert!(reached_root(StopReason::FramePointers, "_start"));
        assert!(reached_root(
            StopReason::FramePointers,
            "clone3 (clone3.S:78)"
        ));
        assert!(!reached_root(StopReason::FramePointers, "main"));
        assert!(!reached_root(StopReason::NoCfi, "_start_not"));
    }
}
