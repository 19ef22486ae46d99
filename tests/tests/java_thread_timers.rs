//! A JVM's threads get perf events of their own (their SIGTRAP asks for
//! the Java stack with no inter-processor interrupt) only while the kernel
//! says a SIGTRAP reaches the agent's handler. A debugger would stop the
//! JVM at every SIGTRAP: a traced JVM keeps the CPUs' events and SIGURG,
//! its Java frames and its life; once the debugger is gone, its threads
//! are timed again. A SIGTRAP handler the program installs in the agent's
//! place gets none of stoke's signals.

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stoke_tests::{
    args, prepare_java, prepare_java_host, read_json, record_args, record_to, require_root,
    JsonProfile, Running, Stoke, JDK_17,
};

/// The `TracerPid:` of thread `tid` of process `pid`.
fn tracer_of(pid: u32, tid: u32) -> u32 {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("TracerPid:"))
                .and_then(|tracer| tracer.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// strace attached to every thread of `pid`, printing nothing, once the
/// kernel says thread `tid` is traced.
fn trace(pid: u32, tid: u32) -> Child {
    let strace = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=none", "-e", "signal=none"])
        .args(["-o", "/dev/null", "-p", &pid.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("starting strace (`cargo xtask setup` installs it)");
    let start = Instant::now();
    while tracer_of(pid, tid) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "strace did not attach to {pid} in 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    strace
}

fn timed_and_java(profile: &JsonProfile) -> (u64, u64) {
    (
        profile.summary.timed_threads,
        profile.summary.java.java_samples,
    )
}

#[test]
fn a_jvm_a_debugger_traces_keeps_its_signal_and_is_timed_once_it_is_gone() {
    require_root();
    let (dir, workload) = prepare_java("java-traced", "JavaSplit", JDK_17);
    // Long enough for stoke's start, attach and two recordings.
    let mut running = workload.spawn(&["16"]);
    let tid = running.printed_tid();
    let pid = running.pid();

    let mut strace = trace(pid, tid);
    let traced_out = dir.join("traced.json");
    let output = record_to(&args!["-p", pid], 499, 3.0, &traced_out);
    println!("{}", output.stderr);
    let (timed, java) = timed_and_java(&read_json(&traced_out));
    println!("traced: {timed} threads timed, {java} samples with Java frames");
    assert!(
        running.is_alive(),
        "the traced JVM died during the recording; stderr:\n{}",
        running.stderr()
    );
    assert_eq!(timed, 0, "stoke timed threads of a JVM a debugger traces");
    // Its busy thread alone gives ~1500 samples in 3 s at 499 Hz, and
    // strace slows the SIGURG's delivery, not its Java frames.
    assert!(
        java > 500,
        "only {java} samples with Java frames from the traced JVM"
    );

    // strace detaches on SIGINT.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(strace.id() as i32, libc::SIGINT) };
    strace.wait().expect("waiting for strace");
    assert_eq!(tracer_of(pid, tid), 0, "strace did not detach");
    let free_out = dir.join("untraced.json");
    let output = record_to(&args!["-p", pid], 499, 2.0, &free_out);
    println!("{}", output.stderr);
    let (timed, java) = timed_and_java(&read_json(&free_out));
    println!("untraced: {timed} threads timed, {java} samples with Java frames");
    assert!(timed >= 1, "no thread of the JVM was timed once untraced");
    assert!(
        java > 500,
        "only {java} samples with Java frames once untraced"
    );
    running.wait_success(Duration::from_secs(30));
}

#[test]
fn a_sigtrap_handler_put_in_the_agents_place_gets_no_signal_of_stoke() {
    let (dir, host, java) = prepare_java_host("jvm-trap", "jvm_trap_handler", JDK_17);
    // Java runs until the agent is in, then 5 s more; the program puts its
    // own SIGTRAP handler in 1 s after the agent came.
    let mut command = Command::new(host.exe());
    command.arg("5").arg(JDK_17.libjvm()).arg(java.classes());
    let mut running = Running::start(command, "jvm_trap_handler", &host.comm());
    let out = dir.join("trap.json");
    // Longer than the program lives: the recording ends at its exit.
    let stoke = Stoke::spawn(&record_args(&args!["-p", running.pid()], 499, 60.0, &out));
    running.wait_for_line("replaced", Duration::from_secs(30));
    let count = running.wait_for_line("sigtrap ", Duration::from_secs(30));
    let output = stoke.wait_targets_exit(Duration::from_secs(50));
    println!("{}", output.stderr);
    let (timed, java) = timed_and_java(&read_json(&out));
    println!("{timed} threads timed, {java} samples with Java frames; {count}");
    assert!(
        timed >= 1,
        "no thread of the JVM was timed before the handler changed"
    );
    assert_eq!(
        count, "sigtrap 0",
        "the program's own SIGTRAP handler got stoke's signals"
    );
    // ~1 s of Java before the change and 4 s after at 499 Hz: the Java
    // frames go on, by SIGURG, after it.
    assert!(
        java > 1200,
        "only {java} samples with Java frames: did they stop at the change?"
    );
    running.wait_success(Duration::from_secs(20));
}
