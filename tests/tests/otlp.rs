//! OpenTelemetry's profiles signal: a file (`-o FILE.otlp.pb`) and pushes
//! (`stoke continuous --otlp URL`) read back with OpenTelemetry's own
//! Python bindings (PyPI's opentelemetry-proto, `tests/tools/otlp_decode.py`),
//! and compared with the folded or pprof output of the same recording.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use stoke_tests::{
    args, prepare, read_folded, record_args, samples_where, tool_path, total_samples, Receiver,
    Stoke, PYTHON_PATH,
};

/// What the decoder says of each file: its resources.
fn decode(files: &[PathBuf]) -> HashMap<String, Value> {
    let output = Command::new("python3")
        .arg(tool_path("otlp_decode.py"))
        .args(files)
        .env("PYTHONPATH", PYTHON_PATH)
        .output()
        .expect("running python3");
    assert!(
        output.status.success(),
        "otlp_decode.py failed (cargo xtask setup installs its packages):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the decoder's JSON")
}

/// The `samples` profile of every resource of a decoded file.
fn sample_profiles(resources: &Value) -> Vec<&Value> {
    resources
        .as_array()
        .expect("resources")
        .iter()
        .flat_map(|resource| resource["profiles"].as_array().expect("profiles"))
        .filter(|profile| profile["type"] == "samples")
        .collect()
}

fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

#[test]
fn a_file_holds_what_the_folded_output_of_the_same_recording_holds() {
    let (dir, workload) = prepare("otlp-file", "fp_split");
    let running = workload.spawn(&["30"]);
    let folded = dir.join("split.folded");
    let otlp = dir.join("split.otlp.pb");
    let mut arguments = record_args(&args!["-p", running.pid()], 499, 2.0, &folded);
    arguments.extend(args!["-o", otlp.display()]);
    Stoke::spawn(&arguments).wait_recording(2.0);

    let stacks = read_folded(&folded);
    let total = total_samples(&stacks);
    let seventy = samples_where(&stacks, |s| s.contains("hot_seventy"));
    let decoded = decode(std::slice::from_ref(&otlp));
    let resources = &decoded[&otlp.display().to_string()];
    let profiles = sample_profiles(resources);
    assert_eq!(profiles.len(), 1, "{resources}");
    let profile = profiles[0];
    println!(
        "folded: {total} samples, {seventy} in hot_seventy; OTLP: {} samples, {} in hot_seventy",
        profile["total"], profile["by_function"]["hot_seventy"]
    );
    assert!(total > 400, "{total} samples");
    assert_eq!(number(&profile["total"]), total);
    assert_eq!(number(&profile["by_function"]["hot_seventy"]), seventy);
    let keys = profile["sample_attributes"].to_string();
    assert!(
        keys.contains("process.pid") && keys.contains("process.executable.name"),
        "{keys}"
    );
    assert!(
        resources[0]["attributes"]["host.name"].is_string(),
        "{resources}"
    );
}

/// The samples of the pprof files `stoke continuous` wrote under `dir`,
/// read back by `stoke convert`.
fn pprof_total(dir: &Path, scratch: &Path) -> u64 {
    let mut total = 0;
    for (index, entry) in fs::read_dir(dir).expect("the output directory").enumerate() {
        let file = entry.unwrap().path();
        let folded = scratch.join(format!("pprof-{index}.folded"));
        Stoke::spawn(&args!["convert", file.display(), "-o", folded.display()])
            .wait(Duration::from_secs(30))
            .assert_success();
        total += total_samples(&read_folded(&folded));
    }
    total
}

#[test]
fn pushes_hold_what_the_directory_of_the_same_run_holds() {
    let (dir, workload) = prepare("otlp-push", "busy_other");
    let running = workload.spawn(&["60"]);
    let receiver = Receiver::start(0, 200);
    let profiles = dir.join("profiles");
    let mut stoke = Stoke::spawn(&args![
        "continuous",
        "-p",
        running.pid(),
        "-F",
        199,
        "--interval",
        1,
        "--otlp",
        receiver.url(),
        "--output-dir",
        profiles.display(),
        "--label",
        "cluster=test"
    ]);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    thread::sleep(Duration::from_secs(4));
    stoke.signal(libc::SIGTERM);
    stoke.wait(Duration::from_secs(60)).assert_success();

    let requests = receiver.accepted();
    let bodies: Vec<PathBuf> = requests
        .iter()
        .enumerate()
        .map(|(index, request)| {
            assert_eq!(request.path, "/v1development/profiles");
            assert_eq!(request.headers["content-type"], "application/x-protobuf");
            let file = dir.join(format!("push-{index}.pb"));
            fs::write(&file, &request.body).unwrap();
            file
        })
        .collect();
    assert!(
        bodies.len() >= 3,
        "{} pushes in 4 s at 1 s intervals",
        bodies.len()
    );
    let decoded = decode(&bodies);
    let mut pushed = 0;
    for resources in decoded.values() {
        let attributes = &resources[0]["attributes"];
        assert_eq!(attributes["service.name"], "busy_other", "{attributes}");
        assert_eq!(attributes["cluster"], "test", "{attributes}");
        assert!(attributes["host.name"].is_string(), "{attributes}");
        pushed += sample_profiles(resources)
            .iter()
            .map(|profile| number(&profile["total"]))
            .sum::<u64>();
    }
    let written = pprof_total(&profiles.join("busy_other"), dir.path());
    println!(
        "pushed {pushed} samples in {} requests, written {written}",
        bodies.len()
    );
    assert!(pushed > 100, "{pushed} samples pushed");
    // Every interval went both ways: each its own file, each its request.
    assert!(
        pushed == written
            && bodies.len() == fs::read_dir(profiles.join("busy_other")).unwrap().count(),
        "pushed {pushed} samples in {} requests, written {written}",
        bodies.len()
    );
}
