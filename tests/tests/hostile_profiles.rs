//! Hostile profiles given to `stoke convert`: a device, a FIFO, endless
//! zeros on standard input, a gzip bomb, bytes that are not UTF-8 and
//! counts at the edge of a `u64`. Each must end within [`MAX_TIME`] at a
//! peak RSS under [`MAX_RSS_MB`] (measured by `wait4` on stoke itself),
//! with one error line and no output file, or with a warning and the
//! profile. A large well-formed file must still convert.

use std::{
    fmt::Write as _,
    fs::{self, File},
    io::Write as _,
    mem::MaybeUninit,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use stoke_tests::{require_root, stoke_bin, TempDir};

/// The most a refusal may take.
const MAX_TIME: Duration = Duration::from_secs(1);
/// The most memory a refusal may take.
const MAX_RSS_MB: u64 = 64;

/// What one run of stoke did.
struct Run {
    success: bool,
    stderr: String,
    elapsed: Duration,
    peak_rss_mb: u64,
}

/// Runs `stoke convert IN -o OUT` in `dir`, with `stdin` as its standard
/// input, and measures it.
fn convert(dir: &Path, input: &str, output: &str, stdin: Stdio) -> Run {
    let stderr_path = dir.join("stderr");
    let started = Instant::now();
    // Reaped by wait4, for its rusage.
    let pid = Command::new(stoke_bin())
        .args(["convert", input, "-o", output])
        .current_dir(dir)
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .expect("starting stoke")
        .id() as i32;
    let mut status = 0;
    let mut usage = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: valid out-pointers; the pid is this test's unreaped child.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
    assert_eq!(waited, pid, "wait4");
    let elapsed = started.elapsed();
    // SAFETY: wait4 filled it.
    let usage = unsafe { usage.assume_init() };
    let run = Run {
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        stderr: fs::read_to_string(&stderr_path).unwrap(),
        elapsed,
        peak_rss_mb: usage.ru_maxrss as u64 / 1024,
    };
    println!(
        "convert {input}: {:?}, {} MB peak RSS, stderr: {}",
        run.elapsed, run.peak_rss_mb, run.stderr
    );
    run
}

/// Asserts that `run` refused its input quickly, in little memory, with
/// one error line containing `expected`, and wrote nothing to `output`.
fn assert_refused(run: &Run, expected: &str, output: &Path) {
    assert!(!run.success, "stoke succeeded: {}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {:?}", run.stderr);
    assert!(
        lines[0].starts_with("stoke: error: ") && lines[0].contains(expected),
        "{:?} does not say {expected:?}",
        lines[0]
    );
    assert!(run.elapsed <= MAX_TIME, "took {:?}", run.elapsed);
    assert!(
        run.peak_rss_mb <= MAX_RSS_MB,
        "peak RSS {} MB",
        run.peak_rss_mb
    );
    assert!(!output.exists(), "{} was written", output.display());
}

#[test]
fn devices_fifos_and_endless_input_are_refused_in_bounds() {
    require_root();
    let dir = TempDir::new("hostile-profiles");
    let out = dir.path().join("x.folded");
    let run = convert(dir.path(), "/dev/zero", "x.folded", Stdio::null());
    assert_refused(&run, "/dev/zero is not a regular file", &out);

    let fifo = dir.path().join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let run = convert(dir.path(), "fifo", "x.folded", Stdio::null());
    assert_refused(&run, "fifo is not a regular file", &out);

    // Zeros on standard input: one endless line.
    let zeros = File::open("/dev/zero").unwrap();
    let run = convert(dir.path(), "-", "x.folded", zeros.into());
    assert_refused(&run, "line 1 of standard input is longer than 1 MiB", &out);
}

#[test]
fn a_gzip_bomb_is_refused_before_it_unzips() {
    require_root();
    let dir = TempDir::new("hostile-profiles");
    // 512 MiB of zeros, twice what a profile may unzip to.
    let status = Command::new("sh")
        .args(["-c", "head -c 512M /dev/zero | gzip -1 > bomb.pb.gz"])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let run = convert(dir.path(), "bomb.pb.gz", "x.folded", Stdio::null());
    assert_refused(
        &run,
        "bomb.pb.gz unzips to more than 256 MiB",
        &dir.path().join("x.folded"),
    );
}

#[test]
fn invalid_utf8_and_huge_counts_are_read_with_a_warning() {
    require_root();
    let dir = TempDir::new("hostile-profiles");
    fs::write(
        dir.path().join("in.folded"),
        b"main;\xffbad 2\nmain;good 1\n",
    )
    .unwrap();
    let run = convert(dir.path(), "in.folded", "out.folded", Stdio::null());
    assert!(run.success, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("stoke: warning: in.folded: 1 lines had invalid UTF-8, read lossily"),
        "{}",
        run.stderr
    );
    let out = fs::read_to_string(dir.path().join("out.folded")).unwrap();
    assert!(
        out.contains("main;\u{fffd}bad 2") && out.contains("main;good 1"),
        "{out}"
    );

    let max = u64::MAX;
    fs::write(
        dir.path().join("big.folded"),
        format!("a;b {max}\na;b {max}\n"),
    )
    .unwrap();
    let run = convert(dir.path(), "big.folded", "big-out.folded", Stdio::null());
    assert!(run.success, "{}", run.stderr);
    assert!(run.stderr.contains("held there"), "{}", run.stderr);
    let out = fs::read_to_string(dir.path().join("big-out.folded")).unwrap();
    assert_eq!(out.trim(), format!("a;b {max}"));
}

#[test]
fn a_large_folded_file_still_converts() {
    require_root();
    let dir = TempDir::new("hostile-profiles");
    const STACKS: usize = 20_000;
    let mut file = File::create(dir.path().join("large.folded")).unwrap();
    let mut line = String::new();
    for stack in 0..STACKS {
        line.clear();
        write!(line, "app [1];main").unwrap();
        for depth in 0..45 {
            write!(
                line,
                ";com.example.service.Handler{}.step{depth}",
                stack % 97
            )
            .unwrap();
        }
        writeln!(line, ";leaf{stack} {}", stack % 10 + 1).unwrap();
        file.write_all(line.as_bytes()).unwrap();
    }
    drop(file);
    let size = fs::metadata(dir.path().join("large.folded")).unwrap().len();
    assert!(size > 30 << 20, "{size} bytes");
    let run = convert(dir.path(), "large.folded", "out.folded", Stdio::null());
    assert!(run.success, "{}", run.stderr);
    let samples: u64 = (0..STACKS as u64).map(|stack| stack % 10 + 1).sum();
    assert!(
        run.stderr
            .contains(&format!("{STACKS} stacks, {samples} samples")),
        "{}",
        run.stderr
    );
    // Generous: the file's size in names and frames, several times over.
    assert!(run.peak_rss_mb < 512, "peak RSS {} MB", run.peak_rss_mb);
    assert!(
        run.elapsed < Duration::from_secs(30),
        "took {:?}",
        run.elapsed
    );
}
