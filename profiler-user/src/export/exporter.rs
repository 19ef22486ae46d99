//! The exporter: a queue and a worker thread per destination, fed by
//! [`Exporter::submit`], and its counters.

use std::{
    fmt,
    sync::Arc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::Context;

use super::{
    args::ExportArgs,
    directory::Directory,
    http::Timeouts,
    otlp::Otlp,
    pyroscope::Pyroscope,
    queue::Queue,
    worker::{self, Backoff, Destination},
    Batch,
};

/// What one destination did with the batches it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryStats {
    /// Profiles taken (pushed, or written).
    pub delivered: u64,
    /// Profiles refused for good (an HTTP 4xx other than 429, a file that
    /// could not be written), not retried.
    pub refused: u64,
    /// Attempts that failed and were retried (unreachable, timed out, 5xx,
    /// 429).
    pub failed_attempts: u64,
    /// Batches not wholly delivered: dropped from a full queue, or still
    /// queued at [`Exporter::finish`]'s deadline.
    pub dropped: u64,
}

/// The counters of each destination given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Pushes to Pyroscope, with `--pyroscope`.
    pub pyroscope: Option<DeliveryStats>,
    /// Pushes to an OTLP collector, with `--otlp`.
    pub otlp: Option<DeliveryStats>,
    /// Files written, with `--output-dir`.
    pub output_dir: Option<DeliveryStats>,
}

/// The destinations' counters and queues, read while the exporter runs
/// (`--metrics-addr`).
#[derive(Clone)]
pub struct ExportProbe {
    queues: Vec<(&'static str, Arc<Queue>)>,
}

impl ExportProbe {
    /// Per destination given: its name, its counters, the batches queued.
    pub fn destinations(&self) -> Vec<(&'static str, DeliveryStats, usize)> {
        self.queues
            .iter()
            .map(|(name, queue)| (*name, queue.stats(), queue.len()))
            .collect()
    }
}

/// The timings of delivery; tests shorten them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub backoff: Backoff,
    pub timeouts: Timeouts,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            backoff: Backoff {
                first: Duration::from_secs(1),
                max: Duration::from_secs(30),
            },
            timeouts: Timeouts {
                connect: Duration::from_secs(5),
                request: Duration::from_secs(30),
            },
        }
    }
}

/// How long past the deadline [`Exporter::finish`] waits for a worker: an
/// attempt begun after `finish` is cut at the deadline, but one begun
/// before has its own timeout, and is left to end alone.
const GRACE: Duration = Duration::from_millis(200);

/// Delivers batches of profiles in the background.
pub struct Exporter {
    pyroscope: Option<Channel>,
    otlp: Option<Channel>,
    output_dir: Option<Channel>,
}

/// One destination's queue and worker.
struct Channel {
    queue: Arc<Queue>,
    worker: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Checks `args` and starts a worker per destination.
    pub fn start(args: &ExportArgs) -> anyhow::Result<Self> {
        Self::start_with(args, Timing::default())
    }

    pub(super) fn start_with(args: &ExportArgs, timing: Timing) -> anyhow::Result<Self> {
        let settings = args.settings()?;
        let pyroscope = settings
            .pyroscope
            .map(|pyroscope| {
                Channel::start(
                    settings.queue,
                    Pyroscope::new(pyroscope, timing.timeouts),
                    timing.backoff,
                )
            })
            .transpose()?;
        let otlp = settings
            .otlp
            .map(|otlp| {
                Channel::start(
                    settings.queue,
                    Otlp::new(otlp, timing.timeouts),
                    timing.backoff,
                )
            })
            .transpose()?;
        let output_dir = settings
            .output_dir
            .map(|dir| {
                Channel::start(
                    settings.queue,
                    Directory::new(dir, settings.keep, settings.retention),
                    timing.backoff,
                )
            })
            .transpose()?;
        Ok(Self {
            pyroscope,
            otlp,
            output_dir,
        })
    }

    /// Queues `batch` for every destination; never waits.
    pub fn submit(&self, batch: Batch) {
        let batch = Arc::new(batch);
        for channel in self.channels() {
            channel.queue.push(Arc::clone(&batch));
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> ExportStats {
        ExportStats {
            pyroscope: self.pyroscope.as_ref().map(|channel| channel.queue.stats()),
            otlp: self.otlp.as_ref().map(|channel| channel.queue.stats()),
            output_dir: self
                .output_dir
                .as_ref()
                .map(|channel| channel.queue.stats()),
        }
    }

    /// Delivers what is queued until `deadline`, then stops; returns by
    /// the deadline (give or take a moment) even if a destination stays
    /// down, with the final counters: what was left counts as dropped.
    pub fn finish(mut self, deadline: Instant) -> ExportStats {
        for channel in self.channels() {
            channel.queue.finish(deadline);
        }
        for channel in [&mut self.pyroscope, &mut self.otlp, &mut self.output_dir]
            .into_iter()
            .flatten()
        {
            if channel.queue.wait_for_worker(deadline + GRACE) {
                if let Some(worker) = channel.worker.take() {
                    // It has returned: joining does not wait.
                    let _ = worker.join();
                }
            } else {
                // Stuck in a request begun before `finish` with a longer
                // timeout: left to end on its own, its batches undelivered.
                channel.queue.abandon();
            }
        }
        self.stats()
    }

    /// The counters and queues, for reading from another thread.
    pub fn probe(&self) -> ExportProbe {
        let queues = [
            ("pyroscope", &self.pyroscope),
            ("otlp", &self.otlp),
            ("output_dir", &self.output_dir),
        ];
        ExportProbe {
            queues: queues
                .into_iter()
                .filter_map(|(name, channel)| Some((name, Arc::clone(&channel.as_ref()?.queue))))
                .collect(),
        }
    }

    fn channels(&self) -> impl Iterator<Item = &Channel> {
        self.pyroscope
            .iter()
            .chain(&self.otlp)
            .chain(&self.output_dir)
    }
}

impl Drop for Exporter {
    /// Without [`Exporter::finish`], the workers stop at once.
    fn drop(&mut self) {
        for channel in self.channels() {
            channel.queue.finish(Instant::now());
        }
    }
}

impl Channel {
    fn start(
        capacity: usize,
        destination: impl Destination,
        backoff: Backoff,
    ) -> anyhow::Result<Self> {
        let queue = Arc::new(Queue::new(capacity));
        let name = format!("stoke-{}", destination.name());
        let worker = std::thread::Builder::new()
            .name(name)
            .spawn({
                let queue = Arc::clone(&queue);
                move || worker::run(queue, destination, backoff)
            })
            .context("cannot start a delivery thread")?;
        Ok(Self {
            queue,
            worker: Some(worker),
        })
    }
}

impl fmt::Display for ExportStats {
    /// One line for the log at exit, e.g. `pyroscope: 12 delivered, 0
    /// refused, 3 failed attempts, 0 batches dropped`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            ("pyroscope", self.pyroscope),
            ("otlp", self.otlp),
            ("output-dir", self.output_dir),
        ];
        let mut first = true;
        for (name, stats) in parts {
            let Some(stats) = stats else { continue };
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(
                f,
                "{name}: {} delivered, {} refused, {} failed attempts, {} batches dropped",
                stats.delivered, stats.refused, stats.failed_attempts, stats.dropped
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_read_as_one_line() {
        let pushed = DeliveryStats {
            delivered: 12,
            refused: 1,
            failed_attempts: 3,
            dropped: 2,
        };
        let stats = ExportStats {
            pyroscope: Some(pushed),
            otlp: None,
            output_dir: Some(DeliveryStats::default()),
        };
        assert_eq!(
            stats.to_string(),
            "pyroscope: 12 delivered, 1 refused, 3 failed attempts, 2 batches dropped; \
             output-dir: 0 delivered, 0 refused, 0 failed attempts, 0 batches dropped"
        );
    }
}
