//! `-e offcpu`: where threads wait, weighed by the nanoseconds they wait.
//! A program that sleeps 7 ms then waits ~3 ms on a pipe per round comes
//! out 70:30 with the scheduler's frame on top, unharmed (no call
//! interrupted, its pace kept), with the user stacks taken by task work
//! and at syscall exits alike; in a context-switch storm, the waits
//! shorter than the minimum are left out, and with no minimum stoke's
//! output stays within the per-CPU budget, the waits past it counted; a
//! whole-host recording stays within the budget, counts no idle CPU, and
//! keeps the split.

use std::{
    path::Path,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use stoke_tests::{
    args, describe, prepare, read_folded, samples_where, stoke_bin, total_samples, Running, Stack,
    Stoke,
};

/// Stoke's budget of off-CPU records per CPU per second.
const BUDGET_PER_CPU_SECOND: u64 = 2000;

/// How many `prefix` lines each of `running` prints in `window` from now.
fn lines_in(running: &[&Running], prefix: &str, window: Duration) -> Vec<f64> {
    let since = Instant::now();
    thread::sleep(window);
    running
        .iter()
        .map(|running| running.lines_since(prefix, since) as f64)
        .collect()
}

/// `key=value` from the last `prefix` line of `running`.
fn last_value(running: &Running, prefix: &str, key: &str) -> f64 {
    let lines = running.stdout_lines();
    let line = lines
        .iter()
        .rev()
        .find(|line| line.text.starts_with(prefix))
        .map_or("", |line| line.text.as_str());
    value_of(line, key)
}

/// `key=value` from a line of the workload's.
fn value_of(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|field| field.strip_prefix(&format!("{key}=")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// Records `running[0]` with `-e offcpu` and `extra` options for
/// `seconds`, stoke's environment extended by `env`, counting the `prefix`
/// lines of each of `running` in a window before, during (once stoke's
/// start-up work, loading unwind tables, is over) and after the recording;
/// returns the counts, [before, during, after] for each.
fn record_paced(
    running: &[&Running],
    prefix: &str,
    extra: &[String],
    seconds: f64,
    outputs: &[String],
    env: &[(&str, &str)],
) -> Vec<[f64; 3]> {
    let window = Duration::from_secs_f64(seconds - 2.0);
    let before = lines_in(running, prefix, window);
    let mut command = args![
        "record",
        "-p",
        running[0].pid(),
        "-e",
        "offcpu",
        "-d",
        seconds
    ]
    .to_vec();
    command.extend_from_slice(extra);
    for output in outputs {
        command.extend(args!["-o", output]);
    }
    let mut stoke_command = Command::new(stoke_bin());
    stoke_command.args(&command).envs(env.iter().copied());
    let mut stoke = Stoke::spawn_command(stoke_command);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    thread::sleep(Duration::from_secs(1));
    let during = lines_in(running, prefix, window);
    stoke.wait_recording(seconds);
    let after = lines_in(running, prefix, window);
    let counts = (0..running.len())
        .map(|index| [before[index], during[index], after[index]])
        .collect();
    println!("{prefix} lines before, during, after the recording: {counts:?}");
    counts
}

#[test]
fn blocked_time_splits_70_30_under_the_scheduler_and_nothing_is_interrupted() {
    blocked_time_splits_70_30(&[], "by task work");
}

/// The same with the user stacks taken at syscall exits, as on kernels
/// without task work for BPF (before 6.18).
#[test]
fn blocked_time_splits_70_30_with_user_stacks_at_syscall_exits() {
    blocked_time_splits_70_30(&[("STOKE_OFFCPU_AT_SYSCALL_EXIT", "1")], "at syscall exits");
}

/// The 70:30 split, with stoke's environment extended by `env`, the
/// summary saying the user stacks were taken as `user_stacks` says.
fn blocked_time_splits_70_30(env: &[(&str, &str)], user_stacks: &str) {
    let (dir, workload) = prepare("offcpu-split", "offcpu_split");
    let mut running = workload.spawn(&args![120]);
    // A second copy, not recorded, paced by the same load on the host: the
    // recorded one's pace is measured against it.
    let mut control = workload.spawn(&args![120]);
    let (out, text) = (dir.join("offcpu.folded"), dir.join("offcpu.txt"));
    let counts = record_paced(
        &[&running, &control],
        "round",
        &[],
        5.0,
        &[out.display().to_string(), text.display().to_string()],
        env,
    );
    let summary = std::fs::read_to_string(&text).unwrap();
    let taken = summary
        .lines()
        .find_map(|line| line.strip_prefix("Off-CPU user stacks taken:"))
        .unwrap_or_else(|| {
            panic!("the summary does not say how user stacks were taken\n{summary}")
        });
    assert!(
        taken.trim().starts_with(user_stacks),
        "user stacks taken {taken:?}, {user_stacks:?} wanted"
    );
    assert!(
        running.is_alive() && control.is_alive(),
        "a workload ended early"
    );
    assert_eq!(
        last_value(&running, "round", "eintr"),
        0.0,
        "a blocked call was interrupted"
    );
    let [recorded, unrecorded] = [counts[0], counts[1]];
    let pace = (recorded[1] / unrecorded[1])
        / ((recorded[0] + recorded[2]) / (unrecorded[0] + unrecorded[2]));
    assert!(
        pace > 0.95,
        "while recorded, the workload kept only {:.1}% of its pace beside an unrecorded copy",
        pace * 100.0
    );

    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 12));
    let main: Vec<Stack> = stacks
        .into_iter()
        .filter(|stack| stack.contains("main"))
        .collect();
    let seventy = samples_where(&main, |stack| stack.contains("sleep_seventy"));
    let thirty = samples_where(&main, |stack| stack.contains("wait_thirty"));
    let share = 100.0 * seventy as f64 / (seventy + thirty) as f64;
    let measured = last_value(&running, "round", "seventy_share");
    println!("sleep_seventy {share:.1}% by stoke, {measured:.1}% as the workload measured");
    assert!(
        (share - 70.0).abs() <= 3.0 && (share - measured).abs() <= 2.0,
        "sleep_seventy has {share:.1}% of the main thread's off-CPU time \
         (70 ± 3 wanted; the workload measured {measured:.1}%)"
    );
    // The main thread waited about 4.5 s while recorded.
    let total = seventy + thirty;
    assert!(
        (3_500_000_000..5_500_000_000).contains(&total),
        "{total} ns off the CPU in main's two functions (about 4.5 s expected)"
    );
    let on_top = main
        .iter()
        .filter(|stack| stack.leaf() == "__schedule_[k]")
        .map(|stack| stack.count)
        .sum::<u64>();
    assert!(
        on_top as f64 >= 0.95 * total as f64,
        "only {on_top} of {total} ns have __schedule_[k] on top"
    );
}

/// What an off-CPU recording's summary and folded profile say.
struct OffCpuRecording {
    /// Records sent.
    records: u64,
    /// Waits left out past the budget.
    over_budget: u64,
    /// The folded profile's stacks.
    stacks: Vec<Stack>,
}

/// Records `select` (`-a`, `-p PID`) with `-e offcpu` and `extra` options
/// for `seconds` into a folded profile and a summary in `dir`.
fn record_offcpu(select: &[String], extra: &[String], seconds: f64, dir: &Path) -> OffCpuRecording {
    let (folded, text) = (dir.join("offcpu.folded"), dir.join("offcpu.txt"));
    let mut command = args!["record"].to_vec();
    command.extend_from_slice(select);
    command.extend(args![
        "-e",
        "offcpu",
        "-d",
        seconds,
        "-o",
        folded.display(),
        "-o",
        text.display()
    ]);
    command.extend_from_slice(extra);
    Stoke::spawn(&command).wait_recording(seconds);
    let summary = std::fs::read_to_string(&text).unwrap();
    let count = |label: &str| -> u64 {
        summary
            .lines()
            .find_map(|line| line.strip_prefix(label))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {label:?} in\n{summary}"))
    };
    let size = std::fs::metadata(&folded).unwrap().len();
    println!("a folded profile of {size} bytes");
    // At most the budget's records, each a few hundred bytes of stack.
    assert!(size < 4 << 20, "the folded profile takes {size} bytes");
    OffCpuRecording {
        records: count("Total samples:"),
        over_budget: count("Off-CPU waits left out (over budget):"),
        stacks: read_folded(&folded),
    }
}

// The storm's pace while recorded is a cost, measured by the bench beside
// perf's and bcc's (`cargo xtask bench --part offcpu`): a ping-pong of two
// threads on a 2-CPU host halves its pace whenever anything else runs.
#[test]
fn a_context_switch_storm_is_cut_at_the_minimum_and_kept_to_the_budget_without_one() {
    let (dir, workload) = prepare("offcpu-storm", "pingpong");
    let mut running = workload.spawn(&args![120]);
    let seconds = 5.0;
    let cpus = thread::available_parallelism().unwrap().get() as u64;
    let most = BUDGET_PER_CPU_SECOND * cpus * (seconds as u64 + 1);
    // With the default minimum (100 µs), its waits of microseconds are
    // left out before any stack is taken: only the longer ones (when the
    // other thread was slow to run) come out.
    let pid = args!["-p", running.pid()];
    let recorded = record_offcpu(&pid, &[], seconds, dir.path());
    let records = recorded.records;
    let mean = total_samples(&recorded.stacks) as f64 / records.max(1) as f64;
    println!("default minimum: {records} records sent, a mean wait of {mean:.0} ns");
    assert!(
        mean >= 100_000.0,
        "the waits recorded with a minimum of 100 µs average {mean:.0} ns"
    );
    // No minimum: every one of its waits would be recorded but for the
    // budget.
    let recorded = record_offcpu(&pid, &args!["--offcpu-min", 0], seconds, dir.path());
    let (records, over) = (recorded.records, recorded.over_budget);
    let mean = total_samples(&recorded.stacks) as f64 / records.max(1) as f64;
    println!(
        "no minimum: {records} records sent, {over} waits over budget, a mean of {mean:.0} ns"
    );
    assert!(
        records <= most && records > most / 4,
        "{records} off-CPU records in {seconds} s on {cpus} CPUs (budget {most})"
    );
    assert!(
        over > records,
        "only {over} waits over budget beside {records} records, in a storm"
    );
    assert!(running.is_alive(), "the ping-pong ended early");
    assert_eq!(
        last_value(&running, "tick", "eintr"),
        0.0,
        "a blocked call was interrupted"
    );
}

#[test]
fn several_events_write_a_file_each_in_its_unit() {
    let (dir, workload) = prepare("offcpu-events", "offcpu_split");
    let running = workload.spawn(&args![60]);
    let (folded, pprof) = (dir.join("both.folded"), dir.join("both.pb.gz"));
    let output = Stoke::spawn(&args![
        "record",
        "-p",
        running.pid(),
        "-e",
        "cpu,offcpu",
        "-d",
        2,
        "-o",
        folded.display(),
        "-o",
        pprof.display()
    ])
    .wait(Duration::from_secs(60));
    output.assert_success();
    assert!(
        !folded.exists() && !pprof.exists(),
        "unnamed outputs written"
    );
    let offcpu = read_folded(&dir.join("both.offcpu.folded"));
    let cpu = read_folded(&dir.join("both.cpu.folded"));
    let waited: u64 = offcpu.iter().map(|stack| stack.count).sum();
    let samples: u64 = cpu.iter().map(|stack| stack.count).sum();
    println!("{waited} ns off the CPU, {samples} CPU samples");
    // Most of 2 s asleep or waiting, in nanoseconds; a few samples of CPU.
    assert!(
        waited > 1_000_000_000,
        "only {waited} ns off the CPU in 2 s"
    );
    assert!(
        samples < 200,
        "{samples} CPU samples of a program that waits"
    );
    for (file, sample_type) in [
        ("both.offcpu.pb.gz", "offcpu/nanoseconds"),
        ("both.cpu.pb.gz", "samples/count"),
    ] {
        // Debian's golang-go links /usr/bin/go.
        let raw = std::process::Command::new("go")
            .args(["tool", "pprof", "-raw"])
            .arg(dir.join(file))
            .output()
            .expect("go tool pprof runs (cargo xtask setup installs golang-go)");
        let text = String::from_utf8_lossy(&raw.stdout);
        assert!(
            raw.status.success() && text.contains(sample_type),
            "{file}: no {sample_type} sample type in go tool pprof -raw:\n{text}{}",
            String::from_utf8_lossy(&raw.stderr)
        );
    }
}

/// A whole-host off-CPU recording of a host with nothing but its daemons
/// and one waiting workload: every process's waits, never an idle CPU's,
/// within the budget, in a small profile; the workload's 70:30 split is
/// there as when it is recorded alone.
#[test]
fn a_whole_host_recording_stays_within_its_budget_and_keeps_the_split() {
    let (dir, workload) = prepare("offcpu-host", "offcpu_split");
    let running = workload.spawn(&args![60]);
    let seconds = 4.0;
    let OffCpuRecording {
        records, stacks, ..
    } = record_offcpu(&args!["-a"], &[], seconds, dir.path());
    println!("{}", describe(&stacks, 8));
    let cpus = thread::available_parallelism().unwrap().get() as u64;
    let most = BUDGET_PER_CPU_SECOND * cpus * (seconds as u64 + 1);
    let processes = stacks
        .iter()
        .map(|stack| stack.root())
        .collect::<std::collections::HashSet<_>>()
        .len();
    println!("{records} records, {processes} processes");
    assert!(records <= most, "{records} records (budget {most})");
    assert!(processes >= 2, "the waits of {processes} process(es) only");
    assert!(
        stacks.iter().all(|stack| !stack.root().ends_with(" [0]")),
        "an idle CPU's time was counted"
    );
    let root = running.root_frame();
    let main: Vec<Stack> = stacks
        .into_iter()
        .filter(|stack| stack.root() == root && stack.contains("main"))
        .collect();
    let seventy = samples_where(&main, |stack| stack.contains("sleep_seventy"));
    let thirty = samples_where(&main, |stack| stack.contains("wait_thirty"));
    let share = 100.0 * seventy as f64 / (seventy + thirty).max(1) as f64;
    println!("sleep_seventy {share:.1}% of {root}'s main thread's waits");
    assert!(
        (share - 70.0).abs() <= 3.0,
        "sleep_seventy has {share:.1}% of {root}'s main thread's waits (70 ± 3 wanted)"
    );
}

/// Waits still going on when the recording ends count until its end: a
/// thread blocked since before stoke started for about the whole
/// recording, one that blocked during it from then on, each under the
/// function it blocked in and the scheduler; neither read is interrupted.
#[test]
fn waits_still_going_on_at_the_end_count_until_then() {
    let (dir, workload) = prepare("offcpu-blocked", "blocked_threads");
    let (seconds, spin) = (3.0, 1.5);
    let mut running = workload.spawn(&args![seconds + 4.0, spin]);
    let spinning_since = Instant::now();
    let out = dir.join("blocked.folded");
    let mut stoke = Stoke::spawn(&stoke_tests::record_args(
        &args!["-p", running.pid(), "-e", "offcpu"],
        99,
        seconds,
        &out,
    ));
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    let sampling_since = Instant::now();
    let output = stoke.wait_recording(seconds);
    println!("{}", output.stderr);
    let woke = running.wait_for_line("woke", Duration::from_secs(30));
    running.wait_success(Duration::from_secs(10));
    assert_eq!(
        woke.trim(),
        "woke stuck=1 late=1",
        "a blocked read was interrupted"
    );

    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 8));
    let in_function = |function: &str| -> f64 {
        let blocked: Vec<&Stack> = stacks
            .iter()
            .filter(|stack| stack.contains(function))
            .collect();
        for stack in &blocked {
            assert!(
                stack.leaf() == "__schedule_[k]" && stack.joined().contains("pipe_read"),
                "{function} is not waiting in a pipe read under the scheduler: {}",
                stack.joined()
            );
        }
        total_samples(blocked) as f64 / 1e9
    };
    let stuck = in_function("stuck_from_start");
    let late = in_function("blocked_later");
    // The late thread blocked `spin` seconds after it started, which was
    // before stoke's start-up; the recording ended `seconds` after its
    // "sampling" line.
    let late_expected =
        seconds - (spinning_since + Duration::from_secs_f64(spin) - sampling_since).as_secs_f64();
    println!(
        "stuck_from_start waited {stuck:.3} s of a {seconds} s recording; \
         blocked_later {late:.3} s, {late_expected:.3} s expected"
    );
    assert!(
        (0.95 * seconds..=1.15 * seconds).contains(&stuck),
        "the thread blocked since before the recording waited {stuck:.3} s in it, not ~{seconds} s"
    );
    assert!(
        (late - late_expected).abs() <= 0.3,
        "the thread that blocked during the recording waited {late:.3} s in it, not ~{late_expected:.3} s"
    );
}
