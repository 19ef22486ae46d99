//! The agent goes idle when no stoke reads it: after a while (60 s, or the
//! `idle=SECONDS` option) without a stoke holding its memory's lock, it
//! gives the memory of its event log and rings back and parks its worker,
//! taking no CPU, until the next stoke wakes it ([`crate::shared`]).

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use crate::shared::SharedMemory;

/// How often the worker looks whether a stoke holds the memory.
const CHECK_PERIOD: Duration = Duration::from_millis(100);

/// How long the agent stays active with no stoke reading it, by default.
const DEFAULT_IDLE_AFTER: Duration = Duration::from_secs(60);

/// The idle time in milliseconds.
static IDLE_AFTER_MS: AtomicU64 = AtomicU64::new(DEFAULT_IDLE_AFTER.as_millis() as u64);

/// Takes the idle time from the agent's options, if they hold
/// `idle=SECONDS` (among comma-separated options).
pub fn configure(options: &str) {
    let idle = options
        .split(',')
        .find_map(|option| option.strip_prefix("idle="))
        .and_then(|seconds| seconds.parse::<f64>().ok())
        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok());
    if let Some(idle) = idle {
        IDLE_AFTER_MS.store(idle.as_millis() as u64, Ordering::Relaxed);
    }
}

/// When a stoke was last seen holding the memory.
pub struct IdleWatch {
    idle_after: Duration,
    last_read: Instant,
    last_check: Instant,
}

impl IdleWatch {
    /// Starts counting now.
    pub fn new() -> Self {
        Self {
            idle_after: Duration::from_millis(IDLE_AFTER_MS.load(Ordering::Relaxed)),
            last_read: Instant::now(),
            last_check: Instant::now(),
        }
    }

    /// Looks (at most every 0.1 s, or at once when a stoke `rang` the
    /// doorbell: it holds the memory, and may want events on now) whether
    /// a stoke holds the memory. When
    /// none has for the idle time, goes idle and returns only once a stoke
    /// woke the agent, with true: the caller then forgets what it told the
    /// last stoke, replays its code map, and says it is active.
    pub fn idled(&mut self, shared: &SharedMemory, rang: bool) -> bool {
        if !rang && self.last_check.elapsed() < CHECK_PERIOD {
            return false;
        }
        self.last_check = Instant::now();
        if shared.held_by_stoke() {
            self.last_read = self.last_check;
            return false;
        }
        if self.last_read.elapsed() < self.idle_after {
            shared.unlock();
            return false;
        }
        shared.go_idle();
        shared.unlock();
        shared.wait_for_stoke();
        self.last_read = Instant::now();
        true
    }
}
