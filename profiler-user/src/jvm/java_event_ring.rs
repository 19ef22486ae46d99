//! Stoke's side of the Java event ring in an agent's memory
//! (`profiler_common::java_events`): says which events the recording
//! wants, and takes the events the agent's JVMTI callbacks wrote. The
//! JVM is not trusted: every count read from a slot is bounded before use.

use std::sync::atomic::Ordering;

use profiler_common::{
    java_events::{
        sequence_of, stored_sequence, JavaEventKind, JavaEventSlot, JAVA_EVENT_SLOTS,
        MAX_CLASS_NAME, MAX_EVENT_FRAMES,
    },
    jvm::{JavaFrame, JAVA_EVENTS_OFFSET},
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
    /// threshold.
    pub fn want_java_events(&self, wanted: u32, alloc_interval: u64, lock_threshold_ns: u64) {
        let header = self.header();
        header
            .alloc_interval
            .store(alloc_interval, Ordering::Relaxed);
        header
            .lock_threshold_ns
            .store(lock_threshold_ns, Ordering::Relaxed);
        header.java_events_wanted.store(wanted, Ordering::Release);
        self.ring_doorbell();
    }

    /// Java events the agent dropped, ever, because the ring was full.
    pub fn java_events_dropped(&self) -> u64 {
        self.header().java_events_dropped.load(Ordering::Relaxed)
    }

    fn event_slot(&self, position: u64) -> &JavaEventSlot {
        let index = index_of(position);
        let offset = JAVA_EVENTS_OFFSET + index * size_of::<JavaEventSlot>();
        // SAFETY: the ring lies inside the mapping, index is bounded.
        unsafe { &*self.at(offset).cast::<JavaEventSlot>() }
    }

    /// Gives back the slot a consumer killed mid-drain took and never
    /// released, as for the sample ring.
    pub(super) fn recover_java_event_ring(&self) {
        let read = self.header().java_events_read.load(Ordering::Acquire);
        let last = read.wrapping_sub(1);
        let index = index_of(last);
        let _ = self.event_slot(last).sequence.compare_exchange(
            stored_sequence(read, index),
            stored_sequence(last.wrapping_add(JAVA_EVENT_SLOTS as u64), index),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Hands every complete Java event to `take`, oldest first; at most one
    /// ring's worth per call. Restartable like the sample ring's drain.
    /// The event handed over is read into one buffer, reused from event to
    /// event: an allocation recording takes thousands a second.
    pub fn drain_java_events(&self, mut take: impl FnMut(&RawJavaEvent)) {
        let header = self.header();
        let mut position = header.java_events_read.load(Ordering::Relaxed);
        // Every field is written by read_event before `take` sees it.
        let mut event = RawJavaEvent {
            kind: JavaEventKind::Alloc,
            tid: 0,
            value: 0,
            class: Vec::with_capacity(MAX_CLASS_NAME),
            frames: Vec::with_capacity(MAX_EVENT_FRAMES),
        };
        for _ in 0..JAVA_EVENT_SLOTS {
            let slot = self.event_slot(position);
            let index = index_of(position);
            if sequence_of(slot.sequence.load(Ordering::Acquire), index) != position.wrapping_add(1)
            {
                break;
            }
            let known = read_event(slot, &mut event);
            let next = position.wrapping_add(1);
            header.java_events_read.store(next, Ordering::Release);
            slot.sequence.store(
                stored_sequence(position.wrapping_add(JAVA_EVENT_SLOTS as u64), index),
                Ordering::Release,
            );
            position = next;
            if known {
                take(&event);
            }
        }
    }
}

fn index_of(position: u64) -> usize {
    (position % JAVA_EVENT_SLOTS as u64) as usize
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
