//! Switches the JVMTI events of Java allocation and lock profiling on and
//! off as the stokes reading ask ([`Consumer::java_events_wanted`]), from
//! the agent's worker: on while any recording that wants them runs, with
//! the smallest allocation interval and lock threshold any asks for (each
//! stoke keeps the events it asked for), off when the last ends, and off
//! too when the stoke that wanted them no longer holds its consumer slot
//! (a stoke killed mid-recording leaves nothing on).

use std::sync::atomic::Ordering;

use profiler_common::{
    java_events::{WANT_ALLOC, WANT_LOCK},
    jvm::Consumer,
};

use crate::{
    compiled_frames,
    handler::monotonic_ns,
    java_events::{LOCK_THRESHOLD_NS, MONITORS_ON_SINCE_NS, RECORDING},
    jvmti::Jvmti,
    jvmti_events::EventGroup,
    shared::SharedMemory,
};

/// The smallest allocation sampling interval the agent sets: a smaller one
/// would make the JVM call the agent for nearly every object. Stoke
/// refuses smaller ones with a message.
pub const MIN_ALLOC_INTERVAL: u64 = 1024;

/// What the worker has switched on.
#[derive(Default)]
pub struct EventControl {
    /// Whether the JVM granted each group's capability, once asked.
    alloc_capable: Option<bool>,
    monitor_capable: Option<bool>,
    /// The `WANT_*` bits on now.
    on: u32,
    /// The sampling interval set with allocation sampling on.
    interval: u64,
}

impl EventControl {
    /// Brings the JVM's events to what the stokes reading want now.
    pub fn apply(&mut self, jvmti: Jvmti, shared: &SharedMemory) {
        let header = shared.header();
        let wants = Wants::of(shared.live_consumers());
        let wanted = wants.wanted;
        let interval = wants.alloc_interval.max(MIN_ALLOC_INTERVAL);
        LOCK_THRESHOLD_NS.store(wants.lock_threshold_ns, Ordering::Relaxed);
        let alloc_changed = self.on & WANT_ALLOC != 0 && interval != self.interval;
        if wanted & WANT_ALLOC != 0 && (self.on & WANT_ALLOC == 0 || alloc_changed) {
            let capable = *self
                .alloc_capable
                .get_or_insert_with(|| jvmti.add_event_capability(EventGroup::Alloc));
            if capable
                && jvmti.set_heap_sampling_interval(interval).is_ok()
                && jvmti.set_events(EventGroup::Alloc, true).is_ok()
            {
                self.interval = interval;
                self.switched(WANT_ALLOC, true);
            }
        }
        if wanted & WANT_LOCK != 0 && self.on & WANT_LOCK == 0 {
            let capable = *self
                .monitor_capable
                .get_or_insert_with(|| jvmti.add_event_capability(EventGroup::Monitor));
            MONITORS_ON_SINCE_NS.store(monotonic_ns(), Ordering::Relaxed);
            if capable && jvmti.set_events(EventGroup::Monitor, true).is_ok() {
                self.switched(WANT_LOCK, true);
            }
        }
        for (bit, group) in [
            (WANT_ALLOC, EventGroup::Alloc),
            (WANT_LOCK, EventGroup::Monitor),
        ] {
            if wanted & bit == 0 && self.on & bit != 0 {
                // Off for the callbacks first; then for the JVM, which
                // stops sampling allocations altogether.
                self.switched(bit, false);
                let _ = jvmti.set_events(group, false);
            }
        }
        // The walk of an event's stack names compiled frames from these.
        compiled_frames::keep(self.on != 0, || {
            let _ = jvmti.replay_compiled_methods();
        });
        if self.on & WANT_ALLOC != 0 {
            header
                .alloc_interval_on
                .store(self.interval, Ordering::Release);
        }
        header.java_events_on.store(self.on, Ordering::Release);
    }

    fn switched(&mut self, bit: u32, on: bool) {
        if on {
            self.on |= bit;
        } else {
            self.on &= !bit;
        }
        RECORDING.store(self.on, Ordering::Release);
    }
}

/// What the stokes reading want, together.
#[derive(Debug, PartialEq, Eq)]
struct Wants {
    /// Every `WANT_*` bit any wants.
    wanted: u32,
    /// The smallest allocation interval of those that want allocations.
    alloc_interval: u64,
    /// The smallest lock threshold of those that want locks.
    lock_threshold_ns: u64,
}

impl Wants {
    fn of<'a>(consumers: impl Iterator<Item = &'a Consumer>) -> Self {
        let mut wants = Self {
            wanted: 0,
            alloc_interval: u64::MAX,
            lock_threshold_ns: u64::MAX,
        };
        for consumer in consumers {
            let wanted = consumer.java_events_wanted.load(Ordering::Acquire);
            wants.wanted |= wanted & (WANT_ALLOC | WANT_LOCK);
            if wanted & WANT_ALLOC != 0 {
                let interval = consumer.alloc_interval.load(Ordering::Relaxed);
                wants.alloc_interval = wants.alloc_interval.min(interval);
            }
            if wanted & WANT_LOCK != 0 {
                let threshold = consumer.lock_threshold_ns.load(Ordering::Relaxed);
                wants.lock_threshold_ns = wants.lock_threshold_ns.min(threshold);
            }
        }
        wants
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicU64};

    use super::*;

    fn consumer(wanted: u32, alloc_interval: u64, lock_threshold_ns: u64) -> Consumer {
        Consumer {
            java_events_wanted: AtomicU32::new(wanted),
            reserved: 0,
            alloc_interval: AtomicU64::new(alloc_interval),
            lock_threshold_ns: AtomicU64::new(lock_threshold_ns),
            requests_written: AtomicU64::new(0),
            requests_read: AtomicU64::new(0),
        }
    }

    #[test]
    fn the_wants_of_several_stokes_are_their_union_at_the_finest_setting() {
        let consumers = [
            consumer(WANT_ALLOC, 1 << 20, 5),
            consumer(WANT_ALLOC | WANT_LOCK, 1 << 19, 1_000_000),
            consumer(WANT_LOCK, 1, 2_000_000),
            consumer(0, 1, 1),
        ];
        assert_eq!(
            Wants::of(consumers.iter()),
            Wants {
                wanted: WANT_ALLOC | WANT_LOCK,
                alloc_interval: 1 << 19,
                lock_threshold_ns: 1_000_000,
            }
        );
        assert_eq!(Wants::of(consumers[3..].iter()).wanted, 0);
    }
}
