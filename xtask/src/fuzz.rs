//! `cargo xtask fuzz`: runs the fuzz targets of profiler-user (bolero
//! tests in `profiler-user/src/fuzz`), each in a process of its own with a
//! budget of seconds, and reports per target the inputs tried and whether
//! one failed. The bench's fuzzing part runs the same, longer.

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::cargo;

/// The targets, as named in `profiler-user/src/fuzz` (test `fuzz::T::T`).
pub const TARGETS: [&str; 9] = [
    "elf", "agent", "proc", "record", "merge", "attach", "folded", "pprof", "python",
];

/// What bolero may add to a target's budget to shrink a failing input
/// (the harness's `SHRINK_TIME`), and the test binary to start and stop.
const GRACE: Duration = Duration::from_secs(60);

/// Arguments of `cargo xtask fuzz`.
#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Seconds per target.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Targets to run (default: all).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(TARGETS))]
    targets: Vec<String>,
}

/// One target's run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub target: String,
    pub inputs: u64,
    pub seconds: f64,
    /// The slowest input, in CPU time.
    pub slowest: Duration,
    /// The most heap one input made the parsers hold.
    pub most_heap: u64,
    /// Why the run failed (an input broke a check, or the process died),
    /// with the end of its output; `None` if it did not.
    pub failure: Option<String>,
}

/// `cargo xtask fuzz`.
pub fn run(args: &FuzzArgs) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        bail!("--seconds must be a positive number");
    }
    let targets: Vec<&str> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        args.targets.iter().map(String::as_str).collect()
    };
    let binary = build()?;
    let mut outcomes = Vec::new();
    for target in targets {
        eprintln!("fuzz: {target}, {} s ...", args.seconds);
        let outcome = run_target(&binary, target, args.seconds)?;
        if let Some(failure) = &outcome.failure {
            eprintln!("fuzz: {target} FAILED:\n{failure}");
        }
        outcomes.push(outcome);
    }
    println!("{}", table(&outcomes));
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|outcome| outcome.failure.is_some())
        .map(|outcome| outcome.target.as_str())
        .collect();
    if !failed.is_empty() {
        bail!("fuzzing found failures in: {}", failed.join(", "));
    }
    Ok(())
}

/// Builds the tests as `cargo xtask test` does (so that CI reuses its
/// build) and returns profiler-user's unit-test binary.
pub fn build() -> Result<PathBuf> {
    let output = cargo()
        .args([
            "test",
            "--release",
            "--workspace",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !output.status.success() {
        bail!("building the tests failed");
    }
    // The JSON line of the `stoke` binary's test build names its executable.
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| {
            line.contains(r#""reason":"compiler-artifact""#)
                && line.contains(r#""name":"stoke""#)
                && line.contains(r#""test":true"#)
        })
        .find_map(|line| {
            let start = line.find(r#""executable":""#)? + r#""executable":""#.len();
            let end = line[start..].find('"')? + start;
            Some(PathBuf::from(&line[start..end]))
        })
        .context("cargo built no test binary of stoke")
}

/// Runs one target for `seconds` in a process of its own.
pub fn run_target(binary: &Path, target: &str, seconds: f64) -> Result<Outcome> {
    let mut child = Command::new(binary)
        .args([
            &format!("fuzz::{target}::{target}"),
            "--exact",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("STOKE_FUZZ_SECONDS", seconds.to_string())
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let readers = (
        std::thread::spawn(move || read_all(&mut stdout)),
        std::thread::spawn(move || read_all(&mut stderr)),
    );
    let deadline = Instant::now() + Duration::from_secs_f64(seconds) + GRACE;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = readers.0.join().unwrap_or_default();
    let stderr = readers.1.join().unwrap_or_default();
    let report = stdout
        .lines()
        // The test harness may have printed the test's name before it.
        .find_map(|line| Some(line.split_once("stoke-fuzz\t")?.1))
        .map(|line| line.split('\t').collect::<Vec<_>>());
    let field = |index: usize| -> u64 {
        report
            .as_ref()
            .and_then(|fields| fields.get(index)?.parse().ok())
            .unwrap_or(0)
    };
    let passed = status.is_some_and(|status| status.success())
        && report
            .as_ref()
            .is_some_and(|fields| fields.get(1) == Some(&"ok"));
    let failure = (!passed).then(|| {
        let why = match status {
            None => "killed: past its budget and grace".to_owned(),
            Some(status) if report.is_none() => format!("the process died ({status})"),
            Some(_) => "an input failed a check".to_owned(),
        };
        let output = format!("{stdout}{stderr}");
        let tail: Vec<&str> = output.lines().rev().take(60).collect();
        format!(
            "{why}\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    });
    Ok(Outcome {
        target: target.to_owned(),
        inputs: field(2),
        seconds: report
            .as_ref()
            .and_then(|fields| fields.get(3)?.parse().ok())
            .unwrap_or(0.0),
        slowest: Duration::from_micros(field(4)),
        most_heap: field(5),
        failure,
    })
}

fn read_all(stream: &mut impl Read) -> String {
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The outcomes as a markdown table.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut text = String::from(
        "| target | inputs | seconds | inputs/s | slowest input (CPU) | most heap per input | failures |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for outcome in outcomes {
        text += &format!(
            "| {} | {} | {:.0} | {:.0} | {:.1} ms | {:.0} KiB | {} |\n",
            outcome.target,
            outcome.inputs,
            outcome.seconds,
            outcome.inputs as f64 / outcome.seconds.max(0.001),
            outcome.slowest.as_secs_f64() * 1e3,
            outcome.most_heap as f64 / 1024.0,
            usize::from(outcome.failure.is_some()),
        );
    }
    text
}

/// The bugs the fuzz targets found that are still open: the ignored tests
/// of `fuzz::regressions` that fail, by name.
pub fn open_findings(binary: &Path) -> Result<Vec<String>> {
    let output = Command::new(binary)
        .args([
            "fuzz::regressions::",
            "--include-ignored",
            "--test-threads=1",
        ])
        .env("RUST_BACKTRACE", "0")
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let name = line.strip_prefix("test fuzz::regressions::")?;
            Some(name.strip_suffix(" ... FAILED")?.to_owned())
        })
        .collect())
}
