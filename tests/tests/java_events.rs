//! Java allocation and lock profiling with real JVMs: a JVM allocating
//! 70:30 bytes in two methods comes out 70 ± 3 % by bytes, with the
//! allocated class on top, on JDK 17 and Temurin 25, and its estimated
//! bytes agree with what it allocated; a JVM whose threads contend for a
//! monitor and for a ReentrantLock shows each lock's class on top of the
//! waiting stacks, with about the wait the program measures itself. The JVMs work at their
//! pace before, while and after the recording and exit 0; after the
//! recording (or a stoke killed during one), the agent's allocation
//! sampling is off: its counter of sampled allocations stands still. The
//! agent walks most allocations' stacks from HotSpot's structures, not
//! through GetStackTrace (its counters say so), also the deep ones of a
//! JVM whose JIT never settles, which all reach `main`. An
//! empty allocation or lock profile says why: an idle JVM, or no JVM.

use std::{
    fs::File,
    mem::offset_of,
    os::unix::fs::FileExt,
    path::Path,
    time::{Duration, Instant},
};

use profiler_common::jvm::{Header, MEMFD_NAME};
use stoke_tests::{
    args, describe, java_workloads_dir, prepare_java, read_folded, record_args, stacks_of,
    total_samples, Jdk, Line, Running, Stack, Stoke, JDK_17, TEMURIN_25,
};

const SEVENTY: &str = "JavaAlloc.seventy";
const THIRTY: &str = "JavaAlloc.thirty";
const RECORD_SECONDS: f64 = 5.0;
/// The class on top of a ReentrantLock's waits.
const REENTRANT_LOCK: &str = "java.util.concurrent.locks.ReentrantLock";

/// The `rate ...` lines a workload printed between `from` and `to`, their
/// numbers after `rate`.
fn rates(running: &Running, from: Instant, to: Instant) -> Vec<Vec<u64>> {
    running
        .stdout_lines()
        .iter()
        .filter(|line: &&Line| line.at > from && line.at <= to)
        .filter_map(|line| line.text.strip_prefix("rate "))
        .map(|numbers| {
            numbers
                .split_whitespace()
                .map(|n| n.parse().expect("a number"))
                .collect()
        })
        .collect()
}

fn median(mut values: Vec<u64>) -> u64 {
    assert!(!values.is_empty(), "no rate lines");
    values.sort_unstable();
    values[values.len() / 2]
}

/// The work rate (the first number of each `rate` line) before, during and
/// after `record`, which runs stoke; asserts that the JVM kept its pace.
fn assert_unharmed(running: &mut Running, record: impl FnOnce()) {
    let before_start = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let start = Instant::now();
    record();
    let end = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let after_end = Instant::now();
    let rate = |from, to| median(rates(running, from, to).iter().map(|r| r[0]).collect());
    let (before, during, after) = (
        rate(before_start, start),
        rate(start, end),
        rate(end, after_end),
    );
    println!("work rate per 100 ms: {before} before, {during} while recording, {after} after");
    for (what, rate) in [("while recording", during), ("after", after)] {
        assert!(
            rate as f64 >= 0.8 * before as f64,
            "the JVM's work rate fell from {before} to {rate} per 100 ms {what}"
        );
    }
}

/// The agent's memory in JVM `pid`, opened through its `/proc` link (fine
/// for a test: the JVM is ours), if the agent is loaded.
fn find_agent_memory(pid: u32) -> Option<File> {
    let link = format!("/memfd:{MEMFD_NAME} (deleted)");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            std::fs::read_link(path).is_ok_and(|target| target.as_os_str() == link.as_str())
        })
        .and_then(|path| File::open(path).ok())
}

fn agent_memory(pid: u32) -> File {
    find_agent_memory(pid).unwrap_or_else(|| panic!("JVM {pid} has no agent memory"))
}

fn read_u64(file: &File, offset: usize) -> u64 {
    let mut bytes = [0; 8];
    file.read_exact_at(&mut bytes, offset as u64)
        .expect("reading the header");
    u64::from_le_bytes(bytes)
}

fn read_u32(file: &File, offset: usize) -> u32 {
    let mut bytes = [0; 4];
    file.read_exact_at(&mut bytes, offset as u64)
        .expect("reading the header");
    u32::from_le_bytes(bytes)
}

/// Asserts, within `within`, that the agent switched its Java events off
/// and that the JVM samples no allocation any more while it allocates.
fn assert_sampling_off(pid: u32, within: Duration) {
    let memory = agent_memory(pid);
    let deadline = Instant::now() + within;
    while read_u32(&memory, offset_of!(Header, java_events_on)) != 0 {
        assert!(
            Instant::now() < deadline,
            "the agent still has Java events on {within:?} after the recording"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let samples = offset_of!(Header, alloc_samples);
    let first = read_u64(&memory, samples);
    assert!(first > 0, "the agent never sampled an allocation");
    std::thread::sleep(Duration::from_secs(1));
    let second = read_u64(&memory, samples);
    assert_eq!(
        first, second,
        "the JVM still samples allocations after the recording"
    );
}

/// Asserts that the agent walked at least `percent` of the allocations'
/// stacks itself (from HotSpot's structures, once the walk matched
/// GetStackTrace on the first 64 events) rather than asking JVMTI's
/// GetStackTrace.
fn assert_stacks_walked(label: &str, pid: u32, percent: u64) {
    let memory = agent_memory(pid);
    let sampled = read_u64(&memory, offset_of!(Header, alloc_samples));
    let walked = read_u64(&memory, offset_of!(Header, java_events_walked));
    println!("{label}: {walked} of {sampled} allocations' stacks walked by the agent");
    assert!(
        walked * 100 >= sampled * percent,
        "{label}: the agent walked only {walked} of {sampled} allocations' stacks"
    );
}

/// Bytes estimated for the stacks with Java method `method` and `class`
/// on top.
fn bytes_of(stacks: &[Stack], method: &str, class: &str) -> u64 {
    stacks
        .iter()
        .filter(|stack| stack.leaf() == class && stack.has_java(method))
        .map(|stack| stack.count)
        .sum()
}

/// `stoke record` of JVM `pid`'s allocations into `out`.
fn alloc_args(pid: u32, out: &Path) -> Vec<String> {
    record_args(&args!["-p", pid, "-e", "alloc"], 99, RECORD_SECONDS, out)
}

fn allocations_on(jdk: Jdk) {
    let label = jdk.label;
    let (dir, workload) = prepare_java("java-alloc", "JavaAlloc", jdk);
    let mut running = workload.spawn(&["14"]);
    let out = dir.join("alloc.folded");
    let args = alloc_args(running.pid(), &out);
    let (mut start, mut end) = (Instant::now(), Instant::now());
    // Kept for a failure's message: what stoke said of lost events.
    let mut stderr = String::new();
    assert_unharmed(&mut running, || {
        start = Instant::now();
        stderr = stoke_tests::record(&args, RECORD_SECONDS).stderr;
        end = Instant::now();
    });
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 10));
    assert_sampling_off(running.pid(), Duration::from_millis(500));
    // 97.9% measured: all but the 64 checked.
    assert_stacks_walked(label, running.pid(), 90);

    // Every stack has its class on top, no Java frame.
    let total: u64 = stacks.iter().map(|stack| stack.count).sum();
    let classless: Vec<_> = stacks
        .iter()
        .filter(|stack| stoke_tests::is_java_frame(stack.leaf()))
        .collect();
    assert!(
        classless.is_empty(),
        "stacks without a class on top: {classless:?}"
    );
    let seventy = bytes_of(&stacks, SEVENTY, "byte[]");
    let thirty = bytes_of(&stacks, THIRTY, "long[]");
    let share = 100.0 * seventy as f64 / (seventy + thirty).max(1) as f64;
    println!("{label}: {seventy} bytes in {SEVENTY} (byte[]), {thirty} in {THIRTY} (long[]): {share:.2}% of {total}");
    assert!(
        seventy + thirty >= total * 95 / 100,
        "{label}: only {} of {total} bytes in the workload's two methods with their classes",
        seventy + thirty
    );
    // The JVM's sampler picks some 3,000 allocations in the recording: the
    // share's standard deviation is then near 0.85 points.
    assert!(
        (66.0..=74.0).contains(&share),
        "{label}: {share:.2}% of the bytes in {SEVENTY}, not 70 ± 4"
    );
    // What the JVM says it allocated while stoke ran: the estimate (from
    // the attach on) is most of it, and never more.
    let allocated: u64 = rates(&running, start, end).iter().map(|r| r[1]).sum();
    let ratio = total as f64 / allocated as f64;
    println!("{label}: estimated {total} bytes, the JVM allocated {allocated} while stoke ran ({ratio:.2})");
    assert!(
        (0.6..=1.1).contains(&ratio),
        "{label}: estimated {total} bytes, but the JVM allocated {allocated} while stoke ran"
    );
    running.wait_success(Duration::from_secs(30));
}

#[test]
fn allocations_split_70_30_by_bytes_on_jdk_17() {
    allocations_on(JDK_17);
}

#[test]
fn allocations_split_70_30_by_bytes_on_temurin_25() {
    allocations_on(TEMURIN_25);
}

/// A JVM whose JIT never settles (javac, over and over): deep stacks
/// through interpreted, compiled, inlined and native frames, methods
/// compiled and thrown away all along. The agent still walks most
/// allocations' stacks itself, and every stack reaches `main`.
fn deep_allocations_under_jit_churn_on(jdk: Jdk) {
    let label = jdk.label;
    let (dir, workload) = prepare_java("java-alloc-churn", "JavaCompile", jdk);
    let classes = dir.join("javac-out");
    let mut running = workload.spawn(&[
        "14".to_owned(),
        java_workloads_dir().display().to_string(),
        classes.display().to_string(),
    ]);
    let out = dir.join("alloc.folded");
    let args = alloc_args(running.pid(), &out);
    stoke_tests::record(&args, RECORD_SECONDS);
    let stacks = read_folded(&out);
    // 87-93% measured: the 64 checked are a tenth of the events, and
    // methods compiled moments before an event are not known yet.
    assert_stacks_walked(label, running.pid(), 70);
    let total: u64 = stacks.iter().map(|stack| stack.count).sum();
    let from_main: u64 = stacks
        .iter()
        .filter(|stack| stack.has_java("JavaCompile.main"))
        .map(|stack| stack.count)
        .sum();
    let deepest = stacks.iter().map(|stack| stack.frames.len()).max();
    println!("{label}: {from_main} of {total} bytes under JavaCompile.main, {} stacks, the deepest {deepest:?} frames", stacks.len());
    assert!(
        stacks.len() > 100 && deepest > Some(40),
        "{label}: expected many deep javac stacks\n{}",
        describe(&stacks, 10)
    );
    assert!(
        from_main * 100 >= total * 99,
        "{label}: only {from_main} of {total} bytes in stacks reaching JavaCompile.main\n{}",
        describe(&stacks, 10)
    );
    running.wait_success(Duration::from_secs(30));
}

#[test]
fn deep_allocation_stacks_under_jit_churn_on_jdk_17() {
    deep_allocations_under_jit_churn_on(JDK_17);
}

#[test]
fn deep_allocation_stacks_under_jit_churn_on_temurin_25() {
    deep_allocations_under_jit_churn_on(TEMURIN_25);
}

/// JVMs started while a whole-host allocation recording runs: stoke may
/// first try one before its VM is live, when JVMTI has no environment to
/// give (the agent then says so and stays ready for the retry); every JVM
/// still gets its agent and most of its allocations recorded.
#[test]
fn jvms_started_during_a_whole_host_alloc_recording_get_their_allocations() {
    let (dir, workload) = prepare_java("java-alloc-starting", "JavaAlloc", JDK_17);
    let out = dir.join("starting.folded");
    let seconds = 9.0;
    let mut stoke = Stoke::spawn(&record_args(&args!["-a", "-e", "alloc"], 99, seconds, &out));
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(10));
    // One after the other: each waits for the previous one's `ready`, a
    // second of warm-up after its start, and then allocates ~330 MB/s.
    let jvms: Vec<Running> = (0..3).map(|_| workload.spawn(&["4"])).collect();
    let output = stoke.wait_recording(seconds);
    println!("{}", output.stderr);
    let stacks = read_folded(&out);
    for jvm in &jvms {
        assert!(
            !output
                .stderr
                .contains(&format!("stoke: warning: JVM {}:", jvm.pid())),
            "stoke warned about JVM {} started mid-recording:\n{}",
            jvm.pid(),
            output.stderr
        );
        let bytes = total_samples(stacks_of(&stacks, &jvm.root_frame()));
        println!("JVM {}: {bytes} bytes estimated", jvm.pid());
        // Over 4 s after its attach, at ~330 MB/s: well over 500 MB.
        assert!(
            bytes >= 500 << 20,
            "JVM {} started mid-recording has only {bytes} bytes of allocations",
            jvm.pid()
        );
    }
}

/// An allocation or lock profile with nothing in it says why, in a line:
/// the JVM profiled had nothing to record, or no JVM was there to profile
/// (the profile alone cannot tell the two apart).
#[test]
fn an_empty_java_event_profile_says_why() {
    let (dir, workload) = prepare_java("java-events-empty", "JavaIdle", JDK_17);
    let idle = workload.spawn(&["30"]);
    let seconds = 2.0;
    let out = dir.join("idle.folded");
    let select = args!["-p", idle.pid(), "-e", "alloc,lock"];
    let output = stoke_tests::record(&record_args(&select, 99, seconds, &out), seconds);
    for expected in [
        "stoke: alloc: 1 JVM(s) profiled, but no allocation reached a sample",
        "stoke: lock: 1 JVM(s) profiled, but no thread waited on a Java lock",
    ] {
        assert!(
            output.stderr.contains(expected),
            "no `{expected}` for an idle JVM:\n{}",
            output.stderr
        );
    }

    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep runs");
    let select = args!["-p", sleeper.id(), "-e", "alloc"];
    let output = stoke_tests::record(&record_args(&select, 99, seconds, &out), seconds);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        output.stderr.contains("stoke: alloc: no JVM was profiled"),
        "no word of the missing JVM:\n{}",
        output.stderr
    );
}

#[test]
fn a_stoke_killed_while_recording_allocations_leaves_sampling_off() {
    let (dir, workload) = prepare_java("java-alloc-killed", "JavaAlloc", JDK_17);
    let mut running = workload.spawn(&["8"]);
    let stoke = Stoke::spawn(&args![
        "record",
        "-p",
        running.pid(),
        "-e",
        "alloc",
        "-o",
        dir.join("never.folded").display()
    ]);
    // Sampling on: the agent says so, and counts sampled allocations.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let on = find_agent_memory(running.pid()).map_or(0, |memory| {
            read_u32(&memory, offset_of!(Header, java_events_on))
        });
        if on != 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "allocation sampling never came on"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stoke.signal(libc::SIGKILL);
    let _ = stoke.wait(Duration::from_secs(5));
    // The agent looks every 0.1 s whether a stoke holds its memory.
    assert_sampling_off(running.pid(), Duration::from_millis(500));
    running.wait_success(Duration::from_secs(30));
}

#[test]
fn contended_monitors_and_reentrant_locks_show_their_class_and_wait_on_jdk_17() {
    locks_on(JDK_17);
}

/// JDK 24 reworked monitors (JEP 491: virtual threads no longer pin them);
/// their contention events must still come.
#[test]
fn contended_monitors_and_reentrant_locks_show_their_class_and_wait_on_temurin_25() {
    locks_on(TEMURIN_25);
}

fn locks_on(jdk: Jdk) {
    let (dir, workload) = prepare_java("java-locks", "JavaLocks", jdk);
    let mut running = workload.spawn(&["10"]);
    let out = dir.join("locks.folded");
    let args = record_args(
        &args!["-p", running.pid(), "-t", "-e", "lock"],
        99,
        RECORD_SECONDS,
        &out,
    );
    let (mut start, mut end) = (Instant::now(), Instant::now());
    // Kept for a failure's message: what stoke said of lost events.
    let mut stderr = String::new();
    assert_unharmed(&mut running, || {
        start = Instant::now();
        stderr = stoke_tests::record(&args, RECORD_SECONDS).stderr;
        end = Instant::now();
    });
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 10));
    let monitor: Vec<&Stack> = stacks
        .iter()
        .filter(|stack| stack.leaf() == "JavaLocks$MonitorLock")
        .collect();
    assert!(
        !monitor.is_empty(),
        "no stack with the monitor's class on top"
    );
    for stack in &monitor {
        assert!(
            stack.has_java("JavaLocks.monitorLoop"),
            "a monitor wait outside the loop that locks it: {stack:?}"
        );
        assert!(
            stack.frames[1].starts_with("monitor-"),
            "not under its thread's frame: {stack:?}"
        );
    }
    let waited: u64 = monitor.iter().map(|stack| stack.count).sum();
    let measured: u64 = rates(&running, start, end).iter().map(|r| r[1]).sum();
    let ratio = waited as f64 / measured as f64;
    println!("monitor: stoke {waited} ns, the program {measured} ns while stoke ran ({ratio:.2})");
    assert!(
        (0.5..=1.2).contains(&ratio),
        "stoke counted {waited} ns of monitor waits, the program measured {measured} ns; \
         stoke said:\n{stderr}"
    );

    // The ReentrantLock's waits are parks: the lock's class on top, its
    // threads' loop below, and no park of another kind (its hold() sleeps,
    // its main thread sleeps between lines).
    let reentrant: Vec<&Stack> = stacks
        .iter()
        .filter(|stack| stack.leaf() == REENTRANT_LOCK)
        .collect();
    for stack in &reentrant {
        assert!(
            stack.has_java("JavaLocks.reentrantLoop") && stack.frames[1].starts_with("reentrant-"),
            "a ReentrantLock wait outside its threads' loop: {stack:?}"
        );
    }
    let others: Vec<&Stack> = stacks
        .iter()
        .filter(|stack| ![REENTRANT_LOCK, "JavaLocks$MonitorLock"].contains(&stack.leaf()))
        .collect();
    assert!(
        others.is_empty(),
        "waits on no lock of the program's: {others:?}"
    );
    let waited: u64 = reentrant.iter().map(|stack| stack.count).sum();
    let measured: u64 = rates(&running, start, end).iter().map(|r| r[2]).sum();
    let ratio = waited as f64 / measured as f64;
    println!(
        "ReentrantLock: stoke {waited} ns, the program {measured} ns while stoke ran ({ratio:.2})"
    );
    assert!(
        (0.5..=1.2).contains(&ratio),
        "stoke counted {waited} ns of ReentrantLock waits, the program measured {measured} ns"
    );
    running.wait_success(Duration::from_secs(30));
}

/// Three stokes read one JVM's agent at once: two record its allocations
/// at different sampling intervals, the third its CPU only. Each
/// allocation profile has the 70:30 split by bytes and an estimate of
/// what the JVM allocated (weighed by the interval the JVM sampled at, the
/// smaller one); the CPU profile holds no allocation.
#[test]
fn stokes_recording_allocations_and_cpu_at_once_each_get_their_own() {
    let (dir, workload) = prepare_java("java-alloc-consumers", "JavaAlloc", JDK_17);
    let mut running = workload.spawn(&["14"]);
    let pid = running.pid();
    let fine_out = dir.join("fine.folded");
    let coarse_out = dir.join("coarse.folded");
    let cpu_out = dir.join("cpu.folded");
    let (mut start, mut end) = (Instant::now(), Instant::now());
    assert_unharmed(&mut running, || {
        start = Instant::now();
        let fine = Stoke::spawn(&alloc_args(pid, &fine_out));
        let coarse = Stoke::spawn(&record_args(
            &args!["-p", pid, "-e", "alloc", "--alloc-interval", 2 << 20],
            99,
            RECORD_SECONDS,
            &coarse_out,
        ));
        let cpu = Stoke::spawn(&record_args(
            &args!["-p", pid],
            99,
            RECORD_SECONDS,
            &cpu_out,
        ));
        for stoke in [fine, coarse, cpu] {
            let output = stoke.wait_recording(RECORD_SECONDS);
            println!("{}", output.stderr);
        }
        end = Instant::now();
    });
    let allocated: u64 = rates(&running, start, end).iter().map(|r| r[1]).sum();
    for (label, out) in [("512 KiB", &fine_out), ("2 MiB", &coarse_out)] {
        let stacks = read_folded(out);
        let total: u64 = stacks.iter().map(|stack| stack.count).sum();
        let seventy = bytes_of(&stacks, SEVENTY, "byte[]");
        let thirty = bytes_of(&stacks, THIRTY, "long[]");
        let share = 100.0 * seventy as f64 / (seventy + thirty).max(1) as f64;
        let ratio = total as f64 / allocated.max(1) as f64;
        println!("{label}: {seventy} bytes in {SEVENTY}, {thirty} in {THIRTY}: {share:.2}%; estimated {total} of {allocated} allocated ({ratio:.2})");
        assert!(
            (67.0..=73.0).contains(&share),
            "{label}: {share:.2}% of the bytes in {SEVENTY}, not 70 ± 3\n{}",
            describe(&stacks, 10)
        );
        // Both started a little after the window the rates cover, and
        // attached later still.
        assert!(
            (0.5..=1.1).contains(&ratio),
            "{label}: estimated {total} bytes, but the JVM allocated {allocated} while stoke ran"
        );
    }
    let cpu = read_folded(&cpu_out);
    let classes = cpu
        .iter()
        .filter(|stack| ["byte[]", "long[]"].contains(&stack.leaf()))
        .count();
    assert_eq!(classes, 0, "the CPU recording holds allocations");
    // The workload paces itself, idle most of the time: a few samples.
    assert!(
        cpu.iter().map(|stack| stack.count).sum::<u64>() > 0,
        "the CPU recording has no sample"
    );
    running.wait_success(Duration::from_secs(30));
}
