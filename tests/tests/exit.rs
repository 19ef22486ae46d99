//! A process that starts and exits in the middle of a recording keeps its
//! symbols: its samples name its functions, not `<module>+0x<offset>`.

use std::thread;
use std::time::Duration;

use stoke_tests::{
    args, describe, prepare, process_stacks, read_folded, record_args, samples_where, Stoke,
};

#[test]
fn exited_process_keeps_its_symbols() {
    let (dir, workload) = prepare("exit", "short_burn");
    let out = dir.join("exit.folded");

    let stoke = Stoke::spawn(&record_args(&args!["-a"], 499, 4.0, &out));
    // Let stoke attach, then run a process that burns CPU for 1.5 s and
    // exits well before the recording ends.
    thread::sleep(Duration::from_secs(1));
    let mut running = workload.spawn(&["1.5"]);
    let root = running.root_frame();
    let status = running.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "short_burn failed: {status}");

    stoke.wait_recording(4.0);
    let stacks = read_folded(&out);
    // It burned a CPU for 1.5 s during the recording: at 499 Hz, about 750
    // samples.
    let (mine, total) = process_stacks(&stacks, &root, 300);
    let named = samples_where(mine.iter().copied(), |s| {
        s.contains_run(&["main", "burn_cpu", "burn_leaf"])
    });
    assert!(
        named as f64 > 0.8 * total as f64,
        "only {named} of {total} samples of the exited process are symbolized as \
         main;burn_cpu;burn_leaf\n{}",
        describe(mine.iter().copied(), 10)
    );
    let unnamed = samples_where(mine.iter().copied(), |s| {
        s.frames.iter().any(|f| f.starts_with("short_burn+0x"))
    });
    assert!(
        unnamed as f64 <= 0.05 * total as f64,
        "{unnamed} of {total} samples have unnamed frames in the executable\n{}",
        describe(mine.iter().copied(), 10)
    );
}
