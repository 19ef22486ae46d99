//! Where `-o` points decides how the profile gets there: a regular file (or
//! a new name, or a symlink to one) is replaced whole; `-` and
//! `/dev/stdout` are standard output; a character device or a FIFO is
//! written through and stays what it is; a socket or a directory is refused
//! before anything is recorded.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use stoke_tests::{args, prepare, Running, Stoke, StokeOutput};

/// How long a 0.5 s recording may take in all.
const TIMEOUT: Duration = Duration::from_secs(30);

/// `stoke record -p PID -d 0.5` with `extra` arguments, to its end.
fn record(running: &Running, extra: &[String]) -> StokeOutput {
    let mut arguments = args!["record", "-p", running.pid(), "-F", 499, "-d", 0.5].to_vec();
    arguments.extend_from_slice(extra);
    let output = Stoke::spawn(&arguments).wait(TIMEOUT);
    println!("exit {:?}, stderr: {}", output.code(), output.stderr);
    output
}

/// Folded lines (`frames count`) of the workload in `text`.
fn folded_lines(text: &str, comm: &str) -> usize {
    text.lines()
        .filter(|line| {
            line.starts_with(comm)
                && line
                    .rsplit_once(' ')
                    .is_some_and(|(_, count)| count.parse::<u64>().is_ok())
        })
        .count()
}

fn mknod(path: &Path, kind: libc::mode_t, major: u32, minor: u32) {
    let name = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    let made = unsafe { libc::mknod(name.as_ptr(), kind | 0o666, libc::makedev(major, minor)) };
    assert_eq!(made, 0, "mknod {}", path.display());
}

#[test]
fn a_character_device_is_written_through_and_stays_one() {
    let (dir, workload) = prepare("out-chardev", "fp_split");
    let running = workload.spawn(&["30"]);
    // A node like /dev/null, in a directory of the test's own.
    let null = dir.join("null");
    mknod(&null, libc::S_IFCHR, 1, 3);
    let output = record(&running, &args!["-o", null.display(), "--format", "folded"]);
    output.assert_success();
    let metadata = fs::symlink_metadata(&null).unwrap();
    assert!(
        metadata.file_type().is_char_device(),
        "{} is no longer a character device: {:?}",
        null.display(),
        metadata.file_type()
    );
    assert_eq!(metadata.rdev(), libc::makedev(1, 3));
}

#[test]
fn a_dash_and_dev_stdout_are_standard_output() {
    let (_dir, workload) = prepare("out-stdout", "fp_split");
    let running = workload.spawn(&["30"]);
    for target in ["-", "/dev/stdout"] {
        let output = record(&running, &args!["-o", target]);
        output.assert_success();
        let lines = folded_lines(&output.stdout, running.comm());
        assert!(
            lines > 0,
            "-o {target}: no folded stacks of {} on stdout:\n{}",
            running.comm(),
            output.stdout
        );
        assert!(
            output.stderr.contains("standard output"),
            "-o {target}: {}",
            output.stderr
        );
    }
    assert!(
        fs::symlink_metadata("/dev/stdout")
            .unwrap()
            .file_type()
            .is_symlink(),
        "/dev/stdout is still a symlink"
    );
}

#[test]
fn a_fifo_is_written_through_to_its_reader() {
    let (dir, workload) = prepare("out-fifo", "fp_split");
    let running = workload.spawn(&["30"]);
    let fifo = dir.join("f.folded");
    let name = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let reader = std::thread::spawn({
        let fifo = fifo.clone();
        move || fs::read_to_string(fifo).unwrap()
    });
    let output = record(&running, &args!["-o", fifo.display()]);
    output.assert_success();
    let text = reader.join().unwrap();
    assert!(folded_lines(&text, running.comm()) > 0, "{text}");
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn a_symlink_to_a_file_stays_and_its_file_is_replaced() {
    let (dir, workload) = prepare("out-symlink", "fp_split");
    let running = workload.spawn(&["30"]);
    let real = dir.join("real.folded");
    let link = dir.join("latest.folded");
    fs::write(&real, "old 1\n").unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    record(&running, &args!["-o", link.display()]).assert_success();
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let text = fs::read_to_string(&real).unwrap();
    assert!(folded_lines(&text, running.comm()) > 0, "{text}");
}

#[test]
fn sockets_directories_and_several_events_on_one_stream_are_refused() {
    let (dir, workload) = prepare("out-refused", "fp_split");
    let running = workload.spawn(&["30"]);
    let socket = dir.join("s.folded");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    record(&running, &args!["-o", socket.display()])
        .assert_user_error(&[&socket.display().to_string(), "socket"]);
    record(
        &running,
        &args!["-o", dir.path().display(), "--format", "folded"],
    )
    .assert_user_error(&["directory"]);
    record(&running, &args!["-o", "-", "-e", "cpu", "-e", "offcpu"])
        .assert_user_error(&["one profile", "file"]);
    assert!(fs::symlink_metadata(&socket)
        .unwrap()
        .file_type()
        .is_socket());
}
