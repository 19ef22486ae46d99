//! Delivery through outages: retried in order and once each within the
//! queue bound, the oldest dropped and counted beyond it, and a finish that
//! keeps its deadline whatever the backend does.

use std::{
    net::TcpListener,
    time::{Duration, Instant},
};

use super::{
    args, batch, body, receiver::Receiver, soon, start, unused_port, wait_until, DeliveryStats,
    ExportStats, ServiceProfile,
};

#[test]
fn batches_survive_errors_and_arrive_once_in_order() {
    let receiver = Receiver::start();
    receiver.answer(500);
    let exporter = start(&args(Some(&receiver.url), None, 5));
    for number in 1..=3 {
        exporter.submit(batch(number));
    }
    receiver.wait_for(3);
    receiver.answer(429);
    receiver.wait_for(6);
    receiver.answer(200);
    let stats = exporter.finish(soon()).pyroscope.unwrap();
    assert_eq!(receiver.accepted_bodies(), [body(1), body(2), body(3)]);
    let retried = receiver
        .requests()
        .iter()
        .filter(|request| request.status != 200)
        .count() as u64;
    assert!(retried >= 6);
    assert_eq!(
        stats,
        DeliveryStats {
            delivered: 3,
            refused: 0,
            failed_attempts: retried,
            dropped: 0
        }
    );
}

#[test]
fn a_retry_resends_only_the_profiles_not_taken() {
    let receiver = Receiver::start();
    receiver.answer_next(&[200, 500, 503]);
    let exporter = start(&args(Some(&receiver.url), None, 5));
    let mut two = batch(1);
    two.profiles.push(ServiceProfile {
        service: "db".to_owned(),
        labels: Vec::new(),
        pprof: body(2),
        event: crate::event::Event::Cpu,
    });
    exporter.submit(two);
    let stats = exporter.finish(soon()).pyroscope.unwrap();
    let bodies: Vec<Vec<u8>> = receiver
        .requests()
        .into_iter()
        .map(|request| request.body)
        .collect();
    assert_eq!(bodies, [body(1), body(2), body(2), body(2)]);
    assert_eq!(receiver.accepted_bodies(), [body(1), body(2)]);
    assert_eq!(
        (stats.delivered, stats.failed_attempts, stats.dropped),
        (2, 2, 0)
    );
}

#[test]
fn beyond_the_queue_bound_the_oldest_are_dropped_and_counted() {
    let receiver = Receiver::start();
    receiver.answer(503);
    let exporter = start(&args(Some(&receiver.url), None, 3));
    for number in 1..=5 {
        exporter.submit(batch(number));
    }
    assert_eq!(exporter.stats().pyroscope.unwrap().dropped, 2);
    receiver.wait_for(2);
    receiver.answer(200);
    let stats = exporter.finish(soon()).pyroscope.unwrap();
    assert_eq!(receiver.accepted_bodies(), [body(3), body(4), body(5)]);
    let retried = receiver.requests().len() as u64 - 3;
    assert_eq!(
        stats,
        DeliveryStats {
            delivered: 3,
            refused: 0,
            failed_attempts: retried,
            dropped: 2
        }
    );
}

#[test]
fn client_errors_are_not_retried() {
    let receiver = Receiver::start();
    receiver.answer(400);
    let exporter = start(&args(Some(&receiver.url), None, 5));
    exporter.submit(batch(1));
    exporter.submit(batch(2));
    let stats = exporter.finish(soon()).pyroscope.unwrap();
    assert_eq!(receiver.requests().len(), 2);
    assert_eq!(
        stats,
        DeliveryStats {
            delivered: 0,
            refused: 2,
            failed_attempts: 0,
            dropped: 0
        }
    );
}

#[test]
fn a_backend_that_comes_up_late_gets_everything() {
    let port = unused_port();
    let exporter = start(&args(Some(&format!("http://127.0.0.1:{port}")), None, 5));
    exporter.submit(batch(1));
    exporter.submit(batch(2));
    wait_until(|| exporter.stats().pyroscope.unwrap().failed_attempts >= 3);
    let receiver = Receiver::start_on(port);
    let stats = exporter.finish(soon()).pyroscope.unwrap();
    assert_eq!(receiver.accepted_bodies(), [body(1), body(2)]);
    assert_eq!((stats.delivered, stats.dropped), (2, 0));
}

/// `finish` with this much time returns this late at most: the grace of
/// the exporter and some scheduling slack on a busy machine.
const LATE: Duration = Duration::from_millis(200 + 300);

#[test]
fn finish_keeps_its_deadline_when_nothing_listens() {
    let exporter = start(&args(
        Some(&format!("http://127.0.0.1:{}", unused_port())),
        None,
        5,
    ));
    exporter.submit(batch(1));
    exporter.submit(batch(2));
    let start = Instant::now();
    let stats = exporter
        .finish(start + Duration::from_millis(300))
        .pyroscope
        .unwrap();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(300) + LATE,
        "{took:?}"
    );
    assert_eq!((stats.delivered, stats.dropped), (0, 2));
    assert!(stats.failed_attempts >= 2, "retried meanwhile: {stats:?}");
}

#[test]
fn finish_keeps_its_deadline_when_the_backend_hangs() {
    // Takes connections and never answers; the request timeout (5 s) is
    // longer than the deadline.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    let exporter = start(&args(Some(&url), None, 5));
    exporter.submit(batch(1));
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    let stats = exporter
        .finish(start + Duration::from_millis(300))
        .pyroscope
        .unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_millis(300) + LATE, "{took:?}");
    assert_eq!((stats.delivered, stats.dropped), (0, 1));
}

#[test]
fn files_are_written_while_pyroscope_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = args(
        Some(&format!("http://127.0.0.1:{}", unused_port())),
        Some(dir.path()),
        2,
    );
    args.keep = std::num::NonZeroUsize::new(2).unwrap();
    let exporter = start(&args);
    for number in 1..=4 {
        exporter.submit(batch(number));
        // One at a time, so that the directory's queue never overflows.
        wait_until(|| exporter.stats().output_dir.unwrap().delivered == number);
    }
    let ExportStats {
        pyroscope,
        output_dir,
        ..
    } = exporter.finish(Instant::now() + Duration::from_millis(100));
    let files = output_dir.unwrap();
    assert_eq!((files.delivered, files.dropped), (4, 0));
    assert_eq!(pyroscope.unwrap().delivered, 0);
    let web = dir.path().join("web");
    let mut names: Vec<String> = std::fs::read_dir(&web)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["1700000030.pb.gz", "1700000040.pb.gz"]);
    assert_eq!(
        std::fs::read(web.join("1700000040.pb.gz")).unwrap(),
        body(4)
    );
}

#[test]
fn without_a_destination_start_fails_in_one_line() {
    let error = super::Exporter::start(&args(None, None, 1)).err().unwrap();
    assert_eq!(
        format!("{error:#}"),
        "nowhere to send profiles: give --pyroscope URL, --otlp URL, --output-dir DIR, or several"
    );
}
