//! JIT code named from its runtime's perf map: Node.js run with
//! `--perf-basic-prof` writes `/tmp/perf-PID.map`, and a JavaScript 70:30
//! split between `hotA` and `hotB` comes out as perf, reading the same map,
//! sees it: within 3 points of perf's share in the same seconds, with stacks
//! that go on through the JIT's frames down to node's `main`.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use stoke_tests::{
    args, perf_script, read_folded, record_args, require_root, samples_where, total_samples,
    workloads_dir, Running, Stoke, TempDir,
};

const PERF: &str = "/usr/bin/perf";
const NODE: &str = "/usr/bin/node";
const HZ: u32 = 499;
/// ~4,000 samples each for stoke and perf: the two shares then differ by
/// about one point (one standard deviation), well inside the 3 allowed.
const SECONDS: f64 = 8.0;

/// The share of hotA among samples under hotA or hotB.
fn share(a: u64, b: u64) -> f64 {
    100.0 * a as f64 / (a + b).max(1) as f64
}

/// `perf record -g` of process `pid` for [`SECONDS`], started now.
fn perf_record(pid: u32, out: &Path) -> std::process::Child {
    Command::new(PERF)
        .args([
            "record",
            "-g",
            "-F",
            &HZ.to_string(),
            "-p",
            &pid.to_string(),
            "-o",
        ])
        .arg(out)
        .args(["--", "sleep", &SECONDS.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting perf record")
}

/// hotA's and hotB's samples in perf's recording.
fn perf_counts(data: &Path, pid: u32) -> (u64, u64) {
    let output = Command::new(PERF)
        .args(["script", "-F", "pid,tid,ip,sym,dso", "-i"])
        .arg(data)
        .output()
        .expect("running perf script");
    assert!(output.status.success(), "perf script: {output:?}");
    let samples = perf_script::parse(&String::from_utf8_lossy(&output.stdout)).unwrap();
    let count = |name: &str| {
        samples
            .iter()
            .filter(|s| s.pid == pid && s.frames.iter().any(|f| f.contains(name)))
            .count() as u64
    };
    (count("hotA"), count("hotB"))
}

#[test]
fn node_jit_frames_are_named_from_its_perf_map_as_perf_names_them() {
    require_root();
    let dir = TempDir::new("jit-perf-map");
    let mut command = Command::new(NODE);
    command
        .args(["--perf-basic-prof", "--no-turbo-inlining"])
        .arg(workloads_dir().join("node/split.js"))
        .arg("30")
        // V8 writes its logs where it runs.
        .current_dir(dir.path());
    let running = Running::start(command, "node split.js", "node");
    // Past the JIT's first compilations.
    thread::sleep(Duration::from_secs(1));

    let perf_data = dir.join("perf.data");
    let mut perf = perf_record(running.pid(), &perf_data);
    let out = dir.join("node.folded");
    Stoke::spawn(&record_args(&args!["-p", running.pid()], HZ, SECONDS, &out))
        .wait_recording(SECONDS);
    assert!(perf.wait().expect("perf record").success());

    let stacks = read_folded(&out);
    let total = total_samples(&stacks);
    let a = samples_where(&stacks, |s| s.frames.iter().any(|f| f.contains("hotA")));
    let b = samples_where(&stacks, |s| s.frames.iter().any(|f| f.contains("hotB")));
    let whole = samples_where(&stacks, |s| {
        s.frames
            .iter()
            .any(|f| f.contains("hotA") || f.contains("hotB"))
            && s.frames.iter().any(|f| f.starts_with("node::Start"))
    });
    let (perf_a, perf_b) = perf_counts(&perf_data, running.pid());
    println!(
        "stoke: {total} samples, hotA {a}, hotB {b} ({:.1}%), {whole} down to node::Start; \
         perf: hotA {perf_a}, hotB {perf_b} ({:.1}%)",
        share(a, b),
        share(perf_a, perf_b)
    );
    assert!(
        a + b > total / 2,
        "only {} of {total} samples under hotA or hotB",
        a + b
    );
    assert!(
        whole * 10 >= (a + b) * 9,
        "{whole} of {} JavaScript samples reach node::Start",
        a + b
    );
    assert!(perf_a + perf_b > 300, "perf saw {perf_a} + {perf_b}");
    assert!(
        (share(a, b) - share(perf_a, perf_b)).abs() <= 3.0,
        "stoke {:.1}% against perf {:.1}%",
        share(a, b),
        share(perf_a, perf_b)
    );
}
