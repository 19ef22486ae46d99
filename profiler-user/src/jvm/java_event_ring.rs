//! Stoke's side of the Java event ring in an agent's memory
//! (`profiler_common::java_events`): says which events the recording
//! wants, and takes the events the agent's JVMTI callbacks wrote, keeping
//! only those it asked for (the agent records what every stoke reading
//! asks for). The JVM is not trusted: every count read from a slot is
//! bounded before use.

use std::{cell::RefCell, sync::atomic::Ordering};

use profiler_common::{
    java_events::{
        JavaEventKind, JavaEventSlot, MAX_CLASS_NAME, MAX_EVENT_FRAMES, WANT_ALLOC, WANT_LOCK,
    },
    jvm::JavaFrame,
};

use super::agent_memory::AgentMemory;

/// A Java event as the agent wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawJavaEvent {
    /// What happened.
    pub kind: JavaEventKind,
    /// The thread, in the JVM's pid namespace.
    pub tid: u32,
    /// Bytes allocated or nanoseconds waited.
    pub value: u64,
    /// The class signature (`[B`), at most `MAX_CLASS_NAME` bytes.
    pub class: Vec<u8>,
    /// Innermost first.
    pub frames: Vec<JavaFrame>,
}

impl AgentMemory {
    /// Asks the agent for the Java events of `wanted` (`WANT_*` bits; 0 to
    /// stop), with the allocation sampling interval and the lock
    /// threshold, in this stoke's consumer slot.
    pub fn want_java_events(&mut self, wanted: u32, alloc_interval: u64, lock_threshold_ns: u64) {
        let consumer = self.consumer();
        consumer
            .alloc_interval
            .store(alloc_interval, Ordering::Relaxed);
        consumer
            .lock_threshold_ns
            .store(lock_threshold_ns, Ordering::Relaxed);
        consumer.java_events_wanted.store(wanted, Ordering::Release);
        self.java_events_wanted = (wanted, lock_threshold_ns);
        self.ring_doorbell();
    }

    /// Java events the agent dropped, ever, their slot mid-write by another
    /// producer.
    pub fn java_events_dropped(&self) -> u64 {
        self.header().java_events_dropped.load(Ordering::Relaxed)
    }

    /// Java events this stoke lost: overwritten in the ring before it read
    /// them, or never written.
    pub fn java_events_lost(&self) -> u64 {
        self.java_events.lost()
    }

    /// The mean bytes between sampled allocations the JVM samples at now
    /// (the smallest interval any stoke reading asked for); 0 if the agent
    /// does not say.
    pub fn alloc_interval_on(&self) -> u64 {
        self.header().alloc_interval_on.load(Ordering::Acquire)
    }

    /// Hands every complete Java event this stoke asked for to `take`,
    /// oldest first; at most one ring's worth per call. The event handed
    /// over is read into one buffer, reused from event to event: an
    /// allocation recording takes thousands a second.
    pub fn drain_java_events(&mut self, mut take: impl FnMut(&RawJavaEvent)) {
        let (wanted, threshold) = self.java_events_wanted;
        // Every field is written by read_event before `take` sees it.
        let event = RefCell::new(RawJavaEvent {
            kind: JavaEventKind::Alloc,
            tid: 0,
            value: 0,
            class: Vec::with_capacity(MAX_CLASS_NAME),
            frames: Vec::with_capacity(MAX_EVENT_FRAMES),
        });
        // SAFETY: the mapping lives as long as `self`.
        unsafe {
            self.java_events.drain(
                self.base(),
                |slot| read_event(slot, &mut event.borrow_mut()),
                |known| {
                    let event = event.borrow();
                    let asked = match event.kind {
                        JavaEventKind::Alloc => wanted & WANT_ALLOC != 0,
                        JavaEventKind::Monitor => {
                            wanted & WANT_LOCK != 0 && event.value >= threshold
                        }
                    };
                    if known && asked {
                        take(&event);
                    }
                },
            )
        }
    }
}

/// Reads a slot's event into `event`; false for a kind no agent writes.
fn read_event(slot: &JavaEventSlot, event: &mut RawJavaEvent) -> bool {
    // SAFETY: plain fields of a committed slot; a hostile producer may
    // still change them, so every value is checked after.
    let (kind, tid, value, frame_count, class_len) = unsafe {
        (
            std::ptr::addr_of!(slot.kind).read_volatile(),
            std::ptr::addr_of!(slot.tid).read_volatile(),
            std::ptr::addr_of!(slot.value).read_volatile(),
            std::ptr::addr_of!(slot.frame_count).read_volatile(),
            std::ptr::addr_of!(slot.class_len).read_volatile(),
        )
    };
    let Some(kind) = JavaEventKind::from_raw(kind) else {
        return false;
    };
    let frame_count = (frame_count as usize).min(MAX_EVENT_FRAMES);
    let class_len = (class_len as usize).min(MAX_CLASS_NAME);
    event.kind = kind;
    event.tid = tid;
    event.value = value;
    event.class.clear();
    event.frames.clear();
    event.class.reserve(class_len);
    event.frames.reserve(frame_count);
    // SAFETY: the counts are bounded by the arrays' lengths, and the
    // buffers have room for that many; bytes and frames of any value are
    // valid, so a producer changing them meanwhile makes wrong values,
    // checked where used, never unsafety in stoke.
    unsafe {
        std::ptr::copy_nonoverlapping(
            std::ptr::addr_of!(slot.class).cast::<u8>(),
            event.class.as_mut_ptr(),
            class_len,
        );
        event.class.set_len(class_len);
        std::ptr::copy_nonoverlapping(
            std::ptr::addr_of!(slot.frames).cast::<JavaFrame>(),
            event.frames.as_mut_ptr(),
            frame_count,
        );
        event.frames.set_len(frame_count);
    }
    true
}
