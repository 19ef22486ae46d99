//! `-p` targets sampled by cpu-clock events on their threads, which the
//! threads they start inherit, instead of an event on every CPU: a CPU
//! running anything else takes no timer interrupt of stoke's, and a
//! target's thread takes one a sample, not its CPU's and its own (the
//! model of async-profiler). Where the kernel has it, the events carry
//! `sigtrap` and serve a JVM's threads as their own timers
//! ([`super::thread_timers`]) once its agent takes SIGTRAP: until then
//! the sampler's program sends none.

use std::collections::HashMap;

use anyhow::{bail, Result};
use aya::Ebpf;
use tracing::debug;

use super::{
    sampler::is_permission_denied,
    thread_event::{self, Attach, OpenError, OpenEvent, ThreadEvent},
};
use crate::procfs::thread_ids;

/// Most events per target, one per thread it had when it was first
/// looked at (the threads started later inherit theirs): past it a
/// thread goes unsampled.
const MAX_EVENTS_PER_TARGET: usize = 16384;

/// Rounds of listing a target's threads: a thread started by one not yet
/// holding an event is found by the next round.
const LISTING_ROUNDS: usize = 8;

/// The events on the targets' threads.
pub struct TargetEvents {
    /// The targets, as given.
    pids: Vec<u32>,
    period_ns: u64,
    /// The events carry `sigtrap` ([`super::thread_timers::kernel_supported`]).
    sigtrap: bool,
    targets: HashMap<u32, Target>,
}

struct Target {
    /// The `sig_data` of its events, if they carry `sigtrap`.
    cookie: Option<u64>,
    /// By thread: its event.
    events: HashMap<u32, OpenEvent>,
}

impl TargetEvents {
    /// Events for processes `pids`, none open yet: they will sample every
    /// `period_ns` of a thread's CPU time, with `sigtrap` if asked.
    pub fn new(pids: Vec<u32>, period_ns: u64, sigtrap: bool) -> Self {
        Self {
            pids,
            period_ns,
            sigtrap,
            targets: HashMap::new(),
        }
    }

    /// Puts an event on every thread of every target, with `cookie(pid)`
    /// as their `sig_data`.
    pub fn start(&mut self, ebpf: &Ebpf, mut cookie: impl FnMut(u32) -> u64) -> Result<()> {
        for pid in self.pids.clone() {
            self.watch(ebpf, pid, cookie(pid))?;
        }
        Ok(())
    }

    /// Puts an event on every thread of process `pid`, with `cookie` as
    /// their `sig_data`. A process that is gone is no error (it is seen
    /// as exited); one whose threads the kernel refuses is.
    fn watch(&mut self, ebpf: &Ebpf, pid: u32, cookie: u64) -> Result<()> {
        let mut target = Target {
            cookie: self.sigtrap.then_some(cookie),
            events: HashMap::new(),
        };
        for _ in 0..LISTING_ROUNDS {
            let mut opened = 0;
            for tid in thread_ids(pid, MAX_EVENTS_PER_TARGET) {
                if target.events.contains_key(&tid) || target.events.len() >= MAX_EVENTS_PER_TARGET
                {
                    continue;
                }
                match self.open(ebpf, tid, &mut target) {
                    Ok(event) => {
                        target.events.insert(tid, event);
                        opened += 1;
                    }
                    // Ended since it was listed.
                    Err(OpenError::Refused(error)) if error.raw_os_error() == Some(libc::ESRCH) => {
                    }
                    Err(error) => bail!(
                        "sampling thread {tid} of process {pid}: {error}{}",
                        advice(&error)
                    ),
                }
            }
            if opened == 0 {
                break;
            }
        }
        self.targets.insert(pid, target);
        Ok(())
    }

    /// An event on `tid`; without `sigtrap` if the kernel refuses it (a
    /// ptrace policy forbidding even root), for all the target's threads.
    fn open(&self, ebpf: &Ebpf, tid: u32, target: &mut Target) -> Result<OpenEvent, OpenError> {
        // The program takes every event of a `-p` recording as a thread's
        // own, so it needs no link: attached to the event, it stays for
        // as long as the event can send SIGTRAP, even if stoke is killed.
        let event = |trap_cookie| ThreadEvent {
            period_ns: self.period_ns,
            trap_cookie,
            inherit: true,
            attach: Attach::Event,
        };
        match thread_event::open(ebpf, tid, event(target.cookie)) {
            Err(OpenError::Refused(error))
                if target.cookie.is_some() && is_permission_denied(&error) =>
            {
                debug!("thread {tid}: no sigtrap ({error})");
                target.cookie = None;
                thread_event::open(ebpf, tid, event(None))
            }
            opened => opened,
        }
    }

    /// The `sig_data` of process `pid`'s events, if it is a target whose
    /// events carry `sigtrap`.
    pub fn cookie(&self, pid: u32) -> Option<u64> {
        self.targets.get(&pid)?.cookie
    }

    /// After target `pid` exec'd: its events carried `sigtrap`, which exec
    /// removes, so it gets new ones. Failing is no error: it goes
    /// unsampled.
    pub fn exec(&mut self, ebpf: &Ebpf, pid: u32) {
        let Some(cookie) = self.targets.get(&pid).and_then(|target| target.cookie) else {
            return;
        };
        self.targets.remove(&pid);
        if let Err(error) = self.watch(ebpf, pid, cookie) {
            debug!("target {pid} after exec: {error:#}");
        }
    }

    /// After target `pid` exited: its events go.
    pub fn exit(&mut self, pid: u32) {
        self.targets.remove(&pid);
    }
}

/// What to do about `error`, after a colon, if anything can be done.
fn advice(error: &OpenError) -> &'static str {
    match error {
        OpenError::Refused(error) if error.raw_os_error() == Some(libc::EMFILE) => {
            ": stoke holds two descriptors a thread of its targets; raise its open-file limit (ulimit -n)"
        }
        OpenError::Refused(error) if is_permission_denied(error) => {
            ": run stoke as root, or with CAP_PERFMON"
        }
        _ => "",
    }
}
