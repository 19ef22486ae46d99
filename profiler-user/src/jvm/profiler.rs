//! Java profiling during a recording: finds the JVMs among the sampled
//! processes, loads the agent into each (on a thread of its own, so that
//! sampling never waits for a JVM), lets the BPF sampler signal the JVMs
//! whose agent is ready, and turns the agents' answers into Java frames.

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::mpsc::{self, Receiver, Sender},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use profiler_common::jvm::{
    agct_failure, AgentState, JavaFrame, AGCT_NO_JAVA_FRAME, AGCT_UNKNOWN_NOT_JAVA,
    NOT_A_JAVA_THREAD, RECOMPILE_REQUEST, SIGNAL,
};

use super::{
    agent_memory::{AgentMemory, JavaSample},
    attach::{self, JvmTarget},
    merge::{Merger, Outcome},
    symbols::JavaSymbols,
    JavaStackFrame,
};
use crate::{
    aggregate::Aggregator,
    profile::JavaSummary,
    sample::{record::Sample, sampler::Sampler},
    symbolize::maps::ProcessImage,
};

/// The agent, built from `agent/` by build.rs.
static AGENT: &[u8] = include_bytes!(env!("STOKE_AGENT_PATH"));

/// How long a JVM may take to load the agent and report ready.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long, after sampling stops, the agents get to answer the last
/// signals and name the last methods.
const FINAL_ANSWER_WAIT: Duration = Duration::from_millis(300);

/// How long, at most, the agents get to name the methods asked about last;
/// usually they answer within a few milliseconds, but a busy host can hold
/// their thread back.
const FINAL_NAMES_WAIT: Duration = Duration::from_secs(2);

/// Samples cut short after one method before its class is recompiled.
const RECOMPILE_AFTER: u32 = 1;

/// How often a process that is no JVM (yet) is looked at again.
const MAX_RECHECKS: u32 = 6;

/// Processes older than this when first seen without libjvm.so are not
/// looked at again: the java launcher maps it within a fraction of a second
/// of its start.
const STARTING_AGE: Duration = Duration::from_secs(5);

/// How often an attach is retried while the JVM is still starting.
const MAX_ATTACH_RETRIES: u32 = 4;

/// When to look at a process again.
#[derive(Clone, Copy, Debug)]
enum Recheck {
    /// A JVM already handled, or a process that stayed no JVM.
    Never,
    /// Not before `when`; `attempts` looks so far.
    At { when: Instant, attempts: u32 },
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
        }
    }
}

/// One JVM with a working agent.
struct Jvm {
    memory: AgentMemory,
    symbols: JavaSymbols,
    /// The JVM's own thread ids (its pid namespace) to the host's.
    host_tids: HashMap<u32, u32>,
    signalled: bool,
    /// Java stacks cut short after their innermost method, by method.
    cut_short: HashMap<u64, u32>,
}

/// The result of loading the agent into one JVM.
struct Attached {
    pid: u32,
    result: Result<AgentMemory>,
    took: Duration,
}

/// Java profiling for one recording.
pub struct JavaProfiler {
    to_attach: Option<Sender<u32>>,
    attached: Receiver<Attached>,
    /// Processes looked at, and when to look again at those that were no
    /// JVM yet: a starting JVM maps libjvm.so (and installs its signal
    /// handlers) only after its first samples.
    considered: HashMap<u32, Recheck>,
    /// Attaches asked for and not yet answered.
    attaching: usize,
    /// Attaches retried because the JVM was still starting: how often, and
    /// the last failure, said at the end if no retry succeeds.
    attach_retries: HashMap<u32, (u32, String)>,
    jvms: HashMap<u32, Jvm>,
    merger: Merger,
    summary: JavaSummary,
}

impl JavaProfiler {
    /// Starts the attach thread; with `enabled` false, JVMs are left alone.
    pub fn new(enabled: bool) -> Self {
        let (to_attach, requests) = mpsc::channel::<u32>();
        let (results, attached) = mpsc::channel();
        if enabled {
            std::thread::Builder::new()
                .name("stoke-attach".into())
                .spawn(move || {
                    for pid in requests {
                        let started = Instant::now();
                        let result = attach_agent(pid);
                        let took = started.elapsed();
                        if results.send(Attached { pid, result, took }).is_err() {
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
            attaching: 0,
            attach_retries: HashMap::new(),
            jvms: HashMap::new(),
            merger: Merger::default(),
            summary: JavaSummary::default(),
        }
    }

    /// A process was sampled: if it is a JVM not attached yet, load the
    /// agent into it. `image` is the process's memory map as the sample's
    /// symbolization read it, which saves a second read on first sight
    /// (later looks read it anew: a starting JVM maps libjvm.so late).
    pub fn consider(&mut self, pid: u32, image: Option<&ProcessImage>) {
        let Some(to_attach) = &self.to_attach else {
            return;
        };
        let attempts = match self.considered.get(&pid) {
            None => 0,
            Some(Recheck::Never) => return,
            Some(Recheck::At { when, .. }) if Instant::now() < *when => return,
            Some(Recheck::At { attempts, .. }) => *attempts,
        };
        let is_jvm = match image {
            Some(image) if attempts == 0 => Some(
                image
                    .mapped_names()
                    .any(|name| attach::is_libjvm(name.as_bytes())),
            ),
            _ => maps_libjvm(pid),
        };
        match is_jvm {
            Some(true) => {
                self.considered.insert(pid, Recheck::Never);
                if to_attach.send(pid).is_ok() {
                    self.attaching += 1;
                }
            }
            Some(false) if attempts == 0 && age(pid).is_none_or(|age| age > STARTING_AGE) => {
                self.considered.insert(pid, Recheck::Never);
            }
            Some(false) => {
                self.considered.insert(pid, Recheck::after(attempts));
            }
            // Gone already: a short-lived process needs no second look.
            None => {
                self.considered.insert(pid, Recheck::Never);
            }
        }
    }

    /// Whether a JVM is being attached: its samples stay native until its
    /// agent is adopted, so the caller should poll again soon.
    pub fn attaching(&self) -> bool {
        self.attaching > 0
    }

    /// A sample that signalled a JVM thread: it waits for its Java stack.
    pub fn hold(&mut self, sample: Sample) {
        self.merger.add_native(sample);
    }

    /// Takes in what the attach thread and the agents have, and counts the
    /// samples whose fate is settled.
    pub fn poll(&mut self, sampler: &mut Sampler, aggregator: &mut Aggregator) -> Result<()> {
        while let Ok(attached) = self.attached.try_recv() {
            self.attaching -= 1;
            self.adopt(attached, sampler)?;
        }
        for (&pid, jvm) in &mut self.jvms {
            if jvm.signalled && jvm.memory.state() != AgentState::Ready {
                sampler.forbid_signals(pid)?;
                jvm.signalled = false;
                eprintln!("stoke: warning: JVM {pid}: its signal handler was replaced; its stacks stay native from now on");
            }
            take_in(pid, jvm, &mut self.merger);
        }
        self.settle(monotonic_ns(), false, aggregator);
        Ok(())
    }

    /// After sampling: waits briefly for the last answers, then counts
    /// every remaining sample and hands over the JVMs' symbols.
    pub fn finish(
        mut self,
        aggregator: &mut Aggregator,
    ) -> (HashMap<u32, JavaSymbols>, JavaSummary) {
        for (_, last) in self.attach_retries.values() {
            warn_native_only(last);
        }
        std::thread::sleep(FINAL_ANSWER_WAIT);
        for (&pid, jvm) in &mut self.jvms {
            take_in(pid, jvm, &mut self.merger);
        }
        self.settle(monotonic_ns(), true, aggregator);
        // The names asked for just now need one more round trip.
        let deadline = Instant::now() + FINAL_NAMES_WAIT;
        while Instant::now() < deadline
            && self.jvms.values().any(|jvm| !jvm.symbols.all_described())
        {
            std::thread::sleep(Duration::from_millis(20));
            for jvm in self.jvms.values_mut() {
                jvm.memory.drain_events(|event| jvm.symbols.apply(event));
            }
        }
        self.summary
            .attach_ms
            .sort_unstable_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
        let symbols = self
            .jvms
            .into_iter()
            .map(|(pid, jvm)| (pid, jvm.symbols))
            .collect();
        (symbols, self.summary)
    }

    fn adopt(&mut self, attached: Attached, sampler: &mut Sampler) -> Result<()> {
        let pid = attached.pid;
        match attached.result {
            Ok(memory) => {
                self.attach_retries.remove(&pid);
                sampler.allow_signals(pid, SIGNAL as u32)?;
                self.summary.jvms += 1;
                self.summary
                    .attach_ms
                    .push((pid, attached.took.as_millis() as u64));
                self.jvms.insert(
                    pid,
                    Jvm {
                        memory,
                        symbols: JavaSymbols::default(),
                        host_tids: HashMap::new(),
                        signalled: true,
                        cut_short: HashMap::new(),
                    },
                );
            }
            Err(error) => {
                let starting = matches!(
                    error.downcast_ref::<attach::AttachError>(),
                    Some(attach::AttachError::SigquitUnsafe { .. })
                );
                // Attach errors name the JVM themselves: name it once.
                let message = format!("{error:#}");
                let own_name = format!("JVM {pid}");
                let reason = message
                    .strip_prefix(&own_name)
                    .map_or(message.as_str(), |rest| rest.trim_start_matches([':', ' ']));
                let named = format!("{own_name}: {reason}");
                let (attempts, last) = self.attach_retries.entry(pid).or_default();
                if starting && *attempts < MAX_ATTACH_RETRIES {
                    // A JVM still starting has no SIGQUIT handler yet.
                    *attempts += 1;
                    *last = named;
                    self.considered.insert(pid, Recheck::after(*attempts));
                    return Ok(());
                }
                self.attach_retries.remove(&pid);
                warn_native_only(&named);
            }
        }
        Ok(())
    }

    fn settle(&mut self, now_ns: u64, flush: bool, aggregator: &mut Aggregator) {
        let mut wanted: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut cut_short = Vec::new();
        let (jvms, summary) = (&self.jvms, &mut self.summary);
        self.merger.settle(now_ns, flush, |outcome| match outcome {
            Outcome::Paired(sample, java) => {
                let Some(jvm) = jvms.get(&sample.tgid) else {
                    aggregator.add(sample, Vec::new());
                    return;
                };
                let frames = java_frames(jvm, &java);
                match java.result {
                    _ if !frames.is_empty() => summary.java_samples += 1,
                    NOT_A_JAVA_THREAD => summary.non_java_samples += 1,
                    // "No Java frame" and "unknown, not Java" are what JIT
                    // compiler threads (JavaThreads to HotSpot) answer; with
                    // no Java code on the native stack either, the thread
                    // ran no Java, and nothing is missing.
                    AGCT_NO_JAVA_FRAME | AGCT_UNKNOWN_NOT_JAVA
                        if !jvm.symbols.in_java_code(&sample.user) =>
                    {
                        summary.non_java_samples += 1
                    }
                    code => *summary.native_only.entry(agct_failure(code)).or_default() += 1,
                }
                if let [only] = frames.as_slice() {
                    cut_short.push((sample.tgid, only.method_id));
                }
                let ids = wanted.entry(sample.tgid).or_default();
                ids.extend(frames.iter().map(|frame| frame.method_id));
                ids.extend(jvm.symbols.compiled_methods_at(sample.user.iter().copied()));
                aggregator.add(sample, frames);
            }
            Outcome::Unpaired(sample, why) => {
                *summary.native_only.entry(why.reason()).or_default() += 1;
                if let Some(jvm) = jvms.get(&sample.tgid) {
                    let ids = jvm.symbols.compiled_methods_at(sample.user.iter().copied());
                    wanted.entry(sample.tgid).or_default().extend(ids);
                }
                aggregator.add(sample, Vec::new());
            }
        });
        for (pid, method_id) in cut_short {
            let Some(jvm) = self.jvms.get_mut(&pid) else {
                continue;
            };
            let count = jvm.cut_short.entry(method_id).or_default();
            *count += 1;
            // Code compiled before the agent came lacks the debug information
            // AsyncGetCallTrace needs to walk past it: one frame is all it
            // finds. Have it recompiled, once.
            if *count == RECOMPILE_AFTER {
                jvm.memory.request_methods(&[method_id | RECOMPILE_REQUEST]);
            }
        }
        for (pid, ids) in wanted {
            if let Some(jvm) = self.jvms.get_mut(&pid) {
                let new = jvm.symbols.newly_wanted(ids);
                let taken = jvm.memory.request_methods(&new);
                jvm.symbols.unrequest(&new[taken..]);
            }
        }
    }
}

/// Says why a JVM keeps native stacks only.
fn warn_native_only(why: &str) {
    eprintln!("stoke: warning: {why}; its stacks stay native-only");
}

/// Drains one JVM's events and Java samples into the symbols and merger.
fn take_in(pid: u32, jvm: &mut Jvm, merger: &mut Merger) {
    jvm.memory.drain_events(|event| jvm.symbols.apply(event));
    let host_tids = &mut jvm.host_tids;
    jvm.memory.drain_samples(|sample| {
        if let Some(tid) = host_tid(pid, sample.tid, host_tids) {
            merger.add_java(tid, sample);
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
    let kinds = jvm.symbols.kinds(pc, &frames);
    frames
        .iter()
        .zip(kinds)
        .map(|(frame, kind)| JavaStackFrame {
            method_id: frame.method_id,
            bci: frame.bci,
            kind,
        })
        .collect()
}

/// The host's id of a JVM thread, which the agent knows by the id in the
/// JVM's own pid namespace (the same one outside containers).
fn host_tid(pid: u32, ns_tid: u32, known: &mut HashMap<u32, u32>) -> Option<u32> {
    if let Some(&tid) = known.get(&ns_tid) {
        return Some(tid);
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(inner) = innermost_ns_id(&task.path().join("status")) {
            known.insert(inner, tid);
        }
    }
    known.get(&ns_tid).copied()
}

/// The last field of a status file's `NSpid:` line: the id in the
/// innermost pid namespace.
pub(crate) fn innermost_ns_id(status: &std::path::Path) -> Option<u32> {
    let text = std::fs::read_to_string(status).ok()?;
    let line = text.lines().find_map(|line| line.strip_prefix("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// How long process `pid` has been running; `None` if it is gone.
pub(crate) fn age(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, start time in clock ticks after boot; the fields after the
    // command name (which may hold spaces and parentheses) start at 3.
    let (_, after_name) = stat.rsplit_once(')')?;
    let started_ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf and clock_gettime with a valid out-pointer.
    let (ticks_per_second, now) = unsafe {
        let mut now: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now);
        (libc::sysconf(libc::_SC_CLK_TCK), now)
    };
    let started = Duration::from_secs_f64(started_ticks as f64 / ticks_per_second.max(1) as f64);
    let now = Duration::new(now.tv_sec as u64, now.tv_nsec as u32);
    Some(now.saturating_sub(started))
}

/// Whether process `pid` maps libjvm.so; `None` if it is gone.
pub(crate) fn maps_libjvm(pid: u32) -> Option<bool> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    Some(maps.lines().any(|line| attach::is_libjvm(line.as_bytes())))
}

/// Loads the agent into `pid` (or finds it loaded) and waits until it is
/// ready for signals.
fn attach_agent(pid: u32) -> Result<AgentMemory> {
    let memory = match AgentMemory::find(pid)? {
        Some(memory) => memory,
        None => {
            let target = JvmTarget::inspect(pid)?;
            let path = attach::install_agent(&target, &agent_file_name(), AGENT)?;
            attach::load_agent(&target, &path, "", ATTACH_TIMEOUT)?;
            AgentMemory::find(pid)?.context("the agent loaded but shares no memory")?
        }
    };
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    loop {
        match memory.state() {
            AgentState::Ready => return Ok(memory),
            AgentState::Starting if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            AgentState::Starting => bail!("the agent did not get ready within {ATTACH_TIMEOUT:?}"),
            AgentState::HandlerLost => bail!("the application replaced the agent's signal handler"),
            AgentState::Failed => {
                bail!("the agent could not start in this JVM (the application may use SIGURG)")
            }
        }
    }
}

/// Writes the agent to `path` (for `-agentpath:`), executable.
pub fn write_agent(path: &std::path::Path) -> Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let mut file = std::fs::File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(path)
        .with_context(|| format!("cannot write the agent to {}", path.display()))?;
    file.write_all(AGENT)
        .with_context(|| format!("writing the agent to {}", path.display()))?;
    eprintln!(
        "stoke: wrote the JVM agent to {0}; start JVMs with -agentpath:{0}",
        path.display()
    );
    Ok(())
}

/// A name that changes with the agent's contents, so that a JVM never
/// loads a stale agent of another stoke version.
fn agent_file_name() -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    AGENT.hash(&mut hasher);
    format!("libstoke_agent-{:016x}.so", hasher.finish())
}

fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_is_how_long_a_process_has_run() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawning sleep");
        std::thread::sleep(Duration::from_millis(300));
        let young = age(child.id()).expect("the child runs");
        child.kill().expect("killing sleep");
        child.wait().expect("reaping sleep");
        assert!(
            (Duration::from_millis(250)..Duration::from_secs(2)).contains(&young),
            "a process started 0.3 s ago is {young:?} old"
        );
        // pid 1 started with the machine, long before this test.
        assert!(age(1).expect("init runs") > young);
        assert_eq!(age(u32::MAX), None);
    }
}
