//! A workload with two non-leaf hot functions at a known 70:30 split of CPU
//! time, recorded with `-p`, must come out at 70 ± 3 %, with stacks that
//! unwind through frame pointers from the process frame down to the leaf;
//! with `--lines`, its frames name the source lines they were on.

use stoke_tests::{
    args, assert_share, count_in_bodies, describe, frame_location, function_lines, line_of,
    prepare, read_folded, record_process, record_to, samples_where, total_samples, workloads_dir,
    Located,
};

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

/// With `--lines`, the workload (built with `-g`) has each frame name its
/// source line: main() the line of its call of hot_seventy(), hot_seventy()
/// a line of its own, and the inlined spin_for() and spin() lines of their
/// bodies, spin_for() as a frame of its own.
#[test]
fn native_frames_name_their_source_lines_with_lines() {
    let (dir, workload) = prepare("split-lines", "fp_split");
    let running = workload.spawn(&["30"]);
    let out = dir.join("lines.folded");
    record_to(&args!["-p", running.pid(), "--lines"], 499, 3.0, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 10));
    let source = std::fs::read_to_string(workloads_dir().join("fp_split.c")).unwrap();
    let call = line_of(&source, "seventy += hot_seventy(");
    let hot = function_lines(&source, "double hot_seventy(");
    let bodies = [
        ("spin_for", function_lines(&source, "double spin_for(")),
        ("spin", function_lines(&source, "void spin(")),
    ];
    println!("main calls hot_seventy on line {call}; hot_seventy is lines {hot:?}, {bodies:?}");
    fn located(frame: &str) -> Located<'_> {
        frame_location(frame).filter(|&(_, file, _)| file == "fp_split.c")
    }

    let mut under = 0;
    let mut placed = 0;
    let mut in_bodies = [0; 2];
    for stack in &stacks {
        let frames: Vec<Located> = stack.frames.iter().map(|frame| located(frame)).collect();
        count_in_bodies(stack, &frames, &bodies, &mut in_bodies);
        let Some(at) = frames
            .iter()
            .position(|frame| frame.is_some_and(|(name, ..)| name == "hot_seventy"))
        else {
            continue;
        };
        under += stack.count;
        let (_, _, line) = frames[at].unwrap();
        if hot.contains(&line) && frames[at - 1] == Some(("main", "fp_split.c", call)) {
            placed += stack.count;
        }
    }
    let total = total_samples(&stacks);
    println!("{under} of {total} samples under hot_seventy, {placed} at main's call and a line of it; spin_for, spin: {in_bodies:?}");
    // hot_seventy has 70% of the workload's samples, nearly all in spin.
    assert_share(under, total, 0.5, "are under a located hot_seventy frame");
    assert_share(
        placed,
        under,
        0.95,
        format_args!(
            "under hot_seventy are called from main's line {call} and on a line of hot_seventy"
        ),
    );
    assert_share(in_bodies[1], total, 0.8, "are in a located spin frame");
    assert_share(in_bodies[0], total, 0.8, "are in a located spin_for frame");
}
