//! `stoke continuous --metrics-addr`: stoke's own counters, scraped every
//! second by a real Prometheus (Debian's `prometheus`), read back through
//! its query API and held against the samples stoke logs per interval; and
//! an address that cannot be listened on is one error line, before any
//! recording.

use std::{
    fs,
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use stoke_tests::{args, free_port, prepare, Stoke, TempDir};

/// The body of `GET path` on 127.0.0.1:`port` (HTTP/1.0: the server
/// closes the connection after its answer), or `None` if it cannot be had.
fn get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    (head.split(' ').nth(1) == Some("200")).then(|| body.to_owned())
}

/// A Prometheus server scraping one target every second, killed on drop.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &TempDir, target: u16) -> Self {
        let config = dir.path().join("prometheus.yml");
        fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: stoke\n    static_configs:\n      \
                 - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Debian's prometheus (`cargo xtask setup` installs it)");
        Self { child, port }
    }

    /// The value of the instant query `query`'s one series, if it has one.
    fn query(&self, query: &str) -> Option<f64> {
        let body = get(self.port, &format!("/api/v1/query?query={query}"))?;
        let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
        let result = answer["data"]["result"].as_array()?;
        result.first()?["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The samples of each interval stoke logged, in order.
fn interval_samples(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter_map(|line| {
            line.split_once("interval: ")?
                .1
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn prometheus_scrapes_the_samples_stoke_counted() {
    let (dir, workload) = prepare("metrics-scrape", "busy_other");
    let running = workload.spawn(&["60"]);
    let stoke_port = free_port();
    let prometheus = Prometheus::start(&dir, stoke_port);
    let mut stoke = Stoke::spawn(&args![
        "continuous",
        "-p",
        running.pid(),
        "-F",
        99,
        "--interval",
        1,
        "--output-dir",
        dir.path().join("profiles").display(),
        "--metrics-addr",
        format!("127.0.0.1:{stoke_port}")
    ]);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));

    // stoke's own exposition, as Prometheus reads it.
    thread::sleep(Duration::from_secs(3));
    let text = get(stoke_port, "/metrics").expect("stoke answers GET /metrics");
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    };
    println!("{text}");
    assert!(value("stoke_samples_total") > 0.0);
    assert!(value("stoke_process_cpu_seconds_total") > 0.0);
    let rss = value("stoke_process_resident_memory_bytes");
    assert!(
        (1e6..2e9).contains(&rss),
        "stoke's resident memory: {rss} bytes"
    );
    assert!(value("stoke_export_delivered_total{destination=\"output_dir\"}") >= 1.0);
    // At most the batch of an interval just cut, not yet written.
    assert!(value("stoke_export_queue_batches{destination=\"output_dir\"}") <= 1.0);
    assert_eq!(value("stoke_samples_lost_total{reason=\"ring_full\"}"), 0.0);

    // Scraped: Prometheus has the counter once at least two intervals in.
    let deadline = Instant::now() + Duration::from_secs(30);
    let scraped = loop {
        match prometheus.query("stoke_samples_total") {
            Some(samples)
                if samples > 0.0
                    && prometheus
                        .query("stoke_intervals_total")
                        .is_some_and(|intervals| intervals >= 2.0) =>
            {
                break samples
            }
            _ if Instant::now() > deadline => {
                panic!("Prometheus never scraped stoke_samples_total")
            }
            _ => thread::sleep(Duration::from_millis(500)),
        }
    };
    let up = prometheus.query("up").expect("Prometheus's up series");
    stoke.signal(libc::SIGTERM);
    let output = stoke.wait(Duration::from_secs(60));
    output.assert_success();
    let intervals = interval_samples(&output.stderr);
    let sums: Vec<u64> = intervals
        .iter()
        .scan(0, |sum, samples| {
            *sum += samples;
            Some(*sum)
        })
        .collect();
    println!("scraped stoke_samples_total {scraped}, up {up}; stoke's intervals {intervals:?}, sums {sums:?}");
    assert_eq!(up, 1.0, "Prometheus's scrape of stoke failed");
    // The counter is the sum of the intervals ended before the scrape: one
    // of the running sums stoke logged, exactly.
    assert!(
        sums.contains(&(scraped as u64)),
        "Prometheus has {scraped} samples, none of the running sums {sums:?} of stoke's intervals"
    );
    // 99 Hz on a busy thread: some 99 samples an interval.
    assert!(
        scraped >= 150.0,
        "only {scraped} samples in two intervals or more"
    );
}

#[test]
fn an_address_that_cannot_be_listened_on_is_one_error_before_recording() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let dir = TempDir::new("metrics-bad-addr");
    let out = dir.path().join("profiles");
    for (addr, words) in [
        (taken.as_str(), &["listen", "use"][..]),
        ("localhost", &["address", "port"][..]),
        ("256.1.1.1:80", &["address", "port"][..]),
    ] {
        let stoke = Stoke::spawn(&args![
            "continuous",
            "-a",
            "--output-dir",
            out.display(),
            "--metrics-addr",
            addr
        ]);
        let output = stoke.wait(Duration::from_secs(30));
        println!("{addr}: {}", output.stderr.trim());
        output.assert_user_error(words);
        assert!(output.stderr.contains(addr), "{}", output.stderr);
    }
    assert!(
        fs::read_dir(&out).map_or(true, |mut files| files.next().is_none()),
        "profiles were written"
    );
}
