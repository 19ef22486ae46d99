//! A recording in progress, for `stoke record` and `stoke continuous`: the
//! stages in order. While samples come in, their processes are registered
//! (and their files' unwind tables loaded), JVM samples get their Java
//! frames, and the raw stacks are counted, apart for each event (`-e`);
//! then every distinct address is named once, and the named stacks are
//! folded into one [`Profile`] per event.

use std::{
    path::Path,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime},
};

use anyhow::Result;
use profiler_common::Counter;

use crate::{
    aggregate::{AggregateOptions, Aggregator},
    cli::SamplingArgs,
    event::{self, Event},
    jvm::{
        java_events::{JavaEventSample, JavaEventSettings},
        profiler::{JavaProfiler, JavaResults},
        MergedSample,
    },
    process::ProcessRegistry,
    profile::{Profile, RecordingSummary},
    progress::Progress,
    sample::{
        ring_record::Record,
        sampler::{Sampler, SamplerConfig},
    },
    symbolize::{names::AddressNames, Symbolizer},
    unwind::loader::UnwindLoader,
};

pub use crate::startup::{announce, check_sampling, raise_open_file_limit, stop_on_signals};

/// Longest wait between two drains of the ring buffer when nothing wakes
/// the reader: it bounds the memory the ring needs and the progress lag.
const DRAIN_INTERVAL: Duration = Duration::from_millis(250);

/// Rows of compiled unwind tables the BPF map holds (16 bytes each): room
/// for libc, libjvm and a few hundred other libraries.
const UNWIND_ROWS: u32 = 1 << 20;

/// The wait while a JVM is being attached, so that its agent is put to use
/// as soon as it is ready.
const ATTACH_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How long an interval's cut waits for the JVM agents to name the methods
/// its samples need: they answer within milliseconds, and sampling waits
/// meanwhile.
const INTERVAL_NAMES_WAIT: Duration = Duration::from_millis(200);

/// Why [`Recording::sample_until`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The time given is over.
    TimeUp,
    /// SIGINT or SIGTERM.
    Signal,
    /// Every `-p` target has exited.
    TargetsExited,
}

/// The stages of a recording while samples come in.
pub struct Recording {
    sampler: Sampler,
    /// Every sampled process's mappings, lent to the other stages.
    processes: ProcessRegistry,
    /// `None` with `--frame-pointers`.
    unwinder: Option<UnwindLoader>,
    /// Process images handed to the unwinder so far.
    images_loaded: usize,
    options: AggregateOptions,
    /// One per event recorded, in the order `-e` named them.
    aggregators: Vec<(Event, Aggregator)>,
    java: JavaProfiler,
    symbolizer: Symbolizer,
    /// Names kept from one interval to the next.
    names: AddressNames,
    pids: Vec<u32>,
    frequency_hz: u64,
    /// Ring records that did not parse (a bug of ours, never the ring
    /// being full).
    malformed: u64,
    started: Instant,
    /// Ring-full losses counted before the current interval.
    lost_before: u64,
}

impl Recording {
    /// Starts sampling as `args` says.
    pub fn start(args: &SamplingArgs) -> Result<Self> {
        let mut sampler = Sampler::start(&SamplerConfig {
            frequency_hz: args.frequency,
            pids: (!args.pids.is_empty()).then(|| args.pids.clone()),
            include_idle: args.idle,
            bpf_stats: args.bpf_stats,
            unwind_rows: if args.frame_pointers { 0 } else { UNWIND_ROWS },
        })?;
        let unwinder = if args.frame_pointers {
            None
        } else {
            let (rows, processes) = sampler.take_unwind_maps()?;
            Some(UnwindLoader::start(rows, processes)?)
        };
        let options = AggregateOptions {
            threads: args.threads,
            lines: args.lines,
            group_by: args.group_by,
        };
        let aggregators = event::distinct(&args.events)
            .into_iter()
            .map(|event| (event, Aggregator::new(options)))
            .collect();
        Ok(Self {
            sampler,
            processes: ProcessRegistry::default(),
            unwinder,
            images_loaded: 0,
            options,
            aggregators,
            java: JavaProfiler::new(!args.no_jvm, args.java_retransform)
                .with_java_events(JavaEventSettings::of(args)?),
            symbolizer: Symbolizer::new(args.lines),
            names: AddressNames::default(),
            pids: args.pids.clone(),
            frequency_hz: args.frequency,
            malformed: 0,
            started: Instant::now(),
            lost_before: 0,
        })
    }

    /// CPUs sampled.
    pub fn cpus(&self) -> usize {
        self.sampler.cpus().len()
    }

    /// Takes samples in until `stop` is raised, `until` has come, or every
    /// `-p` target has exited; with `progress`, shows how it goes on a
    /// terminal (`planned` is the whole recording's length, if known).
    pub fn sample_until(
        &mut self,
        stop: &AtomicBool,
        until: Option<Instant>,
        progress: Option<Option<Duration>>,
    ) -> Result<Stopped> {
        let progress = progress.map(Progress::start);
        let stopped = loop {
            self.take_in()?;
            let remaining = until.map(|until| until.saturating_duration_since(Instant::now()));
            if stop.load(Ordering::Relaxed) {
                break Stopped::Signal;
            }
            if remaining.is_some_and(|left| left.is_zero()) {
                break Stopped::TimeUp;
            }
            if all_exited(&self.pids) {
                break Stopped::TargetsExited;
            }
            if let Some(progress) = progress.as_ref().filter(|progress| progress.is_shown()) {
                let counters = self.sampler.counters()?;
                progress.update(
                    self.started.elapsed(),
                    self.aggregators
                        .iter()
                        .map(|(_, aggregator)| aggregator.samples())
                        .sum(),
                    self.processes.len(),
                    counters[Counter::LostRingFull as usize],
                );
            }
            let interval = if self.java.attaching() {
                ATTACH_POLL_INTERVAL
            } else {
                DRAIN_INTERVAL
            };
            self.sampler
                .wait(remaining.map_or(interval, |left| left.min(interval)));
        };
        if let Some(progress) = progress {
            progress.finish();
        }
        Ok(stopped)
    }

    /// Drains the ring into the stages: each sample's process to the
    /// registry (new ones to the unwinder), samples to aggregation (or to
    /// the Java side, to wait for their Java stacks), exec and exit to the
    /// registry, the unwinder and the Java side.
    fn take_in(&mut self) -> Result<()> {
        let Self {
            sampler,
            processes,
            unwinder,
            aggregators,
            java,
            malformed,
            ..
        } = self;
        let mut cpu = aggregators
            .iter_mut()
            .find(|(event, _)| *event == Event::Cpu)
            .map(|(_, aggregator)| aggregator);
        sampler.drain(|bytes| match Record::parse(bytes) {
            Ok(Record::Sample(sample)) => {
                let pid = sample.tgid;
                let image = processes.image_for(pid, &sample.comm);
                java.look_for_jvm(pid, processes.image(image));
                if sample.signalled {
                    java.await_java_stack(sample);
                } else if let Some(cpu) = cpu.as_deref_mut() {
                    cpu.add(MergedSample::native(image, sample));
                }
            }
            Ok(Record::Exec { tgid } | Record::Exit { tgid }) => {
                processes.forget(tgid);
                java.process_ended(tgid);
                if let Some(unwinder) = unwinder.as_ref() {
                    unwinder.forget(tgid);
                }
            }
            Err(_) => *malformed += 1,
        });
        for merged in java.collect(sampler, processes)? {
            if let Some(cpu) = cpu.as_deref_mut() {
                cpu.add(merged);
            }
        }
        count_java_events(&mut self.aggregators, java.take_java_events());
        self.load_new_images();
        Ok(())
    }

    /// Hands the processes registered since the last call to the unwinder.
    fn load_new_images(&mut self) {
        if let Some(unwinder) = &self.unwinder {
            for image in self.images_loaded..self.processes.len() {
                unwinder.load(self.processes.image(image));
            }
        }
        self.images_loaded = self.processes.len();
    }

    /// For `stoke continuous`: folds what was counted since `since` (the
    /// last cut) into a profile per event, and starts counting anew; then forgets
    /// the processes, files and JVMs that ended, so that what stoke holds
    /// stays bounded by what is alive. Samples still waiting for their
    /// Java stacks go into the next interval.
    pub fn cut(&mut self, since: Instant) -> Result<Vec<Profile>> {
        self.java.await_names(INTERVAL_NAMES_WAIT);
        let lost = self.sampler.counters()?[Counter::LostRingFull as usize];
        let aggregators = self
            .aggregators
            .iter_mut()
            .map(|(event, aggregator)| {
                let fresh = Aggregator::new(self.options);
                (*event, std::mem::replace(aggregator, fresh))
            })
            .collect();
        let summary = RecordingSummary {
            duration: since.elapsed(),
            started: SystemTime::now().checked_sub(since.elapsed()),
            frequency_hz: self.frequency_hz,
            cpus: self.cpus(),
            lost_ring_full: lost.saturating_sub(self.lost_before),
            processes: self.processes.len(),
            ..RecordingSummary::default()
        };
        self.lost_before = lost;
        let profiles = self.name_and_fold(aggregators, summary);
        self.load_new_images();
        self.processes.evict_ended();
        self.images_loaded = self.processes.len();
        self.java.release_ended();
        self.names.forget_unused();
        Ok(profiles)
    }

    /// Stops sampling, waits for the Java side's last answers, and names
    /// and folds the stacks: one profile per event, in `-e`'s order.
    pub fn finish(self) -> Result<Vec<Profile>> {
        let Self {
            sampler,
            mut processes,
            unwinder,
            mut aggregators,
            java,
            symbolizer,
            mut names,
            frequency_hz,
            malformed,
            started,
            ..
        } = self;
        let duration = started.elapsed();
        let cpus = sampler.cpus().len();
        let counters = sampler.counters()?;
        let bpf_time_per_sample = sampler.time_per_sample();
        // Detached first: no signal goes out while the last answers come.
        drop(sampler);
        let JavaResults {
            events: java_events,
            merged,
            symbols: java_symbols,
            summary: java_summary,
        } = java.finish(&mut processes);
        if let Some((_, cpu)) = aggregators
            .iter_mut()
            .find(|(event, _)| *event == Event::Cpu)
        {
            merged.into_iter().for_each(|merged| cpu.add(merged));
        }
        count_java_events(&mut aggregators, java_events);
        let naming = Instant::now();
        let addresses = aggregators
            .iter()
            .flat_map(|(_, aggregator)| aggregator.addresses(&processes));
        names.resolve(addresses, &symbolizer);
        let summary = RecordingSummary {
            duration,
            started: SystemTime::now().checked_sub(duration),
            frequency_hz,
            cpus,
            lost_ring_full: counters[Counter::LostRingFull as usize],
            malformed_records: malformed,
            partial_kernel_stacks: counters[Counter::KernelStackFailed as usize],
            partial_user_stacks: counters[Counter::UserStackFailed as usize],
            lost_lifecycle_records: counters[Counter::LostLifecycle as usize],
            idle_skipped: counters[Counter::IdleSkipped as usize],
            bpf_time_per_sample,
            processes: processes.len(),
            java: java_summary,
            unwind: unwinder.map(UnwindLoader::finish).unwrap_or_default(),
            symbolize_time: naming.elapsed(),
            symbolized_addresses: names.len(),
            ..RecordingSummary::default()
        };
        let java = |pid| java_symbols.get(&pid);
        Ok(aggregators
            .into_iter()
            .map(|(event, aggregator)| {
                let summary = RecordingSummary {
                    event,
                    ..summary.clone()
                };
                aggregator.fold(&processes, &names, &java, summary)
            })
            .collect())
    }

    /// Names the addresses of every aggregator's stacks and folds each into
    /// its event's profile.
    fn name_and_fold(
        &mut self,
        aggregators: Vec<(Event, Aggregator)>,
        mut summary: RecordingSummary,
    ) -> Vec<Profile> {
        let started = Instant::now();
        let addresses = aggregators
            .iter()
            .flat_map(|(_, aggregator)| aggregator.addresses(&self.processes));
        self.names.resolve(addresses, &self.symbolizer);
        summary.symbolize_time = started.elapsed();
        summary.symbolized_addresses = self.names.len();
        let java = &self.java;
        aggregators
            .into_iter()
            .map(|(event, aggregator)| {
                let summary = RecordingSummary {
                    event,
                    ..summary.clone()
                };
                aggregator.fold(
                    &self.processes,
                    &self.names,
                    &|pid| java.symbols_of(pid),
                    summary,
                )
            })
            .collect()
    }
}

/// With `-p`, once every target has exited there is nothing left to sample.
fn all_exited(pids: &[u32]) -> bool {
    !pids.is_empty()
        && pids
            .iter()
            .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Counts each Java event (allocation, lock) in its event's aggregation.
fn count_java_events(aggregators: &mut [(Event, Aggregator)], events: Vec<JavaEventSample>) {
    for java_event in events {
        let event = JavaEventSettings::event_of(java_event.kind);
        if let Some((_, aggregator)) = aggregators.iter_mut().find(|(each, _)| *each == event) {
            aggregator.add_java_event(java_event);
        }
    }
}
