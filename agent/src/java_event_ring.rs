//! The agent's side of the Java event ring
//! (`profiler_common::java_events`): JVMTI callbacks on any Java thread
//! claim a slot with one compare-and-swap, fill it, and commit it; a full
//! ring drops the event and counts it, so no Java thread ever waits.

use std::sync::atomic::Ordering;

use profiler_common::{
    java_events::{sequence_of, stored_sequence, JavaEventSlot, JAVA_EVENT_SLOTS},
    jvm::JAVA_EVENTS_OFFSET,
};

use crate::shared::SharedMemory;

/// A claimed slot, to fill then commit.
pub struct EventClaim {
    /// The slot; only its claimer writes it until committed.
    pub slot: *mut JavaEventSlot,
    position: u64,
}

impl SharedMemory {
    fn event_slot(&self, position: u64) -> *mut JavaEventSlot {
        let index = index_of(position);
        // SAFETY: the ring lies inside the mapping; index is bounded.
        unsafe {
            self.at(JAVA_EVENTS_OFFSET)
                .cast::<JavaEventSlot>()
                .add(index)
        }
    }

    /// Empties the ring (with the sample ring; only while no stoke reads):
    /// its memory is zeroed then (fresh, or given back while idle), which
    /// is an empty ring; only the positions start over.
    pub(crate) fn reset_java_event_ring(&self) {
        let header = self.header();
        header.java_events_written.store(0, Ordering::Release);
        header.java_events_read.store(0, Ordering::Release);
    }

    /// Claims the next free slot; `None` (counted) when the ring is full.
    pub fn claim_event(&self) -> Option<EventClaim> {
        let header = self.header();
        let mut position = header.java_events_written.load(Ordering::Relaxed);
        loop {
            let slot = self.event_slot(position);
            // SAFETY: slot is in bounds; sequence is atomic.
            let stored = unsafe { (*slot).sequence.load(Ordering::Acquire) };
            let sequence = sequence_of(stored, index_of(position));
            match sequence.wrapping_sub(position) as i64 {
                0 => match header.java_events_written.compare_exchange_weak(
                    position,
                    position + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(EventClaim { slot, position }),
                    Err(current) => position = current,
                },
                behind if behind < 0 => {
                    header.java_events_dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                _ => position = header.java_events_written.load(Ordering::Relaxed),
            }
        }
    }

    /// Hands a filled slot to stoke.
    pub fn commit_event(&self, claim: EventClaim) {
        // SAFETY: the claimed slot is in bounds.
        unsafe {
            (*claim.slot).sequence.store(
                stored_sequence(claim.position + 1, index_of(claim.position)),
                Ordering::Release,
            )
        };
    }
}

fn index_of(position: u64) -> usize {
    (position % JAVA_EVENT_SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_event_ring_drops_and_counts() {
        let shared = SharedMemory::create().unwrap();
        for _ in 0..JAVA_EVENT_SLOTS {
            let claim = shared.claim_event().expect("room left");
            shared.commit_event(claim);
        }
        assert!(shared.claim_event().is_none());
        let header = shared.header();
        assert_eq!(header.java_events_dropped.load(Ordering::Relaxed), 1);
        // Consumed (as stoke does), the first slot takes the next event.
        // SAFETY: slot 0 is in bounds; its sequence is atomic.
        unsafe { &(*shared.event_slot(0)).sequence }.store(
            stored_sequence(JAVA_EVENT_SLOTS as u64, 0),
            Ordering::Release,
        );
        let claim = shared.claim_event().expect("a slot was freed");
        assert_eq!(claim.position, JAVA_EVENT_SLOTS as u64);
    }
}
