//! Several stokes read one JVM's agent at once: a fleet daemon
//! (`stoke continuous -a`) and an incident's `stoke record -p JVM`, in
//! either order, or two records at different rates, each get Java frames
//! for nearly all the JVM's samples and the workload's 70:30 split, at
//! their own rate; a stoke killed with SIGKILL mid-recording disturbs none
//! of the others.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use stoke_tests::{
    args, describe, is_java_frame, prepare_java, read_folded, record_args, Stack, Stoke, JDK_17,
};

/// The daemon's interval, seconds.
const INTERVAL: u64 = 3;

const SEVENTY: &str = "JavaSplit.seventy";
const THIRTY: &str = "JavaSplit.thirty";

/// What one stoke's profile says of the JVM.
#[derive(Debug, Default)]
struct JvmCounts {
    total: u64,
    with_java: u64,
    seventy: u64,
    thirty: u64,
}

impl JvmCounts {
    /// The counts of the stacks of the process whose root frame is `root`.
    fn of(stacks: &[Stack], root: &str) -> Self {
        let mut counts = Self::default();
        counts.add(stacks, root);
        counts
    }

    fn add(&mut self, stacks: &[Stack], root: &str) {
        for stack in stacks.iter().filter(|s| s.root() == root) {
            self.total += stack.count;
            if stack.frames.iter().any(|f| is_java_frame(f)) {
                self.with_java += stack.count;
            }
            if stack.has_java(SEVENTY) {
                self.seventy += stack.count;
            }
            if stack.has_java(THIRTY) {
                self.thirty += stack.count;
            }
        }
    }

    fn java_share(&self) -> f64 {
        self.with_java as f64 / self.total.max(1) as f64
    }

    fn split(&self) -> f64 {
        100.0 * self.seventy as f64 / (self.seventy + self.thirty).max(1) as f64
    }

    /// Asserts that `who` got Java frames for at least 90% of the JVM's
    /// samples (at least `least` of them) and the 70:30 split within 3
    /// points, or 3.5 standard deviations of a split of that many samples
    /// where that is wider (under 2,000 samples).
    fn assert_profiled(&self, who: &str, least: u64, stderr: &str) {
        println!(
            "{who}: {} JVM samples, {:.1}% with Java frames, seventy {} thirty {}, split {:.2}%",
            self.total,
            self.java_share() * 100.0,
            self.seventy,
            self.thirty,
            self.split()
        );
        assert!(
            self.total >= least,
            "{who}: only {} samples of the JVM (at least {least} expected)\n{stderr}",
            self.total
        );
        assert!(
            self.java_share() >= 0.9,
            "{who}: {:.1}% of the JVM's samples have Java frames\n{stderr}",
            self.java_share() * 100.0
        );
        let hot = (self.seventy + self.thirty).max(1) as f64;
        let points = (3.5 * 100.0 * (0.7 * 0.3 / hot).sqrt()).max(3.0);
        assert!(
            (self.split() - 70.0).abs() <= points,
            "{who}: {SEVENTY} has {:.2}% of the hot samples, expected 70 ± {points:.1}\n{stderr}",
            self.split()
        );
    }
}

/// The daemon's arguments: the whole host, every `INTERVAL` s, into `dir`.
fn daemon_args(dir: &Path) -> Vec<String> {
    args![
        "continuous",
        "-a",
        "-F",
        249,
        "--interval",
        INTERVAL,
        "--output-dir",
        dir.display()
    ]
    .to_vec()
}

/// The JVM's counts in the daemon's intervals written from `since` on,
/// each with at least 20 of its samples (the last interval, cut short by
/// SIGTERM, may hold a few): the intervals summed, and how many.
fn daemon_counts(profiles: &Path, work: &Path, root: &str, since: SystemTime) -> (JvmCounts, u32) {
    let mut counts = JvmCounts::default();
    let mut intervals = 0;
    let service = profiles.join("java");
    for entry in fs::read_dir(&service).expect("the daemon's JVM profiles") {
        let file = entry.unwrap().path();
        let written = fs::metadata(&file).unwrap().modified().unwrap();
        if written < since {
            continue;
        }
        let folded = work.join(format!("interval-{intervals}.folded"));
        Stoke::spawn(&args!["convert", file.display(), "-o", folded.display()])
            .wait(Duration::from_secs(30))
            .assert_success();
        let stacks = read_folded(&folded);
        let interval = JvmCounts::of(&stacks, root);
        println!(
            "{}: {} JVM samples, {:.1}% with Java frames",
            file.display(),
            interval.total,
            interval.java_share() * 100.0
        );
        if interval.total < 20 {
            continue;
        }
        if interval.java_share() < 0.9 {
            println!("{}", describe(&stacks, 10));
        }
        counts.add(&stacks, root);
        intervals += 1;
    }
    (counts, intervals)
}

#[test]
fn a_record_beside_a_running_daemon_and_the_daemon_both_get_java_frames() {
    let (dir, workload) = prepare_java("java-consumers-daemon-first", "JavaSplit", JDK_17);
    let mut running = workload.spawn(&["40"]);
    let root = running.root_frame();
    let _ = running.printed_tid();

    let profiles = dir.join("profiles");
    let mut daemon = Stoke::spawn(&daemon_args(&profiles));
    daemon.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    // The daemon attaches the JVM and runs a whole interval with it.
    std::thread::sleep(Duration::from_secs(INTERVAL + 1));

    let record_began = SystemTime::now();
    let recorded = dir.join("record.folded");
    let record = Stoke::spawn(&record_args(
        &args!["-p", running.pid()],
        499,
        5.0,
        &recorded,
    ));
    let record = record.wait_recording(5.0);
    let record_counts = JvmCounts::of(&read_folded(&recorded), &root);
    record_counts.assert_profiled("record", 1000, &record.stderr);

    // One more interval after the record, then stop.
    std::thread::sleep(Duration::from_secs(INTERVAL));
    daemon.signal(libc::SIGTERM);
    let said = daemon.wait(Duration::from_secs(60));
    said.assert_success();
    // The intervals that overlapped the record, and the one after it.
    let since = record_began + Duration::from_secs(1);
    let (counts, intervals) = daemon_counts(&profiles, dir.path(), &root, since);
    assert!(
        intervals >= 2,
        "only {intervals} daemon intervals\n{}",
        said.stderr
    );
    counts.assert_profiled("daemon", 500, &said.stderr);
    assert!(running.is_alive(), "the JVM died: {}", running.stderr());
}

#[test]
fn a_daemon_beside_a_running_record_and_the_record_both_get_java_frames() {
    let (dir, workload) = prepare_java("java-consumers-record-first", "JavaSplit", JDK_17);
    let mut running = workload.spawn(&["40"]);
    let root = running.root_frame();
    let _ = running.printed_tid();

    let recorded = dir.join("record.folded");
    let seconds = 12.0;
    let mut record = Stoke::spawn(&record_args(
        &args!["-p", running.pid()],
        499,
        seconds,
        &recorded,
    ));
    record.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(1));

    let profiles = dir.join("profiles");
    let daemon_began = SystemTime::now();
    let mut daemon = Stoke::spawn(&daemon_args(&profiles));
    daemon.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    let stop_at = Instant::now() + Duration::from_secs(2 * INTERVAL + 1);
    let record = record.wait_recording(seconds);
    std::thread::sleep(stop_at.saturating_duration_since(Instant::now()));
    daemon.signal(libc::SIGTERM);
    let said = daemon.wait(Duration::from_secs(60));
    said.assert_success();

    let record_counts = JvmCounts::of(&read_folded(&recorded), &root);
    record_counts.assert_profiled("record", 3000, &record.stderr);
    // The daemon's first interval holds its attach; the later ones it read
    // the agent the record had loaded all along.
    let since = daemon_began + Duration::from_secs(INTERVAL + 1);
    let (counts, intervals) = daemon_counts(&profiles, dir.path(), &root, since);
    assert!(intervals >= 1, "no daemon interval\n{}", said.stderr);
    counts.assert_profiled("daemon", 250, &said.stderr);
    assert!(running.is_alive(), "the JVM died: {}", running.stderr());
}

#[test]
fn two_records_at_different_rates_each_get_java_frames_at_their_own_rate() {
    let (dir, workload) = prepare_java("java-consumers-two-rates", "JavaSplit", JDK_17);
    let mut running = workload.spawn(&["30"]);
    let root = running.root_frame();
    let _ = running.printed_tid();

    let seconds = 6.0;
    let fast_out = dir.join("fast.folded");
    let slow_out = dir.join("slow.folded");
    let fast = Stoke::spawn(&record_args(
        &args!["-p", running.pid()],
        499,
        seconds,
        &fast_out,
    ));
    let slow = Stoke::spawn(&record_args(
        &args!["-p", running.pid()],
        97,
        seconds,
        &slow_out,
    ));
    let fast = fast.wait_recording(seconds);
    let slow = slow.wait_recording(seconds);

    let fast_counts = JvmCounts::of(&read_folded(&fast_out), &root);
    let slow_counts = JvmCounts::of(&read_folded(&slow_out), &root);
    // One busy thread: 499 and 97 samples a second, less the attach.
    fast_counts.assert_profiled("499 Hz record", 1500, &fast.stderr);
    slow_counts.assert_profiled("97 Hz record", 300, &slow.stderr);
    let ratio = fast_counts.total as f64 / slow_counts.total.max(1) as f64;
    println!("the 499 Hz record has {ratio:.2} times the 97 Hz record's samples");
    assert!(
        (3.5..=7.0).contains(&ratio),
        "the records' sample counts are {ratio:.2} to 1, expected about 499 to 97"
    );
    assert!(running.is_alive(), "the JVM died: {}", running.stderr());
}

#[test]
fn a_stoke_killed_mid_recording_leaves_the_other_its_java_frames() {
    let (dir, workload) = prepare_java("java-consumers-kill", "JavaSplit", JDK_17);
    let mut running = workload.spawn(&["30"]);
    let root = running.root_frame();
    let _ = running.printed_tid();

    let seconds = 8.0;
    let kept_out = dir.join("kept.folded");
    let kept = Stoke::spawn(&record_args(
        &args!["-p", running.pid()],
        499,
        seconds,
        &kept_out,
    ));
    let mut killed = Stoke::spawn(&record_args(
        &args!["-p", running.pid()],
        499,
        30.0,
        &dir.join("killed.folded"),
    ));
    killed.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    killed.signal(libc::SIGKILL);
    let _ = killed.wait(Duration::from_secs(10));

    let kept = kept.wait_recording(seconds);
    let counts = JvmCounts::of(&read_folded(&kept_out), &root);
    counts.assert_profiled("the record beside the killed one", 2500, &kept.stderr);

    // The killed stoke's consumer slot is free again: a third record reads
    // the agent as well.
    let again_out = dir.join("again.folded");
    let again = Stoke::spawn(&record_args(
        &args!["-p", running.pid()],
        499,
        3.0,
        &again_out,
    ));
    let again = again.wait_recording(3.0);
    let counts = JvmCounts::of(&read_folded(&again_out), &root);
    counts.assert_profiled("a record after the kill", 1000, &again.stderr);
    assert!(running.is_alive(), "the JVM died: {}", running.stderr());
}

/// Whether JVM `pid` holds its agent's memory.
fn has_agent_memory(pid: u32) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten().any(|fd| {
                fs::read_link(fd.path())
                    .is_ok_and(|target| target.to_string_lossy() == "/memfd:stoke-agent (deleted)")
            })
        })
        .unwrap_or(false)
}

#[test]
fn a_ninth_stoke_says_in_one_line_that_the_agent_serves_eight() {
    let (dir, workload) = prepare_java("java-consumers-ninth", "JavaSplit", JDK_17);
    let mut running = workload.spawn(&["60"]);
    let root = running.root_frame();
    let _ = running.printed_tid();

    let seconds = 20.0;
    let spawn = |index: u32| {
        let out = dir.join(format!("{index}.folded"));
        let stoke = Stoke::spawn(&record_args(&args!["-p", running.pid()], 49, seconds, &out));
        (stoke, out)
    };
    let mut first = spawn(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !has_agent_memory(running.pid()) {
        assert!(Instant::now() < deadline, "no agent loaded within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    first
        .0
        .wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    // The other seven find the agent loaded, and claim their slot before
    // they sample.
    let mut eight = vec![first];
    for index in 1..8 {
        let mut stoke = spawn(index);
        stoke
            .0
            .wait_for_stderr("stoke: sampling", Duration::from_secs(60));
        eight.push(stoke);
    }
    let ninth_out = dir.join("ninth.folded");
    let ninth = Stoke::spawn(&record_args(
        &args!["-p", running.pid()],
        49,
        2.0,
        &ninth_out,
    ))
    .wait_recording(2.0);
    println!("the ninth stoke:\n{}", ninth.stderr);
    let said: Vec<&str> = ninth
        .stderr
        .lines()
        .filter(|line| line.starts_with("stoke: warning:"))
        .collect();
    assert_eq!(
        said,
        [format!(
            "stoke: warning: JVM {}: 8 stokes read this JVM's agent already, the most one agent serves; its stacks stay native-only",
            running.pid()
        )],
        "the ninth stoke did not say in one line that the agent serves eight"
    );
    let ninth_counts = JvmCounts::of(&read_folded(&ninth_out), &root);
    assert!(ninth_counts.total > 0, "the ninth stoke has no JVM sample");
    assert_eq!(ninth_counts.with_java, 0, "the ninth stoke got Java frames");

    for (index, (stoke, out)) in eight.into_iter().enumerate() {
        let output = stoke.wait_recording(seconds);
        let counts = JvmCounts::of(&read_folded(&out), &root);
        counts.assert_profiled(&format!("stoke {index} of 8"), 300, &output.stderr);
    }
    assert!(running.is_alive(), "the JVM died: {}", running.stderr());
}
