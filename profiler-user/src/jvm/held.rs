//! JVMs whose agent another stoke reads (one consumer per agent): their
//! Java stacks are that stoke's while it runs, and this one takes them over
//! once it has ended, so that a daemon started beside an incident's
//! `stoke record` gets the JVM back when the record is done.

use std::{
    os::fd::{AsFd, OwnedFd},
    time::{Duration, Instant},
};

use foldhash::{HashMap, HashSet};

use crate::process::pidfd;

/// How often the attach is tried again where the other stoke cannot be
/// watched (it runs in another pid namespace, so `/proc/locks` gives no pid
/// of it here).
const RETRY_UNSEEN: Duration = Duration::from_secs(5);

/// The most JVMs watched: every JVM of a host, with room to spare.
const MAX_HELD: usize = 4096;

/// The other stoke holding a JVM's agent.
enum Holder {
    /// Watched by its pidfd, which turns readable when it exits.
    Seen(OwnedFd),
    /// Not visible from here: the attach is tried again at `next`.
    Unseen { next: Instant },
}

/// The JVMs held by other stokes.
#[derive(Default)]
pub struct HeldJvms {
    holders: HashMap<u32, Holder>,
    /// Every JVM found held until it is forgotten, due or not.
    seen: HashSet<u32>,
}

impl HeldJvms {
    /// JVM `jvm`'s agent is read by another stoke, process `holder` if it
    /// is known: whether it was found held for the first time, or `None`
    /// if it cannot be watched (too many are).
    pub fn hold(&mut self, jvm: u32, holder: Option<u32>) -> Option<bool> {
        if self.seen.len() >= MAX_HELD && !self.seen.contains(&jvm) {
            return None;
        }
        let holder = match holder.map(pidfd::open) {
            Some(Ok(pidfd)) => Holder::Seen(pidfd),
            // Gone already: due at once.
            Some(Err(_)) => Holder::Unseen {
                next: Instant::now(),
            },
            None => Holder::Unseen {
                next: Instant::now() + RETRY_UNSEEN,
            },
        };
        self.holders.insert(jvm, holder);
        Some(self.seen.insert(jvm))
    }

    /// Forgets JVM `jvm` (attached, or its process ended): whether it had
    /// been found held.
    pub fn forget(&mut self, jvm: u32) -> bool {
        self.holders.remove(&jvm);
        self.seen.remove(&jvm)
    }

    /// The JVMs to attach again now: their holder ended, or their retry
    /// came. A refusal again holds them anew.
    pub fn due(&mut self) -> Vec<u32> {
        let now = Instant::now();
        let due: Vec<u32> = self
            .holders
            .iter()
            .filter(|(_, holder)| match holder {
                Holder::Seen(pidfd) => pidfd::wait_for_exit(pidfd.as_fd(), Duration::ZERO),
                Holder::Unseen { next } => *next <= now,
            })
            .map(|(&jvm, _)| jvm)
            .collect();
        for jvm in &due {
            self.holders.remove(jvm);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn a_jvm_is_due_when_its_holder_exits() {
        let mut holder = Command::new("sleep").arg("0.3").spawn().unwrap();
        let mut held = HeldJvms::default();
        assert_eq!(held.hold(7, Some(holder.id())), Some(true));
        assert_eq!(held.hold(8, None), Some(true));
        assert!(held.due().is_empty(), "both holders still run");
        holder.wait().unwrap();
        assert_eq!(held.due(), [7]);
        assert!(held.due().is_empty(), "not due twice");
        assert_eq!(held.hold(7, None), Some(false), "held again, said before");
        assert!(held.forget(7) && held.forget(8));
        assert!(!held.forget(8));
        assert!(held.holders.is_empty());
    }

    #[test]
    fn a_holder_already_gone_makes_the_jvm_due_at_once() {
        let mut held = HeldJvms::default();
        assert_eq!(held.hold(7, Some(u32::MAX)), Some(true));
        assert_eq!(held.due(), [7]);
    }
}
