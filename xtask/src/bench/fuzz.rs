//! Part 8: the fuzz targets (`cargo xtask fuzz`), each for minutes rather
//! than CI's seconds: inputs tried, the slowest input and the most heap one
//! took, and failures, which must be none.

use anyhow::Result;

use super::{
    report::{Section, Target, Verdict},
    Bench, Part,
};
use crate::fuzz::{build, open_findings, run_target, table, TARGETS};

pub fn run(bench: &Bench) -> Result<Section> {
    let binary = build()?;
    let seconds = bench.settings.fuzz_seconds;
    let mut outcomes = Vec::new();
    for target in TARGETS {
        bench.log(&format!("fuzz target {target}, {seconds} s"));
        outcomes.push(run_target(&binary, target, seconds)?);
    }
    let mut body = format!(
        "Each target of `profiler-user/src/fuzz` ran {seconds:.0} s in a process of its own \
         (bolero, random structure-aware inputs; address space capped at 4 GiB). An input \
         fails if a parser panics, breaks an invariant the target checks, takes more than \
         1 s or holds more than 512 MiB of heap. Each bug found keeps its input and a \
         test in `profiler-user/src/fuzz/regressions.rs`.\n\n{}",
        table(&outcomes)
    );
    let findings = open_findings(&binary)?;
    body += &format!(
        "\nBugs found, still open (their regression tests in `profiler-user/src/fuzz/regressions.rs` \
         fail; inputs under `profiler-user/fuzz/regressions/`): {}.\n",
        if findings.is_empty() {
            "none".to_owned()
        } else {
            findings
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let mut targets = Vec::new();
    for outcome in &outcomes {
        let measured = format!(
            "{} inputs, slowest {:.1} ms of CPU",
            outcome.inputs,
            outcome.slowest.as_secs_f64() * 1e3
        );
        let verdict = match &outcome.failure {
            Some(failure) => {
                body += &format!(
                    "\n`{}` failed:\n\n```\n{}\n```\n",
                    outcome.target,
                    failure.trim_end()
                );
                Verdict::Missed(failure.lines().next().unwrap_or_default().to_owned())
            }
            None => Verdict::Met,
        };
        targets.push(Target {
            goal: format!("fuzz target `{}`: no failing input", outcome.target),
            measured,
            verdict,
        });
    }
    Ok(Section {
        part: Part::Fuzz,
        body,
        targets,
        provenance: String::new(),
    })
}
