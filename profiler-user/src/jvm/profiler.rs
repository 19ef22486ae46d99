//! Java profiling during a recording: finds the JVMs among the sampled
//! processes, loads the agent into each (on a thread of its own, so that
//! sampling never waits for a JVM), lets the BPF sampler signal the JVMs
//! whose agent is ready, and turns the agents' answers into Java frames:
//! the samples it was handed come back as [`MergedSample`]s.

use std::{
    borrow::Cow,
    sync::mpsc::{self, Receiver, Sender},
    time::{Duration, Instant},
};

use anyhow::Result;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use profiler_common::jvm::{
    agct_failure, AgentState, JavaFrame, AGCT_NO_JAVA_FRAME, AGCT_UNKNOWN_NOT_JAVA,
    NOT_A_JAVA_THREAD, RECOMPILE_REQUEST, SIGNAL,
};

use super::{
    agent::attach_agent,
    agent_memory::{AgentMemory, JavaSample},
    attach,
    coverage::{Coverage, MAX_JVMS_TIMED},
    java_events::{self, ClassNames, EventStacks, JavaEventSample, JavaEventSettings},
    merge::{Merger, Outcome, Rejected},
    symbols::JavaSymbols,
    thread_ids::ThreadIds,
    JavaStackFrame, MergedSample,
};
use crate::{
    process::{ProcessImage, ProcessRegistry},
    profile::JavaSummary,
    sample::{
        monotonic_ns,
        ring_record::Sample,
        sampler::{Sampler, SignalsRefused},
        thread_timers::Trap,
    },
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

/// Samples cut short after one method before its class is recompiled.
const RECOMPILE_AFTER: u32 = 1;

/// Most methods counted per JVM for recompiling (ids come from the JVM).
const MAX_CUT_SHORT: usize = 1 << 16;

/// How often a process that is no JVM (yet) is looked at again.
const MAX_RECHECKS: u32 = 6;

/// Processes older than this at a later look without libjvm.so are not
/// looked at again: the java launcher maps it within a fraction of a
/// second of its start.
const STARTING_AGE: Duration = Duration::from_secs(5);

/// How often an attach is retried while the JVM is still starting, and a
/// java launcher looked at for its libjvm.so: over 6.3 s
/// ([`Recheck::soon`]).
const MAX_SOON_LOOKS: u32 = 30;

/// The first steps between looks at a starting JVM: HotSpot sets its
/// attach mechanism up about 35 ms after its start and takes agents 10-20
/// ms later, on this machine's 2 CPUs.
const SOON_STEP: Duration = Duration::from_millis(20);

/// Looks at a starting JVM before the step between them doubles.
const SOON_LOOKS_PER_STEP: u32 = 5;

/// When to look at a process again.
#[derive(Clone, Copy, Debug)]
enum Recheck {
    /// A JVM already handled, or a process that stayed no JVM.
    Never,
    /// Not before `when`; `attempts` looks so far; `soon` for a JVM
    /// starting, which the recording wakes for ([`JavaProfiler::next_look`]).
    At {
        when: Instant,
        attempts: u32,
        soon: bool,
    },
}

impl Recheck {
    /// After `attempts` looks: again in 0.2, 0.4, 0.8... seconds, then never.
    fn after(attempts: u32) -> Self {
        if attempts >= MAX_RECHECKS {
            return Self::Never;
        }
        Self::At {
            when: Instant::now() + Duration::from_millis(200 << attempts),
            attempts: attempts + 1,
            soon: false,
        }
    }

    /// After `attempts` looks at a JVM starting (a java launcher that has
    /// not mapped libjvm.so yet, or a JVM too early for an attach): again
    /// in 20 ms five times, then 40 ms five times, and so on, doubling;
    /// never after [`MAX_SOON_LOOKS`]. A loaded host slows a JVM's start
    /// by seconds; each step waited is time its samples keep no Java
    /// frames.
    fn soon(attempts: u32) -> Self {
        if attempts >= MAX_SOON_LOOKS {
            return Self::Never;
        }
        Self::At {
            when: Instant::now() + SOON_STEP * (1 << (attempts / SOON_LOOKS_PER_STEP)),
            attempts: attempts + 1,
            soon: true,
        }
    }
}

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

    /// Before sampling starts: adopts the agents already loaded into the
    /// JVMs among `pids` (by an earlier stoke), so that their first samples
    /// get Java stacks too, and starts loading one into the other JVMs
    /// among them. Processes not listed are found through their samples.
    pub fn adopt_before_sampling(&mut self, pids: &[u32], sampler: &mut Sampler) -> Result<()> {
        if self.to_attach.is_none() {
            return Ok(());
        }
        for &pid in pids {
            if self.considered.contains_key(&pid) || maps_libjvm(pid) != Some(true) {
                continue;
            }
            self.considered.insert(pid, Recheck::Never);
            let started = Instant::now();
            let began_ns = monotonic_ns();
            match AgentMemory::find(pid) {
                Ok(Some(memory)) if memory.state() == AgentState::Ready => {
                    let attached = Attached {
                        pid,
                        result: Ok(memory),
                        took: started.elapsed(),
                        began_ns,
                    };
                    self.profile_attached(attached, sampler)?;
                }
                // No agent yet, or one to wait for or to report on: the
                // attach thread's work.
                _ => self.ask_attach(pid),
            }
        }
        Ok(())
    }

    /// Hands JVM `pid` to the attach thread; its samples wait for the agent.
    fn ask_attach(&mut self, pid: u32) {
        // One attach at a time per JVM, and none of a JVM profiled already:
        // a second would read the agent again, in a consumer slot of its
        // own. An attach in flight when the process exec'd is answered
        // first: if it began before the exec, the new image is looked at
        // again then
        // ([`Self::profile_attached`]): the maps of a sample taken before an
        // exec (a fork about to exec java) may be read after it.
        let profiled = self.jvms.contains_key(&pid) && !self.ended.contains(&pid);
        if profiled || self.attaching.contains(&pid) {
            return;
        }
        if let Some(to_attach) = &self.to_attach {
            if to_attach.send(pid).is_ok() {
                self.attaching.insert(pid);
                self.coverage.awaiting_agent(pid);
            }
        }
    }

    /// A process was sampled: if it is a JVM not attached yet, load the
    /// agent into it. `image` is the process's memory map as the registry
    /// holds it: a starting JVM maps libjvm.so after its first sample, and
    /// its image is read again once it runs code it mapped since (see
    /// `ProcessRegistry::image_of`), so later looks read nothing either.
    pub fn look_for_jvm(&mut self, pid: u32, image: &ProcessImage) {
        if self.to_attach.is_none() {
            return;
        }
        let attempts = match self.considered.get(&pid) {
            None => 0,
            // A JVM starting is looked at on time ([`Self::look_at_starting`]).
            Some(Recheck::Never | Recheck::At { soon: true, .. }) => return,
            Some(Recheck::At { when, .. }) if Instant::now() < *when => return,
            Some(Recheck::At { attempts, .. }) => *attempts,
        };
        // Older than a starting JVM at a later look and still none: no
        // JVM to be.
        let too_old = attempts > 0
            && image
                .started
                .is_some_and(|started| started.elapsed() > STARTING_AGE);
        let is_jvm = (!too_old).then(|| {
            image
                .mapped_names()
                .any(|name| attach::is_libjvm(name.as_bytes()))
        });
        match is_jvm {
            Some(true) => {
                self.considered.insert(pid, Recheck::Never);
                self.ask_attach(pid);
            }
            Some(false) => {
                let launcher = image
                    .mapped_names()
                    .any(|name| attach::is_java_launcher(name.as_bytes()));
                let recheck = if launcher {
                    Recheck::soon(attempts)
                } else {
                    Recheck::after(attempts)
                };
                self.considered.insert(pid, recheck);
            }
            // No JVM to be.
            None => {
                self.considered.insert(pid, Recheck::Never);
            }
        }
    }

    /// The JVMs starting whose next look has come ([`Recheck::soon`]),
    /// looked at on time, not at their next sample: at the moment it is
    /// due, none may have come since the last drain. A JVM an attach found
    /// too early is attached again; a launcher, once `/proc` shows it maps
    /// libjvm.so.
    fn look_at_starting(&mut self) {
        let now = Instant::now();
        let due: Vec<(u32, u32)> = self
            .considered
            .iter()
            .filter_map(|(&pid, recheck)| match *recheck {
                Recheck::At {
                    when,
                    attempts,
                    soon: true,
                } if when <= now => Some((pid, attempts)),
                _ => None,
            })
            .collect();
        for (pid, attempts) in due {
            // The attach checks the maps itself.
            let is_jvm = if self.attach_retries.contains_key(&pid) {
                Some(true)
            } else {
                maps_libjvm(pid)
            };
            match is_jvm {
                Some(true) => {
                    self.considered.insert(pid, Recheck::Never);
                    self.ask_attach(pid);
                }
                Some(false) => {
                    self.considered.insert(pid, Recheck::soon(attempts));
                }
                // Gone: its exit record is on its way.
                None => {
                    self.considered.insert(pid, Recheck::Never);
                }
            }
        }
    }

    /// When a JVM starting is next looked at, if one is: the caller should
    /// take in what came then rather than at its next drain (a quarter of
    /// a second of Java frames lost for each look).
    pub fn next_look(&self) -> Option<Instant> {
        let now = Instant::now();
        self.considered
            .values()
            .filter_map(|recheck| match *recheck {
                Recheck::At {
                    when, soon: true, ..
                } if when > now => Some(when),
                _ => None,
            })
            .min()
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

    /// Starts taking Java stacks from a JVM whose agent is ready, or says
    /// why it keeps native stacks (or retries one still starting).
    fn profile_attached(&mut self, attached: Attached, sampler: &mut Sampler) -> Result<()> {
        let pid = attached.pid;
        match attached.result {
            Ok(mut memory) => {
                self.attach_retries.remove(&pid);
                if let Err(refused) = sampler.allow_signals(
                    pid,
                    SIGNAL as u32,
                    memory.code_cache(),
                    attached.began_ns,
                ) {
                    self.coverage.agent_answered(pid, false);
                    if matches!(refused, SignalsRefused::Ended) {
                        // The agent found was the image's before an exec
                        // (or the process is gone): the next sample of a
                        // new image looks at it anew.
                        self.considered.remove(&pid);
                    } else {
                        self.warn_native_only(pid, &refused.to_string());
                    }
                    return Ok(());
                }
                self.coverage.agent_answered(pid, true);
                // A JVM of a pid whose earlier process ended: not to release.
                self.ended.retain(|&ended| ended != pid);
                let settings = self.event_settings;
                if settings.wanted != 0 {
                    memory.want_java_events(
                        settings.wanted,
                        settings.alloc_interval,
                        settings.lock_threshold_ns,
                    );
                }
                let java_events_dropped = memory.java_events_dropped();
                self.summary.jvms += 1;
                if self.summary.attach_ms.len() < MAX_JVMS_TIMED {
                    self.summary
                        .attach_ms
                        .push((pid, attached.took.as_millis() as u64));
                }
                self.jvms.insert(
                    pid,
                    Jvm {
                        memory,
                        symbols: JavaSymbols::default(),
                        threads: ThreadIds::of(pid),
                        dropped: Dropped::default(),
                        signalled: true,
                        cut_short: HashMap::new(),
                        java_events_dropped,
                        classes: ClassNames::default(),
                        event_stacks: EventStacks::default(),
                    },
                );
            }
            Err(error) => {
                let starting = error
                    .downcast_ref::<attach::AttachError>()
                    .is_some_and(attach::AttachError::jvm_starting);
                // Attach errors name the JVM themselves: name it once.
                let message = format!("{error:#}");
                let own_name = format!("JVM {pid}");
                let reason = message
                    .strip_prefix(&own_name)
                    .map_or(message.as_str(), |rest| rest.trim_start_matches([':', ' ']));
                let (attempts, last) = self.attach_retries.entry(pid).or_default();
                if starting && *attempts < MAX_SOON_LOOKS {
                    // A JVM still starting has no SIGQUIT handler, no
                    // attach mechanism or no JVMTI yet.
                    self.considered.insert(pid, Recheck::soon(*attempts));
                    *attempts += 1;
                    *last = reason.to_owned();
                    return Ok(());
                }
                self.attach_retries.remove(&pid);
                self.coverage.agent_answered(pid, false);
                self.warn_native_only(pid, reason);
            }
        }
        Ok(())
    }

    /// Pairs the samples and Java stacks that can be paired, gives up on
    /// samples that waited too long (all of them, with `flush`), and asks
    /// the agents for what the merged samples need named or recompiled.
    fn merge_ready(
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
                MergedSample::with_java(processes.image(image), image, sample, frames)
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
    fn request_names(&mut self, wanted: HashMap<u32, Vec<u64>>) {
        for (pid, ids) in wanted {
            if let Some(jvm) = self.jvms.get_mut(&pid) {
                let new = jvm.symbols.newly_wanted(ids);
                let taken = jvm.memory.request_methods(&new);
                jvm.symbols.unrequest(&new[taken..]);
            }
        }
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

/// Java stacks an agent sent that stoke dropped, by why.
#[derive(Debug, Default)]
struct Dropped {
    future: u64,
    stale: u64,
    unknown_thread: u64,
    full: u64,
    /// Overwritten in the agent's ring before stoke read them, or never
    /// written: no sign of trouble, the ring serves every stoke at its own
    /// pace.
    lost: u64,
}

impl Dropped {
    /// Adds the counts to the recording's summary, all JVMs together.
    fn count_in(&self, summary: &mut JavaSummary, events: u64) {
        for (reason, count) in [
            ("timed in the future", self.future),
            ("before the pairing window", self.stale),
            ("of unknown threads", self.unknown_thread),
            ("beyond the bound of held stacks", self.full),
            ("lost in the agent's ring", self.lost),
        ] {
            if count > 0 {
                *summary.dropped_stacks.entry(reason).or_default() += count;
            }
        }
        summary.dropped_code_events += events;
    }

    /// Says what was dropped, with the `events` of the agent's log left
    /// out, if a real agent would not have sent it: stacks timed in the
    /// future, more stacks than the bounds hold, more code than the code
    /// map holds. Stale stacks (left by an earlier stoke) and stacks of
    /// threads gone meanwhile are no sign of trouble, and only counted
    /// then.
    fn warn(&self, pid: u32, events: u64) {
        if self.future + self.full + events == 0 {
            return;
        }
        let total = self.future + self.stale + self.unknown_thread + self.full;
        eprintln!(
            "stoke: warning: JVM {pid}: dropped {total} Java stacks its agent sent ({} timed in the future, {} before the pairing window, {} of unknown threads, {} beyond the bound of held stacks) and {events} code events beyond the code map's bounds",
            self.future, self.stale, self.unknown_thread, self.full
        );
    }
}

/// Whether process `pid` maps libjvm.so (as code); `None` if it is gone.
/// Any JVM, OpenJ9's too: the attach then tells the user it is not
/// HotSpot (`attach`'s own check), rather than its samples staying
/// native without a word.
pub(crate) fn maps_libjvm(pid: u32) -> Option<bool> {
    let maps = crate::process::maps::executable(pid).ok()?;
    Some(
        maps.iter()
            .any(|map| attach::is_libjvm(map.path.as_bytes())),
    )
}
