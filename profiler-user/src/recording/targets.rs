//! The `-p` targets, watched for their exit by pidfds: a recording ends
//! once every target has exited, and the exit of one wakes the wait for
//! samples (reading each target's `/proc/PID/stat` at every drain instead
//! would cost much of stoke's CPU: the kernel sums every thread's times to
//! write it). Their CPU samples are counted against the CPU time they
//! used, read at the start and the end: a target sampled far less than
//! its CPU time says (threads that each run too little for their own
//! CPU-time timer) is said at the end.

use std::{
    os::fd::{AsFd, BorrowedFd, OwnedFd},
    time::Duration,
};

use crate::{process::pidfd, procfs};

/// The processes a `-p` recording samples.
pub struct Targets {
    /// Every target.
    targets: Vec<Target>,
    /// Whether there were any (none for the whole host).
    any: bool,
}

struct Target {
    pid: u32,
    /// `None` if the kernel gave none (then `/proc` tells).
    pidfd: Option<OwnedFd>,
    /// Its CPU time when the recording began.
    cpu_at_start: Option<Duration>,
    /// CPU samples of it.
    samples: u64,
    /// Seen to have exited.
    exited: bool,
}

/// Fewer samples' worth of CPU time than this is too little to judge.
const MIN_EXPECTED: f64 = 50.0;

impl Target {
    fn has_exited(&self) -> bool {
        match &self.pidfd {
            Some(pidfd) => pidfd::wait_for_exit(pidfd.as_fd(), Duration::ZERO),
            None => procfs::has_exited(self.pid),
        }
    }
}

impl Targets {
    /// Watches `pids` (none for a whole-host recording).
    pub fn watch(pids: &[u32]) -> Self {
        let running = pids
            .iter()
            .map(|&pid| Target {
                pid,
                pidfd: pidfd::open(pid).ok(),
                cpu_at_start: procfs::cpu_time(pid),
                samples: 0,
                exited: false,
            })
            .collect();
        Self {
            targets: running,
            any: !pids.is_empty(),
        }
    }

    /// Whether there were targets and every one has exited.
    pub fn all_exited(&mut self) -> bool {
        for target in &mut self.targets {
            target.exited = target.exited || target.has_exited();
        }
        self.any && self.targets.iter().all(|target| target.exited)
    }

    /// Descriptors that turn readable when a running target exits.
    pub fn exit_signals(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.targets
            .iter()
            .filter(|target| !target.exited)
            .filter_map(|target| target.pidfd.as_ref().map(AsFd::as_fd))
    }

    /// Counts a CPU sample of process `tgid`, if it is a target.
    pub fn sampled(&mut self, tgid: u32) {
        if let Some(target) = self.targets.iter_mut().find(|target| target.pid == tgid) {
            target.samples += 1;
        }
    }

    /// A line for each running target sampled at `frequency_hz` less than
    /// half as often as the CPU time it used since the start says (of
    /// more than [`MIN_EXPECTED`] samples' worth).
    pub fn undersampled(&self, frequency_hz: u64) -> Vec<String> {
        self.targets
            .iter()
            .filter(|target| !target.exited)
            .filter_map(|target| {
                let used = procfs::cpu_time(target.pid)?.checked_sub(target.cpu_at_start?)?;
                let expected = used.as_secs_f64() * frequency_hz as f64;
                (expected >= MIN_EXPECTED && (target.samples as f64) < expected / 2.0).then(|| {
                    format!(
                        "process {} got {} CPU samples for {:.1} s of CPU time ({expected:.0} expected at {frequency_hz} Hz): with -p each thread is sampled by a timer of its own CPU time, which threads that each run little seldom fill; record the whole host (-a) to sample it in full",
                        target.pid,
                        target.samples,
                        used.as_secs_f64()
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn ends_once_every_target_has_exited() {
        let mut short = Command::new("sleep").arg("0.1").spawn().unwrap();
        let mut long = Command::new("sleep").arg("0.6").spawn().unwrap();
        let mut targets = Targets::watch(&[short.id(), long.id()]);
        assert!(!targets.all_exited());
        assert_eq!(targets.exit_signals().count(), 2);
        // Unreaped, the first one counts as exited and wakes no wait.
        std::thread::sleep(Duration::from_millis(300));
        assert!(!targets.all_exited());
        assert_eq!(targets.exit_signals().count(), 1);
        long.wait().unwrap();
        assert!(targets.all_exited());
        short.wait().unwrap();
        assert!(!Targets::watch(&[]).all_exited(), "no targets: the host");
    }
}
