//! One stoke's reading of a broadcast ring in an agent's memory (the
//! sample ring and the Java event ring, `profiler_common::jvm`): its read
//! position is its own, it never writes the ring, and it checks each slot's
//! seqlock around its copy. What the producers overwrote before this stoke
//! read it, and positions no producer ever wrote (a producer that found
//! the slot mid-write dropped its entry), count as lost.

use std::{
    marker::PhantomData,
    ptr::NonNull,
    sync::atomic::{fence, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use profiler_common::jvm::{written_sequence, Header, RingSlot};

/// How long a position already claimed stays unwritten before it is
/// skipped: a producer writes its slot in microseconds, so one still
/// unwritten after this dropped its entry (or is stalled).
const STUCK_AFTER: Duration = Duration::from_millis(100);

/// A stoke's position in the broadcast ring of `S`.
#[derive(Debug)]
pub struct RingReader<S> {
    position: u64,
    /// Entries lost to this stoke: overwritten, torn, or never written.
    lost: u64,
    /// The position found claimed but unwritten, and since when.
    stuck: Option<(u64, Instant)>,
    slot: PhantomData<fn() -> S>,
}

/// What a slot's sequence says of `position`.
enum SlotState {
    Written,
    Overwritten,
    NotYet,
}

impl<S: RingSlot> RingReader<S> {
    /// Reads from `position` on (the producers' claim position when the
    /// stoke came: what was written before is none of its business).
    pub fn new(position: u64) -> Self {
        Self {
            position,
            lost: 0,
            stuck: None,
            slot: PhantomData,
        }
    }

    /// Entries lost so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Reads every complete entry of the ring in the shared memory at
    /// `base`, oldest first, at most one ring's worth: `copy` copies a
    /// slot, and `take` gets each copy the seqlock vouches for.
    ///
    /// # Safety
    /// `base` maps the whole shared memory (`jvm::TOTAL_SIZE` bytes) for
    /// the call.
    pub unsafe fn drain<T>(
        &mut self,
        base: NonNull<u8>,
        mut copy: impl FnMut(&S) -> T,
        take: impl FnMut(T),
    ) {
        // SAFETY: the header lies at the start of the mapping; the fields
        // anyone writes concurrently are atomics.
        let header = unsafe { &*base.as_ptr().cast::<Header>() };
        let written = S::written(header).load(Ordering::Acquire);
        // SAFETY: every slot of the ring lies inside the mapping, which
        // outlives the call (the caller's promise).
        let slot = |position| unsafe { &*base.as_ptr().add(S::offset_of(position)).cast::<S>() };
        self.drain_positions(
            written,
            |position| slot(position).sequence(),
            |position| copy(slot(position)),
            take,
        );
    }

    /// [`Self::drain`] over positions: `written` is the producers' claim
    /// position, `sequence` gives the sequence of the slot of a position
    /// and `copy` copies that slot.
    fn drain_positions<'a, T>(
        &mut self,
        written: u64,
        sequence: impl Fn(u64) -> &'a AtomicU64,
        mut copy: impl FnMut(u64) -> T,
        mut take: impl FnMut(T),
    ) {
        let ahead = written.wrapping_sub(self.position);
        if ahead > u64::MAX / 2 {
            // The producers' position went back (an agent reset while no
            // stoke read, or a hostile one): start over from there.
            self.position = written;
            self.stuck = None;
            return;
        }
        let slots = S::SLOTS as u64;
        if ahead > slots {
            // Lapped: the oldest are gone.
            self.lost += ahead - slots;
            self.position = written - slots;
            self.stuck = None;
        }
        for _ in 0..slots {
            if self.position == written {
                break;
            }
            let position = self.position;
            let slot_sequence = sequence(position);
            let seen = slot_sequence.load(Ordering::Acquire);
            match state(seen, position) {
                SlotState::Written => {
                    let entry = copy(position);
                    // The copy's reads complete before the sequence is
                    // looked at again.
                    fence(Ordering::Acquire);
                    if slot_sequence.load(Ordering::Relaxed) == seen {
                        take(entry);
                    } else {
                        self.lost += 1;
                    }
                }
                SlotState::Overwritten => self.lost += 1,
                SlotState::NotYet => match self.stuck {
                    Some((at, since)) if at == position && since.elapsed() >= STUCK_AFTER => {
                        self.lost += 1;
                    }
                    Some((at, _)) if at == position => break,
                    _ => {
                        self.stuck = Some((position, Instant::now()));
                        break;
                    }
                },
            }
            self.position = position.wrapping_add(1);
            self.stuck = None;
        }
    }
}

fn state(sequence: u64, position: u64) -> SlotState {
    if sequence == written_sequence(position) {
        SlotState::Written
    } else if sequence > written_sequence(position) {
        SlotState::Overwritten
    } else {
        // Older, or being written (at most `writing_sequence(position)`).
        SlotState::NotYet
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::jvm::writing_sequence;

    use super::*;

    /// A slot of a ring of 8, whose sequences and values [`Ring`] holds.
    struct Slot;

    impl RingSlot for Slot {
        const OFFSET: usize = 0;
        const SLOTS: usize = 8;

        fn sequence(&self) -> &AtomicU64 {
            unreachable!("the tests read sequences from their Ring")
        }

        fn written(header: &Header) -> &AtomicU64 {
            &header.samples_written
        }

        fn dropped(header: &Header) -> &AtomicU64 {
            &header.samples_dropped
        }
    }

    /// A ring of `N` sequences and values, written as the agent does.
    struct Ring<const N: usize> {
        sequences: [AtomicU64; N],
        values: [AtomicU64; N],
        written: u64,
    }

    impl<const N: usize> Ring<N> {
        fn new() -> Self {
            Self {
                sequences: std::array::from_fn(|_| AtomicU64::new(0)),
                values: std::array::from_fn(|_| AtomicU64::new(0)),
                written: 0,
            }
        }

        fn claim(&mut self) -> u64 {
            let position = self.written;
            self.written += 1;
            self.sequences[position as usize % N]
                .store(writing_sequence(position), Ordering::Release);
            position
        }

        fn commit(&self, position: u64) {
            self.values[position as usize % N].store(position * 10, Ordering::Relaxed);
            self.sequences[position as usize % N]
                .store(written_sequence(position), Ordering::Release);
        }

        fn push(&mut self) {
            let position = self.claim();
            self.commit(position);
        }

        fn read(&self, reader: &mut RingReader<Slot>) -> Vec<u64> {
            let mut taken = Vec::new();
            reader.drain_positions(
                self.written,
                |position| &self.sequences[position as usize % N],
                |position| self.values[position as usize % N].load(Ordering::Relaxed),
                |value| taken.push(value),
            );
            taken
        }
    }

    #[test]
    fn two_readers_each_read_every_entry_at_their_own_pace() {
        let mut ring = Ring::<8>::new();
        let mut fast = RingReader::<Slot>::new(0);
        let mut slow = RingReader::<Slot>::new(0);
        for _ in 0..3 {
            ring.push();
        }
        assert_eq!(ring.read(&mut fast), [0, 10, 20]);
        for _ in 0..3 {
            ring.push();
        }
        assert_eq!(ring.read(&mut fast), [30, 40, 50]);
        assert_eq!(ring.read(&mut slow), [0, 10, 20, 30, 40, 50]);
        assert_eq!((fast.lost(), slow.lost()), (0, 0));
        // A reader that came later starts at the producers' position.
        let mut late = RingReader::<Slot>::new(ring.written);
        ring.push();
        assert_eq!(ring.read(&mut late), [60]);
    }

    #[test]
    fn a_lapped_reader_counts_what_it_lost() {
        let mut ring = Ring::<8>::new();
        let mut reader = RingReader::<Slot>::new(0);
        for _ in 0..11 {
            ring.push();
        }
        assert_eq!(ring.read(&mut reader), [30, 40, 50, 60, 70, 80, 90, 100]);
        assert_eq!(reader.lost(), 3);
        // Overwritten between the look at the producers' position and the
        // look at the slot.
        let mut behind = RingReader::<Slot>::new(3);
        let mut taken = Vec::new();
        behind.drain_positions(
            11,
            |position| &ring.sequences[position as usize % 8],
            |position| position,
            |position| taken.push(position),
        );
        assert_eq!(taken, (3..11).collect::<Vec<_>>());
        ring.push();
        ring.push();
        let mut stale = RingReader::<Slot>::new(3);
        let mut taken = Vec::new();
        stale.drain_positions(
            11,
            |position| &ring.sequences[position as usize % 8],
            |position| position,
            |position| taken.push(position),
        );
        assert_eq!(taken, (5..11).collect::<Vec<_>>());
        assert_eq!(stale.lost(), 2);
    }

    #[test]
    fn a_position_left_unwritten_is_skipped_after_a_while() {
        let mut ring = Ring::<8>::new();
        let mut reader = RingReader::<Slot>::new(0);
        ring.push();
        let _dropped = ring.claim();
        ring.push();
        assert_eq!(ring.read(&mut reader), [0]);
        assert_eq!(ring.read(&mut reader), Vec::<u64>::new(), "waits a while");
        std::thread::sleep(STUCK_AFTER);
        assert_eq!(ring.read(&mut reader), [20]);
        assert_eq!(reader.lost(), 1);
    }

    #[test]
    fn a_position_that_goes_back_restarts_the_reader() {
        let mut ring = Ring::<8>::new();
        let mut reader = RingReader::<Slot>::new(100);
        assert!(ring.read(&mut reader).is_empty());
        ring.push();
        assert_eq!(ring.read(&mut reader), [0]);
    }
}
