//! Java profiling during a recording: finds the JVMs among the sampled
//! processes, loads the agent into each (on a thread of its own, so that
//! sampling never waits for a JVM), lets the BPF sampler signal the JVMs
//! whose agent is ready, and turns the agents' answers into Java frames:
//! the samples it was handed come back as [`MergedSample`]s. By job:
//! [`schedule`] (when to look for JVMs and attach), [`frames`] (the Java
//! frames of each sample), [`dropped`] (the stacks an agent sent in vain).

mod dropped;
mod frames;
mod schedule;

#[cfg(test)]
pub(crate) use schedule::maps_libjvm;

use std::{
    sync::mpsc::{self, Receiver, Sender},
    time::{Duration, Instant},
};

use anyhow::Result;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use profiler_common::jvm::AgentState;

use self::{dropped::Dropped, schedule::Recheck};
use super::{
    agent::attach_agent,
    agent_memory::AgentMemory,
    coverage::Coverage,
    java_events::{self, ClassNames, EventStacks, JavaEventSample, JavaEventSettings},
    merge::{Merger, Rejected},
    symbols::JavaSymbols,
    thread_ids::ThreadIds,
};
use crate::{
    model::{JavaSummary, MergedSample, Sample},
    process::ProcessRegistry,
    sample::{monotonic_ns, sampler::Sampler, thread_timers::Trap},
};

/// How long, after sampling stops, the agents get to answer the last
/// signals and name the last methods.
const FINAL_ANSWER_WAIT: Duration = Duration::from_millis(300);

/// How long, at most, the agents get to name the methods asked about last;
/// usually they answer within a few milliseconds, but a busy host can hold
/// their thread back.
const FINAL_NAMES_WAIT: Duration = Duration::from_secs(2);

/// Most JVMs said, one line each, to keep native stacks: thousands of
/// processes mapping a libjvm.so get one line for all the others.
const MAX_WARNINGS: usize = 20;

/// How long the agents may make no progress at all with the last names
/// before stoke stops waiting for them: a live agent answers at once (stoke
/// rings its doorbell), and one that answers nothing (a process posing as
/// a JVM) must not hold the recording's end back.
const FINAL_NAMES_STALL: Duration = Duration::from_millis(300);

/// One JVM with a working agent.
struct Jvm {
    memory: AgentMemory,
    symbols: JavaSymbols,
    /// The JVM's own thread ids (its pid namespace) to the host's.
    threads: ThreadIds,
    /// Java stacks from the agent dropped on arrival.
    dropped: Dropped,
    signalled: bool,
    /// Java stacks cut short after their innermost method, by method.
    cut_short: HashMap<u64, u32>,
    /// The agent's count of dropped Java events when the recording began.
    java_events_dropped: u64,
    /// The classes its Java events named.
    classes: ClassNames,
    /// The stacks of its Java events, with their frames' kinds.
    event_stacks: EventStacks,
}

/// The result of loading the agent into one JVM.
struct Attached {
    pid: u32,
    result: Result<AgentMemory>,
    took: Duration,
    /// When the attach began (CLOCK_MONOTONIC): an exec or exit of the
    /// process after it means the agent's process is gone.
    began_ns: u64,
}

/// Java profiling for one recording.
pub struct JavaProfiler {
    to_attach: Option<Sender<u32>>,
    attached: Receiver<Attached>,
    /// Processes looked at, and when to look again at those that were no
    /// JVM yet: a starting JVM maps libjvm.so (and installs its signal
    /// handlers) only after its first samples.
    considered: HashMap<u32, Recheck>,
    /// The JVMs whose attach was asked for and not yet answered.
    attaching: HashSet<u32>,
    /// What the summary says of JVM samples never signalled, and how soon
    /// JVMs got Java frames.
    coverage: Coverage,
    /// Attaches retried because the JVM was still starting: how often, and
    /// the last failure, said at the end if no retry succeeds.
    attach_retries: HashMap<u32, (u32, String)>,
    jvms: HashMap<u32, Jvm>,
    /// JVMs whose process ended, released at the next
    /// [`Self::release_ended`].
    ended: Vec<u32>,
    merger: Merger,
    summary: JavaSummary,
    /// Whether stacks cut short after one method have their class
    /// retransformed: a deoptimization a production JVM may not want.
    retransform: bool,
    /// JVMs said to keep native stacks only.
    warnings: usize,
    /// The Java events (allocations, locks) asked of every agent.
    event_settings: JavaEventSettings,
    /// Java events taken and not yet handed over.
    events: Vec<JavaEventSample>,
}

impl JavaProfiler {
    /// Starts the attach thread; with `enabled` false, JVMs are left alone.
    /// With `retransform`, the classes of methods compiled before the
    /// agent came are retransformed, so that HotSpot recompiles them with
    /// the debug information whole stacks need (`--java-retransform`).
    pub fn new(enabled: bool, retransform: bool) -> Self {
        let (to_attach, requests) = mpsc::channel::<u32>();
        let (results, attached) = mpsc::channel();
        if enabled {
            std::thread::Builder::new()
                .name("stoke-attach".into())
                .spawn(move || {
                    for pid in requests {
                        let started = Instant::now();
                        let began_ns = monotonic_ns();
                        let result = attach_agent(pid);
                        let took = started.elapsed();
                        let attached = Attached {
                            pid,
                            result,
                            took,
                            began_ns,
                        };
                        if results.send(attached).is_err() {
                            break;
                        }
                    }
                })
                .expect("spawning the attach thread");
        }
        Self {
            to_attach: enabled.then_some(to_attach),
            attached,
            considered: HashMap::new(),
            attaching: HashSet::new(),
            coverage: Coverage::new(monotonic_ns()),
            attach_retries: HashMap::new(),
            jvms: HashMap::new(),
            ended: Vec::new(),
            merger: Merger::default(),
            summary: JavaSummary {
                disabled: !enabled,
                ..JavaSummary::default()
            },
            retransform,
            warnings: 0,
            event_settings: JavaEventSettings::default(),
            events: Vec::new(),
        }
    }

    /// Asks every agent for Java allocation or lock events as `settings`
    /// says, for the whole recording.
    pub fn with_java_events(mut self, settings: JavaEventSettings) -> Self {
        self.event_settings = settings;
        self
    }

    /// The Java events taken since the last call.
    pub fn take_java_events(&mut self) -> Vec<JavaEventSample> {
        std::mem::take(&mut self.events)
    }

    /// Whether a JVM is being attached: its samples stay native until its
    /// agent is adopted, so the caller should poll again soon.
    pub fn attaching(&self) -> bool {
        !self.attaching.is_empty()
    }

    /// Whether agents are recording Java events: their rings fill
    /// between two reads at the JVMs' pace, not the sampler's, so the
    /// caller should read them more often.
    pub fn recording_java_events(&self) -> bool {
        self.event_settings.wanted != 0 && !self.jvms.is_empty()
    }

    /// A sample that signalled a JVM thread: it waits for its Java stack.
    pub fn await_java_stack(&mut self, sample: Sample) {
        self.merger.add_native(sample);
    }

    /// How per-thread events reach JVM `pid`'s agent, if it takes their
    /// SIGTRAP (with `preferred` as their cookie if none was chosen yet).
    pub fn trap(&self, pid: u32, preferred: impl FnOnce() -> u64) -> Option<Trap> {
        self.jvms.get(&pid)?.memory.trap(preferred)
    }

    /// A sample that signalled no thread: if it is a JVM's, the summary
    /// counts it as missing its Java stack, and why.
    pub fn not_signalled(&mut self, sample: &Sample) {
        let adopted = self.jvms.contains_key(&sample.tgid);
        self.coverage
            .unsignalled(sample.tgid, adopted, &mut self.summary);
    }

    /// Takes in what the attach thread and the agents have, and hands back
    /// the samples whose Java stacks came or will not come.
    pub fn collect(
        &mut self,
        sampler: &mut Sampler,
        processes: &mut ProcessRegistry,
    ) -> Result<Vec<MergedSample>> {
        while let Ok(attached) = self.attached.try_recv() {
            self.attaching.remove(&attached.pid);
            self.profile_attached(attached, sampler)?;
        }
        self.look_at_starting();
        for (&pid, jvm) in &mut self.jvms {
            if jvm.signalled && jvm.memory.state() != AgentState::Ready {
                sampler.forbid_signals(pid)?;
                jvm.signalled = false;
                eprintln!("stoke: warning: JVM {pid}: its signal handler was replaced; its stacks stay native from now on");
            }
            drain_agent(pid, jvm, &mut self.merger);
        }
        self.take_events(processes);
        Ok(self.merge_ready(monotonic_ns(), false, processes))
    }

    /// After sampling: waits briefly for the last answers, then hands back
    /// every remaining sample and the JVMs' symbols.
    pub fn finish(mut self, processes: &mut ProcessRegistry) -> JavaResults {
        for (pid, (_, last)) in std::mem::take(&mut self.attach_retries) {
            self.warn_native_only(pid, &last);
        }
        if self.warnings > MAX_WARNINGS {
            eprintln!(
                "stoke: warning: {} more processes that looked like JVMs keep native stacks only (only the first {MAX_WARNINGS} said why)",
                self.warnings - MAX_WARNINGS
            );
        }
        for (pid, jvm) in &mut self.jvms {
            jvm.memory.want_java_events(0, 0, 0);
            // Dropped by the agent (a slot mid-write when the ring came
            // round to it), or lost to this stoke (overwritten before read).
            let dropped = (jvm.memory.java_events_dropped())
                .saturating_sub(jvm.java_events_dropped)
                .saturating_add(jvm.memory.java_events_lost());
            if dropped > 0 {
                eprintln!("stoke: warning: JVM {pid}: {dropped} allocation or lock events were lost, its agent's ring overrun (raise --alloc-interval or --lock-threshold)");
            }
        }
        std::thread::sleep(FINAL_ANSWER_WAIT);
        self.take_events(processes);
        for (&pid, jvm) in &mut self.jvms {
            drain_agent(pid, jvm, &mut self.merger);
            let events = jvm.symbols.dropped();
            jvm.dropped.lost = jvm.memory.samples_lost();
            jvm.dropped.warn(pid, events);
            jvm.dropped.count_in(&mut self.summary, events);
        }
        let merged = self.merge_ready(monotonic_ns(), true, processes);
        // The names asked for just now need one more round trip.
        self.await_names(FINAL_NAMES_WAIT);
        self.summary
            .attach_ms
            .sort_unstable_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
        JavaResults {
            events: std::mem::take(&mut self.events),
            merged,
            symbols: self
                .jvms
                .into_iter()
                .map(|(pid, jvm)| (pid, jvm.symbols))
                .collect(),
            summary: self.summary,
        }
    }

    /// The counts so far, and how many JVMs were said to keep native
    /// stacks only.
    pub fn counts(&self) -> (&JavaSummary, usize) {
        (&self.summary, self.warnings)
    }

    /// Waits, at most `longest`, until the agents named every method asked
    /// about, or stop making progress with them.
    pub fn await_names(&mut self, longest: Duration) {
        let deadline = Instant::now() + longest;
        let mut progress = (self.progress(), Instant::now());
        while Instant::now() < deadline
            && progress.1.elapsed() < FINAL_NAMES_STALL
            && self.jvms.values().any(|jvm| !jvm.symbols.all_described())
        {
            std::thread::sleep(Duration::from_millis(20));
            for jvm in self.jvms.values_mut() {
                jvm.memory.drain_events(|event| jvm.symbols.apply(event));
            }
            let now = self.progress();
            if now != progress.0 {
                progress = (now, Instant::now());
            }
        }
    }

    /// What the agent of JVM `pid` told so far.
    pub fn symbols_of(&self, pid: u32) -> Option<&JavaSymbols> {
        self.jvms.get(&pid).map(|jvm| &jvm.symbols)
    }

    /// Process `pid` exec'd or exited: a process with its pid is looked at
    /// anew, and its JVM (if it was one) is released at the next
    /// [`Self::release_ended`].
    pub fn process_ended(&mut self, pid: u32) {
        self.coverage.ended(pid);
        self.considered.remove(&pid);
        self.attach_retries.remove(&pid);
        if self.jvms.contains_key(&pid) {
            self.ended.push(pid);
        }
    }

    /// Releases the JVMs whose processes ended (their agent memory, their
    /// symbols): for `stoke continuous`, once the interval that may still
    /// name their frames is folded.
    pub fn release_ended(&mut self) {
        for pid in std::mem::take(&mut self.ended) {
            self.jvms.remove(&pid);
        }
    }

    /// Takes the Java events every agent recorded, and asks for the names
    /// of their frames.
    fn take_events(&mut self, processes: &mut ProcessRegistry) {
        if self.event_settings.wanted == 0 {
            return;
        }
        let mut wanted = HashMap::new();
        for (&pid, jvm) in &mut self.jvms {
            let image = processes.image_for(pid, "");
            let ids = wanted.entry(pid).or_insert_with(Vec::new);
            self.events.extend(java_events::take(
                &mut jvm.memory,
                &jvm.symbols,
                &mut jvm.threads,
                (&mut jvm.classes, &mut jvm.event_stacks),
                (pid, image),
                &self.event_settings,
                ids,
            ));
        }
        self.request_names(wanted);
    }

    /// Says why JVM `pid` keeps native stacks only, and keeps the reason
    /// for the summary; after [`MAX_WARNINGS`], only counts it.
    fn warn_native_only(&mut self, pid: u32, why: &str) {
        self.warn(pid, why, "its stacks stay native-only");
    }

    /// Says why JVM `pid` has no Java stacks and what becomes of them, and
    /// keeps the reason for the summary; after [`MAX_WARNINGS`], only
    /// counts it.
    fn warn(&mut self, pid: u32, why: &str, outcome: &str) {
        self.warnings += 1;
        if self.warnings <= MAX_WARNINGS {
            eprintln!("stoke: warning: JVM {pid}: {why}; {outcome}");
            self.summary.not_attached.push((pid, why.to_owned()));
        }
    }

    /// How far the agents got with stoke's requests and their event logs,
    /// all JVMs together: while it moves, names are still coming.
    fn progress(&self) -> u64 {
        self.jvms
            .values()
            .map(|jvm| jvm.memory.progress())
            .fold(0, u64::wrapping_add)
    }
}

/// What the Java side hands over at the end of a recording.
pub struct JavaResults {
    /// The Java events taken last.
    pub events: Vec<JavaEventSample>,
    /// The samples still waiting for their Java stacks at the end.
    pub merged: Vec<MergedSample>,
    /// What each JVM's agent told, by pid.
    pub symbols: HashMap<u32, JavaSymbols>,
    /// Counts for the recording's summary.
    pub summary: JavaSummary,
}

/// Drains one JVM's events and Java samples into the symbols and merger.
fn drain_agent(pid: u32, jvm: &mut Jvm, merger: &mut Merger) {
    jvm.memory.drain_events(|event| jvm.symbols.apply(event));
    let now = monotonic_ns();
    let (threads, dropped) = (&mut jvm.threads, &mut jvm.dropped);
    jvm.memory.drain_samples(|sample| {
        let tid = threads.host_tid(pid, sample.tid);
        match merger.add_java(pid, tid, sample, now) {
            Ok(()) => {}
            Err(Rejected::Future) => dropped.future += 1,
            Err(Rejected::Stale) => dropped.stale += 1,
            Err(Rejected::UnknownThread) => dropped.unknown_thread += 1,
            Err(Rejected::Full) => dropped.full += 1,
        }
    });
}
