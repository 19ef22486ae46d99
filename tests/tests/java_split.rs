//! Two Java methods at a known 70:30 split of CPU time, in a JVM started
//! with no option and attached by stoke while it runs, come out at 70 ± 3 %
//! on every JDK, with merged stacks rooted at the workload's `main`:
//! `java [PID];JavaSplit.main_[0];JavaSplit.seventy_[j];...`; with
//! `--lines`, each Java frame names its source line.

use std::time::Duration;

use stoke_tests::{
    args, assert_all_of_process, assert_share, count_in_bodies, describe, frame_location,
    function_lines, java_method, java_workloads_dir, line_of, prepare_java, read_folded, record_to,
    samples_where, stacks_of_thread, total_samples, Jdk, Located, JDK_11, JDK_17, TEMURIN_25,
};

const MAIN: &str = "JavaSplit.main";
const SEVENTY: &str = "JavaSplit.seventy";
const THIRTY: &str = "JavaSplit.thirty";

fn seventy_thirty_on(jdk: Jdk) {
    let label = jdk.label;
    let (dir, workload) = prepare_java("java-split", "JavaSplit", jdk);
    // Long enough for stoke's start, attach and 4 s of recording, short
    // enough to exit on its own afterwards and report its own split.
    let mut running = workload.spawn(&["9"]);
    let tid = running.printed_tid();
    let root = running.root_frame();
    let out = dir.join("split.folded");
    let summary = dir.join("split.txt");

    record_to(
        &args!["-p", running.pid(), "-t", "-o", summary.display()],
        499,
        4.0,
        &out,
    );
    // The JVM's busy thread was sampled by a perf event of its own (its
    // SIGTRAP asks for the Java stack with no inter-processor interrupt).
    let summary = std::fs::read_to_string(&summary).expect("the summary written");
    let timed = summary_count(&summary, "JVM threads on timers of their own:");
    assert!(
        timed >= 1,
        "no JVM thread was sampled by a timer of its own ({label}):\n{summary}"
    );
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 15));
    assert_all_of_process(&stacks, &root);

    // The thread running main() burns a CPU: every one of its samples is
    // inside JavaSplit.main. With -t, frames are: process, thread, then the
    // Java frames outermost first.
    let hot = stacks_of_thread(&stacks, tid);
    let hot_total = total_samples(hot.iter().copied());
    let with_java = samples_where(hot.iter().copied(), |s| s.java_at(2).is_some());
    let rooted = samples_where(hot.iter().copied(), |s| s.java_at(2) == Some(MAIN));
    println!("{label}: main thread {tid}: {hot_total} samples, {with_java} with Java frames, {rooted} rooted at {MAIN}");
    // 499 Hz x 4 s x one busy thread is about 2000 samples.
    assert!(
        hot_total > 1000,
        "only {hot_total} samples of the main thread (tid {tid}) in 4 s at 499 Hz (about 2000 expected)\n{}",
        describe(&stacks, 15)
    );
    // Its loops run compiled, and the sampler leaves a sample in the JVM's
    // code cache at its pc (the Java frames are the agent's), with no
    // search of the process's mappings: 97.6% and 98.6% of the main
    // thread's count (JDK 17, Temurin 25).
    let in_jit = summary_count(&summary, "Samples in JIT code:");
    println!("{label}: {in_jit} samples in JIT code");
    assert_share(
        in_jit,
        hot_total,
        0.9,
        format_args!(
            "(the JVM's, against its main thread's) were taken in JIT code ({label}):\n{summary}"
        ),
    );
    assert_share(
        with_java,
        hot_total,
        0.99,
        format_args!(
            "of the main thread (tid {tid}) have Java frames ({label})\n{}",
            describe(hot.iter().copied(), 15)
        ),
    );
    // A Java stack cut short still has Java frames but loses main:
    // AsyncGetCallTrace returns only the top frame when it cannot walk on
    // from it, as `java [PID];java [tid N];JavaSplit.spin_[j]`. Allowed only
    // rarely: the workload's hot code was compiled before stoke attached,
    // as in any JVM that has run for a while, and its stacks must be whole
    // all the same.
    let top_only = samples_where(hot.iter().copied(), |s| {
        s.frames.len() == 3 && s.java_at(2).is_some()
    });
    assert_share(
        rooted,
        hot_total,
        0.97,
        format_args!(
            "of the main thread (tid {tid}) start with `{root};java [tid {tid}];{MAIN}_[..]` \
             ({label}; {top_only} have the top Java frame only)\n{}",
            describe(hot.iter().copied(), 15)
        ),
    );

    let seventy = samples_where(hot.iter().copied(), |s| s.has_java(SEVENTY));
    let thirty = samples_where(hot.iter().copied(), |s| s.has_java(THIRTY));
    let both = samples_where(hot.iter().copied(), |s| {
        s.has_java(SEVENTY) && s.has_java(THIRTY)
    });
    let share = 100.0 * seventy as f64 / (seventy + thirty).max(1) as f64;
    println!("{label}: seventy {seventy}, thirty {thirty}, share {share:.2}%");
    assert_eq!(both, 0, "seventy() and thirty() never call each other");
    assert_share(
        seventy + thirty,
        hot_total,
        0.9,
        format_args!(
            "of the main thread are under {SEVENTY} or {THIRTY}\n{}",
            describe(hot.iter().copied(), 15)
        ),
    );
    assert!(
        (67.0..=73.0).contains(&share),
        "{SEVENTY} has {share:.2}% of the hot samples ({seventy} vs {thirty}) on {label}, expected 70 ± 3\n{}",
        describe(hot.iter().copied(), 15)
    );

    // Root first: main, then the hot method right under it, each a Java
    // frame with its kind suffix.
    for method in [SEVENTY, THIRTY] {
        let under = samples_where(hot.iter().copied(), |s| s.has_java(method));
        let shaped = samples_where(hot.iter().copied(), |s| {
            s.java_at(2) == Some(MAIN) && s.java_at(3) == Some(method)
        });
        assert_share(
            shaped,
            under,
            0.95,
            format_args!(
                "under {method} have the stack `{root};java [tid {tid}];{MAIN}_[..];{method}_[..];...`\n{}",
                describe(hot.iter().copied(), 15)
            ),
        );
    }
    let reversed = samples_where(&stacks, |s| {
        matches!(
            (s.java_position(MAIN), s.java_position(SEVENTY).or(s.java_position(THIRTY))),
            (Some(main), Some(hot)) if main > hot
        )
    });
    assert_eq!(
        reversed, 0,
        "stacks with a hot method rootward of main: Java frames are not root first"
    );

    // The workload measured its own split by thread CPU time.
    running.wait_success(Duration::from_secs(30));
    let stderr = running.stderr();
    println!("{}", stderr.trim());
    let measured: f64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("JavaSplit: ")?.split("share ").nth(1))
        .and_then(|s| s.trim().trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("JavaSplit printed no share:\n{stderr}"));
    assert!(
        (69.0..=71.0).contains(&measured),
        "the workload itself measured {measured}% in seventy(): it does not do its 70:30 split"
    );
}

/// A count the text summary gives after `label`.
fn summary_count(summary: &str, label: &str) -> u64 {
    summary
        .lines()
        .find_map(|line| line.strip_prefix(label))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` count in the summary:\n{summary}"))
}

#[test]
fn java_seventy_thirty_split_on_jdk_11() {
    seventy_thirty_on(JDK_11);
}

#[test]
fn java_seventy_thirty_split_on_jdk_17() {
    seventy_thirty_on(JDK_17);
}

#[test]
fn java_seventy_thirty_split_on_temurin_25() {
    seventy_thirty_on(TEMURIN_25);
}

/// Of the main thread's samples in `out` (recorded with `-t`), how many, and
/// how many have the whole stack, rooted at main.
fn whole_stacks(out: &std::path::Path, tid: u32) -> (u64, u64) {
    let stacks = read_folded(out);
    let hot = stacks_of_thread(&stacks, tid);
    let total = total_samples(hot.iter().copied());
    let rooted = samples_where(hot.iter().copied(), |s| s.java_at(2) == Some(MAIN));
    (total, rooted)
}

/// Of the main thread's samples in `out` (recorded with `-t`), how many
/// were cut short: one Java method, not main. In a recording that found
/// the JVM's agent loaded, every sample had its Java stack taken, so such
/// a stack is one AsyncGetCallTrace cut (in the first, samples taken before
/// the agent answered look the same: their JIT frame named from the code
/// map).
fn cut_short(out: &std::path::Path, tid: u32) -> u64 {
    let stacks = read_folded(out);
    let hot = stacks_of_thread(&stacks, tid);
    samples_where(hot.iter().copied(), |s| {
        let java: Vec<&str> = s.frames.iter().filter_map(|f| java_method(f)).collect();
        java.len() == 1 && java[0] != MAIN
    })
}

/// A JVM whose hot code the JIT compiled long before the agent came (its
/// compiled code may lack the debug information to walk past it): stacks
/// through it are whole, with or without `--java-retransform`; without the
/// flag, stoke never has a class retransformed; with it, a class is
/// retransformed once a stack is cut short in its code.
#[test]
fn a_warm_jvm_gets_whole_stacks_with_and_without_retransform() {
    let (dir, workload) = prepare_java("java-warm", "JavaSplit", JDK_17);
    // HotSpot logs each class it redefines (retransforms) on stdout.
    let log = ["-Xlog:redefine+class+load=info"];
    let mut plain = workload.spawn_with_options(&log, &["40"]);
    let mut retransformed = workload.spawn_with_options(&log, &["40"]);
    let tids = [plain.printed_tid(), retransformed.printed_tid()];
    // Warm: C2 compiled the hot methods within a few seconds.
    std::thread::sleep(Duration::from_secs(8));
    let mut shares = Vec::new();
    let mut cuts = 0;
    for (round, label) in ["first", "second"].into_iter().enumerate() {
        for ((jvm, tid), flag) in [&plain, &retransformed]
            .into_iter()
            .zip(tids)
            .zip([None, Some("--java-retransform")])
        {
            let out = dir.join(format!("{label}-{tid}.folded"));
            let mut select = args!["-p", jvm.pid(), "-t"].to_vec();
            select.extend(flag.map(str::to_owned));
            record_to(&select, 499, 3.0, &out);
            let (total, rooted) = whole_stacks(&out, tid);
            if flag.is_some() && round > 0 {
                cuts += cut_short(&out, tid);
            }
            let share = rooted as f64 / total.max(1) as f64;
            println!(
                "{label} recording, {}: {rooted} of {total} main-thread samples whole ({:.1}%)",
                flag.unwrap_or("no flag"),
                100.0 * share
            );
            assert!(total > 300, "only {total} samples of the main thread");
            shares.push((round, flag.is_some(), share));
        }
    }
    for (round, flag, share) in shares {
        // Measured on this 2-CPU VM, either way: 98.8-99.3% in the first
        // recording (the samples before the agent answered are not whole),
        // 100% in the second; the bars leave room for a loaded host.
        let bar = if round == 1 { 0.97 } else { 0.9 };
        assert!(
            share >= bar,
            "recording {} ({}): {:.1}% whole stacks, at least {:.0}% expected",
            round + 1,
            if flag {
                "--java-retransform"
            } else {
                "no flag"
            },
            100.0 * share,
            100.0 * bar
        );
    }
    let redefined =
        |jvm: &stoke_tests::Running| jvm.stdout_text().contains("redefined name=JavaSplit");
    // A class is retransformed once a sample is cut short in its code; in
    // a warm JVM such samples have become rare (none in most recordings):
    // more recordings until one is.
    let select = args!["-p", retransformed.pid(), "--java-retransform", "-t"].to_vec();
    for extra in 0..4 {
        if cuts > 0 {
            break;
        }
        let out = dir.join(format!("extra-{extra}.folded"));
        record_to(&select, 999, 2.0, &out);
        cuts += cut_short(&out, tids[1]);
    }
    plain.wait_success(Duration::from_secs(60));
    retransformed.wait_success(Duration::from_secs(60));
    assert!(
        !redefined(&plain),
        "without --java-retransform, stoke had JavaSplit retransformed:\n{}",
        plain.stdout_text()
    );
    println!("stacks cut short with --java-retransform: {cuts}");
    assert!(
        cuts == 0 || redefined(&retransformed),
        "with --java-retransform, {cuts} stacks were cut short, and JavaSplit was never retransformed:\n{}",
        retransformed.stdout_text()
    );
}

/// With `--lines`, each Java frame names its line in JavaSplit.java:
/// main() the line of its call of seventy(), seventy() and spin() lines of
/// their own bodies.
#[test]
fn java_frames_name_their_source_lines_with_lines() {
    let (dir, workload) = prepare_java("java-lines", "JavaSplit", JDK_17);
    let running = workload.spawn(&["30"]);
    let out = dir.join("lines.folded");
    record_to(&args!["-p", running.pid(), "--lines"], 499, 3.0, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 10));
    let source = std::fs::read_to_string(java_workloads_dir().join("JavaSplit.java")).unwrap();
    let call = line_of(&source, "seventy += seventy(");
    let bodies = [
        (SEVENTY, function_lines(&source, "static long seventy(")),
        (
            "JavaSplit.spin",
            function_lines(&source, "static void spin("),
        ),
    ];
    println!("main calls seventy on line {call}; {bodies:?}");
    fn located(frame: &str) -> Located<'_> {
        java_method(frame)
            .and_then(frame_location)
            .filter(|&(_, file, _)| file == "JavaSplit.java")
    }

    let mut in_bodies = [0; 2];
    let mut placed = 0;
    for stack in &stacks {
        let frames: Vec<Located> = stack.frames.iter().map(|frame| located(frame)).collect();
        count_in_bodies(stack, &frames, &bodies, &mut in_bodies);
        let called = frames.windows(2).any(|pair| {
            pair[0] == Some((MAIN, "JavaSplit.java", call))
                && pair[1].is_some_and(|(name, ..)| name == SEVENTY)
        });
        if called {
            placed += stack.count;
        }
    }
    println!("under seventy, spin: {in_bodies:?}; {placed} called from main's line {call}");
    let total = total_samples(&stacks);
    // seventy() has 70% of the JVM's samples, nearly all in spin().
    assert_share(in_bodies[0], total, 0.5, "are in a located seventy frame");
    assert_share(in_bodies[1], total, 0.7, "are in a located spin frame");
    assert_share(
        placed,
        in_bodies[0],
        0.95,
        format_args!("under seventy are called from main's line {call}"),
    );
}
