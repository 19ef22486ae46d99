//! A JVM whose JIT never settles (javac compiling, over and over) still
//! gets Java frames for at least 85% of the samples of its threads running
//! Java (92% measured), on both JDKs: samples caught in code whose frame is
//! being set up (AsyncGetCallTrace's "unknown Java state") are walked from
//! their caller, and the JIT compiler threads, which run no Java, are
//! counted as such, not as missing Java stacks.

use stoke_tests::{
    args, java_workloads_dir, prepare_java, read_json, record_to, JavaReport, Jdk, JDK_17,
    TEMURIN_25,
};

fn java_frames_under_jit_churn_on(jdk: Jdk) {
    let label = jdk.label;
    let (dir, workload) = prepare_java("java-jit-churn", "JavaCompile", jdk);
    let classes = dir.join("javac-out");
    let mut running = workload.spawn(&[
        "20".to_owned(),
        java_workloads_dir().display().to_string(),
        classes.display().to_string(),
    ]);
    running.printed_tid();
    let out = dir.join("churn.json");
    record_to(&args!["-p", running.pid()], 499, 5.0, &out);
    let profile = read_json(&out);
    let report = profile.describe();
    let java = JavaReport::of(&profile);
    println!("{label}: {java:?}");
    let running_java = java.java_samples + java.missing_total();
    assert!(
        running_java > 1000,
        "{label}: only {running_java} samples of threads running Java in 5 s at 499 Hz\n{report}"
    );
    assert!(
        java.java_samples as f64 >= 0.85 * running_java as f64,
        "{label}: only {} of {running_java} samples of threads running Java have Java frames\n{report}",
        java.java_samples
    );
    assert!(
        java.non_java_samples > 0,
        "{label}: no sample of the busy JIT compiler threads counted as running no Java\n{report}"
    );
}

#[test]
fn java_frames_under_jit_churn_on_jdk_17() {
    java_frames_under_jit_churn_on(JDK_17);
}

#[test]
fn java_frames_under_jit_churn_on_temurin_25() {
    java_frames_under_jit_churn_on(TEMURIN_25);
}
