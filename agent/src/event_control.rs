//! Switches the JVMTI events of Java allocation and lock profiling on and
//! off as stoke asks ([`Header::java_events_wanted`]), from the agent's
//! worker: on only while a recording that wants them runs, off when it
//! ends, and off too when no stoke holds the memory any more (a stoke
//! killed mid-recording leaves nothing on).

use std::sync::atomic::Ordering;

use profiler_common::java_events::{WANT_ALLOC, WANT_LOCK};

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
    /// Brings the JVM's events to what stoke wants now; `stoke_reads` says
    /// whether a stoke holds the memory.
    pub fn apply(&mut self, jvmti: Jvmti, shared: &SharedMemory, stoke_reads: bool) {
        let header = shared.header();
        let wanted = if stoke_reads {
            header.java_events_wanted.load(Ordering::Acquire)
        } else {
            0
        };
        let interval = header
            .alloc_interval
            .load(Ordering::Relaxed)
            .max(MIN_ALLOC_INTERVAL);
        LOCK_THRESHOLD_NS.store(
            header.lock_threshold_ns.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
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
