//! One stoke at a time reads a JVM's agent. A fleet daemon started while an
//! incident's `stoke record` holds a JVM gets native stacks from it
//! meanwhile, says so once, and takes its Java stacks over as soon as the
//! record has ended.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use stoke_tests::{
    args, is_java_frame, prepare_java, read_folded, record_args, samples_where, total_samples,
    Stoke, JDK_17,
};

/// The daemon's interval, seconds.
const INTERVAL: u64 = 2;

/// The share of `folded`'s samples with Java frames, and their number.
fn java_share(folded: &Path) -> (f64, u64) {
    let stacks = read_folded(folded);
    let total = total_samples(&stacks);
    let java = samples_where(&stacks, |s| s.frames.iter().any(|f| is_java_frame(f)));
    (java as f64 / total.max(1) as f64, total)
}

#[test]
fn a_daemon_takes_a_jvm_over_once_the_record_holding_it_ends() {
    let (dir, workload) = prepare_java("java-held", "JavaBusy", JDK_17);
    let running = workload.spawn(&["40"]);
    let pid = running.pid();

    let recorded = dir.join("record.folded");
    let mut record = Stoke::spawn(&record_args(&args!["-p", pid], 99, 5.0, &recorded));
    record.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    // The record's agent answers within a fraction of a second.
    std::thread::sleep(Duration::from_secs(1));
    let profiles = dir.join("profiles");
    let mut daemon = Stoke::spawn(&args![
        "continuous",
        "-p",
        pid,
        "-F",
        99,
        "--interval",
        INTERVAL,
        "--output-dir",
        profiles.display()
    ]);
    daemon.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    let output = record.wait_recording(5.0);
    let record_ended = SystemTime::now();
    let (share, total) = java_share(&recorded);
    println!(
        "record: {total} samples, {:.1}% with Java frames",
        share * 100.0
    );
    assert!(
        share >= 0.9,
        "the record got {:.1}% Java frames\n{}",
        share * 100.0,
        output.stderr
    );

    let stopping = Instant::now() + Duration::from_secs(4 * INTERVAL + 1);
    std::thread::sleep(stopping.saturating_duration_since(Instant::now()));
    daemon.signal(libc::SIGTERM);
    let said = daemon.wait(Duration::from_secs(60));
    said.assert_success();
    assert!(
        said.stderr.contains("until that stoke ends"),
        "the daemon did not say the JVM was held:\n{}",
        said.stderr
    );

    // The intervals that began at least a second after the record ended.
    let taken_over = record_ended + Duration::from_secs(INTERVAL + 1);
    let mut after = 0;
    for entry in fs::read_dir(profiles.join("java")).expect("the daemon's JVM profiles") {
        let file = entry.unwrap().path();
        let written = fs::metadata(&file).unwrap().modified().unwrap();
        if written < taken_over {
            continue;
        }
        let folded = dir.join(format!("{after}.folded"));
        Stoke::spawn(&args!["convert", file.display(), "-o", folded.display()])
            .wait(Duration::from_secs(30))
            .assert_success();
        let (share, total) = java_share(&folded);
        println!(
            "{}: {total} samples, {:.1}% with Java frames",
            file.display(),
            share * 100.0
        );
        // The last interval, cut short by SIGTERM, may hold a few samples.
        if total < 20 {
            continue;
        }
        assert!(
            share >= 0.9,
            "a daemon interval after the record ended: {total} samples, {:.1}% with Java frames\n{}",
            share * 100.0,
            said.stderr
        );
        after += 1;
    }
    assert!(
        after >= 2,
        "only {after} daemon intervals after the record ended"
    );
}
