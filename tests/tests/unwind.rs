//! Unwinding without frame pointers: stoke compiles each sampled process's
//! `.eh_frame`/`.debug_frame` into tables that its BPF unwinder walks, so
//! code built without frame pointers still unwinds to the process's (or
//! thread's) start.
//!
//! - A C call chain built `-O2 -fomit-frame-pointer` reaches `main` and
//!   libc's start in at least 95% of its samples, with its 70:30 split
//!   intact; with `--frame-pointers` (no tables) it does not.
//! - Debian's stripped `xz`, working in liblzma (no frame pointers either),
//!   reaches libc's start frame in at least 90% of its samples, no worse
//!   than `perf record --call-graph dwarf` on the same process.
//! - The worker threads of a program without frame pointers reach their
//!   thread start (`clone3;start_thread`).
//! - The same chain with its CFI only in a separate debug file (stripped
//!   program, `.gnu_debuglink`) reaches `main` in at least 95% too, and
//!   not without that file.
//! - `stoke tables` lists files' table sizes under the header the bench
//!   reads, and reports a file that is no ELF file.
//! - The summary reports the share of stacks reaching a root and the
//!   unwind tables loaded, and counts whole stacks as whole.
//! - A process with 2,000 dlopened libraries, its hot code in libraries
//!   loaded early and late, reaches `main` in at least 95% of its samples;
//!   one with more executable mappings than the unwinder holds has those
//!   past the cap counted in the summary.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use profiler_common::unwind::{MAX_MAPPINGS, ROOT_FUNCTIONS};
use stoke_tests::{
    args, contains_word, describe, is_kernel_frame, perf_script, read_folded, read_json,
    record_args, record_process, record_to, require_root, run_tool, samples_where, stacks_of,
    stacks_of_thread, stoke_bin, synthetic_profile, total_samples, Running, Stack, Stoke, TempDir,
    Workload,
};

/// Optimized, and no frame pointer in any function: only unwind tables can
/// walk these stacks. No `-g` either: the tables come from `.eh_frame`,
/// which GCC emits on x86-64 regardless.
const NO_FRAME_POINTER_FLAGS: &[&str] = &["-O2", "-fomit-frame-pointer"];

/// libc's functions at the root of a process's main thread, as stoke and
/// perf name them: `_start` calls `__libc_start_main` (called
/// `__libc_start_main_impl` in libc's debug symbols), which calls
/// `__libc_start_call_main`, which calls `main`.
const LIBC_START: &[&str] = &[
    "__libc_start_call_main",
    "__libc_start_main",
    "__libc_start_main_impl",
];

/// Debian's xz: stripped (no `.symtab`), its work done in liblzma.
const XZ: &str = "/usr/bin/xz";

/// Linux perf, from Debian's `linux-perf` (installed by `cargo xtask setup`).
const PERF: &str = "/usr/bin/perf";

/// The deep_split workload's chain from `main`, root first: every whole
/// stack has it.
const DEEP_CHAIN: &[&str] = &["main", "level1", "level2", "level3"];
/// deep_split's functions, none of which may set up a frame pointer.
const DEEP_FUNCTIONS: &[&str] = &[
    "main",
    "level1",
    "level2",
    "level3",
    "hot_seventy",
    "hot_thirty",
    "spin",
];

#[test]
fn deep_chain_without_frame_pointers_reaches_main() {
    let (dir, workload) = prepare_no_fp("unwind-deep", "deep_split", DEEP_FUNCTIONS);
    let running = workload.spawn(&["60"]);
    let root = running.root_frame();

    let stacks = record_process(&running, 499, 4.0, &dir.join("tables.folded"));
    let total = total_samples(&stacks);
    // 499 Hz x 4 s x one busy CPU is about 2000 samples; the split's ± 3
    // points need about a thousand.
    assert!(
        total > 800,
        "only {total} samples of a busy process in 4 s at 499 Hz (about 2000 expected)\n{}",
        describe(&stacks, 15)
    );

    // Whole stacks: _start (the executable's entry) outermost, libc's start
    // under it, then main and the whole chain.
    let whole = samples_where(&stacks, |s| {
        s.frames.get(1).is_some_and(|f| f == "_start")
            && s.frames.iter().any(|f| LIBC_START.contains(&f.as_str()))
            && s.contains_run(DEEP_CHAIN)
    });
    let with_main = samples_where(&stacks, |s| s.contains("main"));
    println!(
        "with unwind tables: {whole} of {total} samples ({:.1}%) run _start;...;{}; \
         {with_main} ({:.1}%) contain main",
        percent(whole, total),
        DEEP_CHAIN.join(";"),
        percent(with_main, total)
    );
    assert_fraction(
        whole,
        total,
        0.95,
        format_args!(
            "of {root} reach _start through {} (stacks built without frame pointers \
             must unwind with the tables)\n{}",
            DEEP_CHAIN.join(";"),
            describe(&stacks, 15)
        ),
    );

    // The split, and the hot functions right under level3, above spin.
    let seventy = samples_where(&stacks, |s| s.contains("hot_seventy"));
    let thirty = samples_where(&stacks, |s| s.contains("hot_thirty"));
    let share = percent(seventy, seventy + thirty);
    println!("hot_seventy {seventy}, hot_thirty {thirty}: {share:.2}% (70 ± 3 expected)");
    assert_eq!(
        samples_where(&stacks, |s| s.contains("hot_seventy")
            && s.contains("hot_thirty")),
        0,
        "hot_seventy and hot_thirty never call each other\n{}",
        describe(&stacks, 15)
    );
    assert_fraction(
        seventy + thirty,
        total,
        0.9,
        format_args!(
            "are under hot_seventy or hot_thirty\n{}",
            describe(&stacks, 15)
        ),
    );
    assert!(
        (67.0..=73.0).contains(&share),
        "hot_seventy has {share:.2}% of the hot samples ({seventy} vs {thirty}), \
         expected 70 ± 3\n{}",
        describe(&stacks, 15)
    );
    for hot in ["hot_seventy", "hot_thirty"] {
        let under = samples_where(&stacks, |s| s.contains(hot));
        let exact = samples_where(&stacks, |s| s.contains_run(&["level3", hot, "spin"]));
        assert_fraction(
            exact,
            under,
            0.9,
            format_args!(
                "under {hot} have level3;{hot};spin (no frame skipped or made up)\n{}",
                describe(&stacks, 15)
            ),
        );
    }

    // The same process with --frame-pointers: the chain has none, so the
    // walk stops in the first frame or two and main is out of reach. This
    // is what proves the tables did the work above.
    let fp_out = dir.join("frame-pointers.folded");
    record_to(
        &args!["-p", running.pid(), "--frame-pointers"],
        499,
        2.0,
        &fp_out,
    );
    let fp_stacks = read_folded(&fp_out);
    let fp_total = total_samples(&fp_stacks);
    let fp_main = samples_where(&fp_stacks, |s| s.contains("main"));
    println!(
        "with --frame-pointers: {fp_main} of {fp_total} samples ({:.1}%) contain main\n{}",
        percent(fp_main, fp_total),
        describe(&fp_stacks, 5)
    );
    assert!(
        fp_total > 300,
        "only {fp_total} samples with --frame-pointers in 2 s at 499 Hz\n{}",
        describe(&fp_stacks, 10)
    );
    assert!(
        (fp_main as f64) < 0.5 * fp_total as f64,
        "with --frame-pointers, {fp_main} of {fp_total} samples still reach main: \
         either the workload has frame pointers after all or --frame-pointers \
         did not turn the tables off\n{}",
        describe(&fp_stacks, 10)
    );

    // The programs of kernels before 5.17 (a tail-call chain of unwinder
    // runs, searches without branches), loaded on this kernel: the same
    // whole stacks and split.
    let legacy_out = dir.join("legacy.folded");
    record_to(
        &args!["-p", running.pid(), "--legacy-bpf"],
        499,
        3.0,
        &legacy_out,
    );
    let legacy = read_folded(&legacy_out);
    let legacy_total = total_samples(&legacy);
    let legacy_whole = samples_where(&legacy, |s| {
        s.frames.get(1).is_some_and(|f| f == "_start") && s.contains_run(DEEP_CHAIN)
    });
    let seventy = samples_where(&legacy, |s| s.contains("hot_seventy"));
    let thirty = samples_where(&legacy, |s| s.contains("hot_thirty"));
    let share = percent(seventy, seventy + thirty);
    println!(
        "legacy programs: {legacy_whole} of {legacy_total} samples whole, \
         hot_seventy {share:.2}%"
    );
    assert!(
        legacy_total > 600,
        "only {legacy_total} samples with --legacy-bpf in 3 s at 499 Hz\n{}",
        describe(&legacy, 10)
    );
    assert_fraction(
        legacy_whole,
        legacy_total,
        0.95,
        format_args!(
            "reach _start through {} with the legacy programs\n{}",
            DEEP_CHAIN.join(";"),
            describe(&legacy, 15)
        ),
    );
    assert!(
        (66.0..=74.0).contains(&share),
        "with the legacy programs hot_seventy has {share:.2}% ({seventy} vs {thirty}), \
         expected 70 ± 4\n{}",
        describe(&legacy, 15)
    );
}

/// A process started while stoke records, with no frame pointers, gets
/// its unwind tables within its first second: every sample taken after it
/// (late_leaf() innermost) reaches main().
#[test]
fn process_started_mid_recording_has_tables_within_a_second() {
    let functions = ["main", "early", "late", "early_leaf", "late_leaf"];
    let (dir, workload) = prepare_no_fp("unwind-late-start", "late_start", &functions);
    let out = dir.join("late-start.folded");
    let mut stoke = Stoke::spawn(&record_args(&args!["-a"], 499, 5.0, &out));
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(10));
    // Returns once the first second is over (the workload says "ready").
    let running = workload.spawn(&["2.5"]);
    let root = running.root_frame();
    stoke.wait_recording(5.0).assert_success();

    let stacks = read_folded(&out);
    let mine = stacks_of(&stacks, &root);
    let innermost_user = |stack: &Stack| -> Option<String> {
        stack.frames[1..]
            .iter()
            .rev()
            .find(|frame| !is_kernel_frame(frame))
            .cloned()
    };
    let phase = |leaf: &'static str, chain: &'static [&'static str]| {
        let all = samples_where(mine.iter().copied(), |s| {
            innermost_user(s).as_deref() == Some(leaf)
        });
        let whole = samples_where(mine.iter().copied(), |s| {
            innermost_user(s).as_deref() == Some(leaf) && s.contains_run(chain)
        });
        (all, whole)
    };
    let (early, early_whole) = phase("early_leaf", &["main", "early", "early_leaf"]);
    let (late, late_whole) = phase("late_leaf", &["main", "late", "late_leaf"]);
    println!(
        "first second: {early_whole} of {early} samples reach main; after it: \
         {late_whole} of {late} ({:.1}%)",
        percent(late_whole, late)
    );
    assert!(
        late > 500,
        "only {late} samples in late_leaf (2.5 s of one busy thread at 499 Hz)\n{}",
        describe(mine.iter().copied(), 10)
    );
    assert_fraction(
        late_whole,
        late,
        0.95,
        format_args!(
            "taken after {root}'s first second run main;late;late_leaf: its tables \
             were not in by then\n{}",
            describe(mine.iter().copied(), 10)
        ),
    );
}

/// A library a process loads after stoke first sampled it (a plugin, a
/// Python extension, libcrypto behind `import hashlib`) is named and
/// unwound through its table: stoke reads the process's mappings again
/// when a sample runs code outside them.
#[test]
fn a_library_loaded_after_the_first_sample_is_named_and_unwound() {
    let functions = ["main", "early", "late", "early_leaf"];
    let (dir, workload) = prepare_no_fp("unwind-dlopen-late", "dlopen_late", &functions);
    let library = Workload::build_with(
        "dlopen_late_lib",
        dir.path(),
        &[NO_FRAME_POINTER_FLAGS, &["-shared", "-fPIC"]].concat(),
    );
    assert_no_frame_pointers(library.exe(), &["late_work", "late_leaf"]);
    // It outlives the recording, which would end at its exit.
    let running = workload.spawn(&args![1.0, library.exe().display(), 5.0]);
    let root = running.root_frame();
    let out = dir.join("dlopen-late.folded");
    // Until stoke drains the ring next and the library's table is in
    // (~0.15 s), the library's samples stop at late_leaf.
    record_to(&args!["-p", running.pid()], 499, 4.5, &out);

    let stacks = read_folded(&out);
    let mine = stacks_of(&stacks, &root);
    let leaf_is = |leaf: &'static str| {
        move |stack: &Stack| stack.frames.last().is_some_and(|frame| frame == leaf)
    };
    let early = samples_where(mine.iter().copied(), leaf_is("early_leaf"));
    let late = samples_where(mine.iter().copied(), leaf_is("late_leaf"));
    let late_whole = samples_where(mine.iter().copied(), |stack| {
        leaf_is("late_leaf")(stack)
            && stack.contains_run(&["main", "late", "late_work", "late_leaf"])
    });
    println!(
        "{early} samples before the library was loaded; after: {late_whole} of {late} reach main \
         ({:.1}%)\n{}",
        percent(late_whole, late),
        describe(mine.iter().copied(), 8)
    );
    assert!(
        early > 100,
        "only {early} samples in early_leaf: stoke did not sample {root} before it loaded the \
         library, which this test is about"
    );
    assert!(
        late > 900,
        "only {late} samples named late_leaf (3.5 s of one busy thread at 499 Hz): the library's \
         code went unnamed\n{}",
        describe(mine.iter().copied(), 10)
    );
    assert_fraction(
        late_whole,
        late,
        0.9,
        format_args!(
            "in the library loaded late run main;late;late_work;late_leaf: its table was not \
             loaded\n{}",
            describe(mine.iter().copied(), 10)
        ),
    );
}

/// Copies of one build of a file (as in containers of one image) share one
/// table, compiled once; a file that only claims the same build ID, with
/// other CFI, does not get that table, and all three unwind to their root.
#[test]
fn copies_of_a_build_share_a_table_and_a_forged_build_id_does_not() {
    require_root();
    let dir = TempDir::new("unwind-shared-table");
    let build_id = "-Wl,--build-id=0x5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";
    let subdir = |name: &str| {
        let path = dir.join(name);
        fs::create_dir(&path).expect("creating a directory");
        path
    };
    let original = Workload::build_with(
        "deep_split",
        &subdir("original"),
        &[NO_FRAME_POINTER_FLAGS, &[build_id]].concat(),
    );
    let copy = original.copy_to(&subdir("copy"));
    let forged = Workload::build_with(
        "deep_split",
        &subdir("forged"),
        &["-O1", "-fomit-frame-pointer", build_id],
    );
    for workload in [&original, &forged] {
        assert_no_frame_pointers(workload.exe(), DEEP_FUNCTIONS);
    }
    assert_ne!(
        fs::read(original.exe()).unwrap(),
        fs::read(forged.exe()).unwrap(),
        "-O1 and -O2 built the same file"
    );
    let running: Vec<_> = [&original, &copy, &forged]
        .map(|workload| workload.spawn(&["30"]))
        .into_iter()
        .collect();
    let pids: Vec<String> = running.iter().map(|r| r.pid().to_string()).collect();

    let out = dir.join("shared.json");
    record_to(&args!["-p", pids.join(",")], 499, 3.0, &out);
    let profile = read_json(&out);
    let report = profile.describe();
    let (tables, quality) = (&profile.summary.unwind, &profile.summary.stack_quality);
    println!(
        "shared: {}, reaching a root: {} of {}",
        tables.shared_files, quality.reached_root, quality.samples
    );
    assert_eq!(
        tables.shared_files, 1,
        "the copy (and only the copy) should share the original's table:\n{report}"
    );
    let (reached, total) = (quality.reached_root, quality.samples);
    assert!(
        total > 1500,
        "only {total} samples of three busy processes in 3 s at 499 Hz:\n{report}"
    );
    assert_fraction(
        reached,
        total,
        0.95,
        format_args!("of the three processes reach their root:\n{report}"),
    );
}

/// deep_split with its CFI in `.debug_frame` only, then split as Debian
/// splits packages: its DWARF moved to `deep_split.debug` next to it,
/// found through `.gnu_debuglink` (and checked by its CRC32).
#[test]
fn stripped_program_with_separate_debug_file_reaches_main() {
    require_root();
    let dir = TempDir::new("unwind-debuglink");
    let workload = Workload::build_with(
        "deep_split",
        dir.path(),
        &[
            "-O2",
            "-fomit-frame-pointer",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-g",
        ],
    );
    assert_no_frame_pointers(workload.exe(), DEEP_FUNCTIONS);
    let exe = workload.exe();
    let debug = dir.join("deep_split.debug");
    run_tool(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            exe.as_os_str(),
            debug.as_os_str(),
        ],
    );
    run_tool("strip", &["--strip-debug".as_ref(), exe.as_os_str()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    run_tool("objcopy", &[link.as_ref(), exe.as_os_str()]);
    // The premise: no CFI of the program's own functions is left in it.
    let sections = run_tool("readelf", &["-SW".as_ref(), exe.as_os_str()]);
    assert!(
        !sections.contains(".debug_frame"),
        "{} still has .debug_frame:\n{sections}",
        exe.display()
    );

    let running = workload.spawn(&["60"]);
    let stacks = record_process(&running, 499, 4.0, &dir.join("debuglink.folded"));
    let total = total_samples(&stacks);
    assert!(
        total > 800,
        "only {total} samples of a busy process in 4 s at 499 Hz (about 2000 expected)\n{}",
        describe(&stacks, 15)
    );
    let whole = |stacks: &[Stack]| {
        samples_where(stacks, |s| {
            s.frames.get(1).is_some_and(|f| f == "_start")
                && s.frames.iter().any(|f| LIBC_START.contains(&f.as_str()))
                && s.contains_run(DEEP_CHAIN)
        })
    };
    let reached = whole(&stacks);
    println!(
        "with deep_split.debug: {reached} of {total} samples ({:.1}%) run _start;...;{}",
        percent(reached, total),
        DEEP_CHAIN.join(";")
    );
    assert_fraction(
        reached,
        total,
        0.95,
        format_args!(
            "reach _start through {} (the program's CFI is in its separate debug file)\n{}",
            DEEP_CHAIN.join(";"),
            describe(&stacks, 15)
        ),
    );

    // Without the debug file, the same process's stacks break: the debug
    // file did the work above.
    fs::remove_file(&debug).unwrap();
    let out = dir.join("without.folded");
    record_to(&args!["-p", running.pid()], 499, 2.0, &out);
    let without = read_folded(&out);
    let without_total = total_samples(&without);
    let without_whole = whole(&without);
    println!(
        "without deep_split.debug: {without_whole} of {without_total} samples ({:.1}%) \
         reach main\n{}",
        percent(without_whole, without_total),
        describe(&without, 5)
    );
    assert!(
        without_total > 300 && (without_whole as f64) < 0.5 * without_total as f64,
        "without its debug file, {without_whole} of {without_total} samples still reach \
         main: the program has CFI of its own after all\n{}",
        describe(&without, 10)
    );
}

/// `stoke tables`: a header whose first columns the bench reads by name,
/// a line per file, a total; a file that is no ELF file gets one error
/// line, and the exit status says so.
#[test]
fn tables_command_lists_files_and_refuses_non_elf() {
    let libc = library_path("libc.so.6");
    let output = Command::new(stoke_bin())
        .arg("tables")
        .arg(&libc)
        .arg(XZ)
        .output()
        .expect("running stoke tables");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stoke tables failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{stdout}");
    let lines: Vec<Vec<&str>> = stdout.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 4, "header, two files, total:\n{stdout}");
    let header = &lines[0];
    assert_eq!(
        header[..4],
        ["file", "rows", "bytes", "compile_ms"],
        "{stdout}"
    );
    assert!(header.iter().all(|column| !column.is_empty()));
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
    let number = |line: &[&str], name: &str| -> f64 {
        line[column(name)]
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number in {line:?}"))
    };
    assert_eq!(lines[1][0], libc.display().to_string());
    assert_eq!(lines[2][0], XZ);
    assert_eq!(lines[3][0], "total");
    for line in &lines[1..] {
        assert_eq!(line.len(), header.len(), "{line:?}");
        let rows = number(line, "rows");
        assert!(rows > 100.0, "{line:?}");
        // 8-byte rows, packed for the BPF array map.
        assert_eq!(number(line, "bytes"), rows * 8.0, "{line:?}");
        assert!(number(line, "compile_ms") > 0.0, "{line:?}");
        let decimals = line[column("compile_ms")]
            .split_once('.')
            .map(|(_, d)| d.len());
        assert_eq!(decimals, Some(2), "{line:?}");
    }
    for name in ["rows", "bytes"] {
        assert_eq!(
            number(&lines[3], name),
            number(&lines[1], name) + number(&lines[2], name)
        );
    }
    let ms_sum = number(&lines[1], "compile_ms") + number(&lines[2], "compile_ms");
    assert!((number(&lines[3], "compile_ms") - ms_sum).abs() < 0.015);
    // libc6-dbg's debug file, found by build ID.
    assert!(
        lines[1][column("debug_file")].starts_with("/usr/lib/debug/.build-id/"),
        "{stdout}"
    );

    let output = Command::new(stoke_bin())
        .args(["tables", "/etc/passwd"])
        .arg(&libc)
        .args(["/nonexistent/libfoo.so"])
        .output()
        .expect("running stoke tables");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    let errors: Vec<&str> = stderr.lines().collect();
    assert_eq!(errors.len(), 2, "one line per bad file:\n{stderr}");
    assert!(
        errors[0].starts_with("stoke: error: /etc/passwd: ") && contains_word(errors[0], "ELF"),
        "{stderr}"
    );
    assert!(
        errors[1].starts_with("stoke: error: /nonexistent/libfoo.so: ")
            && contains_word(errors[1], "No such file or directory"),
        "{stderr}"
    );
    // The good file is still listed.
    let files: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.split('\t').next())
        .collect();
    assert_eq!(files, ["file", &libc.display().to_string(), "total"]);
}

#[test]
fn stripped_xz_reaches_libc_start_like_perf() {
    require_root();
    let perf = Path::new(PERF);
    assert!(
        perf.is_file(),
        "{PERF} is missing: this test compares stoke with `perf record --call-graph dwarf` \
         (Debian's linux-perf; `cargo xtask setup` installs it)"
    );
    let entry = EntryPoint::of(Path::new(XZ));
    assert_no_frame_pointers_in_library("liblzma.so.5");
    let dir = TempDir::new("unwind-xz");
    let mut xz = Xz::start(&dir);
    let pid = xz.pid();

    // stoke and perf sample the same xz at the same time, 3 s each.
    let stoke_out = dir.join("xz.folded");
    let stoke = Stoke::spawn(&record_args(&args!["-p", pid], 499, 3.0, &stoke_out));
    let perf_data = dir.join("perf.data");
    let perf_record = Command::new(perf)
        .args(["record", "--call-graph", "dwarf", "-F", "499", "-p"])
        .arg(pid.to_string())
        .arg("-o")
        .arg(&perf_data)
        .args(["--", "sleep", "3"])
        .output()
        .expect("running perf record");
    assert!(
        perf_record.status.success(),
        "perf record failed ({}):\n{}",
        perf_record.status,
        String::from_utf8_lossy(&perf_record.stderr)
    );
    stoke.wait_recording(3.0);
    assert!(
        xz.is_running(),
        "xz finished before the recordings did: its input is too small"
    );

    let root = format!("xz [{pid}]");
    let stacks = read_folded(&stoke_out);
    println!("stoke: {}", describe(&stacks, 5));
    let stoke_stacks: Vec<(Vec<String>, u64)> = stacks
        .iter()
        .map(|s| {
            assert_eq!(s.root(), root, "with -p, a stack of another process");
            (s.frames[1..].to_vec(), s.count)
        })
        .collect();
    let perf_stacks = perf_stacks(&perf_data, pid);

    let (stoke_total, stoke_whole) = count_whole(&stoke_stacks, &entry);
    let (perf_total, perf_whole) = count_whole(&perf_stacks, &entry);
    let stoke_share = percent(stoke_whole, stoke_total);
    let perf_share = percent(perf_whole, perf_total);
    for (tool, stacks) in [("stoke", &stoke_stacks), ("perf", &perf_stacks)] {
        let broken: Vec<(Vec<String>, u64)> = stacks
            .iter()
            .filter(|(frames, _)| !is_whole(frames, &entry))
            .cloned()
            .collect();
        println!(
            "{tool}'s stacks of xz not reaching libc's start:\n{}",
            describe_frames(&broken, 8)
        );
    }
    let in_lzma = |frames: &[String]| frames.iter().any(|f| is_liblzma_frame(f));
    let stoke_lzma: u64 = stoke_stacks
        .iter()
        .filter(|(f, _)| in_lzma(f))
        .map(|(_, n)| n)
        .sum();
    let perf_lzma: u64 = perf_stacks
        .iter()
        .filter(|(f, _)| in_lzma(f))
        .map(|(_, n)| n)
        .sum();
    println!(
        "xz reaching libc's start (_start outermost, under {}):\n  \
         stoke: {stoke_whole} of {stoke_total} ({stoke_share:.1}%), {stoke_lzma} in liblzma\n  \
         perf:  {perf_whole} of {perf_total} ({perf_share:.1}%), {perf_lzma} in liblzma",
        LIBC_START.join(" or ")
    );

    assert!(
        stoke_total > 500,
        "only {stoke_total} stoke samples of a busy xz in 3 s at 499 Hz\n{}",
        describe(&stacks, 10)
    );
    assert_fraction(
        stoke_lzma,
        stoke_total,
        0.9,
        format_args!("of xz have a liblzma frame\n{}", describe(&stacks, 10)),
    );
    // perf unwinding well is the premise of the comparison: if it did not,
    // the perf script output was probably misread.
    assert!(
        perf_total > 200 && perf_share > 50.0,
        "perf's own stacks reach libc's start in only {perf_whole} of {perf_total} samples: \
         the comparison needs perf to unwind xz\n{}",
        describe_frames(&perf_stacks, 5)
    );
    assert!(
        stoke_share >= 90.0,
        "stoke's stacks of xz reach libc's start in only {stoke_whole} of {stoke_total} \
         samples ({stoke_share:.1}%, 90% expected; perf: {perf_share:.1}%)\n{}",
        describe(&stacks, 10)
    );
    assert!(
        stoke_share >= perf_share - 5.0,
        "stoke's stacks of xz reach libc's start in {stoke_share:.1}% of its samples, \
         more than 5 points below perf's {perf_share:.1}%\n{}",
        describe(&stacks, 10)
    );
}

/// The unwinder reads the stack a window at a time, up from the word it
/// needs: where a window would run past the stack's mapping, it must read
/// up to the mapping's end, or the outermost frames would be lost. A thread
/// started by `clone()` on a stack whose top is the end of its mapping
/// (nothing mapped above, unlike pthreads' and the main thread's).
#[test]
fn a_stack_ending_at_a_hole_is_unwound_to_its_top() {
    require_libc_debug_symbols();
    let chain = [
        "stack_top_entry",
        "climb",
        "climb",
        "climb",
        "climb",
        "climb",
        "spin",
    ];
    let (dir, workload) = prepare_no_fp(
        "unwind-stack-top",
        "stack_at_mapping_end",
        &["stack_top_entry", "climb", "spin"],
    );
    let mut running = workload.spawn(&["60"]);
    let tid = running.printed_tid();

    let out = dir.join("stack-top.folded");
    record_to(&args!["-p", running.pid(), "-t"], 499, 3.0, &out);
    let stacks = read_folded(&out);
    let mine: Vec<Stack> = stacks_of_thread(&stacks, tid)
        .into_iter()
        .cloned()
        .collect();
    let total = total_samples(&mine);
    let whole = samples_where(&mine, |s| {
        s.frames
            .get(2)
            .is_some_and(|f| ROOT_FUNCTIONS.contains(&f.as_str()))
            && s.contains_run(&chain)
    });
    println!(
        "tid {tid}: {whole} of {total} samples ({:.1}%) run clone;{}",
        percent(whole, total),
        chain.join(";")
    );
    assert_busy(total, tid, &stacks);
    assert_fraction(
        whole,
        total,
        0.95,
        format_args!(
            "of thread {tid} reach clone (outermost), then {}\n{}",
            chain.join(";"),
            describe(&mine, 10)
        ),
    );
}

#[test]
fn threads_without_frame_pointers_reach_thread_start() {
    require_libc_debug_symbols();
    let (dir, workload) = prepare_no_fp(
        "unwind-threads",
        "nofp_threads",
        &[
            "thread_a_entry",
            "thread_b_entry",
            "burn_a",
            "burn_b",
            "mix",
        ],
    );
    let running = workload.spawn(&["60"]);
    let threads = running.threads();
    let worker = |name: &str| {
        threads
            .iter()
            .find(|(_, comm)| comm == name)
            .unwrap_or_else(|| panic!("no thread named {name}: {threads:?}"))
            .0
    };
    let workers = [
        (worker("nofp_a"), ["thread_a_entry", "burn_a", "mix"]),
        (worker("nofp_b"), ["thread_b_entry", "burn_b", "mix"]),
    ];

    let out = dir.join("threads.folded");
    record_to(&args!["-p", running.pid(), "-t"], 499, 3.0, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 15));

    for (tid, chain) in workers {
        let mine: Vec<Stack> = stacks_of_thread(&stacks, tid)
            .into_iter()
            .cloned()
            .collect();
        let total = total_samples(&mine);
        // Frames: process, thread, then the outermost native frame.
        let outermost: HashMap<&str, u64> = mine.iter().fold(HashMap::new(), |mut acc, s| {
            *acc.entry(s.frames.get(2).map_or("(none)", String::as_str))
                .or_default() += s.count;
            acc
        });
        let whole = samples_where(&mine, |s| {
            s.frames
                .get(2)
                .is_some_and(|f| ROOT_FUNCTIONS.contains(&f.as_str()))
                && s.contains_run(&["start_thread", chain[0]])
        });
        let in_chain = samples_where(&mine, |s| s.contains_run(&chain));
        println!(
            "tid {tid}: {whole} of {total} samples ({:.1}%) reach the thread start; \
             {in_chain} run {}; outermost frames: {outermost:?}",
            percent(whole, total),
            chain.join(";")
        );
        assert_busy(total, tid, &stacks);
        assert_fraction(
            whole,
            total,
            0.9,
            format_args!(
                "of thread {tid} reach its start (outermost one of {ROOT_FUNCTIONS:?}, \
                 then start_thread;{})\n{}",
                chain[0],
                describe(&mine, 10)
            ),
        );
        assert_fraction(
            in_chain,
            total,
            0.8,
            format_args!(
                "of thread {tid} run {}\n{}",
                chain.join(";"),
                describe(&mine, 10)
            ),
        );
    }
}

#[test]
fn summary_reports_roots_and_tables() {
    let (dir, workload) = prepare_no_fp("unwind-summary", "deep_split", DEEP_FUNCTIONS);
    let running = workload.spawn(&["60"]);
    let out = dir.join("deep.json");
    record_to(&args!["-p", running.pid()], 499, 2.0, &out);
    let profile = read_json(&out);
    let (quality, tables) = (&profile.summary.stack_quality, &profile.summary.unwind);
    let report = profile.describe();
    println!("{quality:?} {tables:?}");

    assert!(
        quality.samples > 300,
        "only {} native stacks counted in 2 s at 499 Hz:\n{report}",
        quality.samples
    );
    assert_fraction(
        quality.reached_root,
        quality.samples,
        0.9,
        format_args!("reach a root according to the summary:\n{report}"),
    );
    // The executable and libc at least (and ld.so, the vdso...).
    assert!(
        tables.files >= 2,
        "the summary has unwind tables for {} files, at least 2 expected \
         (deep_split and libc):\n{report}",
        tables.files
    );
    assert!(
        tables.rows > 0,
        "the summary has no unwind table rows:\n{report}"
    );
    assert!(
        tables.processes >= 1,
        "the summary has unwind tables for no process:\n{report}"
    );
}

/// The summary's share of stacks reaching a root must agree with the
/// stacks: xz's stacks end at its entry point (`_start`, unnamed in a
/// stripped binary, whose CFI marks the end of the stack), so they are
/// whole, and they must count as reaching a root.
#[test]
fn summary_counts_stripped_entry_point_as_root() {
    require_root();
    let dir = TempDir::new("unwind-xz-summary");
    let xz = Xz::start(&dir);
    let out = dir.join("xz.json");
    record_to(&args!["-p", xz.pid()], 499, 2.0, &out);
    let profile = read_json(&out);
    let (quality, tables) = (&profile.summary.stack_quality, &profile.summary.unwind);
    let report = profile.describe();
    println!("{quality:?} {tables:?}");
    assert!(
        quality.samples > 300,
        "only {} native stacks of a busy xz counted in 2 s at 499 Hz:\n{report}",
        quality.samples
    );
    assert_fraction(
        quality.reached_root,
        quality.samples,
        0.9,
        format_args!(
            "of xz reach a root according to the summary, though its stacks end at \
             its entry point (`_start`, which a stripped binary does not name; see \
             stripped_xz_reaches_libc_start_like_perf):\n{report}"
        ),
    );
}

/// Libraries of the many-libraries tests: thousands, as the largest real
/// processes map (browsers, JVMs with many native libraries, Python with
/// many extension modules).
const MANY_LIBRARIES: usize = 2000;

/// A process with [`MANY_LIBRARIES`] dlopened libraries, built without
/// frame pointers, that calls a function of twenty of them in turn, from
/// the 100th loaded to the last, from `main`: once its tables are in, its
/// stacks reach `main` and libc's start, each library's mapping known to
/// the unwinder (with 256 a process at most, 85% of them stopped in the
/// library).
#[test]
fn thousands_of_libraries_unwind_to_main() {
    let (dir, workload) = prepare_no_fp("unwind-many-libraries", "many_libraries", &["main"]);
    let libraries = build_many_libraries(&dir, MANY_LIBRARIES);
    let running = workload.spawn(&args![60, libraries.display(), MANY_LIBRARIES]);
    let out = dir.join("many.json");
    record_to(&args!["-p", running.pid()], 499, 6.0, &out);

    let profile = read_json(&out);
    let (stacks, tables) = (&profile.stacks, &profile.summary.unwind);
    let report = profile.describe();
    let in_library = |s: &Stack| s.frames.last().is_some_and(|f| f == "library_hop");
    let hot = samples_where(stacks, in_library);
    let whole = samples_where(stacks, |s| {
        in_library(s)
            && s.contains_run(&["main", "library_hop"])
            && s.frames.iter().any(|f| LIBC_START.contains(&f.as_str()))
    });
    // Until its 2,000 tables are in, the process's frame pointers are
    // walked (and lead nowhere).
    let before_tables = profile
        .summary
        .stack_quality
        .truncated
        .get("frame pointers ended (no unwind table)")
        .copied()
        .unwrap_or(0);
    let with_tables = hot.saturating_sub(before_tables);
    println!(
        "{whole} of {hot} samples in library_hop ({:.1}%) reach libc's start through main; \
         {before_tables} samples were taken before the tables were in\n{tables:?}",
        percent(whole, hot),
    );
    assert!(
        hot > 600,
        "only {hot} samples in library_hop (6 s of a busy process at 499 Hz, about 3000 \
         expected)\n{report}"
    );
    assert!(
        before_tables * 5 <= hot,
        "{before_tables} of {hot} samples were taken before the process's tables were in: \
         loading 2,000 small tables took over a fifth of the recording\n{report}"
    );
    assert_fraction(
        whole,
        with_tables,
        0.95,
        format_args!("in the libraries reach libc's start through main\n{report}"),
    );
    assert!(
        tables.files as usize >= MANY_LIBRARIES && tables.mappings_left_out == 0,
        "tables for {} files and {} mappings left out: every library has a table of its \
         own and a place in the unwinder's mappings\n{report}",
        tables.files,
        tables.mappings_left_out
    );
}

/// A process with more executable mappings than the unwinder holds for
/// one ([`MAX_MAPPINGS`]: twenty libraries, the first mapped again past
/// the cap) has those past it counted in the summary, in the JSON and the
/// txt report alike.
#[test]
fn mappings_past_the_cap_are_counted_in_the_summary() {
    let (dir, workload) = prepare_no_fp("unwind-mapping-cap", "many_libraries", &["main"]);
    let libraries = build_many_libraries(&dir, 20);
    let extra = MAX_MAPPINGS + 1000;
    let running = workload.spawn(&args![60, libraries.display(), 20, extra]);
    let (json, txt) = (dir.join("cap.json"), dir.join("cap.txt"));
    record_to(
        &args!["-p", running.pid(), "-o", txt.display()],
        99,
        1.0,
        &json,
    );

    let profile = read_json(&json);
    let tables = &profile.summary.unwind;
    let report = fs::read_to_string(&txt).expect("reading the txt report");
    println!("{tables:?}\n{report}");
    // The 20 libraries, the extra mappings and the executable at least.
    let past_cap = (extra + 21 - MAX_MAPPINGS) as u64;
    assert!(
        tables.processes_over_mapping_cap >= 1 && tables.mappings_left_out >= past_cap,
        "{} processes over the cap, {} mappings left out (at least {past_cap} expected)\n{}",
        tables.processes_over_mapping_cap,
        tables.mappings_left_out,
        profile.describe()
    );
    let label = "Executable mappings left out:";
    let count = format!("{} ", tables.mappings_left_out);
    assert!(
        report.lines().any(|line| line
            .strip_prefix(label)
            .is_some_and(|rest| rest.trim_start().starts_with(&count))),
        "the txt report does not say `{label} {count}`:\n{report}"
    );
}

/// `count` libraries for many_libraries in `dir/libraries` (`lib0000.so`
/// on): copies of `tests/workloads/many_libraries_lib.c` built once
/// without frame pointers (a gcc run for each of thousands would make a
/// slow test), each with a build ID of its own, as distinct libraries
/// have: each gets a table of its own.
fn build_many_libraries(dir: &TempDir, count: usize) -> PathBuf {
    let library = Workload::build_with(
        "many_libraries_lib",
        dir.path(),
        &[NO_FRAME_POINTER_FLAGS, &["-shared", "-fPIC"]].concat(),
    );
    assert_no_frame_pointers(library.exe(), &["library_hop"]);
    let bytes = fs::read(library.exe()).expect("reading the built library");
    // The GNU build ID note's header: name size 4, ID size 20, type 3,
    // "GNU"; the ID follows.
    let header = [4, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, b'G', b'N', b'U', 0];
    let id = bytes
        .windows(header.len())
        .position(|window| window == header)
        .expect("the built library has a GNU build ID note (gcc --build-id)")
        + header.len();
    let libraries = dir.join("libraries");
    fs::create_dir(&libraries).expect("creating the libraries' directory");
    for index in 0..count {
        let mut copy = bytes.clone();
        copy[id..id + 4].copy_from_slice(&(index as u32).to_le_bytes());
        let path = libraries.join(format!("lib{index:04}.so"));
        fs::write(&path, copy).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
    libraries
}

/// Builds `tests/workloads/<name>.c` without frame pointers
/// ([`NO_FRAME_POINTER_FLAGS`]) in a fresh [`TempDir`], after
/// [`require_root`], and checks that none of `functions` sets one up.
fn prepare_no_fp(label: &str, name: &str, functions: &[&str]) -> (TempDir, Workload) {
    require_root();
    let dir = TempDir::new(label);
    let workload = Workload::build_with(name, dir.path(), NO_FRAME_POINTER_FLAGS);
    assert_no_frame_pointers(workload.exe(), functions);
    (dir, workload)
}

/// The disassembly of `path` (`objdump -d`), by function: each symbol's
/// instructions, whitespace collapsed (`mov %rsp,%rbp`).
fn disassemble(path: &Path) -> HashMap<String, Vec<String>> {
    let output = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(path)
        .output()
        .expect("running objdump (binutils)");
    assert!(
        output.status.success(),
        "objdump -d {} failed:\n{}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut functions: HashMap<String, Vec<String>> = HashMap::new();
    let mut current: Option<String> = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        // `0000000000001380 <hot_seventy>:` starts a function.
        if let Some(name) = line
            .strip_suffix(">:")
            .and_then(|l| l.split_once(" <"))
            .map(|(_, name)| name)
        {
            current = Some(name.to_owned());
            functions.entry(name.to_owned()).or_default();
        } else if let (Some(name), Some((_, instruction))) = (&current, line.split_once(":\t")) {
            let instruction = instruction.split_whitespace().collect::<Vec<_>>().join(" ");
            functions.get_mut(name).unwrap().push(instruction);
        }
    }
    functions
}

/// Whether an instruction sets up a frame pointer (`mov %rsp,%rbp`, after
/// `push %rbp`): code that does can be walked without tables.
fn sets_up_frame_pointer(instruction: &str) -> bool {
    instruction == "mov %rsp,%rbp"
}

/// Panics unless each of `functions` is in `exe` under that exact name
/// (not inlined, not renamed to a `.isra` clone) and none sets up a frame
/// pointer: the premise of these tests.
fn assert_no_frame_pointers(exe: &Path, functions: &[&str]) {
    let disassembly = disassemble(exe);
    for name in functions {
        let instructions = disassembly.get(*name).unwrap_or_else(|| {
            panic!(
                "{name} is not a function of {} (inlined or renamed by the compiler?)",
                exe.display()
            )
        });
        assert!(
            !instructions.iter().any(|i| sets_up_frame_pointer(i)),
            "{name} in {} sets up a frame pointer, built with {NO_FRAME_POINTER_FLAGS:?}:\n{}",
            exe.display(),
            instructions.join("\n")
        );
    }
}

/// Panics unless the shared library `name` (as this test process maps it,
/// e.g. `liblzma.so.5`) sets up a frame pointer in at most 5% of its
/// functions (counted as `ret` instructions: it is stripped): Debian builds
/// it without frame pointers, which is what makes xz a test of the tables.
fn assert_no_frame_pointers_in_library(name: &str) {
    let path = library_path(name);
    let disassembly = disassemble(&path);
    let instructions = disassembly.values().flatten();
    let (mut setups, mut returns) = (0, 0);
    for instruction in instructions {
        setups += usize::from(sets_up_frame_pointer(instruction));
        returns += usize::from(instruction == "ret");
    }
    println!(
        "{}: {setups} frame pointer setups, {returns} ret",
        path.display()
    );
    assert!(
        returns > 100 && setups * 20 <= returns,
        "{} sets up a frame pointer {setups} times for {returns} `ret`s: \
         this test needs a library built without frame pointers",
        path.display()
    );
}

/// Where the dynamic linker finds library `name` (from `ldconfig -p`).
fn library_path(name: &str) -> PathBuf {
    let output = Command::new("ldconfig")
        .arg("-p")
        .output()
        .expect("running ldconfig -p");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .filter_map(|line| line.trim().split_once(" => "))
        .find(|(left, _)| left.split_whitespace().next() == Some(name))
        .map(|(_, path)| PathBuf::from(path.trim()))
        .unwrap_or_else(|| panic!("{name} is not installed (ldconfig -p does not list it)"))
}

/// Panics unless libc's debug symbols (Debian's libc6-dbg) are installed:
/// `start_thread` and `clone3` are local functions, named only there, and
/// the thread test checks stacks by those names.
fn require_libc_debug_symbols() {
    let libc = library_path("libc.so.6");
    let output = Command::new("readelf")
        .arg("-n")
        .arg(&libc)
        .output()
        .expect("running readelf (binutils)");
    let text = String::from_utf8_lossy(&output.stdout);
    let build_id = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build ID", libc.display()));
    let debug = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &build_id[..2],
        &build_id[2..]
    ));
    assert!(
        debug.is_file(),
        "{} is missing: install libc6-dbg (libc's debug symbols name start_thread and \
         clone3, which this test looks for)",
        debug.display()
    );
}

/// A running `xz -T1 -6 -c <input> > /dev/null` over generated input,
/// killed on drop.
struct Xz {
    child: Child,
}

impl Xz {
    /// Writes [`XZ_INPUT_BYTES`] of compressible text into `dir` and starts
    /// one xz thread compressing it. xz -6 takes 20 s or more for that much,
    /// much longer than any recording here.
    fn start(dir: &TempDir) -> Xz {
        assert!(
            Path::new(XZ).is_file(),
            "{XZ} is missing (Debian's xz-utils)"
        );
        let input = dir.join("input.txt");
        write_compressible(&input, XZ_INPUT_BYTES);
        let child = Command::new(XZ)
            .args(["-T1", "-6", "-c"])
            .arg(&input)
            .stdin(Stdio::null())
            .stdout(File::create("/dev/null").expect("opening /dev/null"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {XZ}: {e}"));
        let mut xz = Xz { child };
        // Past exec and the dynamic linker, into liblzma's work.
        thread::sleep(Duration::from_millis(300));
        assert!(xz.is_running(), "xz exited at once");
        xz
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("waiting for xz").is_none()
    }
}

impl Drop for Xz {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How much input xz gets.
const XZ_INPUT_BYTES: usize = 128 << 20;

/// Writes `bytes` of text that compresses about 3:1, as logs do: lines of
/// words from a small vocabulary and numbers, from a fixed-seed xorshift
/// (the same input every run).
fn write_compressible(path: &Path, bytes: usize) {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let vocabulary: Vec<Vec<u8>> = (0..4096)
        .map(|_| {
            let len = 2 + (next() % 8) as usize;
            (0..len).map(|_| b'a' + (next() % 26) as u8).collect()
        })
        .collect();
    let file = File::create(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut written = 0;
    let mut line = Vec::with_capacity(256);
    while written < bytes {
        line.clear();
        for _ in 0..12 {
            line.extend_from_slice(&vocabulary[(next() % 4096) as usize]);
            line.push(b' ');
        }
        let _ = writeln!(line, "{}", next() % 1_000_000);
        out.write_all(&line).expect("writing xz's input");
        written += line.len();
    }
    out.flush().expect("writing xz's input");
}

/// An executable's entry point (`_start`), for recognizing it unnamed in a
/// stripped binary: stoke shows such a frame as `<file>+0x<file offset>`.
struct EntryPoint {
    /// The file's name (`xz`).
    file: String,
    /// The entry point's virtual address and file offset (perf shows the
    /// one, stoke the other; equal in most executables).
    addresses: [u64; 2],
}

impl EntryPoint {
    /// `_start` is a few dozen bytes long; its call to `__libc_start_main`
    /// returns within them.
    const SIZE: u64 = 0x40;

    /// Reads the entry point from the ELF header and program headers of a
    /// 64-bit little-endian ELF file.
    fn of(path: &Path) -> EntryPoint {
        let data = fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let u16_at =
            |at: usize| u64::from(u16::from_le_bytes(data[at..at + 2].try_into().unwrap()));
        let u32_at =
            |at: usize| u64::from(u32::from_le_bytes(data[at..at + 4].try_into().unwrap()));
        let u64_at = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
        assert!(
            data.starts_with(b"\x7fELF\x02\x01"),
            "{} is not a 64-bit little-endian ELF file",
            path.display()
        );
        let entry = u64_at(0x18);
        let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
        let offset = (0..phnum)
            .map(|i| (phoff + i * phentsize) as usize)
            .filter(|&ph| u32_at(ph) == 1) // PT_LOAD
            .find_map(|ph| {
                let (p_offset, p_vaddr, p_filesz) =
                    (u64_at(ph + 8), u64_at(ph + 16), u64_at(ph + 32));
                (p_vaddr..p_vaddr + p_filesz)
                    .contains(&entry)
                    .then(|| entry - p_vaddr + p_offset)
            })
            .unwrap_or_else(|| panic!("{}: no segment holds the entry point", path.display()));
        EntryPoint {
            file: path.file_name().unwrap().to_string_lossy().into_owned(),
            addresses: [entry, offset],
        }
    }

    /// Whether `frame` is this entry point: `_start`, or `<file>+0x<n>`
    /// with `n` within [`EntryPoint::SIZE`] bytes of it.
    fn is(&self, frame: &str) -> bool {
        if frame == "_start" {
            return true;
        }
        frame
            .strip_prefix(&self.file)
            .and_then(|rest| rest.strip_prefix("+0x"))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .is_some_and(|n| {
                self.addresses
                    .iter()
                    .any(|&a| (a..a + Self::SIZE).contains(&n))
            })
    }
}

/// The samples in `stacks` (native and kernel frames root first, with a
/// count) and how many of them are whole ([`is_whole`]): the same rule for
/// stoke's stacks and perf's.
fn count_whole(stacks: &[(Vec<String>, u64)], entry: &EntryPoint) -> (u64, u64) {
    let total = stacks.iter().map(|(_, n)| n).sum();
    let whole = stacks
        .iter()
        .filter(|(frames, _)| is_whole(frames, entry))
        .map(|(_, n)| n)
        .sum();
    (total, whole)
}

/// Whether a stack (frames root first, no process frame) is whole: its
/// outermost frame is the executable's entry point, and libc's start
/// ([`LIBC_START`]) is on it.
fn is_whole(frames: &[String], entry: &EntryPoint) -> bool {
    frames.first().is_some_and(|f| entry.is(f))
        && frames.iter().any(|f| LIBC_START.contains(&f.as_str()))
}

/// Whether a frame is in liblzma: one of its exported functions
/// (`lzma_code`), or an address in it (`liblzma.so.5.4.1+0x15bc9`).
fn is_liblzma_frame(frame: &str) -> bool {
    frame.starts_with("lzma_") || frame.starts_with("liblzma.so")
}

/// The stacks of process `pid` in a `perf record -g` file, read with
/// `perf script`, as stoke would name their frames
/// ([`perf_script::frame_name`]; root first, an inlined function a frame of
/// its own), each with a count of 1.
fn perf_stacks(perf_data: &Path, pid: u32) -> Vec<(Vec<String>, u64)> {
    let output = Command::new(PERF)
        .args(["script", "-F", "pid,tid,ip,sym,dso", "-i"])
        .arg(perf_data)
        .output()
        .expect("running perf script");
    assert!(
        output.status.success(),
        "perf script failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    perf_script::parse(&text)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|sample| sample.pid == pid && !sample.frames.is_empty())
        .map(|sample| (sample.frames, 1))
        .collect()
}

/// A summary of the heaviest of `stacks` (frames root first, with counts),
/// for messages about stacks that are not stoke's.
fn describe_frames(stacks: &[(Vec<String>, u64)], n: usize) -> String {
    let mut merged: HashMap<String, u64> = HashMap::new();
    for (frames, count) in stacks {
        *merged.entry(frames.join(";")).or_default() += count;
    }
    let mut sorted: Vec<(String, u64)> = merged.into_iter().collect();
    sorted.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    sorted
        .iter()
        .take(n)
        .map(|(stack, count)| format!("  {count:>6} {stack}\n"))
        .collect()
}

/// `part` as a percentage of `whole` (0 if `whole` is 0).
fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Panics unless `whole` is positive and `part` is at least `fraction` of
/// it, with the message `only <part> of <whole> samples (<p>%) <what>`.
#[track_caller]
/// A thread that burns CPU throughout a 3 s recording at 499 Hz has
/// samples enough to judge its stacks by.
fn assert_busy(total: u64, tid: u32, stacks: &[Stack]) {
    assert!(
        total > 300,
        "only {total} samples of the busy thread {tid} in 3 s at 499 Hz\n{}",
        describe(stacks, 15)
    );
}

fn assert_fraction(part: u64, whole: u64, fraction: f64, what: impl std::fmt::Display) {
    assert!(
        whole > 0 && part as f64 >= fraction * whole as f64,
        "only {part} of {whole} samples ({:.1}%, at least {:.0}% expected) {what}",
        percent(part, whole),
        fraction * 100.0
    );
}

/// A Rust program linked by lld, Rust's default linker (stoke itself,
/// converting a large profile): lld starts the code segment inside a page
/// of read-only data, one page further in memory than in the file; its
/// stacks reach their root as a C program's do (9.6% did, before the load
/// bias took that page into account).
#[test]
fn an_lld_linked_rust_program_reaches_its_root() {
    let dir = TempDir::new("unwind-lld");
    let input = dir.join("big.folded");
    fs::write(&input, synthetic_profile(500_000)).unwrap();
    let mut command = Command::new("sh");
    command.arg("-c").arg(format!(
        "echo ready; exec {} convert {} -o {}",
        stoke_bin().display(),
        input.display(),
        dir.join("big.svg").display()
    ));
    let running = Running::start(command, "stoke convert", "stoke");
    let out = dir.join("lld.json");
    record_to(&args!["-p", running.pid()], 499, 2.0, &out);
    let profile = read_json(&out);
    let quality = &profile.summary.stack_quality;
    println!("{quality:?}");
    assert!(
        quality.samples > 300,
        "only {} stacks of stoke convert in 2 s at 499 Hz:\n{}",
        quality.samples,
        profile.describe()
    );
    assert_fraction(
        quality.reached_root,
        quality.samples,
        0.95,
        format_args!("of stoke convert reach a root:\n{}", profile.describe()),
    );
}
