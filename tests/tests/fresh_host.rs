//! What a fresh host does not have, and runs that fail: stoke needs no
//! tracefs or debugfs (a fresh host mounts neither), and its output file
//! appears whole or not at all.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::thread;
use std::time::Duration;

use stoke_tests::{
    args, describe, prepare, process_stacks, read_folded, record_args, require_root, samples_where,
    stoke_bin, Stoke, TempDir, Workload,
};

/// Runs `stoke args` in a mount namespace of its own where tracefs and
/// debugfs are covered by empty tmpfs mounts, after checking that they are.
fn stoke_without_tracefs(args: &[String]) -> Stoke {
    let script = r#"set -e
for dir in /sys/kernel/tracing /sys/kernel/debug; do
  mount -t tmpfs none "$dir"
  [ "$(stat -f -c %T "$dir")" = tmpfs ] || { echo "$dir still mounted" >&2; exit 3; }
done
[ ! -e /sys/kernel/debug/tracing/events ] && [ ! -e /sys/kernel/tracing/events ]
exec "$@""#;
    let mut command = in_mount_namespace(script);
    command.arg(stoke_bin()).args(args);
    Stoke::spawn_command(command)
}

/// `sh -c script sh` in a mount namespace of its own: what the script
/// mounts stays there. Arguments added to the command follow `sh`.
fn in_mount_namespace(script: &str) -> Command {
    let mut command = Command::new("unshare");
    command.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
    ]);
    command
}

#[test]
fn exec_and_exit_are_seen_without_tracefs() {
    let (dir, workload) = prepare("notracefs", "exec_after_burn");
    let then = Workload::build("short_burn", dir.path());
    let out = dir.join("notracefs.folded");

    let mut stoke = stoke_without_tracefs(&record_args(&args!["-a"], 499, 5.0, &out));
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    // Burns 1.5 s as itself, then 1.5 s as short_burn under the same pid,
    // and exits before the recording ends.
    let mut running = workload.spawn(&args![1.5, then.exe().display(), 1.5]);
    let pid = running.pid();
    let status = running.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exec_after_burn failed: {status}");
    stoke.wait_recording(5.0);

    let stacks = read_folded(&out);
    let (before, before_total) = process_stacks(&stacks, &running.root_frame(), 100);
    let named = samples_where(before.iter().copied(), |s| {
        s.contains_run(&["main", "burn_before_exec", "burn_before_exec_leaf"])
    });
    assert!(
        named as f64 > 0.8 * before_total as f64,
        "only {named} of {before_total} samples before the exec are named\n{}",
        describe(before.iter().copied(), 10)
    );
    // After the exec, a fresh snapshot of its maps names the new program.
    let after_root = format!("{} [{pid}]", then.comm());
    let (after, after_total) = process_stacks(&stacks, &after_root, 100);
    let named = samples_where(after.iter().copied(), |s| {
        s.contains_run(&["main", "burn_cpu", "burn_leaf"])
    });
    assert!(
        named as f64 > 0.8 * after_total as f64,
        "only {named} of {after_total} samples after the exec are named as short_burn's\n{}",
        describe(after.iter().copied(), 10)
    );
}

/// The names in `dir`, sorted.
fn names_in(dir: &TempDir) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_killed_recording_leaves_the_old_output_alone() {
    require_root();
    let dir = TempDir::new("killed");
    let target = dir.join("host.svg");
    fs::write(&target, "old").unwrap();
    for signal in [libc::SIGKILL, libc::SIGTERM] {
        let mut stoke = Stoke::spawn(&record_args(&args!["-a"], 99, 30.0, &target));
        stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
        thread::sleep(Duration::from_millis(500));
        stoke.signal(signal);
        if signal == libc::SIGTERM {
            // A second signal quits at once, without output (sent a moment
            // later: two at once would be one pending signal).
            thread::sleep(Duration::from_millis(50));
            stoke.signal(signal);
        }
        let output = stoke.wait(Duration::from_secs(60));
        assert!(!output.status.success(), "{:?}", output.status);
        assert_eq!(
            fs::read_to_string(&target).unwrap(),
            "old",
            "signal {signal}"
        );
        assert_eq!(names_in(&dir), ["host.svg"], "signal {signal}");
    }
}

#[test]
fn a_failed_write_leaves_no_partial_file() {
    require_root();
    let dir = TempDir::new("fullfs");
    let small = dir.join("small");
    fs::create_dir(&small).unwrap();
    fs::set_permissions(&small, fs::Permissions::from_mode(0o755)).unwrap();
    // A filesystem too small for a flame graph (inferno's alone is larger),
    // mounted in a namespace of stoke's own.
    let script = r#"set -e
mount -t tmpfs -o size=16k none "$1"
echo old > "$1/host.svg"
shift
status=0
"$@" || status=$?
echo "left: $(ls -A "$DIR")"
echo "content: $(cat "$DIR/host.svg")"
exit $status"#;
    let mut command = in_mount_namespace(script);
    command
        .arg(&small)
        .arg(stoke_bin())
        .args(record_args(
            &args!["-a", "--idle"],
            499,
            1.0,
            &small.join("host.svg"),
        ))
        .env("DIR", &small);
    let output = Stoke::spawn_command(command).wait(Duration::from_secs(60));
    output.assert_no_panic();
    assert_eq!(output.code(), Some(1), "{}", output.stderr);
    let errors: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.starts_with("stoke: error: "))
        .collect();
    assert!(
        errors.len() == 1 && errors[0].contains("host.svg"),
        "expected one error line naming the output: {}",
        output.stderr
    );
    assert!(
        output.stdout.contains("left: host.svg\n") && output.stdout.contains("content: old\n"),
        "a partial file is left, or the old one clobbered: {}",
        output.stdout
    );
}
