//! A recording in progress, for `stoke record` and `stoke continuous`: the
//! stages in order. While samples come in, their processes are registered
//! (and their files' unwind tables loaded), JVM samples get their Java
//! frames, and the raw stacks are counted; then every distinct address is
//! named once, and the named stacks are folded into a [`Profile`].

mod events;
mod setup;
mod targets;

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime},
};

use anyhow::Result;
use profiler_common::Counter;

pub use self::setup::{announce, check_sampling, raise_open_file_limit, stop_on_signals};
use self::{events::EventAggregators, targets::Targets};
use crate::{
    aggregate::{AggregateOptions, Aggregator},
    cli::SamplingArgs,
    event::{self, Event},
    interpreter::python::Pythons,
    jvm::{
        profiler::{JavaProfiler, JavaResults},
        running,
    },
    model::{JavaSummary, Measure, MergedSample, Profile, RecordingSummary},
    process::ProcessRegistry,
    progress::Progress,
    sample::{
        counter_events::Rate,
        ring_record::Record,
        sampler::{CounterTotals, OffCpuConfig, OffCpuCounting, Sampler, SamplerConfig},
        thread_timers::{fresh_cookie, trap_caught},
    },
    symbolize::{kernel_names::KernelNamer, names::AddressNames, Symbolizer},
    unwind::loader::{UnwindLoader, UnwindMaps},
};

/// Longest wait between two drains of the ring buffer when nothing wakes
/// the reader: it bounds the memory the ring needs and the progress lag.
const DRAIN_INTERVAL: Duration = Duration::from_millis(250);

/// Rows of compiled unwind tables the BPF map holds (8 bytes each): room
/// for libc, libjvm and a few hundred other libraries.
const UNWIND_ROWS: u32 = 1 << 20;

/// Most off-CPU records each CPU sends per second. Taking a blocked
/// thread's stacks costs a few microseconds, so this bounds their cost to
/// about 1% of a CPU in a storm of long waits; waits past it are counted
/// in the summary as over budget.
const OFFCPU_RECORDS_PER_CPU_SECOND: u32 = 2000;

/// The wait while a JVM is being attached, so that its agent is put to use
/// as soon as it is ready.
const ATTACH_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Longest wait between two reads of the agents' Java event rings while
/// they record allocations or locks: a ring holds 2048 events, which a JVM
/// allocating 4 GB/s fills in a quarter of a second at the default
/// interval.
const JAVA_EVENTS_DRAIN_INTERVAL: Duration = Duration::from_millis(50);

/// How long an interval's cut waits for the JVM agents to name the methods
/// its samples need: they answer within milliseconds, and sampling waits
/// meanwhile.
const INTERVAL_NAMES_WAIT: Duration = Duration::from_millis(200);

/// How often the timed JVMs' SIGTRAP handlers are checked in /proc (a
/// status file each): the sampler checks the handler at every sample and
/// sends SIGURG meanwhile, so this only moves a process back to the
/// CPUs' events; reading the files at every drain would be a large share
/// of stoke's CPU. The events of ended threads are closed as often, for
/// the same reason (a lookup of each timed thread in the sampler's map).
const TRAP_CHECK_INTERVAL: Duration = Duration::from_secs(1);

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
    /// Processes that exec'd or exited since the unwinder was last told.
    ended: Vec<u32>,
    /// What each event counted since the start or the last cut.
    counted: EventAggregators,
    java: JavaProfiler,
    pythons: Pythons,
    symbolizer: Symbolizer,
    /// Names kept from one interval to the next.
    names: AddressNames,
    /// The `-p` targets.
    targets: Targets,
    /// What to count, each once, in `-e` order: a profile each.
    events: Vec<Event>,
    frequency_hz: u64,
    /// Ring records that did not parse (a bug of ours, never the ring
    /// being full).
    malformed: u64,
    /// Most JVM threads timed by events of their own at once.
    timed_threads: usize,
    /// When the timed JVMs' SIGTRAP handlers were last checked.
    traps_checked: Option<Instant>,
    started: Instant,
    /// The sampler's counters when the current interval began.
    counters_before: CounterTotals,
}

impl Recording {
    /// Starts sampling as `args` says.
    pub fn start(args: &SamplingArgs) -> Result<Self> {
        let events = event::distinct(&args.events);
        let mut sampler = Sampler::load(&SamplerConfig {
            frequency_hz: args.frequency,
            pids: (!args.pids.is_empty()).then(|| args.pids.clone()),
            include_idle: args.idle,
            bpf_stats: args.bpf_stats,
            legacy: args.legacy_bpf,
            unwind_rows: if args.frame_pointers { 0 } else { UNWIND_ROWS },
            // JVMs are found, and their agents loaded, through their CPU
            // samples: the Java events need them too.
            cpu: events.iter().any(|event| {
                matches!(event, Event::Cpu | Event::Wall | Event::Alloc | Event::Lock)
            }),
            cpu_java_stacks: events
                .iter()
                .any(|event| matches!(event, Event::Cpu | Event::Wall) || event.counted()),
            offcpu: offcpu_config(args, &events),
            counters: self::events::counters(&events),
            counter_rate: args
                .period
                .map_or(Rate::Frequency(args.frequency), Rate::Period),
        })?;
        if let Some(limits) = sampler.kernel_limits() {
            eprintln!("stoke: warning: {limits}");
        }
        let unwinder = if args.frame_pointers || !sampler.unwinds_tables() {
            None
        } else {
            Some(UnwindLoader::start(UnwindMaps::take_from(
                sampler.object_mut(),
            )?)?)
        };
        let python_map = if args.no_python {
            None
        } else {
            Some(sampler.take_python_map()?)
        };
        let pythons = Pythons::new(python_map, args.lines)?;
        let symbolizer = Symbolizer::new(args.lines)
            .with_kernel_namer(KernelNamer::take_from(sampler.object_mut()));
        let options = AggregateOptions {
            threads: args.threads,
            lines: args.lines,
            group_by: args.group_by,
        };
        let mut java = JavaProfiler::new(!args.no_jvm, args.java_retransform)
            .with_java_events(events::java_event_settings(args)?);
        if !args.no_jvm {
            let running = if args.pids.is_empty() {
                running::java_launchers()
            } else {
                args.pids.clone()
            };
            java.adopt_before_sampling(&running, &mut sampler)?;
        }
        // A JVM adopted already keeps the cookie its agent knows.
        sampler.start_sampling(|pid| {
            java.trap(pid, fresh_cookie)
                .map_or_else(fresh_cookie, |trap| trap.cookie)
        })?;
        Ok(Self {
            sampler,
            processes: ProcessRegistry::default(),
            unwinder,
            images_loaded: 0,
            ended: Vec::new(),
            counted: EventAggregators::new(options, &events, args),
            java,
            pythons,
            symbolizer,
            names: AddressNames::default(),
            targets: Targets::watch(&args.pids),
            events,
            frequency_hz: args.frequency,
            malformed: 0,
            timed_threads: 0,
            traps_checked: None,
            started: Instant::now(),
            counters_before: CounterTotals::default(),
        })
    }

    /// Keeps the files named in one interval copied and indexed for the
    /// next ones, within `budget` bytes of copies (`stoke continuous`).
    pub fn keep_files_prepared(&mut self, budget: u64) {
        self.symbolizer.keep_files_prepared(budget);
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
            if self.targets.all_exited() {
                break Stopped::TargetsExited;
            }
            if let Some(progress) = progress.as_ref().filter(|progress| progress.is_shown()) {
                let counters = self.sampler.counters()?;
                progress.update(
                    self.started.elapsed(),
                    self.counted.cpu_samples(),
                    self.processes.processes_seen(),
                    counters[Counter::LostRingFull as usize],
                );
            }
            let interval = if self.java.attaching() {
                ATTACH_POLL_INTERVAL
            } else if self.java.recording_java_events() {
                JAVA_EVENTS_DRAIN_INTERVAL
            } else {
                DRAIN_INTERVAL
            };
            let next_look = self
                .java
                .next_look()
                .map(|look| look.saturating_duration_since(Instant::now()));
            let interval = next_look.map_or(interval, |look| look.min(interval));
            self.sampler.wait(
                remaining.map_or(interval, |left| left.min(interval)),
                self.targets.exit_signals(),
            );
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
            ended,
            counted,
            java,
            pythons,
            malformed,
            traps_checked,
            targets,
            ..
        } = self;
        let mut to_time = Vec::new();
        // Exec and exit, for the sampler: a `-p` target's events, the
        // threads it could not time.
        let mut lifecycle = Vec::new();
        sampler.drain(|bytes| match Record::parse(bytes) {
            Ok(Record::Sample(sample)) => {
                let pid = sample.tgid;
                if sample.measure == Measure::Cpu {
                    targets.sampled(pid);
                }
                let image = processes.image_of(&sample);
                // JVMs are found through their threads' waits too: an
                // off-CPU recording gets their Java frames. A process seen
                // ending, maybe gone, is none to attach to.
                if processes.is_live(image) {
                    java.look_for_jvm(pid, processes.image(image));
                }
                if sample.signalled {
                    to_time.push((sample.tgid, sample.tid));
                    java.await_java_stack(sample);
                } else {
                    java.not_signalled(&sample);
                    let python = pythons.name(pid, &sample.python);
                    counted.add(MergedSample::with_python(image, sample, python));
                }
            }
            Ok(Record::Exec { tgid }) => {
                lifecycle.push((tgid, false));
                pythons.ended(tgid);
                end_process(processes, java, ended, tgid, false);
            }
            Ok(Record::Exit { tgid }) => {
                lifecycle.push((tgid, true));
                pythons.ended(tgid);
                end_process(processes, java, ended, tgid, true);
            }
            Err(_) => *malformed += 1,
        });
        for (pid, exited) in lifecycle {
            if exited {
                sampler.process_exit(pid);
            } else {
                sampler.process_exec(pid);
            }
        }
        // An agent whose SIGTRAP handler was replaced, a debugger come
        // since: the process's threads get their Java stacks by SIGURG
        // again (sampled by the CPUs' events, or with `-p` by the
        // target's, which then send no SIGTRAP).
        let check_traps = traps_checked.is_none_or(|at| at.elapsed() >= TRAP_CHECK_INTERVAL);
        if check_traps {
            // As seldom: a map lookup for every timed thread, and a
            // thread id reused before it is only not timed yet.
            sampler.prune_timed_threads()?;
        }
        for pid in sampler.timed_processes() {
            let trap = java.trap(pid, || sampler.trap_cookie(pid));
            if trap.is_none() || (check_traps && !trap_caught(&format!("/proc/{pid}/status"))) {
                sampler.untime_process(pid)?;
            }
        }
        if check_traps {
            *traps_checked = Some(Instant::now());
        }
        to_time.sort_unstable();
        to_time.dedup();
        for (pid, tid) in to_time {
            if sampler.thread_timed((pid, tid)) {
                continue;
            }
            if let Some(trap) = java.trap(pid, || sampler.trap_cookie(pid)) {
                sampler.time_thread((pid, tid), trap)?;
            }
        }
        self.timed_threads = self.timed_threads.max(sampler.timed_threads());
        for merged in java.collect(sampler, processes)? {
            counted.add(merged);
        }
        counted.add_java_events(java.take_java_events());
        self.load_new_images();
        Ok(())
    }

    /// Tells the unwinder, in one message (one wakeup of its thread), of
    /// the processes that ended and of those registered since the last
    /// call, but for those that ended since: their tables would stay in
    /// the kernel's map for good.
    fn load_new_images(&mut self) {
        let ended = std::mem::take(&mut self.ended);
        for image in self.images_loaded..self.processes.len() {
            if self.processes.is_live(image) {
                self.pythons.found(self.processes.image(image));
            }
        }
        if let Some(unwinder) = &self.unwinder {
            let new = (self.images_loaded..self.processes.len())
                .filter(|&image| self.processes.is_live(image))
                .map(|image| self.processes.image(image));
            unwinder.update(ended, new);
        }
        self.images_loaded = self.processes.len();
    }

    /// For `stoke continuous`: folds what was counted since `since` (the
    /// last cut) into a profile per event, and starts counting anew; then forgets
    /// the processes, files and JVMs that ended, so that what stoke holds
    /// stays bounded by what is alive. Samples still waiting for their
    /// Java stacks go into the next interval.
    pub fn cut(&mut self, since: Instant) -> Result<Vec<Profile>> {
        let waits_in_progress = self.take_waits_in_progress()?;
        self.java.await_names(INTERVAL_NAMES_WAIT);
        let counters = self.sampler.counters()?;
        let mut since_cut = counters;
        for (count, before) in since_cut.iter_mut().zip(self.counters_before) {
            *count = count.saturating_sub(before);
        }
        self.counters_before = counters;
        let counted = self.counted.take();
        let summary = RecordingSummary {
            duration: since.elapsed(),
            started: SystemTime::now().checked_sub(since.elapsed()),
            frequency_hz: self.frequency_hz,
            cpus: self.cpus(),
            lost_ring_full: since_cut[Counter::LostRingFull as usize],
            lost_lifecycle_records: since_cut[Counter::LostLifecycle as usize],
            processes: self.processes.processes_seen(),
            waits_in_progress,
            offcpu_user_stacks: self.sampler.offcpu_user_stacks(),
            kernel_limits: self.sampler.kernel_limits(),
            ..RecordingSummary::default()
        };
        let events = std::mem::take(&mut self.events);
        let profiles = counted.fold(&events, summary, &since_cut, |aggregator, summary| {
            self.name_and_fold(aggregator, summary)
        });
        self.events = events;
        // An exit record lost to a full ring would leave its process
        // registered for good (its tables loaded, its JVM's memory held):
        // after a loss, processes whose /proc entry is gone have ended.
        if since_cut[Counter::LostLifecycle as usize] > 0 {
            for pid in self.processes.live_but_gone() {
                end_process(
                    &mut self.processes,
                    &mut self.java,
                    &mut self.ended,
                    pid,
                    true,
                );
                self.pythons.ended(pid);
            }
        }
        self.load_new_images();
        self.processes.evict_ended();
        self.images_loaded = self.processes.len();
        self.java.release_ended();
        self.names.forget_unused();
        self.symbolizer.end_interval();
        Ok(profiles)
    }

    /// The JVMs' counts so far, and how many JVMs keep native stacks only.
    pub fn java_counts(&self) -> (&JavaSummary, usize) {
        self.java.counts()
    }

    /// Stops sampling, waits for the Java side's last answers, and names
    /// and folds the stacks: a profile per event, in `-e` order.
    pub fn finish(mut self) -> Result<Vec<Profile>> {
        let waits_in_progress = self.take_waits_in_progress()?;
        let Self {
            sampler,
            mut processes,
            unwinder,
            mut counted,
            java,
            pythons,
            symbolizer,
            mut names,
            frequency_hz,
            malformed,
            started,
            events,
            timed_threads,
            targets,
            ..
        } = self;
        let duration = started.elapsed();
        if events.contains(&Event::Cpu) {
            for line in targets.undersampled(frequency_hz) {
                eprintln!("stoke: warning: {line}");
            }
        }
        let cpus = sampler.cpus().len();
        let counters = sampler.counters()?;
        let bpf_time_per_sample = sampler.time_per_sample();
        let offcpu_user_stacks = sampler.offcpu_user_stacks();
        let kernel_limits = sampler.kernel_limits();
        // Detached first: no signal goes out while the last answers come.
        drop(sampler);
        let JavaResults {
            events: java_events,
            merged,
            symbols: java_symbols,
            summary: java_summary,
        } = java.finish(&mut processes);
        for merged in merged {
            counted.add(merged);
        }
        counted.add_java_events(java_events);
        let naming = Instant::now();
        names.resolve(counted.addresses(&processes), &symbolizer);
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
            timed_threads,
            processes: processes.processes_seen(),
            java: java_summary,
            python: pythons.summary(),
            unwind: unwinder.map(UnwindLoader::finish).unwrap_or_default(),
            symbolize_time: naming.elapsed(),
            symbolized_addresses: names.len(),
            waits_in_progress,
            offcpu_user_stacks,
            kernel_limits,
            ..RecordingSummary::default()
        };
        let java = |pid| java_symbols.get(&pid);
        Ok(
            counted.fold(&events, summary, &counters, |aggregator, summary| {
                aggregator.fold(&processes, &names, &java, summary)
            }),
        )
    }

    /// With off-CPU time recorded, takes in the waits still going on now,
    /// up to now (the rest of each counts at its end or the next cut:
    /// [`crate::sample::waiting`]), the ring drained between batches: how
    /// many.
    fn take_waits_in_progress(&mut self) -> Result<u64> {
        let Some(mut waits) = self.sampler.waits_in_progress()? else {
            return Ok(0);
        };
        while waits.next_batch()? {
            self.take_in()?;
        }
        self.take_in()?;
        Ok(waits.waits)
    }

    /// Names the addresses of `aggregator`'s stacks and folds them.
    fn name_and_fold(&mut self, aggregator: Aggregator, mut summary: RecordingSummary) -> Profile {
        let started = Instant::now();
        self.names
            .resolve(aggregator.addresses(&self.processes), &self.symbolizer);
        summary.symbolize_time = started.elapsed();
        summary.symbolized_addresses = self.names.len();
        let java = &self.java;
        aggregator.fold(
            &self.processes,
            &self.names,
            &|pid| java.symbols_of(pid),
            summary,
        )
    }
}

/// What off-CPU waits the sampler records: with `-e offcpu`, every
/// profiled thread's longer than `--offcpu-min`; with `-e wall`, every
/// profiled thread's time off the CPU, the waits shorter than the sampling
/// period (or `--offcpu-min` with offcpu) sampled; with `-e runqueue`, the
/// time on the run queue alone, sampled as for wall; with `-e lock` alone,
/// the JVMs' longer than `--lock-threshold`, for their parks on
/// java.util.concurrent locks.
fn offcpu_config(args: &SamplingArgs, events: &[Event]) -> Option<OffCpuConfig> {
    let wall = events.contains(&Event::Wall);
    let offcpu = events.contains(&Event::Offcpu);
    let counting = if wall {
        OffCpuCounting::Wall
    } else {
        OffCpuCounting::Waits
    };
    let config = |min_ns, jvms_only, counting| OffCpuConfig {
        min_ns,
        records_per_cpu_second: OFFCPU_RECORDS_PER_CPU_SECOND,
        jvms_only,
        counting,
    };
    let period = event::period_ns(args.frequency);
    // Alone of the three ([`setup::check_sampling`]).
    if events.contains(&Event::Runqueue) {
        return Some(config(period, false, OffCpuCounting::RunQueue));
    }
    match (offcpu, wall) {
        (true, true) => Some(config(args.offcpu_min.min(period), false, counting)),
        (true, false) => Some(config(args.offcpu_min, false, counting)),
        (false, true) => Some(config(period, false, counting)),
        (false, false) if events.contains(&Event::Lock) => {
            Some(config(args.lock_threshold, true, counting))
        }
        (false, false) => None,
    }
}

/// A process exited, or replaced its image by exec (`exited` false): the
/// registry and the Java side let it go, and the unwinder at its next
/// update.
fn end_process(
    processes: &mut ProcessRegistry,
    java: &mut JavaProfiler,
    ended: &mut Vec<u32>,
    tgid: u32,
    exited: bool,
) {
    if exited {
        processes.exited(tgid);
    } else {
        processes.forget(tgid);
    }
    java.process_ended(tgid);
    ended.push(tgid);
}
