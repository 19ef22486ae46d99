//! A whole-host recording (`-a`) of two JVMs of different JDKs and a native
//! process running at the same time: each process under its own process
//! frame, each JVM with its own Java methods and no other's.

use stoke_tests::{
    args, assert_run_share, assert_share, describe, is_java_frame, process_stacks, read_folded,
    record_to, require_root, samples_where, JavaWorkload, TempDir, Workload, JDK_17, TEMURIN_25,
};

#[test]
fn two_jvms_and_a_native_process_under_their_own_process_frames() {
    require_root();
    let dir = TempDir::new("java-whole-host");
    let split = JavaWorkload::build("JavaSplit", JDK_17, dir.path());
    let busy = JavaWorkload::build("JavaBusy", TEMURIN_25, dir.path());
    let other = Workload::build("busy_other", dir.path());
    let split_run = split.spawn(&["30"]);
    let busy_run = busy.spawn(&["30"]);
    let other_run = other.spawn(&["30"]);
    let out = dir.join("host.folded");

    let output = record_to(&args!["-a"], 299, 4.0, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 20));
    for jvm in [&split_run, &busy_run] {
        assert!(
            !output
                .stderr
                .contains(&format!("stoke: warning: JVM {}:", jvm.pid())),
            "stoke could not attach to JVM {}:\n{}",
            jvm.pid(),
            output.stderr
        );
    }

    // Three busy processes share two CPUs (with stoke): at 299 Hz for 4 s,
    // about 800 samples each.
    let split_root = split_run.root_frame();
    let busy_root = busy_run.root_frame();
    let other_root = other_run.root_frame();
    assert!(
        split_root.starts_with("java [") && busy_root.starts_with("java ["),
        "a JVM's process frame is `java [PID]`"
    );
    let (split_stacks, split_total) = process_stacks(&stacks, &split_root, 200);
    let (busy_stacks, busy_total) = process_stacks(&stacks, &busy_root, 200);
    let (other_stacks, _) = process_stacks(&stacks, &other_root, 200);

    // Each JVM's own Java methods, as Java frames from the root on. Not
    // necessarily from main down: java_split.rs checks whole stacks. The
    // rest is JIT compilers and GC, busy while the JVMs warm up.
    for (root, jvm_stacks, total, class) in [
        (&split_root, &split_stacks, split_total, "JavaSplit."),
        (&busy_root, &busy_stacks, busy_total, "JavaBusy."),
    ] {
        let own = samples_where(jvm_stacks.iter().copied(), |s| {
            s.java_at(1).is_some_and(|m| m.starts_with(class))
        });
        println!("{root}: {total} samples, {own} with {class}* Java frames from the root");
        assert_share(
            own,
            total,
            0.85,
            format_args!(
                "of `{root}` are `{root};{class}<method>_[..];...`\n{}",
                describe(jvm_stacks.iter().copied(), 10)
            ),
        );
    }
    assert_run_share(
        &other_stacks,
        &other_root,
        &["main", "other_work", "other_spin"],
        0.8,
    );

    // No process's functions under another's frame.
    let misattributed = samples_where(&stacks, |s| {
        (s.frames.iter().any(|f| f.starts_with("JavaSplit.")) && s.root() != split_root)
            || (s.frames.iter().any(|f| f.starts_with("JavaBusy.")) && s.root() != busy_root)
            || (s.contains("other_work") && s.root() != other_root)
    });
    assert_eq!(
        misattributed,
        0,
        "workload functions under another process's frame\n{}",
        describe(&stacks, 20)
    );
    // And no Java frame in the native process.
    let java_in_native = samples_where(other_stacks.iter().copied(), |s| {
        s.frames.iter().any(|f| is_java_frame(f))
    });
    assert_eq!(java_in_native, 0, "Java frames under {other_root}");
}
