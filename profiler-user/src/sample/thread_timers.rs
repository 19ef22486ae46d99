//! JVM threads sampled by perf events of their own. A CPU's event asks a
//! JVM's thread for its Java stack with `bpf_send_signal_thread`, which
//! from the timer interrupt goes through irq_work, a self-interrupt (costly
//! on a VM that traps it). A thread's own cpu-clock event with
//! `sigtrap` has perf queue a SIGTRAP as task work, delivered as the thread
//! returns to user mode, with no interrupt. The CPUs' sampler, linked to it
//! with a cookie (so verified once), takes the same record and returns 1
//! to have the signal sent. The CPUs' events leave the timed threads alone
//! (`timed_threads`).

use std::collections::HashMap;

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap as BpfHashMap, MapData},
    Ebpf,
};
use profiler_common::bpf_names as names;

use super::thread_event::{self, Attach, OpenEvent, ThreadEvent};
use crate::procfs;

/// Whether this kernel runs a perf event's BPF program before its
/// `sigtrap` (so that the program's 0 sends no signal) and cancels a
/// SIGTRAP still pending when exec removes the event (so that no program
/// exec'd over a JVM gets one): Linux 6.10 and later.
pub fn kernel_supported() -> bool {
    procfs::kernel_release().is_some_and(|release| release_at_least(&release, (6, 10)))
}

/// Whether a kernel release string (`6.18.44-fc`) is `at_least` (major,
/// minor).
fn release_at_least(release: &str, at_least: (u32, u32)) -> bool {
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= at_least,
        _ => false,
    }
}

/// Where a JVM's agent takes the SIGTRAP of stoke's per-thread events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trap {
    /// The events' `sig_data`, by which the handler knows them.
    pub cookie: u64,
    /// The handler's address, which the BPF program compares with the
    /// process's at every sample.
    pub handler: u64,
}

/// A random `sig_data` for stoke's events, never 0 (which the agent takes
/// for none).
pub fn fresh_cookie() -> u64 {
    let mut fresh = [0u8; 8];
    // SAFETY: getrandom into our own buffer.
    unsafe { libc::getrandom(fresh.as_mut_ptr().cast(), fresh.len(), 0) };
    u64::from_ne_bytes(fresh) | 1
}

/// Whether a SIGTRAP sent to the task whose status file is at
/// `status_path` (`/proc/PID/status`, `/proc/PID/task/TID/status`) reaches
/// a handler: the kernel says the signal is caught, and no debugger traces
/// the task (it would stop at each). The agent's word in shared memory is
/// not enough: a process may write anything there, and SIGTRAP's default
/// action ends it. Unknown counts as not.
pub fn trap_caught(status_path: &str) -> bool {
    procfs::read_status(status_path).is_ok_and(|status| status_catches_trap(&status))
}

fn status_catches_trap(status: &str) -> bool {
    let caught = procfs::caught_signals(status)
        .is_some_and(|mask| mask & procfs::signal_bit(libc::SIGTRAP) != 0);
    let untraced = procfs::status_field(status, "TracerPid:")
        .and_then(|mut tracer| tracer.next())
        .is_some_and(|tracer| tracer == "0");
    caught && untraced
}

/// Most threads timed at once, host-wide (a descriptor each); past it the
/// CPUs' events and signals sample them.
const MAX_TIMED: usize = 8192;

/// The per-thread events stoke holds.
#[derive(Default)]
pub struct ThreadTimers {
    /// By thread: its process, and its event (`None` for a `-p` target's
    /// thread, whose event is the target's).
    events: HashMap<u32, (u32, Option<OpenEvent>)>,
    /// Threads that could not be timed (gone, refused by the kernel, their
    /// SIGTRAP not caught or traced), with their process: not tried again
    /// while it lives (a thread id reused by another process is).
    refused: HashMap<u32, u32>,
}

impl ThreadTimers {
    /// Whether thread `tid` of process `pid` is timed, or was tried.
    pub fn known(&self, (pid, tid): (u32, u32)) -> bool {
        self.events.contains_key(&tid) || self.refused.get(&tid) == Some(&pid)
    }

    /// Process `pid` ended or exec'd: its threads refused may be tried
    /// again under their ids reused, or as the program exec'd.
    pub fn forget(&mut self, pid: u32) {
        if !self.refused.is_empty() {
            self.refused.retain(|_, owner| *owner != pid);
        }
    }

    /// How many threads are timed.
    pub fn count(&self) -> usize {
        self.events.len()
    }

    /// Closes the events of threads that ended or exec'd (the sampler's
    /// lifecycle programs took them out of `timed_threads`), so that
    /// their ids, reused, can be timed again.
    pub fn prune(&mut self, ebpf: &Ebpf) -> Result<()> {
        if self.events.is_empty() {
            return Ok(());
        }
        let timed: BpfHashMap<&MapData, u32, u64> = BpfHashMap::try_from(
            ebpf.map(names::map::timed_threads)
                .context("no timed_threads map")?,
        )?;
        self.events.retain(|tid, _| timed.get(tid, 0).is_ok());
        Ok(())
    }

    /// The processes with timed threads.
    pub fn processes(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.events.values().map(|(pid, _)| *pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Closes the events of process `pid`'s threads: the CPUs' events
    /// sample them again, with signals (a target's event, with signals).
    pub fn release(&mut self, ebpf: &mut Ebpf, pid: u32) -> Result<()> {
        let mut timed = timed_threads(ebpf)?;
        let tids: Vec<u32> = self
            .events
            .iter()
            .filter(|(_, (owner, _))| *owner == pid)
            .map(|(tid, _)| *tid)
            .collect();
        for tid in tids {
            // Out of the map first: no sample of the thread is lost.
            let _ = timed.remove(&tid);
            self.events.remove(&tid);
        }
        Ok(())
    }

    /// Times thread `tid` so that its SIGTRAP reaches `trap`: with a
    /// cpu-clock event of its own every `period_ns`, or with `None` by the
    /// event it has as a `-p` target's thread (whose cookie the caller
    /// checked), sampled by the CPUs' sampler.
    pub fn time(
        &mut self,
        ebpf: &mut Ebpf,
        (pid, tid): (u32, u32),
        period_ns: Option<u64>,
        trap: Trap,
    ) -> Result<()> {
        if self.events.len() >= MAX_TIMED || self.known((pid, tid)) {
            return Ok(());
        }
        if !trap_caught(&format!("/proc/{pid}/task/{tid}/status")) {
            self.refuse(pid, tid);
            return Ok(());
        }
        // Into the map before the event samples: its program reads the
        // handler there, and the CPUs' events leave the thread to it.
        timed_threads(ebpf)?.insert(tid, trap.handler, 0)?;
        let event = ThreadEvent {
            period_ns: period_ns.unwrap_or_default(),
            trap_cookie: Some(trap.cookie),
            inherit: false,
            // The CPUs' events sample the thread too: the link's cookie
            // tells the program which is its own.
            attach: Attach::Link,
        };
        match period_ns
            .map(|_| thread_event::open(ebpf, tid, event))
            .transpose()
        {
            Ok(event) => {
                self.events.insert(tid, (pid, event));
            }
            Err(_) => {
                let _ = timed_threads(ebpf)?.remove(&tid);
                self.refuse(pid, tid);
            }
        }
        Ok(())
    }

    fn refuse(&mut self, pid: u32, tid: u32) {
        if self.refused.len() < MAX_TIMED {
            self.refused.insert(tid, pid);
        }
    }
}

fn timed_threads(ebpf: &mut Ebpf) -> Result<BpfHashMap<&mut MapData, u32, u64>> {
    Ok(BpfHashMap::try_from(
        ebpf.map_mut(names::map::timed_threads)
            .context("no timed_threads map")?,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.18.44-fc-v782", (6, 10)));
        assert!(release_at_least("6.10.0", (6, 10)));
        assert!(!release_at_least("6.9.12-amd64", (6, 10)));
        assert!(!release_at_least("5.15.0-91-generic", (6, 10)));
        assert!(release_at_least("7.0", (6, 10)));
        assert!(!release_at_least("garbage", (6, 10)));
    }

    #[test]
    fn the_sampler_checks_the_handler_of_sigtrap() {
        assert_eq!(profiler_common::SIGTRAP, libc::SIGTRAP as u32);
    }

    #[test]
    fn a_trap_is_caught_only_with_a_handler_and_no_tracer() {
        let status = |caught: &str, tracer: &str| {
            format!("Name:\tjava\nTracerPid:\t{tracer}\nSigBlk:\t0\nSigCgt:\t{caught}\n")
        };
        // HotSpot's mask with SIGTRAP's bit (0x10) set, and without.
        assert!(status_catches_trap(&status("0000000181005cdf", "0")));
        assert!(!status_catches_trap(&status("0000000181005ccf", "0")));
        assert!(!status_catches_trap(&status("0000000181005cdf", "4242")));
        assert!(!status_catches_trap(&status("not hex", "0")));
        assert!(!status_catches_trap("Name:\tjava\nSigCgt:\t10\n"));
    }
}
