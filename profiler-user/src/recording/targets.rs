//! The `-p` targets, watched for their exit by pidfds: a recording ends
//! once every target has exited, and the exit of one wakes the wait for
//! samples. Reading each target's `/proc/PID/stat` at every drain instead
//! was a quarter of stoke's CPU on a JVM sampled at 99 Hz (the kernel sums
//! every thread's times to write it).

use std::{
    os::fd::{AsFd, BorrowedFd, OwnedFd},
    time::Duration,
};

use crate::process::{pidfd, procfs};

/// The processes a `-p` recording samples.
pub struct Targets {
    /// Those not seen to have exited yet.
    running: Vec<Target>,
    /// Whether there were any (none for the whole host).
    any: bool,
}

struct Target {
    pid: u32,
    /// `None` if the kernel gave none (then `/proc` tells).
    pidfd: Option<OwnedFd>,
}

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
            })
            .collect();
        Self {
            running,
            any: !pids.is_empty(),
        }
    }

    /// Whether there were targets and every one has exited.
    pub fn all_exited(&mut self) -> bool {
        self.running.retain(|target| !target.has_exited());
        self.any && self.running.is_empty()
    }

    /// Descriptors that turn readable when a running target exits.
    pub fn exit_signals(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.running
            .iter()
            .filter_map(|target| target.pidfd.as_ref().map(AsFd::as_fd))
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
