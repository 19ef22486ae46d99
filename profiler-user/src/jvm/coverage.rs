//! What the Java summary says about the samples that had no chance at a
//! Java stack, and how soon each JVM started during the recording got Java
//! frames: a JVM is found through its samples, and its agent loaded or
//! found, before its threads are signalled for their Java stacks.

use crate::{model::JavaSummary, procfs, sample::monotonic_ns};
use foldhash::HashSet;

/// The reasons the summary gives for JVM samples never signalled.
const BEFORE_AGENT: &str = "before its agent answered";
const NO_AGENT: &str = "no agent: see the warning";
const SIGNALS_STOPPED: &str = "signals stopped";

/// The most JVMs whose times the summary lists (attach, Java frames after
/// start): `stoke continuous` keeps one summary for as long as it runs,
/// through any number of JVMs.
pub const MAX_JVMS_TIMED: usize = 4096;

/// The resolution of a process's start time in `/proc/PID/stat` (USER_HZ
/// is 100 on Linux).
const START_TICK_NS: u64 = 10_000_000;

/// The JVMs of a recording as far as their samples' Java stacks go.
#[derive(Default)]
pub struct Coverage {
    /// JVMs found, whose agent has not answered yet.
    awaiting: HashSet<u32>,
    /// JVMs whose agent could not be loaded or used.
    failed: HashSet<u32>,
    /// JVMs whose first sample with Java frames was seen.
    with_java: HashSet<u32>,
    /// When the recording began (CLOCK_MONOTONIC, ns).
    began_ns: u64,
}

impl Coverage {
    /// For a recording that begins now, at `began_ns`.
    pub fn new(began_ns: u64) -> Self {
        Self {
            began_ns,
            ..Self::default()
        }
    }

    /// JVM `pid` was found: its agent is being loaded or looked for.
    pub fn awaiting_agent(&mut self, pid: u32) {
        self.awaiting.insert(pid);
    }

    /// JVM `pid`'s agent answered, or never will.
    pub fn agent_answered(&mut self, pid: u32, usable: bool) {
        self.awaiting.remove(&pid);
        if !usable {
            self.failed.insert(pid);
        }
    }

    /// Process `pid` ended (exited or exec'd): a new one may take its pid.
    pub fn ended(&mut self, pid: u32) {
        self.awaiting.remove(&pid);
        self.failed.remove(&pid);
        self.with_java.remove(&pid);
    }

    /// A sample of process `pid` that did not signal its thread: counted as
    /// missing its Java stack if `pid` is a JVM (`adopted`: its agent is in
    /// use, and signals stopped).
    pub fn unsignalled(&self, pid: u32, adopted: bool, summary: &mut JavaSummary) {
        let reason = if self.awaiting.contains(&pid) {
            BEFORE_AGENT
        } else if self.failed.contains(&pid) {
            NO_AGENT
        } else if adopted {
            SIGNALS_STOPPED
        } else {
            return;
        };
        *summary.native_only.entry(reason).or_default() += 1;
    }

    /// A sample of JVM `pid`, taken at `time_ns`, had Java frames: the
    /// first one of a JVM started during the recording says how long after
    /// its start Java frames came.
    pub fn java_frames(&mut self, pid: u32, time_ns: u64, summary: &mut JavaSummary) {
        if !self.with_java.insert(pid) {
            return;
        }
        let Some(age) = procfs::age(pid) else {
            return;
        };
        // The process's start on the samples' clock.
        let Some(started_ns) = monotonic_ns().checked_sub(age.as_nanos() as u64) else {
            return;
        };
        // The start time counts clock ticks: a process started just after
        // the recording began may show as started up to a tick before.
        if started_ns + START_TICK_NS >= self.began_ns
            && summary.java_after_start_ms.len() < MAX_JVMS_TIMED
        {
            let after_ms = time_ns.saturating_sub(started_ns) / 1_000_000;
            summary.java_after_start_ms.push((pid, after_ms));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsignalled_samples_are_counted_by_what_the_jvm_was_waiting_for() {
        let mut coverage = Coverage::new(0);
        let mut summary = JavaSummary::default();
        coverage.awaiting_agent(10);
        coverage.awaiting_agent(11);
        coverage.unsignalled(10, false, &mut summary);
        coverage.unsignalled(12, false, &mut summary);
        coverage.agent_answered(11, false);
        coverage.unsignalled(11, false, &mut summary);
        coverage.agent_answered(10, true);
        coverage.unsignalled(10, true, &mut summary);
        let counts: Vec<_> = summary.native_only.into_iter().collect();
        assert_eq!(
            counts,
            [(BEFORE_AGENT, 1), (NO_AGENT, 1), (SIGNALS_STOPPED, 1)]
        );
        coverage.ended(11);
        assert!(coverage.awaiting.is_empty() && coverage.failed.is_empty());
    }
}
