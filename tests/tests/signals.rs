//! Without `-d`, stoke records until SIGINT or SIGTERM, then still writes
//! its output and exits 0.

use std::thread;
use std::time::Duration;

use stoke_tests::{
    args, describe, read_folded, require_root, samples_where, total_samples, Stoke, TempDir,
    Workload,
};

fn stops_on(signal: libc::c_int, label: &str) {
    require_root();
    let dir = TempDir::new(label);
    let workload = Workload::build("fp_split", dir.path());
    let running = workload.spawn(&["60"]);
    let out = dir.join("until-signal.folded");

    let stoke = Stoke::spawn(&args![
        "record",
        "-p",
        running.pid(),
        "-F",
        499,
        "-o",
        out.display()
    ]);
    thread::sleep(Duration::from_secs(3));
    stoke.signal(signal);
    let output = stoke.wait(Duration::from_secs(33));
    output.assert_success();
    println!("stopped {:?} after start", output.elapsed);

    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 10));
    let total = total_samples(&stacks);
    assert!(
        total > 100,
        "only {total} samples of a busy process in about 3 s at 499 Hz"
    );
    assert!(
        stacks.iter().all(|s| s.root() == running.root_frame()),
        "with -p, stacks of other processes\n{}",
        describe(&stacks, 10)
    );
    let hot = samples_where(&stacks, |s| {
        s.contains("hot_seventy") || s.contains("hot_thirty")
    });
    assert!(
        hot as f64 >= 0.9 * total as f64,
        "only {hot} of {total} samples are under hot_seventy or hot_thirty"
    );
}

#[test]
fn sigint_stops_recording_and_writes_output() {
    stops_on(libc::SIGINT, "sigint");
}

#[test]
fn sigterm_stops_recording_and_writes_output() {
    stops_on(libc::SIGTERM, "sigterm");
}
