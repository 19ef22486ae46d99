//! A process that starts and exits in the middle of a recording keeps its
//! symbols: its samples name its functions, not `<module>+0x<offset>`.

use std::thread;
use std::time::Duration;

use stoke_tests::{
    args, describe, read_folded, require_root, samples_where, stacks_of, total_samples, Stoke,
    TempDir, Workload,
};

#[test]
fn exited_process_keeps_its_symbols() {
    require_root();
    let dir = TempDir::new("exit");
    let workload = Workload::build("short_burn", dir.path());
    let out = dir.join("exit.folded");

    let stoke = Stoke::spawn(&args![
        "record",
        "-a",
        "-F",
        499,
        "-d",
        4,
        "-o",
        out.display()
    ]);
    // Let stoke attach, then run a process that burns CPU for 1.5 s and
    // exits well before the recording ends.
    thread::sleep(Duration::from_secs(1));
    let mut running = workload.spawn(&["1.5"]);
    let root = running.root_frame();
    let status = running.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "short_burn failed: {status}");

    let output = stoke.wait(Duration::from_secs(64));
    output.assert_success();
    assert!(
        output.elapsed >= Duration::from_millis(3950),
        "stoke stopped early"
    );
    let stacks = read_folded(&out);
    let mine = stacks_of(&stacks, &root);
    let total = total_samples(mine.iter().copied());
    println!("{root}: {}", describe(mine.iter().copied(), 10));

    // 1.5 s at 499 Hz is about 750 samples.
    assert!(
        total > 300,
        "only {total} samples of `{root}`, which burned a CPU for 1.5 s during the recording\n{}",
        describe(&stacks, 20)
    );
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
