//! Without `-d`, stoke records until SIGINT or SIGTERM, then still writes
//! its output and exits 0.

use std::thread;
use std::time::Duration;

use stoke_tests::{
    args, assert_all_of_process, assert_share, describe, prepare, read_folded, samples_where,
    total_samples, Stoke,
};

fn stops_on(signal: libc::c_int, label: &str) {
    let (dir, workload) = prepare(label, "fp_split");
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
    assert_all_of_process(&stacks, &running.root_frame());
    let hot = samples_where(&stacks, |s| {
        s.contains("hot_seventy") || s.contains("hot_thirty")
    });
    assert_share(hot, total, 0.9, "are under hot_seventy or hot_thirty");
}

#[test]
fn sigint_stops_recording_and_writes_output() {
    stops_on(libc::SIGINT, "sigint");
}

#[test]
fn sigterm_stops_recording_and_writes_output() {
    stops_on(libc::SIGTERM, "sigterm");
}
