//! `--metrics-addr`: stoke's own counters for Prometheus, served as its
//! text exposition format on `GET /metrics`. The recording adds each
//! interval's counts as it ends ([`Metrics::add_interval`]); the export
//! queues and stoke's CPU and memory are read when a scrape comes. The work
//! is split by job: [`exposition`] (the text of the counters) and
//! [`server`] (the HTTP side, one request at a time).

mod exposition;
mod server;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard},
};

use anyhow::{Context, Result};

use crate::{
    export::ExportProbe,
    model::{JavaSummary, RecordingSummary},
};

/// The counters a scrape reads, shared with the server's thread.
#[derive(Clone)]
pub struct Metrics {
    state: Arc<Mutex<State>>,
}

/// Everything counted so far.
#[derive(Default)]
struct State {
    /// Intervals ended.
    intervals: u64,
    /// The sum of the intervals' counts.
    totals: RecordingSummary,
    /// The JVMs' counts, whole-run already.
    java: JavaSummary,
    /// JVMs said to keep native stacks only.
    jvms_native_only: u64,
    /// The export queues, read at each scrape.
    export: Option<ExportProbe>,
}

impl Metrics {
    /// Listens on `addr` and serves the counters from a thread of their own;
    /// an address that cannot be listened on is an error here, before any
    /// recording.
    pub fn serve(addr: &str) -> Result<Self> {
        let socket: SocketAddr = addr.parse().map_err(|_| {
            anyhow::anyhow!("--metrics-addr {addr}: not an address and port such as 127.0.0.1:9464")
        })?;
        let listener = std::net::TcpListener::bind(socket)
            .with_context(|| format!("--metrics-addr {addr}: cannot listen there"))?;
        let metrics = Self {
            state: Arc::default(),
        };
        server::start(listener, metrics.clone())?;
        Ok(metrics)
    }

    /// Adds an interval's counts.
    pub fn add_interval(&self, interval: &RecordingSummary) {
        let mut state = self.lock();
        state.intervals += 1;
        add(&mut state.totals, interval);
    }

    /// The JVMs' counts since the start, and how many JVMs keep native
    /// stacks only.
    pub fn set_java(&self, java: &JavaSummary, native_only: usize) {
        let mut state = self.lock();
        state.java = java.clone();
        state.jvms_native_only = native_only as u64;
    }

    /// Where the export queues' counters are read.
    pub fn set_export(&self, probe: ExportProbe) {
        self.lock().export = Some(probe);
    }

    /// The exposition text of everything counted, as a scrape gets it.
    fn render(&self) -> String {
        exposition::render(&self.lock())
    }

    /// The state; a panic elsewhere while it was held leaves it usable.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Adds `interval`'s counts to `totals`.
fn add(totals: &mut RecordingSummary, interval: &RecordingSummary) {
    totals.samples += interval.samples;
    totals.lost_ring_full += interval.lost_ring_full;
    totals.malformed_records += interval.malformed_records;
    totals.over_budget += interval.over_budget;
    totals.partial_kernel_stacks += interval.partial_kernel_stacks;
    totals.partial_user_stacks += interval.partial_user_stacks;
    totals.lost_lifecycle_records += interval.lost_lifecycle_records;
    totals.idle_skipped += interval.idle_skipped;
    totals.processes = interval.processes;
    let (sum, quality) = (&mut totals.stack_quality, &interval.stack_quality);
    sum.samples += quality.samples;
    sum.reached_root += quality.reached_root;
    for (&reason, &count) in &quality.truncated {
        *sum.truncated.entry(reason).or_default() += count;
    }
}
