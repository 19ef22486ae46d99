//! The bounded queue between the recording and one destination's worker,
//! with that destination's counters. Pushing never waits: when full, the
//! oldest batch goes, even the one being retried, since under a long outage
//! the freshest profiles are the ones worth keeping.

use std::{
    collections::VecDeque,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use super::{exporter::DeliveryStats, Batch};

/// A batch in the queue, numbered so that the worker can tell whether the
/// one it is retrying was dropped meanwhile.
pub(super) struct Queued {
    pub number: u64,
    pub batch: Arc<Batch>,
}

/// How a wait before a retry ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Wake {
    /// The delay passed: try again.
    Retry,
    /// The batch was dropped to make room: go on with the next.
    Dropped,
    /// The deadline of [`Queue::finish`] passed.
    OutOfTime,
}

/// A bounded queue of batches, shared by the exporter and one worker.
pub(super) struct Queue {
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    batches: VecDeque<Queued>,
    capacity: usize,
    pushed: u64,
    /// Set by [`Queue::finish`]: deliver what is queued until then.
    finish_by: Option<Instant>,
    /// The worker has returned.
    worker_done: bool,
    stats: DeliveryStats,
}

impl Queue {
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                batches: VecDeque::with_capacity(capacity),
                capacity,
                pushed: 0,
                finish_by: None,
                worker_done: false,
                stats: DeliveryStats::default(),
            }),
            changed: Condvar::new(),
        }
    }

    /// The state; a panic elsewhere while it was held leaves it usable.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `batch`, dropping the oldest if full.
    pub fn push(&self, batch: Arc<Batch>) {
        let mut state = self.lock();
        if state.batches.len() == state.capacity {
            state.batches.pop_front();
            state.stats.dropped += 1;
        }
        state.pushed += 1;
        let number = state.pushed;
        state.batches.push_back(Queued { number, batch });
        self.changed.notify_all();
    }

    /// The oldest batch, left queued until [`Queue::delivered`]; waits for
    /// one. `None` once finishing and empty, or past the deadline, when
    /// whatever is left is counted as dropped.
    pub fn next(&self) -> Option<Queued> {
        let mut state = self.lock();
        loop {
            if let Some(deadline) = state.finish_by {
                if Instant::now() >= deadline {
                    state.stats.dropped += state.batches.len() as u64;
                    state.batches.clear();
                    return None;
                }
            }
            if let Some(first) = state.batches.front() {
                return Some(Queued {
                    number: first.number,
                    batch: Arc::clone(&first.batch),
                });
            }
            if state.finish_by.is_some() {
                return None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Removes batch `number`, done with, unless it was dropped already.
    pub fn delivered(&self, number: u64) {
        let mut state = self.lock();
        if state
            .batches
            .front()
            .is_some_and(|first| first.number == number)
        {
            state.batches.pop_front();
        }
    }

    /// Waits `delay` before retrying batch `number`, or less if it is
    /// dropped or the deadline comes first.
    pub fn wait_to_retry(&self, number: u64, delay: Duration) -> Wake {
        let retry_at = Instant::now() + delay;
        let mut state = self.lock();
        loop {
            if state
                .batches
                .front()
                .is_none_or(|first| first.number != number)
            {
                return Wake::Dropped;
            }
            let now = Instant::now();
            if state.finish_by.is_some_and(|deadline| now >= deadline) {
                return Wake::OutOfTime;
            }
            if now >= retry_at {
                return Wake::Retry;
            }
            let until = state
                .finish_by
                .map_or(retry_at, |deadline| deadline.min(retry_at));
            state = self
                .changed
                .wait_timeout(state, until - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    /// Time left before the deadline, if finishing.
    pub fn time_left(&self) -> Option<Duration> {
        self.lock()
            .finish_by
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// Updates the counters.
    pub fn count(&self, update: impl FnOnce(&mut DeliveryStats)) {
        update(&mut self.lock().stats);
    }

    /// The counters so far.
    pub fn stats(&self) -> DeliveryStats {
        self.lock().stats
    }

    /// The batches waiting.
    pub fn len(&self) -> usize {
        self.lock().batches.len()
    }

    /// Called by the worker as it returns.
    pub fn worker_done(&self) {
        self.lock().worker_done = true;
        self.changed.notify_all();
    }

    /// Asks the worker to deliver what is queued by `deadline`, then stop
    /// (an earlier deadline given before stands). Does not wait.
    pub fn finish(&self, deadline: Instant) {
        let mut state = self.lock();
        state.finish_by = Some(
            state
                .finish_by
                .map_or(deadline, |given| given.min(deadline)),
        );
        self.changed.notify_all();
    }

    /// Counts what is still queued as dropped, and empties the queue.
    pub fn abandon(&self) {
        let mut state = self.lock();
        state.stats.dropped += state.batches.len() as u64;
        state.batches.clear();
        self.changed.notify_all();
    }

    /// Waits until the worker has returned, or until `until`; whether it has.
    pub fn wait_for_worker(&self, until: Instant) -> bool {
        let mut state = self.lock();
        while !state.worker_done {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, until - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn batch(seconds: u64) -> Arc<Batch> {
        let until = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
        Arc::new(Batch {
            from: until,
            until,
            sample_rate_hz: 99,
            profiles: Vec::new(),
        })
    }

    #[test]
    fn a_full_queue_drops_its_oldest() {
        let queue = Queue::new(2);
        for seconds in 1..=5 {
            queue.push(batch(seconds));
        }
        assert_eq!(queue.stats().dropped, 3);
        let first = queue.next().unwrap();
        assert_eq!(first.batch.until, batch(4).until);
        // Batch 4 is dropped while being retried: the wait says so at once.
        queue.push(batch(6));
        assert_eq!(
            queue.wait_to_retry(first.number, Duration::from_secs(60)),
            Wake::Dropped
        );
        queue.delivered(first.number);
        assert_eq!(queue.next().unwrap().batch.until, batch(5).until);
    }

    #[test]
    fn past_the_deadline_what_is_left_counts_as_dropped() {
        let queue = Queue::new(4);
        queue.push(batch(1));
        queue.push(batch(2));
        let first = queue.next().unwrap();
        let start = Instant::now();
        queue.finish(start + Duration::from_millis(50));
        assert_eq!(
            queue.wait_to_retry(first.number, Duration::from_secs(60)),
            Wake::OutOfTime
        );
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(50) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        assert!(queue.next().is_none());
        assert_eq!(queue.stats().dropped, 2);
    }
}
