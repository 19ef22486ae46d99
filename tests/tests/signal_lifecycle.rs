//! Stoke signals a JVM only while it is that JVM: a program exec'd over a
//! JVM whose agent Stoke was signalling gets no signal, from the exec on:
//! neither SIGURG nor the SIGTRAP of the JVM threads' own perf events.

use std::process::Command;
use std::time::Duration;

use stoke_tests::{
    args, describe, is_java_frame, prepare_java_host, read_folded, read_json, record_args,
    samples_where, Running, Stack, Stoke, JDK_17,
};

#[test]
fn a_program_exec_d_over_a_signalled_jvm_gets_no_signal() {
    let (dir, host, java) = prepare_java_host("jvm-exec", "jvm_then_exec", JDK_17);
    let out = dir.join("jvm-exec.folded");
    let json = dir.join("jvm-exec.json");

    // The JVM is up (it printed "ready") before stoke starts, as in the other
    // Java tests: a JVM still being created refuses attach, and stoke's
    // retries for starting JVMs are bounded. Java runs until the agent is
    // in, then 2 s more; then the process exec's into a counter of SIGURGs
    // that burns CPU for 3 s.
    let mut command = Command::new(host.exe());
    command
        .arg("2")
        .arg(JDK_17.libjvm())
        .arg(java.classes())
        .arg("3");
    let mut running = Running::start(command, "jvm_then_exec", &host.comm());
    let mut stoke = Stoke::spawn(&record_args(
        &args!["-a", "-o", json.display()],
        499,
        8.0,
        &out,
    ));
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    running.wait_for_line("attached", Duration::from_secs(20));
    running.wait_for_line("counting", Duration::from_secs(20));
    let count = running.wait_for_line("sigurg ", Duration::from_secs(20));
    let output = stoke.wait_recording(8.0);
    println!("{}", output.stderr);

    let stacks = read_folded(&out);
    // After the exec, the process is named after /proc/self/exe: `exe`.
    let pid = format!("[{}]", running.pid());
    let mine = |s: &Stack| s.root().ends_with(&pid);
    let java = samples_where(&stacks, |s| {
        mine(s)
            && s.frames
                .iter()
                .any(|f| is_java_frame(f) && f.contains("JavaBusy.crunch"))
    });
    let after = samples_where(&stacks, |s| mine(s) && s.contains("after_exec_burn"));
    println!("{}", describe(stacks.iter().filter(|s| mine(s)), 12));
    assert!(
        java > 100,
        "only {java} samples had Java frames before the exec: was the JVM signalled at all?"
    );
    assert!(
        after > 100,
        "only {after} samples of the program after the exec"
    );
    assert_eq!(
        count, "sigurg 0",
        "the program exec'd over the JVM was signalled"
    );
    // The JVM's threads had perf events of their own, whose SIGTRAP would
    // have killed the program after the exec (it has no handler): the
    // events went with the exec, and no SIGTRAP was left pending.
    let timed = read_json(&json).summary.timed_threads;
    assert!(timed >= 1, "no thread of the JVM was timed before the exec");
    running.wait_success(Duration::from_secs(20));
}
