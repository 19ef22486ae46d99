//! Stoke signals only JVMs whose agent is ready: a process that maps
//! libjvm.so but runs no JVM gets neither SIGURG (the sampler's signal) nor
//! SIGQUIT (the attach protocol's, which would kill it), only a warning;
//! and a JVM recorded with `--no-jvm` gets no agent at all.

use std::fs;
use std::time::Duration;

use stoke_tests::{
    agent_paths, args, assert_all_of_process, assert_run_share, describe, is_java_frame, prepare,
    prepare_java, process_stacks, read_folded, record_to, samples_where, JDK_17,
};

#[test]
fn process_mapping_libjvm_without_a_jvm_gets_no_signal() {
    let (dir, workload) = prepare("libjvm-host", "libjvm_host");
    // Outlives the recording (3 s, plus stoke's start and end).
    let mut running = workload.spawn(&args![7, JDK_17.libjvm().display()]);
    let pid = running.pid();
    let out = dir.join("host.folded");

    let output = record_to(&args!["-a"], 499, 3.0, &out);
    println!("{}", output.stderr);
    assert!(
        running.is_alive(),
        "libjvm_host died during the recording (SIGQUIT?); stderr:\n{}",
        running.stderr()
    );
    // Stoke tried it (it maps libjvm.so), refused to attach, said so once,
    // and went on recording.
    let prefix = format!("stoke: warning: JVM {pid}: ");
    let warnings: Vec<&str> = output
        .stderr
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "expected one warning line for {pid} on stoke's stderr:\n{}",
        output.stderr
    );
    assert!(
        warnings[0].ends_with("its stacks stay native-only"),
        "the warning does not say what follows: {}",
        warnings[0]
    );
    let stacks = read_folded(&out);
    let root = running.root_frame();
    let (mine, _) = process_stacks(&stacks, &root, 300);
    assert_run_share(&mine, &root, &["main", "host_burn", "host_leaf"], 0.8);

    // It exits normally, and counted no SIGURG.
    running.wait_success(Duration::from_secs(20));
    let stdout = running.stdout_text();
    assert!(
        stdout.lines().any(|l| l == "sigurg 0"),
        "libjvm_host received SIGURG from stoke; its stdout:\n{stdout}"
    );
}

#[test]
fn no_jvm_leaves_a_jvm_alone() {
    let (dir, workload) = prepare_java("java-no-jvm", "JavaBusy", JDK_17);
    let running = workload.spawn(&["30"]);
    let pid = running.pid();
    let out = dir.join("no-jvm.folded");

    record_to(&args!["-p", pid, "--no-jvm"], 499, 1.5, &out);
    let stacks = read_folded(&out);
    let (_, total) = process_stacks(&stacks, &running.root_frame(), 300);
    assert_all_of_process(&stacks, &running.root_frame());
    println!("--no-jvm: {total} samples");

    // No agent file mapped, no shared memory, no agent thread.
    assert_eq!(
        agent_paths(pid),
        Vec::<String>::new(),
        "--no-jvm loaded the agent (unless another stoke recording the whole host ran meanwhile)"
    );
    let fds: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("reading the JVM's fds")
        .filter_map(|fd| fs::read_link(fd.ok()?.path()).ok())
        .map(|target| target.display().to_string())
        .collect();
    assert!(
        !fds.iter().any(|t| t.contains("stoke-agent")),
        "--no-jvm: the JVM holds the agent's memfd: {fds:?}"
    );
    let agent_thread = running
        .threads()
        .into_iter()
        .find(|(_, c)| c == "stoke-agent");
    assert_eq!(
        agent_thread, None,
        "--no-jvm: the JVM runs the agent's thread"
    );
    // Native stacks only.
    let java = samples_where(&stacks, |s| s.frames.iter().any(|f| is_java_frame(f)));
    assert_eq!(
        java,
        0,
        "Java frames with --no-jvm\n{}",
        describe(&stacks, 10)
    );
}
