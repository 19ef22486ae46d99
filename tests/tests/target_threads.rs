//! `-p` targets are sampled by events on their threads, which the threads
//! they start inherit, not by an event on every CPU: threads started after
//! the recording began are sampled, no SIGTRAP of those events ever
//! reaches a program that does not take it, and a target that execs
//! (which removes events that may signal) is sampled after the exec too;
//! no end of stoke's, on time or killed, leaves an event that signals; a
//! CPU that runs no target takes no timer interrupt of stoke's; and a
//! target of thousands of threads, which their own timers would miss, is
//! sampled by the CPUs' events in proportion to its CPU time.

use std::{process::Command, thread, time::Duration};

use stoke_tests::{
    args, describe, prepare, process_stacks, read_folded, record_args, record_to, samples_where,
    stacks_of, total_samples, Running, Stoke, Workload,
};

#[test]
fn threads_started_during_a_recording_are_sampled_and_never_trapped() {
    let (dir, workload) = prepare("churn", "thread_churn");
    let out = dir.join("churn.folded");
    // A thread every ~2 ms, before, during and after stoke opens the
    // target's events: some start while an event is being set up.
    let mut running = workload.spawn(&["6"]);
    record_to(&args!["-p", running.pid()], 499, 3.0, &out);
    let status = running.wait_exit(Duration::from_secs(20));
    assert!(
        status.success(),
        "thread_churn ended with {status} (a SIGTRAP would end it)"
    );
    let threads: u64 = running
        .stdout_text()
        .lines()
        .find_map(|line| line.strip_prefix("threads="))
        .and_then(|count| count.parse().ok())
        .expect("thread_churn prints threads=N");

    let stacks = read_folded(&out);
    let (mine, total) = process_stacks(&stacks, &running.root_frame(), 100);
    // The main thread waits in pthread_join: nearly every sample of the
    // process is of a thread it started, and churn_work is where those
    // threads spend most of their time (the rest goes to starting and
    // ending threads, more of it on a loaded host).
    let started = samples_where(mine.iter().copied(), |s| s.contains("start_thread"));
    let churning = samples_where(mine.iter().copied(), |s| {
        s.contains_run(&["churn_work", "churn_spin"])
    });
    println!(
        "{threads} threads started; of {total} samples, {started} in started threads, {churning} in churn_work"
    );
    assert!(threads > 1000, "only {threads} threads started in 6 s");
    // One busy thread at a time: 3 s at 499 Hz is ~1500 samples, nearly
    // all of them of threads that did not exist when stoke started (the
    // threads alive at the start last 2 ms). A loaded host gives the
    // process less of a CPU (999 samples in one CI run, 1,410 on a quiet
    // host): the share of its samples tells as well.
    assert!(
        started > 600 && started * 10 >= total * 9 && churning * 2 >= total,
        "{started} of {total} samples in started threads, {churning} in churn_work, in 3 s at 499 Hz of a busy thread (~1500 expected): threads started later are not sampled\n{}",
        describe(mine.iter().copied(), 10)
    );
}

/// A process of 3,000 threads that each run half a millisecond every 3 s
/// (half a core in all) fills no thread's own CPU-time timer: a `-p`
/// recording of it is sampled by the CPUs' events, filtered to it, and
/// gets as many samples of it as `-a` does, with no warning of
/// undersampling.
#[test]
fn a_target_of_many_idle_threads_is_sampled_as_the_whole_host_samples_it() {
    let (dir, workload) = prepare("many-threads", "many_threads");
    let mut running = workload.spawn(&["30", "3000"]);
    let mut counts = Vec::new();
    for select in [args!["-p", running.pid()].to_vec(), args!["-a"].to_vec()] {
        let out = dir.join("many.folded");
        let output = record_to(&select, 499, 5.0, &out);
        let stacks = read_folded(&out);
        let mine = stacks_of(&stacks, &running.root_frame());
        let samples = total_samples(mine.iter().copied());
        let light = samples_where(mine.iter().copied(), |s| s.contains("light_spin"));
        println!("{select:?}: {samples} samples of the target, {light} in light_spin");
        assert!(
            light * 10 >= samples * 8,
            "{light} of {samples} samples in light_spin"
        );
        if select[0] == "-p" {
            assert_eq!(
                total_samples(&stacks),
                samples,
                "samples of processes other than the target"
            );
            assert!(
                !output.stderr.contains("warning: process"),
                "a warning of undersampling:\n{}",
                output.stderr
            );
        }
        counts.push(samples);
    }
    let (by_pid, by_host) = (counts[0], counts[1]);
    // Half a core at 499 Hz for 5 s: ~1,250 samples each.
    assert!(
        by_host > 500,
        "only {by_host} samples of the target with -a"
    );
    assert!(
        by_pid * 10 >= by_host * 8 && by_pid * 10 <= by_host * 12,
        "-p got {by_pid} samples of the target, -a {by_host}"
    );
    assert!(running.is_alive(), "the target ended early");
}

/// Rounds of [`a_target_outlives_stoke_ended_or_killed`], half of them
/// killing stoke.
const OUTLIVE_ROUNDS: usize = 10;

/// A target's events carry `sigtrap`, which the kernel sends at any
/// overflow the sampler's program does not see (the default action of
/// SIGTRAP ends the process): the program must stay on the events for as
/// long as they live, whether stoke stops on time or is killed. At
/// 20 kHz an overflow falls in a window of microseconds in most rounds:
/// with the program linked to the events (a link lets go of it before the
/// kernel removes the event), the target died in the first round, and
/// within 1 to 8 kills at 999 Hz.
#[test]
fn a_target_outlives_stoke_ended_or_killed() {
    let (dir, workload) = prepare("outlive", "short_burn");
    let mut running = workload.spawn(&["120"]);
    for round in 0..OUTLIVE_ROUNDS {
        let out = dir.join(format!("round{round}.folded"));
        let select = args!["-p", running.pid()];
        let mut stoke = Stoke::spawn(&record_args(&select, 20_000, 60.0, &out));
        stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(20));
        thread::sleep(Duration::from_millis(100));
        let (signal, how) = if round % 2 == 0 {
            (libc::SIGKILL, "killed")
        } else {
            (libc::SIGINT, "stopped by SIGINT")
        };
        stoke.signal(signal);
        let output = stoke.wait(Duration::from_secs(30));
        if signal == libc::SIGINT {
            output.assert_success();
        }
        // The kernel sends a pending SIGTRAP when the target next returns
        // to user mode: well within this.
        thread::sleep(Duration::from_millis(50));
        assert!(
            running.is_alive(),
            "the target ended ({}) after stoke was {how} in round {round}: an event \
             overflowed without the sampler's program",
            running.wait_exit(Duration::ZERO)
        );
    }
}

#[test]
fn a_target_that_execs_is_sampled_after_the_exec() {
    let (before, after) = samples_around_exec("target_exec", &[]);
    assert!(before > 300, "only {before} samples before the exec");
    // 2.5 s at 499 Hz is ~1250 samples: a target's exec record wakes
    // stoke, which puts its events back at once (1,247 measured).
    assert!(
        after > 1100,
        "only {after} samples of the exec'd program in 2.5 s at 499 Hz (~1250 expected)"
    );
}

#[test]
fn a_target_idle_until_its_exec_is_sampled_after_the_exec() {
    // No sample before the exec, so stoke has heard nothing of the
    // process when it execs: a launcher script's shape.
    let (before, after) = samples_around_exec("idle_exec", &["--idle"]);
    assert_eq!(before, 0, "samples of the sleeping launcher");
    assert!(
        after > 1100,
        "only {after} samples of the program an idle target exec'd in 2.5 s at 499 Hz (~1250 expected)"
    );
}

/// Records `exec_after_burn` (with `flags`) by `-p` as it runs 1.5 s as
/// itself, then 2.5 s as `short_burn` under the same pid: its samples in
/// `burn_before_exec`, and in `burn_cpu` after the exec.
fn samples_around_exec(name: &str, flags: &[&str]) -> (u64, u64) {
    let (dir, workload) = prepare(name, "exec_after_burn");
    let then = Workload::build("short_burn", dir.path());
    let out = dir.join(format!("{name}.folded"));
    let mut arguments: Vec<String> = flags.iter().map(|flag| flag.to_string()).collect();
    arguments.extend(args![1.5, then.exe().display(), 2.5]);
    let running = workload.spawn(&arguments);
    let pid = running.pid();
    // Longer than the target lives: the recording ends when it exits (a
    // zombie until this test reaps it), soon after its 4 s.
    let output = Stoke::spawn(&record_args(&args!["-p", pid], 499, 60.0, &out))
        .wait_targets_exit(Duration::from_secs(50));
    assert!(
        output.elapsed < Duration::from_secs(10),
        "stoke ended {:?} after its start, its target 4 s after: it should stop when the target exits",
        output.elapsed
    );

    let stacks = read_folded(&out);
    let before = stacks_of(&stacks, &running.root_frame());
    let burned_before = samples_where(before.iter().copied(), |s| s.contains("burn_before_exec"));
    let after_root = format!("{} [{pid}]", then.comm());
    let (after, _) = process_stacks(&stacks, &after_root, 100);
    let burned_after = samples_where(after.iter().copied(), |s| s.contains("burn_cpu"));
    println!(
        "burn_before_exec {burned_before}, burn_cpu after the exec {burned_after}\n{}",
        describe(after.iter().copied(), 10)
    );
    (burned_before, burned_after)
}

/// Local timer interrupts so far on `cpu` (`LOC:` in /proc/interrupts).
fn timer_interrupts(cpu: usize) -> u64 {
    let table = std::fs::read_to_string("/proc/interrupts").expect("reading /proc/interrupts");
    table
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("LOC:"))
        .and_then(|counts| counts.split_whitespace().nth(cpu)?.parse().ok())
        .expect("a LOC: line with a count for each CPU")
}

/// Timer interrupts a second on `cpu` over 2 s.
fn interrupt_rate(cpu: usize) -> f64 {
    let before = timer_interrupts(cpu);
    thread::sleep(Duration::from_secs(2));
    (timer_interrupts(cpu) - before) as f64 / 2.0
}

/// `workload` running `seconds` on CPU `cpu` alone.
fn pinned(workload: &Workload, cpu: usize, seconds: u32) -> Running {
    let mut command = Command::new("taskset");
    command
        .args(["-c", &cpu.to_string()])
        .arg(workload.exe())
        .arg(seconds.to_string());
    Running::start(command, workload.name(), &workload.comm())
}

#[test]
fn a_cpu_running_no_target_takes_no_timer_interrupt_of_stoke() {
    let (dir, workload) = prepare("other_cpu", "short_burn");
    let other = Workload::build("busy_other", dir.path());
    let out = dir.join("other_cpu.folded");
    // The target on CPU 0, another busy process on CPU 1: a busy CPU
    // takes the scheduler's tick (250 a second here) and little else.
    let target = pinned(&workload, 0, 30);
    let _other = pinned(&other, 1, 30);
    let alone = interrupt_rate(1);

    let mut rates = Vec::new();
    for select in [args!["-p", target.pid()].to_vec(), args!["-a"].to_vec()] {
        let mut stoke = Stoke::spawn(&record_args(&select, 999, 3.0, &out));
        stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
        rates.push(interrupt_rate(1));
        stoke.wait_recording(3.0);
    }
    println!(
        "CPU 1: {alone:.0} timer interrupts a second alone, {:.0} with -p on CPU 0, {:.0} with -a",
        rates[0], rates[1]
    );
    // With -a the CPU's own event adds up to 999 a second (fewer where it
    // expires with the tick): the measure sees stoke's interrupts.
    assert!(
        rates[1] > alone + 500.0,
        "CPU 1 took {:.0} timer interrupts a second under -a at 999 Hz, {alone:.0} alone: the measure cannot tell",
        rates[1]
    );
    assert!(
        rates[0] < alone + 100.0,
        "CPU 1, running no target, took {:.0} timer interrupts a second under -p, {alone:.0} alone",
        rates[0]
    );
}
