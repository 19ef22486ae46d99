//! Processes that pose as JVMs, or JVMs in hostile surroundings: stoke
//! finishes on time, within a bounded memory, writes its output, and leaves
//! the process unharmed (not killed, not sent SIGQUIT).
//!
//! - a fake JVM whose fake agent memory floods stoke with forged Java
//!   stacks (future, ancient and current times, random threads and
//!   methods) and a forged event log;
//! - a JVM-looking process in a chroot (and a mount namespace of its own)
//!   whose `/tmp` is a symlink to `/etc`, or a FIFO;
//! - thousands of short-lived processes mapping a libjvm.so.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

use profiler_common::jvm::VERSION;
use stoke_tests::{
    args, read_json, record_args, require_root, Running, Stoke, StokeOutput, TempDir, Workload,
    FRAME_POINTER_FLAGS,
};

/// A small library copied as `dir/libjvm.so`: what stoke takes for HotSpot.
fn fake_libjvm(dir: &Path) -> PathBuf {
    let libjvm = dir.join("libjvm.so");
    fs::copy("/lib/x86_64-linux-gnu/libm.so.6", &libjvm).expect("copying libm as libjvm.so");
    libjvm
}

/// Runs stoke with `args` for a `seconds` recording and returns its output
/// and its peak resident memory (VmHWM, sampled until it exits).
fn record_measured(args: &[String], seconds: f64) -> (StokeOutput, u64) {
    let stoke = Stoke::spawn(args);
    let pid = stoke.pid();
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(kb) = vm_hwm_kb(pid) {
                    peak.fetch_max(kb, Ordering::Relaxed);
                }
                thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let output = stoke.wait(Duration::from_secs_f64(seconds + 60.0));
    done.store(true, Ordering::Relaxed);
    watcher.join().expect("the RSS watcher");
    println!(
        "stoke: {:?}, peak RSS {} MB; stderr:\n{}",
        output.elapsed,
        peak.load(Ordering::Relaxed) / 1024,
        output.stderr
    );
    (output, peak.load(Ordering::Relaxed) * 1024)
}

fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Panics unless the recording took at most `seconds + slack` and wrote a
/// non-empty `out`.
fn assert_finished(output: &StokeOutput, seconds: f64, slack: f64, out: &Path) {
    output.assert_success();
    assert!(
        output.elapsed.as_secs_f64() <= seconds + slack,
        "a {seconds} s recording took {:?} (at most {slack} s more allowed)",
        output.elapsed
    );
    let written = fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    assert!(written > 0, "stoke wrote nothing to {}", out.display());
}

/// The `sigurg N sigquit M` line a fake JVM prints when it exits, after
/// asserting that it exited 0 (SIGQUIT, unhandled, would have killed it).
fn signals_received(fake: &mut Running) -> (u32, u32) {
    fake.wait_success(Duration::from_secs(30));
    let text = fake.stdout_text();
    let line = text
        .lines()
        .find(|l| l.starts_with("sigurg "))
        .unwrap_or_else(|| panic!("the fake JVM printed no signal counts:\n{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    (words[1].parse().unwrap(), words[3].parse().unwrap())
}

/// Runs the flooding fake JVM, in a pid namespace of its own with
/// `in_namespace` (its thread ids then are not the host's, and stoke must
/// look them up), records it, and checks stoke and the fake.
fn flood(label: &str, in_namespace: bool) {
    require_root();
    let dir = TempDir::new(label);
    let libjvm = fake_libjvm(dir.path());
    let fake = Workload::build("hostile_fake_jvm", dir.path());
    let fake_args = args![8, libjvm.display(), "flood", VERSION];
    let (mut running, pid) = if in_namespace {
        let mut command = Command::new("unshare");
        command
            .args(["--pid", "--fork", "--kill-child"])
            .arg(fake.exe())
            .args(&fake_args);
        let running = Running::start(command, "hostile_fake_jvm", &fake.comm());
        let children = fs::read_to_string(format!("/proc/{0}/task/{0}/children", running.pid()))
            .expect("reading unshare's children");
        let pid = children
            .split_whitespace()
            .next()
            .expect("the fake")
            .parse()
            .unwrap();
        (running, pid)
    } else {
        let running = fake.spawn(&fake_args);
        let pid = running.pid();
        (running, pid)
    };
    let out = dir.join("flood.json");
    let seconds = 4.0;
    let (output, peak) =
        record_measured(&record_args(&args!["-p", pid], 999, seconds, &out), seconds);
    // The end waits 0.3 s for the last answers and 0.3 s more for names
    // that do not come; then naming thousands of forged frames.
    assert_finished(&output, seconds, 3.0, &out);
    // Taken for a JVM with an agent, and its forged stacks dropped, said in
    // one line.
    let warning = output
        .stderr
        .lines()
        .find(|l| l.starts_with(&format!("stoke: warning: JVM {pid}: dropped")))
        .unwrap_or_else(|| panic!("stoke did not say it dropped forged Java stacks"));
    println!("{warning}");
    // And counted in the summary.
    let profile = read_json(&out);
    let future = profile
        .summary
        .java
        .dropped_stacks
        .get("timed in the future");
    assert!(
        future.is_some_and(|&n| n > 0),
        "no count of Java stacks from the future:\n{}",
        profile.describe()
    );
    // Its header says its agent catches SIGTRAP; the kernel says no
    // handler does: none of its threads got a SIGTRAP event (the fake,
    // alive at the end, says the same).
    assert_eq!(
        profile.summary.timed_threads, 0,
        "stoke timed threads of a process that does not catch SIGTRAP"
    );
    // A recording of one process at 999 Hz needs some 30 MB; the flood may
    // add the bounded 8 MB of held stacks, the bounded code map and
    // requests, and the profile of thousands of distinct forged stacks.
    assert!(
        peak < 100 << 20,
        "stoke's peak RSS was {} MB under the flood (at most 100 MB)",
        peak >> 20
    );
    let (sigurg, sigquit) = signals_received(&mut running);
    println!("the fake JVM got {sigurg} SIGURG, {sigquit} SIGQUIT");
    assert_eq!(sigquit, 0, "stoke sent SIGQUIT to a fake JVM");
}

#[test]
fn a_fake_jvm_flooding_its_fake_agent_memory_costs_stoke_bounded_time_and_memory() {
    flood("hostile-flood", false);
}

#[test]
fn a_flooding_fake_jvm_in_a_pid_namespace_costs_stoke_bounded_time_and_memory() {
    flood("hostile-flood-pidns", true);
}

/// A static build of the fake JVM in a fresh root `dir/root`, with the
/// libjvm.so copy, where `make_tmp` makes `root/tmp`.
fn chroot_with_tmp(dir: &TempDir, make_tmp: impl FnOnce(&Path)) -> (PathBuf, Workload) {
    let root = dir.join("root");
    fs::create_dir(&root).expect("creating the root");
    let mut flags = FRAME_POINTER_FLAGS.to_vec();
    flags.push("-static");
    let fake = Workload::build_with("hostile_fake_jvm", &root, &flags);
    fake_libjvm(&root);
    make_tmp(&root.join("tmp"));
    (root, fake)
}

fn hostile_tmp(label: &str, make_tmp: impl FnOnce(&Path)) {
    require_root();
    let dir = TempDir::new(label);
    let (root, fake) = chroot_with_tmp(&dir, make_tmp);
    // A mount namespace of its own, chrooted: its /tmp is the hostile one.
    let mut command = Command::new("unshare");
    command.args(["-m", "--propagation", "private", "chroot"]);
    command
        .arg(&root)
        .args(["/hostile_fake_jvm", "6", "/libjvm.so", "plain-quit"]);
    let mut running = Running::start(command, "hostile_fake_jvm", &fake.comm());
    let pid = running.pid();
    let etc_before = etc_names();
    let out = dir.join("tmp.txt");
    let seconds = 2.0;
    let (output, peak) =
        record_measured(&record_args(&args!["-p", pid], 99, seconds, &out), seconds);
    // The attach gives up at once or after its 5 s timeout at most.
    assert_finished(&output, seconds, 8.0, &out);
    assert!(
        output
            .stderr
            .lines()
            .any(|l| l.starts_with(&format!("stoke: warning: JVM {pid}:"))),
        "stoke did not say why it keeps the fake JVM native:\n{}",
        output.stderr
    );
    assert!(peak < 100 << 20, "peak RSS {} MB", peak >> 20);
    let etc_after = etc_names();
    let new: Vec<&String> = etc_after.difference(&etc_before).collect();
    assert!(
        new.is_empty(),
        "stoke wrote into /etc through the symlink: {new:?}"
    );
    running.wait_exit(Duration::from_secs(30));
    let (_, sigquit) = signals_received(&mut running);
    assert_eq!(
        sigquit, 0,
        "stoke sent SIGQUIT though it could not write the trigger file"
    );
}

fn etc_names() -> std::collections::BTreeSet<String> {
    fs::read_dir("/etc")
        .expect("listing /etc")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_jvm_whose_tmp_is_a_symlink_to_etc_gets_nothing_written_through_it() {
    hostile_tmp("hostile-tmp-symlink", |tmp| {
        symlink("/etc", tmp).expect("linking tmp to /etc")
    });
}

#[test]
fn a_jvm_whose_tmp_is_a_fifo_does_not_hang_stoke() {
    hostile_tmp("hostile-tmp-fifo", |tmp| {
        let path = std::ffi::CString::new(tmp.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o666) }, 0, "mkfifo");
    });
}

/// Records the whole host for 6 s while 2,000 short-lived processes map
/// `library`; returns stoke's output and peak RSS.
fn record_short_lived(dir: &TempDir, library: &Path, label: &str) -> (StokeOutput, u64) {
    let spawner = Workload::build("hostile_spawner", dir.path());
    let seconds = 6.0;
    let out = dir.join(format!("{label}.txt"));
    let stoke_args = record_args(&args!["-a"], 999, seconds, &out);
    let stoke = thread::spawn(move || record_measured(&stoke_args, seconds));
    thread::sleep(Duration::from_secs(1));
    let mut running = spawner.spawn(&args![seconds - 2.0, 2000, library.display()]);
    running.wait_success(Duration::from_secs(60));
    let (output, peak) = stoke.join().expect("the recording");
    let text = running.stdout_text();
    println!("{label}: {text}");
    assert!(
        text.contains("children 2000 failed 0"),
        "{label}: a short-lived process died or failed:\n{text}"
    );
    // Thousands of new processes cost the sampler's side seconds of work
    // after the end, JVMs or not: the baseline below tells.
    assert_finished(&output, seconds, 30.0, &out);
    (output, peak)
}

#[test]
fn thousands_of_short_lived_fake_jvms_cost_stoke_no_more_than_other_processes() {
    require_root();
    let dir = TempDir::new("hostile-many");
    let libjvm = fake_libjvm(dir.path());
    let other = dir.join("libother.so");
    fs::copy(&libjvm, &other).expect("copying the library");
    let (base, base_peak) = record_short_lived(&dir, &other, "no-jvm");
    let (jvms, jvm_peak) = record_short_lived(&dir, &libjvm, "fake-jvms");
    println!(
        "2,000 short-lived processes: {:?} and {} MB without libjvm.so, {:?} and {} MB with",
        base.elapsed,
        base_peak >> 20,
        jvms.elapsed,
        jvm_peak >> 20
    );
    assert!(
        jvms.elapsed <= base.elapsed + Duration::from_secs(3),
        "mapping libjvm.so made stoke take {:?} instead of {:?}",
        jvms.elapsed,
        base.elapsed
    );
    assert!(
        jvm_peak <= base_peak + (30 << 20),
        "mapping libjvm.so made stoke's peak RSS {} MB instead of {} MB",
        jvm_peak >> 20,
        base_peak >> 20
    );
    let warnings = jvms
        .stderr
        .lines()
        .filter(|l| l.starts_with("stoke: warning:"))
        .count();
    assert!(
        warnings <= 21,
        "{warnings} warning lines for the short-lived fake JVMs (at most 20 and one for the rest)"
    );
}
