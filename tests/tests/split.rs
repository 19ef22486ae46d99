//! A workload with two non-leaf hot functions at a known 70:30 split of CPU
//! time, recorded with `-p`, must come out at 70 ± 3 %, with stacks that
//! unwind through frame pointers from the process frame down to the leaf.

use stoke_tests::{assert_share, describe, prepare, record_process, samples_where, total_samples};

#[test]
fn seventy_thirty_split_with_pid() {
    let (dir, workload) = prepare("split", "fp_split");
    let running = workload.spawn(&["30"]);
    let out = dir.join("split.folded");

    // -p PID records that process and nothing else.
    let stacks = record_process(&running, 499, 4.0, &out);
    let root = running.root_frame();

    let total = total_samples(&stacks);
    let seventy = samples_where(&stacks, |s| s.contains("hot_seventy"));
    let thirty = samples_where(&stacks, |s| s.contains("hot_thirty"));
    let both = samples_where(&stacks, |s| {
        s.contains("hot_seventy") && s.contains("hot_thirty")
    });
    let share = 100.0 * seventy as f64 / (seventy + thirty).max(1) as f64;
    println!("total {total}, hot_seventy {seventy}, hot_thirty {thirty}, share {share:.2}%");

    // 499 Hz x 4 s x one busy CPU is about 2000 samples.
    assert!(
        total > 1000,
        "only {total} samples of a busy process in 4 s at 499 Hz (about 2000 expected)\n{}",
        describe(&stacks, 15)
    );
    assert_eq!(both, 0, "hot_seventy and hot_thirty never call each other");
    assert_share(
        seventy + thirty,
        total,
        0.9,
        format_args!(
            "are under hot_seventy or hot_thirty\n{}",
            describe(&stacks, 15)
        ),
    );
    assert!(
        (67.0..=73.0).contains(&share),
        "hot_seventy has {share:.2}% of the hot samples ({seventy} vs {thirty}), expected 70 ± 3\n{}",
        describe(&stacks, 15)
    );

    // Root first: <comm> [pid] -> ... -> main -> hot_seventy -> spin.
    for hot in ["hot_seventy", "hot_thirty"] {
        let under_hot = samples_where(&stacks, |s| s.contains(hot));
        let well_formed = samples_where(&stacks, |s| {
            s.contains_run(&["main", hot, "spin"])
                && s.leaf() == "spin"
                && s.position("main").is_some_and(|i| i > 0)
        });
        assert_share(
            well_formed,
            under_hot,
            0.8,
            format_args!(
                "under {hot} have the stack `{root};...;main;{hot};spin`\n{}",
                describe(&stacks, 15)
            ),
        );
    }
    // No stack may be reversed (leaf first).
    let reversed = samples_where(
        &stacks,
        |s| matches!((s.position("main"), s.position("spin")), (Some(m), Some(l)) if m > l),
    );
    assert_eq!(
        reversed, 0,
        "stacks with spin rootward of main: frames are not root first"
    );
}
