//! The host's ids of a JVM's threads: the agent names threads by the ids
//! of the JVM's own pid namespace, the BPF samples by the host's.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use crate::procfs::{innermost_ns_id, thread_ids};
use foldhash::{HashMap, HashMapExt};

/// How often, at most, a JVM's threads are listed anew to find an id the
/// agent names: whatever ids a process writes, stoke reads `/proc` at this
/// pace.
const THREAD_RESCAN_INTERVAL: Duration = Duration::from_millis(100);

/// Most thread ids known per JVM.
const MAX_KNOWN_THREADS: usize = 1 << 17;

/// The host's ids of one JVM's threads, which the agent knows by the ids
/// of the JVM's own pid namespace.
#[derive(Debug)]
pub struct ThreadIds {
    /// The JVM's pid namespace is stoke's: the ids are the host's.
    same_namespace: bool,
    known: HashMap<u32, u32>,
    last_scan: Option<Instant>,
}

impl ThreadIds {
    /// The threads of JVM `pid`.
    pub fn of(pid: u32) -> Self {
        let depth = |path: &str| {
            std::fs::read_to_string(path).ok().and_then(|text| {
                text.lines()
                    .find_map(|line| line.strip_prefix("NSpid:"))
                    .map(|ids| ids.split_whitespace().count())
            })
        };
        let theirs = depth(&format!("/proc/{pid}/status"));
        Self {
            same_namespace: theirs.is_some() && theirs == depth("/proc/self/status"),
            known: HashMap::new(),
            last_scan: None,
        }
    }

    /// The host's id of the thread the agent names `ns_tid`.
    pub fn host_tid(&mut self, pid: u32, ns_tid: u32) -> Option<u32> {
        if self.same_namespace {
            return Some(ns_tid);
        }
        if let Some(&tid) = self.known.get(&ns_tid) {
            return Some(tid);
        }
        if self
            .last_scan
            .is_some_and(|last| last.elapsed() < THREAD_RESCAN_INTERVAL)
        {
            return None;
        }
        self.last_scan = Some(Instant::now());
        for tid in thread_ids(pid, MAX_KNOWN_THREADS) {
            let status = format!("/proc/{pid}/task/{tid}/status");
            if let Some(inner) = innermost_ns_id(Path::new(&status)) {
                if self.known.len() >= MAX_KNOWN_THREADS {
                    self.known.clear();
                }
                self.known.insert(inner, tid);
            }
        }
        self.known.get(&ns_tid).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_thread_ids_do_not_make_stoke_list_threads_each_time() {
        let pid = std::process::id();
        let mut threads = ThreadIds {
            same_namespace: false,
            known: HashMap::new(),
            last_scan: None,
        };
        // This process's own id is its main thread's, in every namespace.
        assert_eq!(threads.host_tid(pid, pid), Some(pid));
        let started = Instant::now();
        let found = (0..100_000)
            .filter_map(|tid| threads.host_tid(pid, u32::MAX - tid))
            .count();
        let took = started.elapsed();
        assert_eq!(found, 0);
        // One listing of /proc/PID/task per 100 ms at most, not one per
        // unknown id.
        assert!(
            took < Duration::from_millis(100),
            "100,000 unknown ids took {took:?}"
        );
    }
}
