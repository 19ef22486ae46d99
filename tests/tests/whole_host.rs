//! Whole-host recording (`-a`) sees concurrently running workloads under
//! their own process frames; `-t` adds thread frames; the txt and svg
//! outputs carry the same functions; the format follows `--format` or the
//! output's extension.

use std::fs;

use stoke_tests::{
    args, assert_run_share, assert_share, describe, parse_process_frame, parse_thread_frame,
    pprof_tags, prepare, process_stacks, read_folded, record_process, record_to, samples_where,
    stacks_of, total_samples, Workload,
};

#[test]
fn all_cpus_show_two_concurrent_workloads_under_their_process_frames() {
    let (dir, split) = prepare("whole-host", "fp_split");
    let other = Workload::build("busy_other", dir.path());
    let split_run = split.spawn(&["30"]);
    let other_run = other.spawn(&["30"]);
    let out = dir.join("host.folded");

    record_to(&args!["-a"], 299, 3.0, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 20));

    for stack in &stacks {
        assert!(
            parse_process_frame(stack.root()).is_some(),
            "the root frame is not `<comm> [<pid>]`: {}",
            stack.joined()
        );
    }

    // 299 Hz x 3 s is about 900 samples for a process that has a CPU to
    // itself; two busy workloads on two CPUs share them with stoke.
    let split_root = split_run.root_frame();
    let other_root = other_run.root_frame();
    let (split_stacks, split_total) = process_stacks(&stacks, &split_root, 300);
    let (other_stacks, _) = process_stacks(&stacks, &other_root, 300);

    // Each process's own functions below its own process frame, and not
    // below the other's.
    let split_hot = samples_where(split_stacks.iter().copied(), |s| {
        s.contains_run(&["main", "hot_seventy", "spin"])
            || s.contains_run(&["main", "hot_thirty", "spin"])
    });
    assert_share(
        split_hot,
        split_total,
        0.8,
        format_args!(
            "of {split_root} are in main;hot_*;spin\n{}",
            describe(split_stacks.iter().copied(), 10)
        ),
    );
    assert_run_share(
        &other_stacks,
        &other_root,
        &["main", "other_work", "other_spin"],
        0.8,
    );
    let misattributed = samples_where(&stacks, |s| {
        (s.contains("other_work") && s.root() != other_root)
            || ((s.contains("hot_seventy") || s.contains("hot_thirty")) && s.root() != split_root)
    });
    assert_eq!(
        misattributed,
        0,
        "workload functions under another process's frame\n{}",
        describe(&stacks, 20)
    );
}

#[test]
fn thread_frames_with_t() {
    let (dir, workload) = prepare("threads", "two_threads");
    let running = workload.spawn(&["30"]);
    let threads = running.threads();
    println!("threads of {}: {threads:?}", running.root_frame());
    let out = dir.join("threads.folded");

    record_to(&args!["-a", "-t"], 299, 2.0, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 20));

    // With -t, the second frame of every stack is `<thread comm> [tid N]`.
    for stack in &stacks {
        assert!(
            stack.frames.len() >= 2 && parse_thread_frame(&stack.frames[1]).is_some(),
            "with -t, the second frame is not `<thread comm> [tid N]`: {}",
            stack.joined()
        );
    }

    // The root names the process (its main thread's comm), the second
    // frame the thread that was running, with its own tid and comm.
    let root = running.root_frame();
    let mine = stacks_of(&stacks, &root);
    for stack in &mine {
        let (comm, tid) = parse_thread_frame(&stack.frames[1]).unwrap();
        assert!(
            threads.iter().any(|(t, c)| *t == tid && c == comm),
            "thread frame `{}` is not a thread of {root} (threads: {threads:?})",
            stack.frames[1]
        );
    }
    for (thread_comm, function, not_function) in [
        ("worker_a", "thread_a_work", "thread_b_work"),
        ("worker_b", "thread_b_work", "thread_a_work"),
    ] {
        let tid = threads
            .iter()
            .find(|(_, c)| c == thread_comm)
            .unwrap_or_else(|| panic!("the workload has no thread {thread_comm}: {threads:?}"))
            .0;
        let frame = format!("{thread_comm} [tid {tid}]");
        let in_thread = samples_where(mine.iter().copied(), |s| s.frames[1] == frame);
        let in_function = samples_where(mine.iter().copied(), |s| {
            s.frames[1] == frame && s.contains_run(&[function, "worker_spin"])
        });
        let wrong = samples_where(mine.iter().copied(), |s| {
            s.frames[1] == frame && s.contains(not_function)
        });
        println!("{frame}: {in_thread} samples, {in_function} in {function};worker_spin");
        assert!(
            in_thread > 150,
            "only {in_thread} samples under `{root};{frame}` (about 600 expected)\n{}",
            describe(mine.iter().copied(), 10)
        );
        assert_share(
            in_function,
            in_thread,
            0.8,
            format_args!(
                "under `{frame}` are in {function};worker_spin\n{}",
                describe(mine.iter().copied(), 10)
            ),
        );
        assert_eq!(wrong, 0, "{not_function} under the thread frame `{frame}`");
    }
}

/// One data row of a txt table: samples, percent, function.
#[derive(Debug)]
struct Row {
    samples: u64,
    percent: f64,
    function: String,
}

fn parse_row(line: &str) -> Option<Row> {
    let mut tokens = line.split_whitespace();
    let samples = tokens.next()?.parse().ok()?;
    let percent = tokens.next()?.trim_end_matches('%').parse().ok()?;
    let function = tokens.collect::<Vec<_>>().join(" ");
    (!function.is_empty()).then_some(Row {
        samples,
        percent,
        function,
    })
}

/// The data rows of the table that follows the line containing `title`,
/// up to the next line containing "top functions" or the end.
fn table(text: &str, title: &str) -> Vec<Row> {
    let mut lines = text.lines();
    assert!(
        lines.any(|l| l.contains(title)),
        "the txt report has no `{title}` table:\n{text}"
    );
    lines
        .take_while(|l| !l.to_lowercase().contains("top functions"))
        .filter_map(parse_row)
        .collect()
}

fn first_number(line: &str) -> Option<u64> {
    line.split(|c: char| !c.is_ascii_digit())
        .find(|t| !t.is_empty())?
        .parse()
        .ok()
}

#[test]
fn txt_and_svg_reports_and_format_selection() {
    let (dir, workload) = prepare("reports", "fp_split");
    let running = workload.spawn(&["60"]);
    let pid = running.pid();

    // --format txt wins over an extension that says nothing.
    let txt_path = dir.join("report.data");
    record_to(&args!["-p", pid, "--format", "txt"], 499, 2.0, &txt_path);
    let txt = fs::read_to_string(&txt_path).expect("reading the txt report");
    println!("{txt}");
    let lower = txt.to_lowercase();
    let header_end = lower.find("top functions").unwrap_or(lower.len());
    let header = &lower[..header_end];
    let total_line = header
        .lines()
        .find(|l| l.contains("total") && l.contains("samples"))
        .unwrap_or_else(|| panic!("no total samples line in the txt header:\n{txt}"));
    let total = first_number(total_line)
        .unwrap_or_else(|| panic!("no number on the total samples line: {total_line}"));
    assert!(
        header
            .lines()
            .any(|l| l.contains("lost") && first_number(l).is_some()),
        "no lost samples line in the txt header:\n{txt}"
    );
    assert!(total > 500, "only {total} samples in 2 s at 499 Hz:\n{txt}");

    let self_rows = table(&txt, "Top functions by self samples");
    let total_rows = table(&txt, "Top functions by total samples");
    assert!(
        txt.find("Top functions by self samples") < txt.find("Top functions by total samples"),
        "the self table comes first"
    );
    for row in self_rows.iter().chain(&total_rows) {
        assert!(
            row.samples <= total,
            "a row with more samples than the total: {row:?}"
        );
        let expected = 100.0 * row.samples as f64 / total as f64;
        assert!(
            (row.percent - expected).abs() < 1.0,
            "{row:?}: percent does not match {} / {total}",
            row.samples
        );
    }
    let find = |rows: &[Row], name: &str| -> f64 {
        rows.iter()
            .find(|r| r.function == name)
            .unwrap_or_else(|| panic!("{name} missing from a txt table:\n{txt}"))
            .percent
    };
    let spin_self = find(&self_rows, "spin");
    assert!(
        spin_self > 80.0,
        "spin has {spin_self}% self samples:\n{txt}"
    );
    let main_total = find(&total_rows, "main");
    let seventy_total = find(&total_rows, "hot_seventy");
    let thirty_total = find(&total_rows, "hot_thirty");
    assert!(
        main_total > 90.0,
        "main has {main_total}% total samples:\n{txt}"
    );
    assert!(
        (60.0..=78.0).contains(&seventy_total),
        "hot_seventy has {seventy_total}% total samples, expected about 70:\n{txt}"
    );
    assert!(
        (22.0..=40.0).contains(&thirty_total),
        "hot_thirty has {thirty_total}% total samples, expected about 30:\n{txt}"
    );
    // Where the samples ran: this one process, under its process frame.
    let places = table(&txt, "Top containers and processes by samples");
    let process = places
        .iter()
        .map(|row| (row.function.as_str(), row.samples))
        .collect::<Vec<_>>();
    assert_eq!(
        process,
        [(format!("{} [{pid}]", workload.comm()).as_str(), total)],
        "the txt report's places:\n{txt}"
    );

    // --format pprof: Go's reader counts the same process's samples.
    let pprof_path = dir.join("report.out");
    record_to(
        &args!["-p", pid, "--format", "pprof"],
        499,
        2.0,
        &pprof_path,
    );
    let tags = pprof_tags(&pprof_path);
    let pprof_samples = tags["pid"][&pid.to_string()];
    assert!(
        pprof_samples > 500,
        "only {pprof_samples} samples of pid {pid} in the pprof of 2 s at 499 Hz: {tags:?}"
    );

    // .svg: an inferno flame graph.
    let svg_path = dir.join("flame.svg");
    record_to(&args!["-p", pid], 499, 2.0, &svg_path);
    let svg = fs::read_to_string(&svg_path).expect("reading the svg");
    assert!(
        svg.contains("<svg"),
        "not an svg:\n{}",
        &svg[..svg.len().min(500)]
    );
    assert!(
        svg.trim_end().ends_with("</svg>"),
        "the svg is not complete"
    );
    for name in [
        "hot_seventy",
        "hot_thirty",
        "spin",
        "main",
        &running.root_frame(),
    ] {
        assert!(svg.contains(name), "{name} is not in the flame graph");
    }

    // .collapsed means folded; -d takes fractional seconds.
    let collapsed_path = dir.join("short.collapsed");
    let stacks = record_process(&running, 499, 1.5, &collapsed_path);
    let samples = total_samples(&stacks);
    println!("-d 1.5: {samples} samples");
    assert!(
        samples_where(&stacks, |s| s.contains("hot_seventy")) > 0,
        "no hot_seventy in the .collapsed output"
    );
    // 1.5 s x 499 Hz is about 750: neither 1 s (< 500) nor 2 s (~1000).
    assert!(
        (560..=950).contains(&samples),
        "{samples} samples in -d 1.5 at 499 Hz: was the duration rounded?"
    );
}
