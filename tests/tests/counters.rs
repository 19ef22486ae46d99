//! Perf counter events by name (`-e page-faults`...): a program that
//! faults on 7 pages in one function for every 3 in another comes out
//! 70:30 by page faults, every fault counted (`--period 1`) or sampled at
//! `-F`, beside CPU and other counters in files of their own; `stoke list`
//! says which counters this host has, and a counter it lacks is refused in
//! one line before anything starts, with no output file; with the
//! programs of kernels before 5.17 too. A user probe
//! (`-e uprobe:PATH:SYMBOL`) counts every call by its caller (kernel
//! probes are checked on Debian's kernels, `cargo xtask test --kernels`:
//! this kernel places none), a tracepoint (`-e SYSTEM:NAME`) every hit,
//! the host's mounts untouched, a system call's tracepoint every call by
//! its caller; a JVM's counter samples carry its Java frames.

use std::{
    thread,
    time::{Duration, Instant},
};

use stoke_tests::{
    args, describe, prepare, prepare_java, process_stacks, read_folded, record, record_args,
    samples_where, total_samples, Stoke, JDK_17,
};

/// The share of `fault_seven`'s faults among both functions' in `out`,
/// and their total, of `workload`'s process `root`.
fn seven_share(out: &std::path::Path, root: &str) -> (f64, u64) {
    let stacks = read_folded(out);
    let (mine, _) = process_stacks(&stacks, root, 100);
    let seven = samples_where(mine.iter().copied(), |s| {
        s.contains_run(&["fault_seven", "touch_pages"])
    });
    let three = samples_where(mine.iter().copied(), |s| {
        s.contains_run(&["fault_three", "touch_pages"])
    });
    assert!(
        seven + three > 0,
        "no fault in fault_seven or fault_three\n{}",
        describe(mine.iter().copied(), 10)
    );
    (seven as f64 / (seven + three) as f64, seven + three)
}

/// Rounds of 10 faults the workload made, from its `rounds=N` line.
fn rounds(workload: &mut stoke_tests::Running) -> u64 {
    workload.wait_exit(Duration::from_secs(30));
    workload
        .stdout_text()
        .lines()
        .find_map(|line| line.strip_prefix("rounds="))
        .and_then(|count| count.parse().ok())
        .expect("page_faults prints rounds=N")
}

#[test]
fn every_page_fault_is_counted_by_the_function_that_faulted() {
    let (dir, workload) = prepare("faults_every", "page_faults");
    let out = dir.join("faults.folded");
    let mut running = workload.spawn(&["4"]);
    let select = args!["-p", running.pid(), "-e", "page-faults", "--period", 1];
    record(&record_args(&select, 99, 2.0, &out), 2.0);
    let (share, faults) = seven_share(&out, &running.root_frame());
    let made = rounds(&mut running) * 10;
    println!(
        "fault_seven: {:.1}% of {faults} faults ({made} made in 4 s)",
        share * 100.0
    );
    // perf record -e page-faults -c 1 gives 70.0% on this workload.
    assert!(
        (share - 0.70).abs() <= 0.02,
        "fault_seven has {:.1}% of the faults, 70±2% expected",
        share * 100.0
    );
    // Every fault of 2 s of the 4 the workload ran: about half of them.
    assert!(
        faults * 4 >= made && faults * 4 <= made * 3,
        "{faults} faults counted in 2 s of the {made} made in 4 s"
    );
}

#[test]
fn counters_are_sampled_at_a_rate_beside_cpu_in_files_of_their_own() {
    sampled_at_a_rate("faults_rate", &[]);
}

/// The programs of kernels before 5.17 (no bpf_loop), on this one: each
/// counter's events go to a program of its own, with no attach cookie.
#[test]
fn counters_take_a_program_each_on_kernels_without_bpf_loop() {
    sampled_at_a_rate("faults_rate_legacy", &["--legacy-bpf"]);
}

/// Page faults and context switches sampled at 999 Hz beside CPU, host
/// wide, with `extra` arguments.
fn sampled_at_a_rate(name: &str, extra: &[&str]) {
    let (dir, workload) = prepare(name, "page_faults");
    let out = dir.join("host.folded");
    let running = workload.spawn(&["7"]);
    let mut select = args!["-a", "-e", "cpu,page-faults,context-switches"].to_vec();
    select.extend(extra.iter().map(ToString::to_string));
    let output = record(&record_args(&select, 999, 5.0, &out), 5.0);
    let root = running.root_frame();
    // Sampled about 999 times a second, each sample weighs the faults
    // since the last: the split holds by weight, with the spread of
    // weighing each burst of faults by the one stack sampled at its end
    // (68.5-73.4% over twelve runs of 3 s, once past 74%: 5 s narrow it).
    let (share, faults) = seven_share(&dir.join("host.page-faults.folded"), &root);
    println!("fault_seven: {:.1}% of {faults} faults", share * 100.0);
    assert!(
        (share - 0.70).abs() <= 0.04,
        "fault_seven has {:.1}% of the sampled faults, 70±4% expected",
        share * 100.0
    );
    let cpu = read_folded(&dir.join("host.cpu.folded"));
    let (_, cpu_samples) = process_stacks(&cpu, &root, 1);
    assert!(
        cpu_samples > 300,
        "only {cpu_samples} CPU samples of the workload"
    );
    let switches = read_folded(&dir.join("host.context-switches.folded"));
    let switched = total_samples(&switches);
    assert!(
        switched > 0 && output.stderr.contains("context-switches:"),
        "no context switch counted host-wide in 5 s:\n{}",
        output.stderr
    );
}

#[test]
fn list_says_which_counters_there_are_and_a_missing_one_is_refused() {
    let (dir, _) = prepare("faults_list", "page_faults");
    let listed = Stoke::spawn(&args!["list"]).wait(Duration::from_secs(20));
    listed.assert_success();
    println!("{}", listed.stdout);
    let line_of = |event: &str| {
        listed
            .stdout
            .lines()
            .find(|line| line.split_whitespace().next() == Some(event))
            .unwrap_or_else(|| panic!("stoke list has no {event} line"))
            .to_owned()
    };
    for event in ["cpu", "offcpu", "alloc", "lock"] {
        line_of(event);
    }
    // page-faults is the kernel's own: every host counts it.
    assert!(!line_of("page-faults").contains("not available"));
    // A raw PMU event (Intel's unhalted core cycles) is counted where
    // cycles are.
    let cycles = !line_of("cycles").contains("not available");
    for (event, available) in [
        ("page-faults", true),
        ("context-switches", true),
        ("cycles", cycles),
        (
            "cache-misses",
            !line_of("cache-misses").contains("not available"),
        ),
        ("r3c", cycles),
    ] {
        let out = dir.join(format!("{event}.folded"));
        let output = Stoke::spawn(&args![
            "record",
            "-a",
            "-e",
            event,
            "-d",
            1,
            "-o",
            out.display()
        ])
        .wait(Duration::from_secs(30));
        println!("{event}: available {available}; stderr: {}", output.stderr);
        if available {
            output.assert_success();
            assert!(out.is_file(), "{event}: no output");
        } else {
            output.assert_user_error(&[event, "not available", "stoke list"]);
            assert!(
                !out.exists(),
                "{event}: refused, yet {} exists",
                out.display()
            );
        }
    }
}

#[test]
fn a_user_probe_counts_every_call_by_its_caller() {
    user_probe_calls("uprobe", &[]);
}

/// The programs of kernels before 5.17 (no bpf_loop), on this one: the
/// probe's caller comes from the unwind tables (the probe fires before
/// touch_pages has a frame).
#[test]
fn a_user_probe_takes_a_program_of_its_own_on_kernels_without_bpf_loop() {
    user_probe_calls("uprobe_legacy", &["--legacy-bpf"]);
}

/// Calls of touch_pages counted by a user probe, with `extra` arguments.
fn user_probe_calls(name: &str, extra: &[&str]) {
    let (dir, workload) = prepare(name, "page_faults");
    let out = dir.join("calls.folded");
    let mut running = workload.spawn(&["4"]);
    let probe = format!("uprobe:{}:touch_pages", workload.exe().display());
    let mut select = args!["-p", running.pid(), "-e", probe].to_vec();
    select.extend(extra.iter().map(ToString::to_string));
    let output = record(&record_args(&select, 99, 2.0, &out), 2.0);
    let stacks = read_folded(&out);
    let (mine, total) = process_stacks(&stacks, &running.root_frame(), 100);
    let calls_from = |caller: &str| {
        samples_where(mine.iter().copied(), |s| {
            s.contains_run(&[caller, "touch_pages"])
        })
    };
    let (seven, three) = (calls_from("fault_seven"), calls_from("fault_three"));
    let made = rounds(&mut running);
    println!("{seven} calls from fault_seven, {three} from fault_three, of {total}; {made} rounds in 4 s");
    // One call of each a round: equal counts.
    assert!(
        seven.abs_diff(three) * 100 <= seven.max(three) && seven + three >= total * 99 / 100,
        "{seven} calls from fault_seven, {three} from fault_three, of {total}: each caller's calls expected once a round\n{}",
        describe(mine.iter().copied(), 10)
    );
    // The calls of 2 s of the 4: at most three quarters of the rounds,
    // and at least a tenth, as each probed call (a trap, a stack walked
    // by tables) costs more than an unprobed round (~12 us) takes, so
    // rounds run 3-5 times slower while probed.
    assert!(
        seven * 10 >= made && seven * 4 <= made * 3,
        "{seven} calls in 2 s of the {made} rounds of 4 s"
    );
    assert!(
        output.stderr.contains("uprobe-touch_pages:"),
        "{}",
        output.stderr
    );
}

/// The mounts of tracefs this host has.
fn tracefs_mounts() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|line| line.contains(" - tracefs "))
        .count()
}

#[test]
fn a_tracepoint_counts_every_hit_and_leaves_the_mounts_alone() {
    tracepoint_hits("tracepoint", &[]);
}

/// The programs of kernels before 5.17 (no bpf_loop), on this one: a
/// tracepoint's program of its own, its user stacks walked by the legacy
/// unwinder's chain of tracepoint programs.
#[test]
fn a_tracepoint_takes_a_program_of_its_own_on_kernels_without_bpf_loop() {
    tracepoint_hits("tracepoint_legacy", &["--legacy-bpf"]);
}

/// Page faults counted by their tracepoint, with `extra` arguments.
fn tracepoint_hits(name: &str, extra: &[&str]) {
    let (dir, workload) = prepare(name, "page_faults");
    let out = dir.join("hits.folded");
    let running = workload.spawn(&["4"]);
    let mounts = tracefs_mounts();
    let mut select = args!["-p", running.pid(), "-e", "exceptions:page_fault_user"].to_vec();
    select.extend(extra.iter().map(ToString::to_string));
    let output = record(&record_args(&select, 99, 2.0, &out), 2.0);
    let (share, faults) = seven_share(&out, &running.root_frame());
    println!(
        "fault_seven: {:.1}% of {faults} page_fault_user hits",
        share * 100.0
    );
    assert!(
        (share - 0.70).abs() <= 0.02 && faults > 10_000,
        "fault_seven has {:.1}% of {faults} hits, 70±2% of more than 10,000 expected",
        share * 100.0
    );
    assert!(
        output.stderr.contains("tp-exceptions-page_fault_user:"),
        "{}",
        output.stderr
    );
    // Read from a tracefs of stoke's own when the host has none mounted.
    assert_eq!(tracefs_mounts(), mounts, "stoke changed the host's mounts");
}

/// offcpu_split writes its pipe once a round (transfer) and prints a line
/// once a round (main): `-e syscalls:sys_enter_write` counts as many
/// calls in each as the workload made rounds.
#[test]
fn a_syscall_tracepoint_counts_every_call_by_its_caller() {
    let (dir, workload) = prepare("syscall-tracepoint", "offcpu_split");
    let out = dir.join("writes.folded");
    let running = workload.spawn(&["60"]);
    let seconds = 3.0;
    let select = args!["-p", running.pid(), "-e", "syscalls:sys_enter_write"];
    let mut stoke = Stoke::spawn(&record_args(&select, 99, seconds, &out));
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    let since = Instant::now();
    thread::sleep(Duration::from_secs_f64(seconds - 0.5));
    let per_second = running.lines_since("round", since) as f64 / since.elapsed().as_secs_f64();
    stoke.wait_recording(seconds);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 8));
    let piped = samples_where(&stacks, |s| s.contains_run(&["transfer", "call4"]));
    let printed = samples_where(&stacks, |s| s.contains("main"));
    for (calls, what) in [(piped, "transfer"), (printed, "main")] {
        let rate = calls as f64 / seconds;
        println!("{what}: {rate:.1} writes a second, {per_second:.1} rounds a second");
        assert!(
            (rate / per_second - 1.0).abs() <= 0.1,
            "{calls} writes in {what} in {seconds} s: {rate:.1} a second, \
             {per_second:.1} expected (one a round)"
        );
    }
}

#[test]
fn a_jvm_s_counter_samples_carry_its_java_frames() {
    let (dir, workload) = prepare_java("counters-java", "JavaSplit", JDK_17);
    let running = workload.spawn(&["8"]);
    let out = dir.join("task-clock.folded");
    // A millisecond of CPU time a sample, on the CPUs' counters.
    let select = args![
        "-p",
        running.pid(),
        "-e",
        "task-clock",
        "--period",
        1_000_000
    ];
    record(&record_args(&select, 99, 4.0, &out), 4.0);
    let stacks = read_folded(&out);
    let (mine, total) = process_stacks(&stacks, &running.root_frame(), 100);
    let java = samples_where(mine.iter().copied(), |s| {
        s.frames.iter().any(|f| f.ends_with("_[j]"))
    });
    let seventy = samples_where(mine.iter().copied(), |s| s.has_java("JavaSplit.seventy"));
    let thirty = samples_where(mine.iter().copied(), |s| s.has_java("JavaSplit.thirty"));
    let share = seventy as f64 / (seventy + thirty).max(1) as f64;
    println!(
        "{java} of {total} ns with Java frames; JavaSplit.seventy {:.1}%",
        share * 100.0
    );
    assert!(
        java * 10 >= total * 9,
        "only {java} of {total} ns of task-clock samples have Java frames\n{}",
        describe(mine.iter().copied(), 10)
    );
    assert!(
        (share - 0.70).abs() <= 0.03,
        "JavaSplit.seventy has {:.1}% of the Java samples, 70±3% expected",
        share * 100.0
    );
}
