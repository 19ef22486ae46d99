//! JFR output, read by the JDK's own `jfr` tool: a recording written to
//! both folded stacks and JFR at once holds one `jdk.ExecutionSample` per
//! folded sample, with the same 70:30 split of the C workload; Java frames
//! are Java methods of their class; `stoke convert` writes JFR too.

use std::{collections::HashMap, path::Path, process::Command, time::Duration};

use serde_json::Value;
use stoke_tests::{
    args, assert_share, describe, prepare, prepare_java, read_folded, record_to, samples_where,
    total_samples, Jdk, Stoke, JDK_17, TEMURIN_25,
};

/// The frames (class, method, frame type) of every `jdk.ExecutionSample`
/// of `file`, leaf first, as `jfr print --json` of JDK 17 reads them.
fn execution_samples(file: &Path) -> Vec<Vec<(String, String, String)>> {
    let output = Command::new(JDK_17.tool("jfr"))
        .args(["print", "--json", "--stack-depth", "256", "--events"])
        .arg("jdk.ExecutionSample")
        .arg(file)
        .output()
        .expect("jfr runs");
    assert!(
        output.status.success(),
        "jfr print failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_slice(&output.stdout).expect("jfr print --json is JSON");
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    json["recording"]["events"]
        .as_array()
        .expect("an event list")
        .iter()
        .map(|event| {
            event["values"]["stackTrace"]["frames"]
                .as_array()
                .expect("frames")
                .iter()
                .map(|frame| {
                    let method = &frame["method"];
                    (
                        text(&method["type"]["name"]),
                        text(&method["name"]),
                        text(&frame["type"]),
                    )
                })
                .collect()
        })
        .collect()
}

/// `jfr summary` of `file` by `jdk`'s tool, printed, and its count of
/// `event`.
fn summary_count(jdk: Jdk, file: &Path, event: &str) -> u64 {
    let output = Command::new(jdk.tool("jfr"))
        .arg("summary")
        .arg(file)
        .output()
        .expect("jfr runs");
    let text = String::from_utf8_lossy(&output.stdout);
    println!("{} jfr summary:\n{text}", jdk.name);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text.lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(event)).then(|| words.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

fn has_method(frames: &[(String, String, String)], name: &str) -> bool {
    frames.iter().any(|(_, method, _)| method == name)
}

#[test]
fn jfr_holds_every_sample_of_the_folded_profile() {
    let (dir, workload) = prepare("jfr-split", "fp_split");
    let running = workload.spawn(&["30"]);
    let folded = dir.join("split.folded");
    let jfr = dir.join("split.jfr");
    record_to(
        &args!["-p", running.pid(), "-o", jfr.display()],
        999,
        4.0,
        &folded,
    );
    let stacks = read_folded(&folded);
    println!("{}", describe(&stacks, 10));
    let total = total_samples(&stacks);
    let seventy = samples_where(&stacks, |s| s.contains("hot_seventy"));
    let thirty = samples_where(&stacks, |s| s.contains("hot_thirty"));

    let samples = execution_samples(&jfr);
    let jfr_seventy = samples
        .iter()
        .filter(|s| has_method(s, "hot_seventy"))
        .count() as u64;
    let jfr_thirty = samples
        .iter()
        .filter(|s| has_method(s, "hot_thirty"))
        .count() as u64;
    let share = |a: u64, b: u64| 100.0 * a as f64 / (a + b).max(1) as f64;
    println!(
        "folded: {total} samples, hot_seventy {seventy}, hot_thirty {thirty} ({:.2}%); \
         jfr: {} events, hot_seventy {jfr_seventy}, hot_thirty {jfr_thirty} ({:.2}%)",
        share(seventy, thirty),
        samples.len(),
        share(jfr_seventy, jfr_thirty)
    );
    assert!(total > 2000, "only {total} samples in 4 s at 999 Hz");
    assert_eq!(samples.len() as u64, total, "one event per folded sample");
    for jdk in [JDK_17, TEMURIN_25] {
        assert_eq!(summary_count(jdk, &jfr, "jdk.ExecutionSample"), total);
    }
    let difference = (share(jfr_seventy, jfr_thirty) - share(seventy, thirty)).abs();
    assert!(
        difference <= 2.0,
        "the JFR split is {difference:.2} points off the folded one"
    );
    assert!(
        (67.0..=73.0).contains(&share(jfr_seventy, jfr_thirty)),
        "hot_seventy has {:.2}% of the hot events, expected 70 ± 3",
        share(jfr_seventy, jfr_thirty)
    );
    // Native frames are native methods of no class, leaf first.
    let native = samples
        .iter()
        .filter(|s| {
            s.first().is_some_and(|(class, method, kind)| {
                class.is_empty() && method == "spin" && kind == "Native"
            }) && has_method(s, "main")
        })
        .count() as u64;
    assert_share(
        native,
        jfr_seventy + jfr_thirty,
        0.8,
        "have the leaf spin, a Native frame, and main",
    );
}

#[test]
fn java_frames_are_java_methods() {
    let (dir, workload) = prepare_java("jfr-java", "JavaSplit", JDK_17);
    let mut running = workload.spawn(&["8"]);
    running.printed_tid();
    let folded = dir.join("java.folded");
    let jfr = dir.join("java.jfr");
    record_to(
        &args!["-p", running.pid(), "-o", jfr.display()],
        499,
        3.0,
        &folded,
    );
    let stacks = read_folded(&folded);
    println!("{}", describe(&stacks, 10));
    let folded_seventy = samples_where(&stacks, |s| s.has_java("JavaSplit.seventy"));

    let samples = execution_samples(&jfr);
    let mut kinds: HashMap<String, u64> = HashMap::new();
    let mut seventy = 0;
    for frames in &samples {
        let java = frames
            .iter()
            .find(|(class, method, _)| class == "JavaSplit" && method == "seventy");
        if let Some((_, _, kind)) = java {
            seventy += 1;
            *kinds.entry(kind.clone()).or_default() += 1;
        }
    }
    println!(
        "{} events, {seventy} in JavaSplit.seventy by frame type {kinds:?}; folded: {folded_seventy}",
        samples.len()
    );
    assert_eq!(samples.len() as u64, total_samples(&stacks));
    assert!(
        folded_seventy > 300,
        "only {folded_seventy} samples in JavaSplit.seventy"
    );
    assert_eq!(
        seventy, folded_seventy,
        "JavaSplit.seventy is a method of class JavaSplit"
    );
    assert!(
        kinds
            .keys()
            .all(|kind| ["JIT compiled", "Inlined", "Interpreted"].contains(&kind.as_str())),
        "Java frame types: {kinds:?}"
    );
}

#[test]
fn convert_writes_jfr() {
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("in.folded");
    let jfr = dir.path().join("out.jfr");
    std::fs::write(
        &folded,
        "app [7];main;work 6\napp [7];main;java.lang.Thread.run_[j];do_syscall_64_[k] 4\n",
    )
    .unwrap();
    Stoke::spawn(&args!["convert", folded.display(), "-o", jfr.display()])
        .wait(Duration::from_secs(30))
        .assert_success();
    let samples = execution_samples(&jfr);
    assert_eq!(samples.len(), 10);
    let kernel = samples
        .iter()
        .filter(|s| s[0] == (String::new(), "do_syscall_64".into(), "Kernel".into()))
        .count();
    assert_eq!(kernel, 4);
    assert!(samples.iter().all(|s| s.last().unwrap().1 == "main"));
    assert!(samples.iter().any(|s| s.contains(&(
        "java.lang.Thread".into(),
        "run".into(),
        "JIT compiled".into()
    ))));
}
