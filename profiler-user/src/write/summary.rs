//! A flat text report: how the recording went and where the time went.

use std::{
    collections::{HashMap, HashSet},
    io::{self, Write},
};

use profiler_common::unwind::MAX_MAPPINGS;

use crate::model::{JavaSummary, Profile, PythonSummary, RecordingSummary};

/// More rows bury the few functions that matter.
const MAX_ROWS: usize = 40;

/// Writes the recording's counts, then the top functions by self and by
/// total samples.
pub(super) fn write(profile: &Profile, out: &mut dyn Write) -> io::Result<()> {
    let summary = &profile.summary;
    writeln!(out, "Stoke {} profile", profile.event.title())?;
    writeln!(out)?;
    for (label, value) in [
        ("Total samples", summary.samples.to_string()),
        (
            "Lost samples (ring buffer full)",
            summary.lost_ring_full.to_string(),
        ),
        (
            "Partial kernel stacks",
            summary.partial_kernel_stacks.to_string(),
        ),
        (
            "Partial user stacks",
            summary.partial_user_stacks.to_string(),
        ),
        (
            "Lost exec/exit notices",
            summary.lost_lifecycle_records.to_string(),
        ),
        ("Idle samples left out", summary.idle_skipped.to_string()),
        (
            "Off-CPU waits left out (over budget)",
            summary.over_budget.to_string(),
        ),
        (
            "Off-CPU waits still going on at the end",
            summary.waits_in_progress.to_string(),
        ),
        (
            "Duration",
            format!("{:.1} s", summary.duration.as_secs_f64()),
        ),
        ("Frequency", format!("{} Hz per CPU", summary.frequency_hz)),
        ("CPUs", summary.cpus.to_string()),
        ("Processes", summary.processes.to_string()),
        (
            "BPF time per sample",
            summary.bpf_time_per_sample.map_or_else(
                || "not measured (--bpf-stats measures it)".to_owned(),
                |time| format!("{:.2} µs", time.as_secs_f64() * 1e6),
            ),
        ),
        (
            "JVM threads on timers of their own",
            summary.timed_threads.to_string(),
        ),
        (
            "Symbolization",
            format!(
                "{} addresses in {:.0} ms",
                summary.symbolized_addresses,
                summary.symbolize_time.as_secs_f64() * 1e3
            ),
        ),
    ] {
        writeln!(out, "{:<33} {value}", format!("{label}:"))?;
    }
    if summary.malformed_records > 0 {
        // A bug of stoke's, not the host's: said only when it happens.
        writeln!(
            out,
            "{:<33} {}",
            "Malformed ring records (lost):", summary.malformed_records
        )?;
    }
    if let Some(how) = summary.offcpu_user_stacks {
        writeln!(out, "{:<33} {how}", "Off-CPU user stacks taken:")?;
    }
    if let Some(limits) = &summary.kernel_limits {
        writeln!(out, "{:<33} {limits}", "Kernel limits:")?;
    }
    write_stack_quality(summary, out)?;
    write_java(&summary.java, out)?;
    write_python(&summary.python, out)?;

    // Percentages are of the samples being counted, so they add up even if
    // the summary's total disagrees.
    let total: u64 = profile.stacks.iter().map(|stack| stack.samples).sum();
    let (self_samples, total_samples) = count_functions(profile);
    let unit = profile.event.unit();
    write_table(
        out,
        "Top containers and processes by",
        "where",
        count_places(profile),
        total,
        unit,
    )?;
    write_table(
        out,
        "Top functions by self",
        "function",
        self_samples,
        total,
        unit,
    )?;
    write_table(
        out,
        "Top functions by total",
        "function",
        total_samples,
        total,
        unit,
    )
}

/// Samples per place a stack ran: its context frames (container, process,
/// thread with -t), outermost first.
fn count_places(profile: &Profile) -> HashMap<String, u64> {
    let mut places = HashMap::new();
    for stack in &profile.stacks {
        let context = stack.frames.get(..stack.context_frames).unwrap_or_default();
        *places.entry(context.join(" / ")).or_default() += stack.samples;
    }
    places
}

/// How far native stacks got, and what the unwind tables cost.
fn write_stack_quality(summary: &RecordingSummary, out: &mut dyn Write) -> io::Result<()> {
    let quality = &summary.stack_quality;
    let unwind = &summary.unwind;
    let mut lines = vec![
        (
            "Native stacks reaching a root".to_owned(),
            format!(
                "{} of {} ({:.1}%)",
                quality.reached_root,
                quality.samples,
                percent(quality.reached_root, quality.samples)
            ),
        ),
        (
            "Unwind tables".to_owned(),
            format!(
                "{} files, {} rows, {:.1} MB, compiled in {:.0} ms ({} processes)",
                unwind.files,
                unwind.rows,
                unwind.bytes as f64 / 1e6,
                unwind.compile_time.as_secs_f64() * 1e3,
                unwind.processes
            ),
        ),
        (
            "Separate debug files read".to_owned(),
            format!("{} (their .debug_frame)", unwind.debug_files),
        ),
        (
            "Copies sharing a table".to_owned(),
            format!("{} (same build of a file seen again)", unwind.shared_files),
        ),
    ];
    // Said only when it happens.
    if unwind.mappings_left_out > 0 {
        lines.push((
            "Executable mappings left out".to_owned(),
            format!(
                "{} ({} processes with over {MAX_MAPPINGS}; stacks end in their code)",
                unwind.mappings_left_out, unwind.processes_over_mapping_cap
            ),
        ));
    }
    lines.extend(quality.truncated.iter().map(|(reason, samples)| {
        (
            format!("Truncated stacks ({reason})"),
            format!("{samples} ({:.1}%)", percent(*samples, quality.samples)),
        )
    }));
    for (label, value) in lines {
        writeln!(out, "{:<33} {value}", format!("{label}:"))?;
    }
    Ok(())
}

/// How Java profiling went, when there were JVMs.
fn write_java(java: &JavaSummary, out: &mut dyn Write) -> io::Result<()> {
    if java.jvms == 0 && java.not_attached.is_empty() {
        return Ok(());
    }
    let slowest = java.attach_ms.first().map_or(0, |&(_, ms)| ms);
    let mut lines = vec![(
        "JVMs profiled".to_owned(),
        format!("{} (slowest attach {slowest} ms)", java.jvms),
    )];
    // A JVM that had the agent already (an earlier recording) answers at once.
    lines.extend(
        java.attach_ms
            .iter()
            .map(|&(pid, ms)| (format!("JVM {pid} attach"), format!("{ms} ms"))),
    );
    lines.extend(
        java.not_attached
            .iter()
            .map(|(pid, why)| (format!("JVM {pid} native only"), why.clone())),
    );
    // JVMs started during the recording: how soon their stacks had Java.
    lines.extend(java.java_after_start_ms.iter().map(|&(pid, ms)| {
        (
            format!("JVM {pid} Java frames"),
            format!("{ms} ms after its start"),
        )
    }));
    lines.extend([
        (
            "Samples with Java frames".to_owned(),
            java.java_samples.to_string(),
        ),
        (
            "Samples of non-Java JVM threads".to_owned(),
            java.non_java_samples.to_string(),
        ),
        (
            "Samples in JIT code".to_owned(),
            java.samples_in_code_cache.to_string(),
        ),
    ]);
    lines.extend(java.native_only.iter().map(|(reason, samples)| {
        (
            format!("Java stack missing ({reason})"),
            samples.to_string(),
        )
    }));
    // What an agent sent that could not be used: said only when it happens.
    lines.extend(java.dropped_stacks.iter().map(|(reason, stacks)| {
        (
            format!("Java stacks dropped ({reason})"),
            stacks.to_string(),
        )
    }));
    if java.dropped_code_events > 0 {
        lines.push((
            "Java code events dropped".to_owned(),
            java.dropped_code_events.to_string(),
        ));
    }
    for (label, value) in lines {
        writeln!(out, "{:<33} {value}", format!("{label}:"))?;
    }
    Ok(())
}

fn write_python(python: &PythonSummary, out: &mut dyn Write) -> io::Result<()> {
    let mut lines = Vec::new();
    if !python.processes.is_empty() {
        let versions: Vec<String> = python
            .processes
            .iter()
            .map(|(version, count)| format!("{count} of {version}"))
            .collect();
        lines.push(("Python processes".to_owned(), versions.join(", ")));
    }
    lines.extend(
        python
            .not_read
            .iter()
            .map(|(pid, why)| (format!("Python {pid} native only"), why.clone())),
    );
    if python.unnamed_frames > 0 {
        lines.push((
            "Python frames not named".to_owned(),
            format!("{} (code freed before naming)", python.unnamed_frames),
        ));
    }
    for (label, value) in lines {
        writeln!(out, "{:<33} {value}", format!("{label}:"))?;
    }
    Ok(())
}

/// Samples per function as the leaf, and per function anywhere on the
/// stack; the context frames naming process and thread are not functions.
fn count_functions(profile: &Profile) -> (HashMap<&str, u64>, HashMap<&str, u64>) {
    let mut self_samples = HashMap::new();
    let mut total_samples = HashMap::new();
    let mut on_stack = HashSet::new();
    for stack in &profile.stacks {
        let code = stack.frames.get(stack.context_frames..).unwrap_or_default();
        if let Some(leaf) = code.last() {
            *self_samples.entry(&**leaf).or_default() += stack.samples;
        }
        // A recursive function is on the CPU once, however deep it recurses.
        on_stack.clear();
        for frame in code {
            if on_stack.insert(&**frame) {
                *total_samples.entry(&**frame).or_default() += stack.samples;
            }
        }
    }
    (self_samples, total_samples)
}

/// The top rows of `counts` in `unit`, under `title` and `unit`, the names'
/// column headed `what`.
fn write_table<K: AsRef<str> + Ord>(
    out: &mut dyn Write,
    title: &str,
    what: &str,
    counts: HashMap<K, u64>,
    total: u64,
    unit: &str,
) -> io::Result<()> {
    let mut rows: Vec<_> = counts.into_iter().collect();
    rows.sort_unstable_by(|(a, a_samples), (b, b_samples)| {
        b_samples.cmp(a_samples).then_with(|| a.cmp(b))
    });
    writeln!(out)?;
    writeln!(out, "{title} {unit}")?;
    writeln!(out, "{unit:>10}  {:>8}  {what}", "percent")?;
    for (name, samples) in rows.into_iter().take(MAX_ROWS) {
        let percent = percent(samples, total);
        writeln!(out, "{samples:>10}  {percent:>7.2}%  {}", name.as_ref())?;
    }
    Ok(())
}

/// `part` in percent of `total`; 0 of nothing.
fn percent(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 * 100.0 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::write::tests::profile;

    fn report(profile: &Profile) -> String {
        let mut out = Vec::new();
        write(profile, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The rows of the table under `title`, as written.
    fn table<'a>(report: &'a str, title: &str) -> Vec<&'a str> {
        let mut lines = report.lines().skip_while(|line| *line != title).skip(2);
        lines.by_ref().take_while(|line| !line.is_empty()).collect()
    }

    #[test]
    fn counts_self_and_total_samples() {
        let mut profile = profile(&[
            ("app;main;fib;fib;fib", 6),
            ("app;main;fib;write_[k]", 3),
            ("app;main", 1),
            ("worker;fib", 1),
            ("app", 4),
        ]);
        profile.summary.lost_ring_full = 2;
        profile.summary.duration = Duration::from_millis(1240);
        let report = report(&profile);
        assert!(report.contains("Total samples:                    15\n"));
        assert!(report.contains("Lost samples (ring buffer full):  2\n"));
        assert!(report.contains("Duration:                         1.2 s\n"));
        assert_eq!(
            table(&report, "Top functions by self samples"),
            [
                "         7    46.67%  fib",
                "         3    20.00%  write_[k]",
                "         1     6.67%  main",
            ]
        );
        // `app` and `worker` are context frames, not functions.
        assert_eq!(
            table(&report, "Top functions by total samples"),
            [
                "        10    66.67%  fib",
                "        10    66.67%  main",
                "         3    20.00%  write_[k]",
            ]
        );
        assert_eq!(
            table(&report, "Top containers and processes by samples"),
            ["        14    93.33%  app", "         1     6.67%  worker",]
        );
    }

    #[test]
    fn places_are_all_the_context_frames() {
        let mut profile = profile(&[
            ("web [container 1a2b3c4d5e6f];nginx [7];main", 3),
            ("web [container 1a2b3c4d5e6f];nginx [7];poll", 2),
            ("cron [9];main", 1),
        ]);
        for stack in &mut profile.stacks {
            stack.context_frames = stack.frames.len() - 1;
        }
        assert_eq!(
            table(&report(&profile), "Top containers and processes by samples"),
            [
                "         5    83.33%  web [container 1a2b3c4d5e6f] / nginx [7]",
                "         1    16.67%  cron [9]",
            ]
        );
    }

    #[test]
    fn tables_stop_at_max_rows() {
        let names: Vec<String> = (0..MAX_ROWS + 5).map(|i| format!("app;f{i:02}")).collect();
        let stacks: Vec<(&str, u64)> = names.iter().map(|name| (name.as_str(), 1)).collect();
        let report = report(&profile(&stacks));
        let rows = table(&report, "Top functions by self samples");
        assert_eq!(rows.len(), MAX_ROWS);
        assert!(rows[0].ends_with("f00"));
    }

    #[test]
    fn names_each_jvms_attach_time() {
        let mut profile = profile(&[("java;main", 1)]);
        profile.summary.java.jvms = 2;
        profile.summary.java.attach_ms = vec![(42, 130), (7, 0)];
        profile.summary.java.java_after_start_ms = vec![(42, 310)];
        profile.summary.java.not_attached = vec![(9, "attach refused".into())];
        let report = report(&profile);
        assert!(report.contains(&format!("{:<33} attach refused\n", "JVM 9 native only:")));
        assert!(report.contains("JVMs profiled:                    2 (slowest attach 130 ms)\n"));
        assert!(report.contains("JVM 42 attach:                    130 ms\nJVM 7 attach:"));
        assert!(report.contains("JVM 42 Java frames:               310 ms after its start\n"));
    }

    #[test]
    fn python_versions_and_what_was_not_read_are_said() {
        let mut profile = profile(&[("python3;main", 1)]);
        assert!(!report(&profile).contains("Python"));
        profile.summary.python.processes = [("3.11".into(), 2), ("3.8".into(), 1)].into();
        profile.summary.python.not_read = vec![(9, "Python 3.14 is not read".into())];
        profile.summary.python.unnamed_frames = 3;
        let report = report(&profile);
        assert!(report.contains(
            "Python processes:                 2 of 3.11, 1 of 3.8
"
        ));
        assert!(report.contains(&format!(
            "{:<33} Python 3.14 is not read
",
            "Python 9 native only:"
        )));
        assert!(report.contains(
            "Python frames not named:          3 (code freed before naming)
"
        ));
    }

    #[test]
    fn an_older_kernels_limits_are_said() {
        let mut profile = profile(&[("app;main", 1)]);
        assert!(!report(&profile).contains("Kernel limits:"));
        profile.summary.kernel_limits = Some("frame pointers only".into());
        assert!(
            report(&profile).contains(&format!("{:<33} frame pointers only\n", "Kernel limits:"))
        );
    }

    #[test]
    fn zero_samples_gives_empty_tables() {
        let report = report(&profile(&[]));
        assert!(report.contains("Total samples:                    0\n"));
        assert!(table(&report, "Top functions by total samples").is_empty());
        assert!(!report.contains("NaN"));
    }
}
