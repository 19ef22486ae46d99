//! The agent's side of the Java event ring
//! (`profiler_common::java_events`): JVMTI callbacks on any Java thread
//! claim a position with one `fetch_add`, fill its slot, and commit it for
//! every stoke; a slot still mid-write by another drops the event and
//! counts it, so no Java thread ever waits.

use std::sync::atomic::Ordering;

use profiler_common::{
    java_events::{JavaEventSlot, JAVA_EVENT_SLOTS},
    jvm::{written_sequence, JAVA_EVENTS_OFFSET},
};

use crate::shared::{claim, SharedMemory};

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
    /// is an empty ring; only the position starts over.
    pub(crate) fn reset_java_event_ring(&self) {
        self.header()
            .java_events_written
            .store(0, Ordering::Release);
    }

    /// Claims the next position; `None` (counted) when its slot is still
    /// mid-write by another producer.
    pub fn claim_event(&self) -> Option<EventClaim> {
        let header = self.header();
        let (slot, position) = claim(
            &header.java_events_written,
            &header.java_events_dropped,
            |at| {
                let slot = self.event_slot(at);
                // SAFETY: the slot is in bounds; its sequence is atomic.
                (slot, unsafe { &(*slot).sequence })
            },
        )?;
        Some(EventClaim { slot, position })
    }

    /// Hands a filled slot to every stoke.
    pub fn commit_event(&self, claim: EventClaim) {
        // SAFETY: the claimed slot is in bounds.
        unsafe {
            (*claim.slot)
                .sequence
                .store(written_sequence(claim.position), Ordering::Release)
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
    fn an_event_slot_mid_write_drops_the_next_lap_and_counts() {
        let shared = SharedMemory::create().unwrap();
        let slow = shared.claim_event().expect("an empty ring");
        for _ in 1..JAVA_EVENT_SLOTS {
            let claim = shared.claim_event().expect("room left");
            shared.commit_event(claim);
        }
        assert!(shared.claim_event().is_none());
        let header = shared.header();
        assert_eq!(header.java_events_dropped.load(Ordering::Relaxed), 1);
        shared.commit_event(slow);
        // SAFETY: slot 0 is in bounds; its sequence is atomic.
        let sequence = unsafe { &(*shared.event_slot(0)).sequence };
        assert_eq!(sequence.load(Ordering::Acquire), written_sequence(0));
        let claim = shared.claim_event().expect("the next slot is free");
        assert_eq!(claim.position, JAVA_EVENT_SLOTS as u64 + 1);
    }
}
