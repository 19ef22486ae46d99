//! The host's verdict on a guest's smoke suite (smoke.sh): each check's
//! exit code and what its profile holds.

use std::{fmt, path::Path};

/// One check of one kernel.
pub struct CheckResult {
    pub name: &'static str,
    /// Why it failed, if it did.
    failure: Option<String>,
    /// What was measured.
    detail: String,
}

impl CheckResult {
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

impl fmt::Display for CheckResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            None => write!(f, "  ok   {:<14} {}", self.name, self.detail),
            Some(why) if self.detail.is_empty() => write!(f, "  FAIL {:<14} {why}", self.name),
            Some(why) => write!(f, "  FAIL {:<14} {why} ({})", self.name, self.detail),
        }
    }
}

/// A check's outputs: its profile's stacks and counts, and its seconds.
struct Outputs {
    stacks: Vec<(String, u64)>,
    seconds: f64,
}

impl Outputs {
    fn total(&self, filter: impl Fn(&str) -> bool) -> u64 {
        self.stacks
            .iter()
            .filter(|(stack, _)| filter(stack))
            .map(|(_, count)| count)
            .sum()
    }
}

/// Reads check `name`'s outputs in `out`, or why they are unusable.
fn outputs(out: &Path, name: &str) -> Result<Outputs, String> {
    let read = |extension: &str| std::fs::read_to_string(out.join(format!("{name}.{extension}")));
    let rc = read("rc").map_err(|_| "no exit code: the check did not run".to_owned())?;
    let seconds = read("time")
        .ok()
        .and_then(|text| {
            let times: Vec<f64> = text
                .split_whitespace()
                .filter_map(|t| t.parse().ok())
                .collect();
            Some(times.get(1)? - times.first()?)
        })
        .unwrap_or(0.0);
    if rc.trim() != "0" {
        let log = read("log").unwrap_or_default();
        let last = log.lines().rev().find(|line| !line.trim().is_empty());
        return Err(format!(
            "exit code {}: {}",
            rc.trim(),
            last.unwrap_or("no output")
        ));
    }
    let folded = read("folded").map_err(|error| format!("no profile: {error}"))?;
    let stacks = folded
        .lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            Some((stack.to_owned(), count.parse().ok()?))
        })
        .collect();
    Ok(Outputs { stacks, seconds })
}

/// Runs `verdict` on check `name`'s outputs.
fn check(
    out: &Path,
    name: &'static str,
    verdict: impl FnOnce(&Outputs) -> Result<String, (String, String)>,
) -> CheckResult {
    let (failure, detail) = match outputs(out, name) {
        Err(why) => (Some(why), String::new()),
        Ok(outputs) => {
            let seconds = outputs.seconds;
            match verdict(&outputs) {
                Ok(detail) => (None, format!("{detail}; {seconds:.1} s")),
                Err((why, detail)) => (Some(why), format!("{detail}; {seconds:.1} s")),
            }
        }
    };
    CheckResult {
        name,
        failure,
        detail,
    }
}

/// Fails with `why` unless `ok`.
fn require(ok: bool, why: &str, detail: String) -> Result<String, (String, String)> {
    if ok {
        Ok(detail)
    } else {
        Err((why.to_owned(), detail))
    }
}

/// The 70:30 workload's split: hot_seventy's share of its hot samples.
fn split(outputs: &Outputs) -> (u64, u64, f64) {
    let seventy = outputs.total(|stack| stack.contains("hot_seventy"));
    let thirty = outputs.total(|stack| stack.contains("hot_thirty"));
    let share = 100.0 * seventy as f64 / (seventy + thirty).max(1) as f64;
    (seventy, thirty, share)
}

/// The 7:3 page-fault workload's split, counted by page faults or by
/// the calls of the kernel's fault handler.
/// A sleeping thread's `what` (nanoseconds) in a 3 s recording: it
/// cannot wait longer than the recording, plus the moments around it.
fn asleep(outputs: &Outputs, what: &str) -> Result<String, (String, String)> {
    let ns = outputs.total(|stack| stack.contains("sleep"));
    let seconds = ns as f64 / 1e9;
    require(
        (2.0..=3.5).contains(&seconds),
        &format!("expected 2-3.5 s of one sleeping thread's {what}"),
        format!("{seconds:.2} s"),
    )
}

fn fault_split(outputs: &Outputs, what: &str) -> Result<String, (String, String)> {
    let seven = outputs.total(|stack| stack.contains("fault_seven"));
    let three = outputs.total(|stack| stack.contains("fault_three"));
    let share = 100.0 * seven as f64 / (seven + three).max(1) as f64;
    require(
        seven + three >= 1000 && (share - 70.0).abs() <= 3.0,
        &format!("expected ≥ 1000 {what} at 70 ± 3 % in fault_seven"),
        format!("{} {what}, {share:.1}% in fault_seven", seven + three),
    )
}

/// Every check of the smoke suite on the outputs in `out`.
pub fn all(out: &Path) -> Vec<CheckResult> {
    vec![
        check(out, "record_a", |outputs| {
            let total = outputs.total(|_| true);
            let workload = outputs.total(|stack| stack.starts_with("fp_split"));
            require(
                total >= 100 && workload * 2 >= total,
                "too few samples, or too few of the workload",
                format!("{total} samples, {workload} of the workload"),
            )
        }),
        check(out, "record_p", |outputs| {
            let (seventy, thirty, share) = split(outputs);
            let hot = seventy + thirty;
            let reaching_main = outputs.total(|s| {
                (s.contains("hot_seventy") || s.contains("hot_thirty")) && s.contains(";main;")
            });
            let detail = format!(
                "{hot} hot samples, {share:.1}% in hot_seventy, {reaching_main} reach main"
            );
            require(
                hot >= 100 && (share - 70.0).abs() <= 5.0 && reaching_main * 100 >= hot * 95,
                "expected ≥ 100 samples at 70 ± 5 %, ≥ 95 % of them under main",
                detail,
            )
        }),
        check(out, "container", |outputs| {
            let id = std::fs::read_to_string(out.join("container.id")).unwrap_or_default();
            let frame = format!("[container {}]", id.get(..12).unwrap_or("?"));
            let (seventy, thirty, share) = split(outputs);
            let hot = seventy + thirty;
            let contained = outputs.total(|s| {
                s.strip_prefix(&frame)
                    .is_some_and(|rest| rest.starts_with(';'))
                    && (s.contains("hot_seventy") || s.contains("hot_thirty"))
            });
            // Whole-host sampling goes by the CPU's clock, which the
            // workload shares with stoke's own start-up work in the guest:
            // a coarser measure of its split than `-p`'s, hence ± 7.
            require(
                hot >= 100 && (share - 70.0).abs() <= 7.0 && contained * 100 >= hot * 95,
                "expected ≥ 100 samples at 70 ± 7 %, ≥ 95 % of them under the container's frame",
                format!("{hot} hot samples, {share:.1}% in hot_seventy, {contained} under {frame}"),
            )
        }),
        check(out, "runqueue", |outputs| {
            let ns = outputs.total(|stack| stack.contains("main"));
            let seconds = ns as f64 / 1e9;
            // Two burners on one CPU: half of 3 s each, give or take
            // stoke's own share.
            require(
                (0.8..=2.5).contains(&seconds),
                "expected 0.8-2.5 s of a burner's run-queue time beside another",
                format!("{seconds:.2} s"),
            )
        }),
        check(out, "kernel_frames", |outputs| {
            let total = outputs.total(|_| true);
            let kernel = outputs.total(|stack| stack.contains("_[k]"));
            require(
                total >= 10 && kernel * 2 >= total,
                "expected most of read_loop's samples in the kernel",
                format!("{kernel} of {total} samples with kernel frames"),
            )
        }),
        check(out, "counters", |outputs| {
            fault_split(outputs, "page faults")
        }),
        // Every page fault calls handle_mm_fault once.
        check(out, "kprobe", |outputs| fault_split(outputs, "calls")),
        check(out, "tracepoint", |outputs| fault_split(outputs, "hits")),
        check(out, "offcpu", |outputs| asleep(outputs, "off-CPU time")),
        check(out, "wall", |outputs| asleep(outputs, "wall-clock time")),
        check(out, "deep", |outputs| {
            // Unwound by tables (the samples before the process's tables
            // are loaded have spin_leaf alone): thread_main, then descend
            // from depth 100 down to 0.
            let unwound = outputs.total(|stack| stack.contains(";descend;"));
            let whole = outputs.total(|stack| {
                stack.contains(";thread_main;descend;") && stack.matches(";descend").count() == 101
            });
            require(
                whole >= 100 && whole * 100 >= unwound * 95,
                "expected ≥ 100 samples under all 101 descend frames, ≥ 95 % of those unwound",
                format!("{unwound} samples in descend, {whole} under all 101 of them"),
            )
        }),
        check(out, "python", |outputs| {
            let a = outputs.total(|stack| stack.contains(";hot_a_[py]"));
            let b = outputs.total(|stack| stack.contains(";hot_b_[py]"));
            let share = 100.0 * a as f64 / (a + b).max(1) as f64;
            // The workload's split is 71:29 (py-spy: 70.7-72.1%); at ~350
            // samples one standard deviation of the share is 2.4 points.
            require(
                a + b >= 100 && (share - 71.0).abs() <= 7.0,
                "expected ≥ 100 samples in Python frames at 71 ± 7 % in hot_a",
                format!("{} samples in hot_a or hot_b, {share:.1}% in hot_a", a + b),
            )
        }),
        check(out, "java", |outputs| {
            let total = outputs.total(|_| true);
            let java = outputs.total(|stack| stack.contains("JavaSplit.seventy"));
            require(
                java > 0,
                "no Java frames",
                format!("{java} of {total} samples in JavaSplit.seventy"),
            )
        }),
    ]
}
