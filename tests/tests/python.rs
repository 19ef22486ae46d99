//! Python frames, host-wide with no flags: a pure-Python 70:30 split
//! (`workloads/python/split.py`) comes out as py-spy, reading the same
//! process in the same seconds, sees it: hot_a's share within 3 points of
//! py-spy's, with every call of the interpreter in its place (the C of
//! `sum(map(...))` between `main` and `step`). Debian's python3.11 (a
//! static interpreter), pyenv's builds (libpython) of every version
//! read, Debian trixie's 3.13 in a root of its own with `-X perf`
//! trampolines, and Python in a container; `--lines` names the lines.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use stoke_tests::docker::{ensure_daemon, Container, Engine, Image, Rootfs};
use stoke_tests::{
    args, read_folded, record_args, require_root, samples_where, total_samples, workloads_dir,
    Running, Stack, Stoke, TempDir, PYTHON_3_13_ROOT, PYTHON_PATH,
};

const DEBIAN_PYTHON: &str = "/usr/bin/python3.11";
/// pyenv's builds on this kind of machine, one per version read.
const PYENV: &str = "/root/.pyenv/versions";
/// Some 5,000 samples each for stoke and py-spy: their shares then differ
/// by over 3 points once in a thousand by chance alone.
const HZ: u32 = 999;
const SECONDS: f64 = 5.0;

fn script() -> PathBuf {
    workloads_dir().join("python/split.py")
}

/// The share of hot_a among samples under hot_a or hot_b.
fn share(a: u64, b: u64) -> f64 {
    100.0 * a as f64 / (a + b).max(1) as f64
}

fn has(stack: &Stack, name: &str) -> bool {
    stack.frames.iter().any(|frame| frame.starts_with(name))
}

/// Starts `python` on the workload for `seconds`, past its first round.
fn start(python: &Path, seconds: u32) -> Running {
    let mut command = Command::new(python);
    command.arg(script()).arg(seconds.to_string());
    let comm = python.file_name().unwrap().to_string_lossy();
    Running::start(command, "split.py", &comm)
}

/// `py-spy record` of process `pid` for [`SECONDS`], started now, without
/// stopping the process at each sample (as stoke does not).
fn py_spy(pid: u32, out: &Path) -> Child {
    Command::new(Path::new(PYTHON_PATH).join("bin/py-spy"))
        .args(["record", "--nonblocking", "--format", "raw", "--rate"])
        .arg(HZ.to_string())
        .args(["--duration", &(SECONDS as u32).to_string(), "--pid"])
        .arg(pid.to_string())
        .arg("--output")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting py-spy (cargo xtask setup installs it)")
}

/// hot_a's and hot_b's samples in py-spy's folded output.
fn py_spy_counts(out: &Path) -> (u64, u64) {
    let stacks = read_folded(out);
    let count =
        |name: &str| samples_where(&stacks, |s| s.frames.iter().any(|f| f.starts_with(name)));
    (count("hot_a ("), count("hot_b ("))
}

/// What stoke's stacks of one process say.
struct Split {
    total: u64,
    a: u64,
    b: u64,
    /// Samples under hot_a or hot_b whose stack holds every Python frame
    /// in order, `<module>`, main, step, hot_x, spin, with the C of `sum`
    /// (native frames) between main and step.
    whole: u64,
}

fn split_of(stacks: &[Stack]) -> Split {
    let whole = samples_where(stacks, |stack| {
        let frames = &stack.frames;
        let python: Vec<&str> = frames
            .iter()
            .filter(|f| f.ends_with("_[py]"))
            .map(String::as_str)
            .collect();
        let hot = python
            .get(3)
            .is_some_and(|f| *f == "hot_a_[py]" || *f == "hot_b_[py]");
        let at = |name: &str| frames.iter().position(|f| f == name);
        let native_between = match (at("main_[py]"), at("step_[py]")) {
            (Some(main), Some(step)) if main < step => {
                frames[main + 1..step].iter().any(|f| !f.ends_with("_[py]"))
            }
            _ => false,
        };
        hot && native_between
            && python.len() == 5
            && python[..3] == ["<module>_[py]", "main_[py]", "step_[py]"]
            && python[4] == "spin_[py]"
    });
    Split {
        total: total_samples(stacks),
        a: samples_where(stacks, |s| has(s, "hot_a_[py]")),
        b: samples_where(stacks, |s| has(s, "hot_b_[py]")),
        whole,
    }
}

/// Asserts stoke's split against py-spy's.
fn assert_split(label: &str, split: &Split, py_spy: (u64, u64)) {
    let Split { total, a, b, whole } = *split;
    println!(
        "{label}: stoke {total} samples, hot_a {a}, hot_b {b} ({:.1}%), {whole} whole; \
         py-spy hot_a {}, hot_b {} ({:.1}%)",
        share(a, b),
        py_spy.0,
        py_spy.1,
        share(py_spy.0, py_spy.1),
    );
    assert!(
        a + b > total * 9 / 10,
        "{label}: {} of {total} samples under hot_a or hot_b",
        a + b
    );
    assert!(
        whole * 10 >= (a + b) * 9,
        "{label}: {whole} of {} stacks whole",
        a + b
    );
    assert!(py_spy.0 + py_spy.1 > 2000, "{label}: py-spy saw {py_spy:?}");
    assert!(
        (share(a, b) - share(py_spy.0, py_spy.1)).abs() <= 3.0,
        "{label}: stoke {:.1}% against py-spy {:.1}%",
        share(a, b),
        share(py_spy.0, py_spy.1)
    );
}

/// Records `pid` with stoke and py-spy at once.
fn record_both(dir: &TempDir, label: &str, pid: u32, extra: &[String]) -> (Vec<Stack>, (u64, u64)) {
    let spy_out = dir.join(format!("{label}.py-spy"));
    let mut spy = py_spy(pid, &spy_out);
    let out = dir.join(format!("{label}.folded"));
    let mut stoke_args = record_args(&args!["-p", pid], HZ, SECONDS, &out);
    stoke_args.extend(extra.iter().cloned());
    Stoke::spawn(&stoke_args)
        .wait_recording(SECONDS)
        .assert_success();
    assert!(spy.wait().expect("py-spy").success(), "py-spy failed");
    (read_folded(&out), py_spy_counts(&spy_out))
}

#[test]
fn debian_python_frames_split_as_py_spy_sees_them() {
    require_root();
    let dir = TempDir::new("python-debian");
    let running = start(Path::new(DEBIAN_PYTHON), 30);
    let (stacks, spy) = record_both(&dir, "debian", running.pid(), &[]);
    assert_split("Debian 3.11", &split_of(&stacks), spy);
}

#[test]
fn every_pyenv_version_read_splits_as_py_spy_sees_it() {
    require_root();
    let dir = TempDir::new("python-pyenv");
    // 3.11.7 is this kind of machine's python3; the others are tested
    // where the machine has them.
    let mut tested = Vec::new();
    for version in ["3.8.18", "3.9.18", "3.10.13", "3.11.7", "3.12.1", "3.13.0"] {
        let python = Path::new(PYENV).join(version).join("bin/python3");
        if !python.exists() && version != "3.11.7" {
            continue;
        }
        let running = start(&python, 30);
        let (stacks, spy) = record_both(&dir, version, running.pid(), &[]);
        assert_split(version, &split_of(&stacks), spy);
        tested.push(version);
    }
    println!("tested {tested:?}");
}

/// CPython 3.12 and newer with `-X perf` call each Python function through
/// a trampoline of their own making, in anonymous memory, with no frame
/// pointer and no unwind tables, and name it in /tmp/perf-PID.map: the
/// walk goes through every trampoline to the interpreter's `main`, and the
/// trampolines' names (`py::hot_a:<string>`), which the Python frames
/// repeat, are left out.
#[test]
fn python_3_13_with_perf_trampolines_splits_as_py_spy_sees_it() {
    require_root();
    let dir = TempDir::new("python-perf");
    let source = std::fs::read_to_string(script()).unwrap();
    let mut command = Command::new("chroot");
    command
        .arg(PYTHON_3_13_ROOT)
        .args(["/usr/bin/python3.13", "-X", "perf", "-c", &source, "30"]);
    let running = Running::start(command, "split.py", "python3.13");
    let map = Path::new(PYTHON_3_13_ROOT).join(format!("tmp/perf-{}.map", running.pid()));
    let (stacks, spy) = record_both(&dir, "perf", running.pid(), &[]);
    drop(running);
    let _ = std::fs::remove_file(&map);
    let split = split_of(&stacks);
    // hot_a and hot_b never share a stack.
    let hot = split.a + split.b;
    let from_main = samples_where(&stacks, |s| {
        (has(s, "hot_a_[py]") || has(s, "hot_b_[py]")) && has(s, "Py_RunMain")
    });
    let trampolines = samples_where(&stacks, |s| has(s, "py::"));
    println!("{from_main} of {hot} hot samples from Py_RunMain, {trampolines} with trampolines");
    assert!(
        from_main * 100 >= hot * 95,
        "{from_main} of {hot} hot samples reach Py_RunMain"
    );
    assert_eq!(trampolines, 0, "trampolines named in {trampolines} samples");
    assert_split("3.13 -X perf", &split, spy);
}

#[test]
fn lines_name_the_loop_that_burns() {
    require_root();
    let dir = TempDir::new("python-lines");
    let running = start(Path::new(DEBIAN_PYTHON), 30);
    let out = dir.join("lines.folded");
    let mut stoke_args = record_args(&args!["-p", running.pid()], HZ, SECONDS, &out);
    stoke_args.push("--lines".into());
    Stoke::spawn(&stoke_args)
        .wait_recording(SECONDS)
        .assert_success();
    let stacks = read_folded(&out);
    let source = std::fs::read_to_string(script()).unwrap();
    let line_of = |text: &str| source.lines().position(|line| line.contains(text)).unwrap() + 1;
    // spin's two lines of its loop; the calls of step.
    let (loop_line, body_line) = (line_of("for i in range(n)"), line_of("acc = (acc * 31"));
    let step_call = line_of("return hot_a(700) ^ hot_b(300)");
    let spin = samples_where(&stacks, |s| has(s, "spin (split.py:"));
    let in_loop = samples_where(&stacks, |s| {
        s.frames.iter().any(|f| {
            *f == format!("spin (split.py:{loop_line})_[py]")
                || *f == format!("spin (split.py:{body_line})_[py]")
        })
    });
    let from_step = samples_where(&stacks, |s| {
        has(s, &format!("step (split.py:{step_call})_[py]"))
    });
    println!("spin {spin}, in its loop {in_loop}, step at line {step_call}: {from_step}");
    assert!(
        spin > total_samples(&stacks) * 9 / 10,
        "spin in {spin} samples"
    );
    assert!(
        in_loop * 100 >= spin * 95,
        "{in_loop} of {spin} in spin's loop"
    );
    assert!(
        from_step * 100 >= spin * 95,
        "{from_step} of {spin} from step's line"
    );
}

#[test]
fn python_in_a_container_splits_as_py_spy_sees_it() {
    require_root();
    ensure_daemon();
    let dir = TempDir::new("python-container");
    let mut rootfs = Rootfs::new(&dir.join("rootfs"));
    rootfs.add_program(Path::new(DEBIAN_PYTHON), "/usr/bin/python3.11");
    rootfs.add_host_tree(
        Path::new("/usr/lib/python3.11"),
        &[
            "*/test",
            "*/site-packages",
            "*/dist-packages",
            "*/__pycache__",
            "*/idlelib",
            "*/tkinter",
        ],
    );
    rootfs.add_host_tree(&workloads_dir().join("python"), &[]);
    let image = Image::import(Engine::Docker, "python", &rootfs);
    let container = Container::run(
        "python",
        &image,
        &[
            "/usr/bin/python3.11",
            "-I",
            &script().to_string_lossy(),
            "60",
        ],
    );
    // Past its first round.
    std::thread::sleep(Duration::from_secs(2));
    let (stacks, spy) = record_both(&dir, "container", container.pid(), &[]);
    assert!(
        stacks
            .iter()
            .all(|s| s.frames[0] == container.container_frame()),
        "stacks not under {}",
        container.container_frame()
    );
    let stacks: Vec<Stack> = stacks
        .into_iter()
        .map(|mut s| {
            s.frames.remove(0);
            s
        })
        .collect();
    assert_split("container", &split_of(&stacks), spy);
}

#[test]
fn off_cpu_waits_get_their_python_frames() {
    require_root();
    let dir = TempDir::new("python-offcpu");
    let mut command = Command::new(DEBIAN_PYTHON);
    command.arg(workloads_dir().join("python/nap.py")).arg("30");
    let running = Running::start(command, "nap.py", "python3.11");
    let out = dir.join("offcpu.folded");
    let mut stoke_args = record_args(&args!["-p", running.pid()], HZ, 3.0, &out);
    stoke_args.extend(args!["-e", "offcpu"]);
    Stoke::spawn(&stoke_args)
        .wait_recording(3.0)
        .assert_success();
    let stacks = read_folded(&out);
    let total = total_samples(&stacks);
    let napping = samples_where(&stacks, |s| {
        let python: Vec<&str> = s
            .frames
            .iter()
            .filter(|f| f.ends_with("_[py]"))
            .map(String::as_str)
            .collect();
        python == ["<module>_[py]", "main_[py]", "nap_[py]"]
    });
    println!(
        "{:.2} s off the CPU, {:.2} s of it in nap",
        total as f64 / 1e9,
        napping as f64 / 1e9
    );
    assert!(total as f64 / 1e9 > 2.0, "{total} ns off the CPU");
    assert!(napping * 10 >= total * 9, "{napping} of {total} ns in nap");
}

#[test]
fn a_version_not_read_keeps_its_native_stack_and_says_why() {
    require_root();
    let python = Path::new(PYENV).join("3.7.16/bin/python3");
    if !python.exists() {
        println!("no pyenv 3.7 on this machine: nothing to check");
        return;
    }
    let dir = TempDir::new("python-3.7");
    let running = start(&python, 30);
    let (folded, text) = (dir.join("old.folded"), dir.join("old.txt"));
    let mut stoke_args = record_args(&args!["-p", running.pid()], HZ, 2.0, &folded);
    stoke_args.extend(args!["-o", text.display()]);
    Stoke::spawn(&stoke_args)
        .wait_recording(2.0)
        .assert_success();
    let stacks = read_folded(&folded);
    let python_frames = samples_where(&stacks, |s| s.frames.iter().any(|f| f.ends_with("_[py]")));
    let eval = samples_where(&stacks, |s| {
        s.frames.iter().any(|f| f == "_PyEval_EvalFrameDefault")
    });
    let summary = std::fs::read_to_string(&text).unwrap();
    let said = format!("Python {} native only:", running.pid());
    println!("{python_frames} with Python frames, {eval} in the interpreter");
    assert_eq!(python_frames, 0);
    assert!(
        eval * 10 >= total_samples(&stacks) * 9,
        "{eval} in the interpreter"
    );
    assert!(
        summary
            .lines()
            .any(|l| l.starts_with(&said) && l.ends_with("Python 3.7 is not read")),
        "no line `{said} ... Python 3.7 is not read` in:\n{summary}"
    );
}

#[test]
fn the_main_thread_is_found_behind_two_hundred_others() {
    require_root();
    let dir = TempDir::new("python-threads");
    let mut command = Command::new(DEBIAN_PYTHON);
    command
        .arg(workloads_dir().join("python/many_threads.py"))
        .args(["30", "200"]);
    let running = Running::start(command, "many_threads.py", "python3.11");
    let out = dir.join("threads.folded");
    Stoke::spawn(&record_args(&args!["-p", running.pid()], HZ, 3.0, &out))
        .wait_recording(3.0)
        .assert_success();
    let stacks = read_folded(&out);
    let split = split_of(&stacks);
    println!(
        "{} samples, hot_a {}, hot_b {} ({:.1}%)",
        split.total,
        split.a,
        split.b,
        share(split.a, split.b)
    );
    assert!(
        split.a + split.b > split.total * 9 / 10,
        "{} of {} in hot_a or hot_b",
        split.a + split.b,
        split.total
    );
    assert!((share(split.a, split.b) - 71.0).abs() <= 4.0);
}

#[test]
fn a_whole_host_recording_names_python_frames() {
    require_root();
    let dir = TempDir::new("python-host");
    let running = start(Path::new(DEBIAN_PYTHON), 30);
    let out = dir.join("host.folded");
    Stoke::spawn(&record_args(&args!["-a"], HZ, 3.0, &out))
        .wait_recording(3.0)
        .assert_success();
    let stacks: Vec<Stack> = read_folded(&out)
        .into_iter()
        .filter(|s| s.frames[0] == running.root_frame())
        .collect();
    let split = split_of(&stacks);
    println!(
        "{} samples of the process, hot_a {}, hot_b {} ({:.1}%), {} whole",
        split.total,
        split.a,
        split.b,
        share(split.a, split.b),
        split.whole
    );
    assert!(split.total > 1000, "{} samples of the process", split.total);
    assert!(
        split.whole * 10 >= split.total * 9,
        "{} of {} whole",
        split.whole,
        split.total
    );
    assert!((share(split.a, split.b) - 71.0).abs() <= 4.0);
}
