//! The exporter end to end, over real HTTP on loopback and real files:
//! what a push carries, delivery through outages, the queue bound, and
//! finishing within a deadline.

mod delivery;
mod receiver;
mod request;

use std::{
    net::TcpListener,
    num::NonZeroUsize,
    path::Path,
    time::{Duration, Instant, SystemTime},
};

use super::{
    exporter::{DeliveryStats, ExportStats, Timing},
    http::Timeouts,
    worker::Backoff,
    Batch, ExportArgs, Exporter, ServiceProfile,
};

/// Short delays, so that outages last milliseconds.
fn timing() -> Timing {
    Timing {
        backoff: Backoff {
            first: Duration::from_millis(10),
            max: Duration::from_millis(40),
        },
        timeouts: Timeouts {
            connect: Duration::from_secs(1),
            request: Duration::from_secs(5),
        },
    }
}

fn args(pyroscope: Option<&str>, output_dir: Option<&Path>, queue: usize) -> ExportArgs {
    ExportArgs {
        pyroscope: pyroscope.map(str::to_owned),
        otlp: None,
        basic_auth: None,
        bearer_token: None,
        tenant: None,
        labels: Vec::new(),
        output_dir: output_dir.map(Path::to_owned),
        keep: NonZeroUsize::new(60).unwrap(),
        retention: Duration::from_secs(86400),
        queue: NonZeroUsize::new(queue).unwrap(),
    }
}

fn start(args: &ExportArgs) -> Exporter {
    Exporter::start_with(args, timing()).unwrap()
}

/// Batch `number`: one profile, of service `web`, whose body names it.
fn batch(number: u64) -> Batch {
    let until = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + number * 10);
    Batch {
        from: until - Duration::from_secs(10),
        until,
        sample_rate_hz: 99,
        profiles: vec![ServiceProfile {
            service: "web".to_owned(),
            labels: Vec::new(),
            pprof: body(number),
            event: crate::event::Event::Cpu,
        }],
    }
}

fn body(number: u64) -> Vec<u8> {
    format!("pprof of batch {number}").into_bytes()
}

/// A loopback URL where nothing listens (for now).
fn unused_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// Waits (at most 10 s) until `done` holds.
fn wait_until(mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "never happened");
        std::thread::sleep(Duration::from_millis(5));
    }
}
