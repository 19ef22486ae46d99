//! One destination's worker: takes batches from its queue in order and
//! delivers each profile once, retrying with capped exponential backoff
//! while the destination cannot take it. Logs one line when delivery starts
//! failing and one when it recovers, not one per retry, and one per kind of
//! refusal.

use std::{collections::HashSet, sync::Arc, time::Duration};

use super::{
    queue::{Queue, Wake},
    Batch, ServiceProfile,
};

/// What became of one attempt to deliver one profile.
#[derive(Debug)]
pub(super) enum Delivery {
    /// Taken.
    Delivered,
    /// Worth trying again later: the destination is down or overloaded.
    Failed(String),
    /// Refused for good: retrying would not help.
    Refused {
        /// The class of refusal, logged once (e.g. `HTTP 400`).
        kind: String,
        detail: String,
    },
}

/// Where a worker delivers.
pub(super) trait Destination: Send + 'static {
    /// Its name in logs.
    fn name(&self) -> &'static str;

    /// One attempt at `profile`, of `batch`, taking at most `time_left`
    /// when the exporter is finishing.
    fn deliver(
        &mut self,
        batch: &Batch,
        profile: &ServiceProfile,
        time_left: Option<Duration>,
    ) -> Delivery;
}

/// The delays between retries: `first`, doubling up to `max`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

/// Delivers batches from `queue` until it is finished.
pub(super) fn run(queue: Arc<Queue>, mut destination: impl Destination, backoff: Backoff) {
    let name = destination.name();
    let mut failing = false;
    let mut refusals_logged = HashSet::new();
    while let Some(queued) = queue.next() {
        let batch = &queued.batch;
        let mut profiles = batch.profiles.iter();
        let mut profile = profiles.next();
        let mut delay = backoff.first;
        let mut finished = true;
        while let Some(current) = profile {
            if queue.time_left() == Some(Duration::ZERO) {
                // Left queued: counted as dropped by the next `next`.
                finished = false;
                break;
            }
            match destination.deliver(batch, current, queue.time_left()) {
                Delivery::Delivered => {
                    queue.count(|stats| stats.delivered += 1);
                    if failing {
                        tracing::info!("{name}: delivering again");
                        failing = false;
                    }
                    delay = backoff.first;
                    profile = profiles.next();
                }
                Delivery::Refused { kind, detail } => {
                    queue.count(|stats| stats.refused += 1);
                    if refusals_logged.insert(kind) {
                        tracing::warn!(
                            "{name}: profile of {} refused, not retried: {detail}",
                            current.service
                        );
                    }
                    profile = profiles.next();
                }
                Delivery::Failed(reason) => {
                    queue.count(|stats| stats.failed_attempts += 1);
                    if !failing {
                        tracing::warn!(
                            "{name}: {reason}; retrying, backing off up to {:?}",
                            backoff.max
                        );
                        failing = true;
                    }
                    match queue.wait_to_retry(queued.number, delay) {
                        Wake::Retry => delay = (delay * 2).min(backoff.max),
                        Wake::Dropped => break,
                        Wake::OutOfTime => {
                            finished = false;
                            break;
                        }
                    }
                }
            }
        }
        if finished {
            queue.delivered(queued.number);
        }
    }
    queue.worker_done();
}
