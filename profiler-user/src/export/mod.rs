//! Delivering the profiles of `stoke continuous`: each interval's batch of
//! gzipped pprof bodies, one per service, pushed to Grafana Pyroscope's
//! `/ingest`, to an OpenTelemetry collector as OTLP profiles, and/or
//! written as files under `--output-dir`.
//!
//! Recording must never wait on a backend: [`Exporter::submit`] only queues.
//! Each destination has its own bounded queue and worker thread, so a
//! Pyroscope outage neither delays the files nor stalls the recording; when
//! a queue is full its oldest batch is dropped and counted. The work is split
//! by job: [`args`] (the flags, checked into a [`args::Settings`]),
//! [`queue`] (the bounded queue and its counters), [`worker`] (delivery,
//! retries with backoff, the deadline of [`Exporter::finish`]),
//! [`http`] (what the HTTP destinations share), [`pyroscope`] (one ingest
//! request), [`otlp`] (one OTLP request) and [`directory`] (one file, and
//! rotation).

mod args;
mod directory;
mod exporter;
mod http;
mod otlp;
mod pyroscope;
mod queue;
mod worker;

#[cfg(test)]
mod tests;

use std::time::SystemTime;

use crate::event::Event;

pub use args::ExportArgs;
pub use exporter::{DeliveryStats, ExportProbe, Exporter};

/// One service's profile of one interval.
#[derive(Debug, Clone)]
pub struct ServiceProfile {
    /// The service, as the profile's labels name it: Pyroscope's
    /// application name and the file's directory, sanitized by each.
    pub service: String,
    /// Labels of the whole profile (container, pod, host...), sent after the
    /// service name. Names and values Pyroscope cannot take are rewritten.
    pub labels: Vec<(String, String)>,
    /// The gzipped pprof body, sent and written as is.
    pub pprof: Vec<u8>,
    /// What it counts: Pyroscope tells events apart by the pprof's sample
    /// types; files by their names.
    pub event: Event,
}

/// The profiles of one interval, `from` to `until`.
#[derive(Debug, Clone)]
pub struct Batch {
    /// When the interval started.
    pub from: SystemTime,
    /// When it ended: the files' names are its UNIX seconds.
    pub until: SystemTime,
    /// The sampling frequency, for Pyroscope's `sampleRate`.
    pub sample_rate_hz: u64,
    /// One profile per service.
    pub profiles: Vec<ServiceProfile>,
}

/// `time`'s whole seconds since the UNIX epoch (0 before it).
fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}
