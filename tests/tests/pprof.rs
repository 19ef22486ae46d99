//! One recording written as pprof and folded (`-o x.pb.gz -o x.folded`):
//! Go's own `go tool pprof` reads the pprof profile, and it says what the
//! folded one says: the same total, the same samples per function, the
//! samples' pid, comm and thread labels, Java frames with their kind; and
//! `stoke diff` of the two finds no change.

use std::{
    collections::{BTreeMap, HashMap},
    ffi::OsStr,
    path::{Path, PathBuf},
    time::Duration,
};

use stoke_tests::{
    args, assert_all_of_process, describe, go_pprof, is_java_frame, parse_thread_frame, pprof_tags,
    prepare, prepare_java, read_folded, record, run_tool, Stack, Stoke, JDK_17,
};

/// Records `pid` (with `extra` options) at 499 Hz for `seconds` into
/// `dir/profile.pb.gz` and `dir/profile.folded`, in one recording.
fn record_both(pid: u32, extra: &[String], seconds: f64, dir: &Path) -> (PathBuf, Vec<Stack>) {
    let pprof = dir.join("profile.pb.gz");
    let folded = dir.join("profile.folded");
    let mut command = args!["record", "-p", pid, "-F", 499, "-d", seconds].to_vec();
    command.extend_from_slice(extra);
    command.extend(args!["-o", pprof.display(), "-o", folded.display()]);
    let output = record(&command, seconds);
    assert!(
        output
            .stderr
            .contains(&format!("{}, {}", pprof.display(), folded.display())),
        "stoke does not name both outputs: {}",
        output.stderr
    );
    let stacks = read_folded(&folded);
    println!("{}", describe(&stacks, 15));
    (pprof, stacks)
}

/// What `-raw` prints of a profile recorded at 499 Hz.
struct Raw {
    /// The samples' counts, summed; each sample's cpu value is checked to
    /// be its count times the period.
    total: u64,
    /// The profile's duration in seconds.
    duration: f64,
    /// The mappings' lines: id, addresses, file, build ID.
    mappings: Vec<String>,
}

fn raw(pprof: &Path) -> Raw {
    let raw = go_pprof(&["-raw"], pprof);
    let period: u64 = raw
        .lines()
        .find_map(|line| line.strip_prefix("Period: "))
        .and_then(|period| period.trim().parse().ok())
        .unwrap_or_else(|| panic!("no period in -raw:\n{raw}"));
    assert_eq!(period, 1_000_000_000 / 499, "the period at 499 Hz");
    let samples = raw.split_once("Samples:\n").expect("-raw lists samples").1;
    let mut total = 0;
    // After the sample types' line, each sample is a line of its values and
    // locations, then lines of its labels; locations follow.
    for line in samples.lines().skip(1) {
        if line.starts_with("Locations") {
            break;
        }
        let Some((values, _)) = line.split_once(':') else {
            continue;
        };
        let values: Option<Vec<u64>> = values.split_whitespace().map(|v| v.parse().ok()).collect();
        if let Some([count, cpu]) = values.as_deref() {
            assert_eq!(*cpu, count * period, "{line}");
            total += count;
        }
    }
    let duration = raw
        .lines()
        .find_map(|line| line.strip_prefix("Duration: "))
        .and_then(|duration| duration.trim().parse().ok())
        .unwrap_or_else(|| panic!("no duration in -raw:\n{raw}"));
    let mappings = raw.split_once("Mappings\n").map_or("", |(_, rest)| rest);
    Raw {
        total,
        duration,
        mappings: mappings.lines().map(str::to_owned).collect(),
    }
}

/// `-top`'s flat and cum samples by function, every function listed.
fn top(pprof: &Path) -> HashMap<String, (u64, u64)> {
    top_with(pprof, &[])
}

/// `-top`'s flat and cum samples by node, with `extra` options (`-lines`:
/// by function and source line, `name file:LINE`).
fn top_with(pprof: &Path, extra: &[&str]) -> HashMap<String, (u64, u64)> {
    let mut options = vec![
        "-top",
        "-nodecount=1000000",
        "-nodefraction=0",
        "-edgefraction=0",
    ];
    options.extend_from_slice(extra);
    let text = go_pprof(&options, pprof);
    let table = text.split_once("cum%\n").expect("-top prints a table").1;
    table
        .lines()
        .map(|line| {
            let mut rest = line.trim_start();
            let mut fields = Vec::new();
            for _ in 0..5 {
                let (field, tail) = rest.split_once(' ').expect("5 columns and a name");
                fields.push(field);
                rest = tail.trim_start();
            }
            let count = |field: &str| field.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
            (rest.to_owned(), (count(fields[0]), count(fields[3])))
        })
        .collect()
}

/// The folded stacks' samples by function: as the innermost frame (flat)
/// and anywhere in the code frames (cum), each sample counted once.
fn folded_by_function(stacks: &[Stack], context_frames: usize) -> HashMap<String, (u64, u64)> {
    let mut functions: HashMap<String, (u64, u64)> = HashMap::new();
    for stack in stacks {
        let code = &stack.frames[context_frames..];
        let mut seen: Vec<&String> = code.iter().collect();
        seen.sort();
        seen.dedup();
        for frame in seen {
            functions.entry(frame.clone()).or_default().1 += stack.count;
        }
        if let Some(leaf) = code.last() {
            functions.entry(leaf.clone()).or_default().0 += stack.count;
        }
    }
    functions
}

/// Panics unless pprof's functions that `compared` picks are the folded
/// profile's, each with the same flat and cum samples. (pprof shows C++
/// names shortened, without parameters, so that overloads add up.)
fn assert_same_functions(
    pprof: &Path,
    stacks: &[Stack],
    context_frames: usize,
    compared: fn(&str) -> bool,
) {
    let total: u64 = stacks.iter().map(|s| s.count).sum();
    assert_eq!(
        raw(pprof).total,
        total,
        "pprof's total is not the folded one"
    );
    let mut expected = folded_by_function(stacks, context_frames);
    expected.retain(|name, _| compared(name));
    assert!(!expected.is_empty(), "no function to compare");
    let mut listed = top(pprof);
    // Context frames are labels, not functions.
    for stack in stacks {
        for frame in &stack.frames[..context_frames] {
            assert!(
                !listed.contains_key(frame),
                "context frame {frame} is a function"
            );
        }
    }
    let mut differ = Vec::new();
    for (function, counts) in &expected {
        let pprof_counts = listed.remove(function);
        if pprof_counts != Some(*counts) {
            differ.push(format!(
                "{function}: folded {counts:?}, pprof {pprof_counts:?}"
            ));
        }
    }
    differ.extend(
        listed
            .keys()
            .filter(|name| compared(name))
            .map(|name| format!("{name}: only in pprof")),
    );
    assert!(
        differ.is_empty(),
        "(flat, cum) differ:\n{}",
        differ.join("\n")
    );
}

#[test]
fn native_workload_has_the_same_functions_samples_and_labels_in_pprof() {
    let (dir, workload) = prepare("pprof-native", "two_threads");
    let running = workload.spawn(&args![30]);
    let (pprof, stacks) = record_both(running.pid(), &args!["-t"], 3.0, dir.path());
    assert_all_of_process(&stacks, &running.root_frame());
    let total: u64 = stacks.iter().map(|s| s.count).sum();
    // About 3000 on an idle machine; comparing the outputs needs only some.
    assert!(
        total > 300,
        "only {total} samples of two busy threads in 3 s at 499 Hz"
    );

    // Process and thread frames are context; the C functions compare whole.
    assert_same_functions(&pprof, &stacks, 2, |_| true);
    let functions = folded_by_function(&stacks, 2);
    for function in ["worker_spin", "thread_a_work", "thread_b_work"] {
        let (_, cum) = functions.get(function).copied().unwrap_or_default();
        assert!(
            cum > total / 4,
            "{function} has only {cum} of {total} samples"
        );
    }

    // The workload's own file is a mapping, with its build ID.
    let raw = raw(&pprof);
    assert!(
        (raw.duration - 3.0).abs() < 0.5,
        "a 3 s recording lasted {} s",
        raw.duration
    );
    let exe = workload.exe().display().to_string();
    let notes = run_tool("readelf", &[OsStr::new("-n"), workload.exe().as_os_str()]);
    let build_id = notes
        .lines()
        .find_map(|line| line.trim().strip_prefix("Build ID: "))
        .expect("gcc links with a build ID");
    assert!(
        raw.mappings
            .iter()
            .any(|line| line.contains(&format!(" {exe} {build_id} "))),
        "no mapping of {exe} with build ID {build_id}: {:#?}",
        raw.mappings
    );

    let tags = pprof_tags(&pprof);
    println!("{tags:#?}");
    let pid = running.pid().to_string();
    assert_eq!(tags["pid"], BTreeMap::from([(pid, total)]));
    assert_eq!(
        tags["comm"],
        BTreeMap::from([(running.comm().to_owned(), total)])
    );
    let mut threads: BTreeMap<String, u64> = BTreeMap::new();
    for stack in &stacks {
        let (name, _) = parse_thread_frame(&stack.frames[1]).expect("a thread frame with -t");
        *threads.entry(name.to_owned()).or_default() += stack.count;
    }
    assert!(
        threads.contains_key("worker_a") && threads.contains_key("worker_b"),
        "{threads:?}"
    );
    assert_eq!(
        tags["thread"], threads,
        "thread labels are not the thread frames"
    );
    assert_eq!(tags["tid"].values().sum::<u64>(), total);
}

/// With `--lines`, a function is one pprof function in its source file and
/// its lines are lines of it: `-top` gives worker_spin the samples of all
/// the frames naming its lines in the folded output, and `-top -lines`
/// splits them by line as the folded output does.
#[test]
fn source_lines_are_lines_of_one_function_in_pprof() {
    let (dir, workload) = prepare("pprof-lines", "two_threads");
    let running = workload.spawn(&args![30]);
    let (pprof, stacks) = record_both(running.pid(), &args!["--lines"], 3.0, dir.path());
    let mut by_function: HashMap<String, u64> = HashMap::new();
    let mut by_line: HashMap<String, u64> = HashMap::new();
    for stack in &stacks {
        let leaf = stack.frames.last().expect("a stack has frames");
        let Some((name, location)) = leaf
            .strip_suffix(')')
            .and_then(|leaf| leaf.rsplit_once(" ("))
            .filter(|(_, location)| location.starts_with("two_threads.c:"))
        else {
            continue;
        };
        *by_function.entry(name.to_owned()).or_default() += stack.count;
        *by_line.entry(format!("{name} {location}")).or_default() += stack.count;
    }
    let spin = by_function.get("worker_spin").copied().unwrap_or_default();
    assert!(
        spin > 300,
        "only {spin} samples in worker_spin's lines of two_threads.c"
    );
    let functions = top(&pprof);
    assert!(
        functions
            .keys()
            .all(|name| !name.contains("two_threads.c:")),
        "a line is a function of its own in pprof: {:?}",
        functions.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        functions.get("worker_spin").map(|&(flat, _)| flat),
        Some(spin),
        "worker_spin's flat samples are not its lines' in the folded output"
    );
    let lines = top_with(&pprof, &["-lines"]);
    for (line, flat) in &by_line {
        assert_eq!(
            lines.get(line).map(|&(flat, _)| flat),
            Some(*flat),
            "{line} in pprof's -lines: {:?}",
            lines.keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn java_frames_keep_their_kind_in_pprof() {
    let (dir, workload) = prepare_java("pprof-java", "JavaSplit", JDK_17);
    let mut running = workload.spawn(&["9"]);
    running.printed_tid();
    let (pprof, stacks) = record_both(running.pid(), &[], 4.0, dir.path());
    assert_all_of_process(&stacks, &running.root_frame());

    assert_same_functions(&pprof, &stacks, 1, is_java_frame);
    let listed = top(&pprof);
    for method in ["JavaSplit.main", "JavaSplit.seventy", "JavaSplit.thirty"] {
        let cum: u64 = listed
            .iter()
            .filter(|(name, _)| {
                ["_[j]", "_[i]", "_[0]"]
                    .iter()
                    .any(|kind| name.strip_suffix(kind) == Some(method))
            })
            .map(|(_, &(_, cum))| cum)
            .sum();
        assert!(
            cum > 0,
            "no {method} frame (with its _[j], _[i] or _[0]) in pprof"
        );
    }
}

/// The folded and the pprof output of one recording with `-t`, compared by
/// `stoke diff`: each stack lines up with itself, under its process and
/// thread frames, with the same samples on both sides.
#[test]
fn stoke_diff_of_the_folded_and_pprof_of_one_recording_finds_no_change() {
    let (dir, workload) = prepare("pprof-diff", "two_threads");
    let running = workload.spawn(&args![30]);
    let (pprof, stacks) = record_both(running.pid(), &args!["-t"], 2.0, dir.path());
    drop(running);
    let total: u64 = stacks.iter().map(|stack| stack.count).sum();
    assert!(total > 200, "only {total} samples of two busy threads");
    let diff = dir.join("diff.folded");
    Stoke::spawn(&args![
        "diff",
        dir.join("profile.folded").display(),
        pprof.display(),
        "-o",
        diff.display()
    ])
    .wait(Duration::from_secs(60))
    .assert_success();
    let text = std::fs::read_to_string(&diff).expect("the diff was written");
    let process = format!("{} [*]", workload.comm());
    let (mut before, mut after) = (0, 0);
    for line in text.lines() {
        let mut fields = line.rsplitn(3, ' ');
        let counts: Vec<u64> = fields
            .by_ref()
            .take(2)
            .map(|count| count.parse().expect("a count"))
            .collect();
        let frames: Vec<&str> = fields.next().expect("frames").split(';').collect();
        assert_eq!(counts[0], counts[1], "a stack changed: {line}");
        assert!(
            frames[0] == process && frames[1].ends_with(" [tid *]"),
            "no process and thread frame: {line}"
        );
        (before, after) = (before + counts[1], after + counts[0]);
    }
    assert_eq!((before, after), (total, total), "{text}");
    assert_eq!(text.lines().count(), stacks.len(), "{text}");
}
