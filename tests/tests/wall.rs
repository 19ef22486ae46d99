//! `-e wall`: every thread's time, running or not, by the stack it spent it
//! in. A process with four threads (one sleeping 7 ms then waiting ~3 ms on
//! a pipe per round, one spinning, one blocked all along, one writing the
//! pipe) gives each thread the recording's length within 15%, the first
//! one's time 70:30 between its two functions, the spinner's in spin() and
//! the blocked one's in its system call; with the user stacks taken by task work
//! and at syscall exits alike.

use std::{collections::BTreeMap, process::Command};

use stoke_tests::{
    args, describe, parse_thread_frame, prepare, read_folded, record_args, samples_where,
    stoke_bin, Stack, Stoke,
};

const SECONDS: f64 = 5.0;

#[test]
fn every_thread_gets_the_recordings_length_by_task_work() {
    wall_time_of_four_threads(&[]);
}

/// The same with the user stacks taken at syscall exits, as on kernels
/// without task work for BPF (before 6.18).
#[test]
fn every_thread_gets_the_recordings_length_at_syscall_exits() {
    wall_time_of_four_threads(&[("STOKE_OFFCPU_AT_SYSCALL_EXIT", "1")]);
}

/// Records the four-thread workload with `-e wall -t` at 199 Hz (a 5 ms
/// period: the 7 ms sleeps are recorded each, the ~3 ms waits by chance),
/// stoke's environment extended by `env`, and checks each thread's time.
fn wall_time_of_four_threads(env: &[(&str, &str)]) {
    let (dir, workload) = prepare("wall", "offcpu_split");
    let running = workload.spawn(&args![60, "threads"]);
    let out = dir.join("wall.folded");
    let select = args!["-p", running.pid(), "-e", "wall", "-t"];
    let mut command = Command::new(stoke_bin());
    command
        .args(record_args(&select, 199, SECONDS, &out))
        .envs(env.iter().copied());
    Stoke::spawn_command(command).wait_recording(SECONDS);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 15));

    let mut threads: BTreeMap<String, Vec<&Stack>> = BTreeMap::new();
    for stack in &stacks {
        let (name, _) = stack
            .frames
            .get(1)
            .and_then(|frame| parse_thread_frame(frame))
            .unwrap_or_else(|| panic!("no thread frame: {}", stack.joined()));
        threads.entry(name.to_owned()).or_default().push(stack);
    }
    let totals: BTreeMap<&str, u64> = threads
        .iter()
        .map(|(name, stacks)| (name.as_str(), stacks.iter().map(|stack| stack.count).sum()))
        .collect();
    println!("nanoseconds by thread: {totals:?}");
    assert_eq!(
        totals.len(),
        4,
        "four threads wanted, each with its wall-clock time: {totals:?}"
    );
    for (name, &total) in &totals {
        let seconds = total as f64 / 1e9;
        assert!(
            (seconds / SECONDS - 1.0).abs() <= 0.15,
            "thread {name} has {seconds:.2} s of wall-clock time in a {SECONDS} s recording \
             (within 15% wanted): {totals:?}"
        );
    }

    let main = &threads["offcpu_split"];
    let seventy = samples_where(main.iter().copied(), |stack| {
        stack.contains("sleep_seventy")
    });
    let thirty = samples_where(main.iter().copied(), |stack| stack.contains("wait_thirty"));
    let share = 100.0 * seventy as f64 / (seventy + thirty).max(1) as f64;
    println!("main: sleep_seventy {seventy} ns, wait_thirty {thirty} ns: {share:.1}%");
    assert!(
        (share - 70.0).abs() <= 4.0,
        "sleep_seventy has {share:.1}% of the main thread's time in its two functions \
         (70 ± 4 wanted)\n{}",
        describe(main.iter().copied(), 10)
    );
    // The blocked thread's wait goes on past the end: its user side is the
    // one address it entered the kernel at, in call4().
    for (thread, function) in [("spinner", "spin"), ("blocked", "call4")] {
        let stacks = &threads[thread];
        let inside = samples_where(stacks.iter().copied(), |stack| stack.contains(function));
        let total = totals[thread];
        assert!(
            inside as f64 >= 0.9 * total as f64,
            "only {inside} of thread {thread}'s {total} ns are in {function}()\n{}",
            describe(stacks.iter().copied(), 10)
        );
    }
    drop(running);
}
