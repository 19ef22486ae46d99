//! Errors a user can cause: one line on stderr starting with
//! `stoke: error: `, exit status 1 (2 for argument-parsing errors), no panic
//! or backtrace, and well before the `-d 30` the command asked for.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use stoke_tests::{args, pid_max, require_root, stoke_bin, Stoke, StokeOutput, TempDir, Workload};

/// How long stoke may take to refuse a command that asks for 30 s.
const FAST: Duration = Duration::from_secs(10);
/// When to give up on it altogether.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Waits for a started stoke to finish and returns its output, asserting it
/// was quick.
fn finish(stoke: Stoke) -> StokeOutput {
    let output = stoke.wait(TIMEOUT);
    println!("exit {:?}, stderr: {}", output.code(), output.stderr);
    assert!(
        output.elapsed < FAST,
        "stoke took {:?} to refuse the command (it should fail before recording)",
        output.elapsed
    );
    output
}

/// Runs stoke with `args` and returns its output, asserting it was quick.
fn run(args: &[String]) -> StokeOutput {
    finish(Stoke::spawn(args))
}

/// Runs a prepared command (stoke under a wrapper), asserting it was quick.
fn run_command(command: Command) -> StokeOutput {
    finish(Stoke::spawn_command(command))
}

/// The arguments of `stoke record <select> -d 30 -o <out>`: a 30 s
/// recording, which stoke should refuse well before it could end.
fn record_30s(select: &[String], out: &Path) -> Vec<String> {
    let mut args = vec!["record".to_owned()];
    args.extend_from_slice(select);
    args.extend(args!["-d", 30, "-o", out.display()]);
    args
}

/// Runs `stoke record <select> -d 30 -o <dir>/x.folded` ([`run`]) with a
/// fresh directory named after `label`. Returns the output and the
/// directory, which is kept for inspection if the test then fails.
fn refused(label: &str, select: &[String]) -> (StokeOutput, TempDir) {
    let dir = TempDir::new(label);
    let output = run(&record_30s(select, &dir.join("x.folded")));
    (output, dir)
}

/// A copy of the stoke binary, with its directory, that any user can run
/// (the workspace may not be traversable for `nobody`).
fn world_executable_copy(dir: &TempDir) -> PathBuf {
    let bin_dir = dir.join("bin");
    fs::create_dir(&bin_dir).unwrap();
    fs::set_permissions(&bin_dir, fs::Permissions::from_mode(0o755)).unwrap();
    let copy = bin_dir.join("stoke");
    fs::copy(stoke_bin(), &copy).expect("copying the stoke binary");
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

#[test]
fn non_root_user_is_refused() {
    require_root();
    let dir = TempDir::new("nonroot");
    let stoke = world_executable_copy(&dir);
    let out_dir = dir.join("out");
    fs::create_dir(&out_dir).unwrap();
    fs::set_permissions(&out_dir, fs::Permissions::from_mode(0o777)).unwrap();

    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&stoke)
        .args(record_30s(&args!["-a"], &out_dir.join("x.folded")))
        .current_dir(&out_dir);
    let output = run_command(command);
    output.assert_user_error(&["root", "CAP_BPF"]);
}

#[test]
fn root_without_capabilities_is_refused() {
    require_root();
    let dir = TempDir::new("nocaps");
    let mut command = Command::new("setpriv");
    command
        .args([
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(stoke_bin())
        .args(record_30s(&args!["-a"], &dir.join("x.folded")));
    let output = run_command(command);
    output.assert_user_error(&["root", "CAP_BPF"]);
}

#[test]
fn missing_btf_is_reported() {
    require_root();
    assert!(
        Path::new("/sys/kernel/btf/vmlinux").exists(),
        "this host has no /sys/kernel/btf/vmlinux to hide"
    );
    let dir = TempDir::new("nobtf");
    // In a private mount namespace, hide /sys/kernel/btf under an empty
    // tmpfs, check that it is hidden, then exec stoke.
    let script = "mount -t tmpfs none /sys/kernel/btf || exit 97; \
                  if [ -e /sys/kernel/btf/vmlinux ]; then echo 'BTF still visible' >&2; exit 98; fi; \
                  exec \"$0\" \"$@\"";
    let mut command = Command::new("unshare");
    command
        .args(["-m", "sh", "-c", script])
        .arg(stoke_bin())
        .args(record_30s(&args!["-a"], &dir.join("x.folded")));
    let output = run_command(command);
    assert!(
        !matches!(output.code(), Some(97 | 98)),
        "could not hide /sys/kernel/btf/vmlinux for the test: {}",
        output.stderr
    );
    output.assert_user_error(&["BTF"]);
    assert!(
        Path::new("/sys/kernel/btf/vmlinux").exists(),
        "the host's BTF must still be there"
    );
}

#[test]
fn refused_perf_event_open_is_reported() {
    require_root();
    let dir = TempDir::new("noperf");
    let deny = Workload::build_with("deny_perf", dir.path(), &["-O2"]);
    let mut command = Command::new(deny.exe());
    command
        .arg(stoke_bin())
        .args(record_30s(&args!["-a"], &dir.join("x.folded")));
    let output = run_command(command);
    assert_ne!(
        output.code(),
        Some(97),
        "deny_perf could not install its seccomp filter: {}",
        output.stderr
    );
    output.assert_user_error(&["perf_event_open"]);
}

#[test]
fn pid_above_pid_max_is_reported() {
    require_root();
    let pid = pid_max() + 1;
    let (output, _dir) = refused("nopid", &args!["-p", pid]);
    output.assert_user_error(&["no process", &pid.to_string()]);
}

#[test]
fn pid_of_exited_process_is_reported() {
    require_root();
    let mut child = Command::new("true").spawn().expect("running true");
    let dead = child.id();
    child.wait().unwrap();
    let (output, _dir) = refused("deadpid", &args!["-p", dead]);
    output.assert_user_error(&["no process", &dead.to_string()]);

    // One dead pid in a list with a live one (this test process).
    let alive = std::process::id();
    let (output, _dir) = refused("deadpid", &args!["-p", format!("{alive},{dead}")]);
    output.assert_user_error(&["no process", &dead.to_string()]);
}

#[test]
fn pid_of_zombie_is_reported() {
    require_root();
    let mut child = Command::new("true").spawn().expect("running true");
    let zombie = child.id();
    // Waited for without reaping: its /proc entry stays, but nothing of it
    // runs, and a recording of it would have no sample.
    // SAFETY: waitid with a valid out-pointer, on our own child.
    let waited = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PID,
            zombie,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        )
    };
    assert_eq!(waited, 0, "waiting for true");
    assert!(Path::new(&format!("/proc/{zombie}")).exists());
    let (output, _dir) = refused("zombiepid", &args!["-p", zombie]);
    child.wait().unwrap();
    output.assert_user_error(&["exited", &zombie.to_string()]);
}

#[test]
fn unwritable_output_is_reported() {
    require_root();
    assert!(!Path::new("/nonexistent-dir").exists());
    let output = run(&record_30s(
        &args!["-a"],
        Path::new("/nonexistent-dir/x.svg"),
    ));
    output.assert_user_error(&["/nonexistent-dir/x.svg"]);
}

#[test]
fn a_bad_one_of_several_outputs_fails_before_recording() {
    require_root();
    let dir = TempDir::new("badsecond");
    let good = dir.join("x.pb.gz");
    let output = run(&args![
        "record",
        "-a",
        "-d",
        30,
        "-o",
        good.display(),
        "-o",
        "/nonexistent-dir/x.json"
    ]);
    output.assert_user_error(&["/nonexistent-dir/x.json"]);
    assert!(
        !good.exists(),
        "{} written by a refused recording",
        good.display()
    );
}

#[test]
fn several_outputs_need_distinct_paths_and_their_own_formats() {
    require_root();
    let dir = TempDir::new("severalout");
    let (svg, other) = (dir.join("x.svg"), dir.join("y.svg"));
    let output = run(&args![
        "record",
        "-a",
        "-d",
        30,
        "-o",
        svg.display(),
        "-o",
        svg.display()
    ]);
    output.assert_user_error(&["twice"]);
    let output = run(&args![
        "record",
        "-a",
        "-d",
        30,
        "--format",
        "txt",
        "-o",
        svg.display(),
        "-o",
        other.display()
    ]);
    output.assert_user_error(&["--format"]);
}

#[test]
fn zero_frequency_is_refused() {
    require_root();
    let (output, _dir) = refused("f0", &args!["-a", "-F", 0]);
    output.assert_rejected(&["frequency"]);
}

#[test]
fn absurd_frequency_is_refused() {
    require_root();
    let (output, _dir) = refused("fhuge", &args!["-a", "-F", 10_000_000]);
    output.assert_rejected(&["frequency"]);
}

#[test]
fn run_queue_time_beside_off_cpu_or_wall_clock_time_is_refused() {
    require_root();
    for events in ["runqueue,offcpu", "wall,runqueue", "runqueue,lock"] {
        let (output, dir) = refused("runqueue-with", &args!["-a", "-e", events]);
        output.assert_rejected(&["runqueue", "own"]);
        assert!(!dir.join("x.folded").exists(), "-e {events} left an output");
    }
}

#[test]
fn unknown_flag_is_a_usage_error() {
    require_root();
    let output = run(&args!["record", "-a", "-d", 30, "--no-such-flag"]);
    output.assert_usage_error(&["--no-such-flag"]);
}

#[test]
fn non_numeric_frequency_is_refused() {
    require_root();
    let (output, _dir) = refused("fabc", &args!["-a", "-F", "abc"]);
    output.assert_rejected(&[]);
}

#[test]
fn output_without_known_extension_needs_a_format() {
    require_root();
    let dir = TempDir::new("noext");
    let target = dir.join("out.bin");
    let output = run(&record_30s(&args!["-a"], &target));
    output.assert_rejected(&[]);
    assert!(!target.exists(), "stoke wrote {} anyway", target.display());
}

#[test]
fn all_cpus_and_pids_together_are_refused() {
    require_root();
    let (output, _dir) = refused("aandp", &args!["-a", "-p", std::process::id()]);
    output.assert_rejected(&[]);
}
