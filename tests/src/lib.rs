//! Shared harness for Stoke's end-to-end tests.
//!
//! The tests in `tests/tests/` run the real `stoke` binary (as root, with
//! real BPF) against small C programs from `tests/workloads/`, which are
//! compiled at test time with `cc`, and assert on the profiles it writes.
//! The Java tests (`java_*.rs`) run Java programs from
//! `tests/workloads/java/`, compiled at test time with the `javac` of each
//! JDK under test ([`JDK_17`], [`TEMURIN_25`]) and started with no JVM
//! option, so that stoke has to attach to them as they run.
//!
//! The binary is taken from the `STOKE_BIN` environment variable, or else
//! from `<workspace root>/target/release/stoke` (run `cargo build --release`
//! first). Run the suite serially:
//!
//! ```text
//! cargo build --release
//! cargo test -p stoke-tests -- --test-threads=1
//! ```

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Builds an array of `String` command-line arguments from anything that
/// implements `Display`: `args!["record", "-p", pid, "-o", path.display()]`.
#[macro_export]
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        [$(($arg).to_string()),*]
    };
}

/// The directory of this crate (`<workspace root>/tests`).
pub fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    crate_dir()
        .parent()
        .expect("the tests crate lives inside the workspace")
        .to_path_buf()
}

/// Runs `program` (a build tool: binutils' strip, objcopy, readelf...)
/// with `args` and returns its stdout.
///
/// # Panics
///
/// If it cannot be run or fails; the message carries its stderr.
pub fn run_tool(program: &str, args: &[&OsStr]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program} (binutils): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The directory holding the C workloads.
pub fn workloads_dir() -> PathBuf {
    crate_dir().join("workloads")
}

/// Panics unless the test process runs as root: every test here loads BPF
/// programs through `stoke`, so without root they cannot run, and they must
/// never be silently skipped.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the stoke end-to-end tests must run as root (they load BPF programs); euid is {euid}"
    );
}

/// The common start of a test: [`require_root`], then a fresh [`TempDir`]
/// named after `label` with `tests/workloads/<workload>.c` built in it
/// ([`Workload::build`]).
pub fn prepare(label: &str, workload: &str) -> (TempDir, Workload) {
    require_root();
    let dir = TempDir::new(label);
    let workload = Workload::build(workload, dir.path());
    (dir, workload)
}

/// The `stoke` binary under test: `$STOKE_BIN` if set, else
/// `<workspace root>/target/release/stoke`.
///
/// # Panics
///
/// If the binary does not exist, with a message saying to build it.
pub fn stoke_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("STOKE_BIN") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "STOKE_BIN is set to {}, which is not a file",
            path.display()
        );
        return path;
    }
    let path = workspace_root().join("target/release/stoke");
    assert!(
        path.is_file(),
        "the stoke binary was not found at {}: run `cargo build --release` first \
         (or set STOKE_BIN to the binary to test)",
        path.display()
    );
    path
}

/// A temporary directory under [`std::env::temp_dir`], removed on drop
/// unless the test is panicking (then it is kept, and its path printed, to
/// look at what the failed test left there).
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh, empty directory whose name contains `label`.
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("stoke-tests-{label}-{}-{n}", std::process::id()));
        if path.exists() {
            fs::remove_dir_all(&path).expect("removing a stale temporary directory");
        }
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        TempDir { path }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("keeping {} for inspection", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// The compiler flags the profiling workloads are built with: frame pointers
/// everywhere (leaf functions too) and debug info, no `-static`.
pub const FRAME_POINTER_FLAGS: &[&str] = &[
    "-O1",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-g",
];

/// A C program from `tests/workloads/`, compiled into a temporary directory.
#[derive(Debug, Clone)]
pub struct Workload {
    name: String,
    exe: PathBuf,
}

impl Workload {
    /// Compiles `tests/workloads/<name>.c` into `dir/<name>` with
    /// [`FRAME_POINTER_FLAGS`].
    pub fn build(name: &str, dir: &Path) -> Self {
        Self::build_with(name, dir, FRAME_POINTER_FLAGS)
    }

    /// Compiles `tests/workloads/<name>.c` into `dir/<name>` with `flags`
    /// (plus warnings, `-pthread` and the workloads directory as include
    /// path).
    ///
    /// # Panics
    ///
    /// If `cc` fails; the panic message carries its output.
    pub fn build_with(name: &str, dir: &Path, flags: &[&str]) -> Self {
        let source = workloads_dir().join(format!("{name}.c"));
        let exe = dir.join(name);
        let output = Command::new("cc")
            .args(flags)
            .args(["-Wall", "-Wextra", "-pthread", "-I"])
            .arg(workloads_dir())
            .arg("-o")
            .arg(&exe)
            .arg(&source)
            .output()
            .unwrap_or_else(|e| panic!("running cc for {}: {e}", source.display()));
        assert!(
            output.status.success(),
            "cc failed to build {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        Workload {
            name: name.to_owned(),
            exe,
        }
    }

    /// A copy of the executable in `dir` (another file, the same bytes).
    ///
    /// # Panics
    ///
    /// If the copy fails.
    pub fn copy_to(&self, dir: &Path) -> Self {
        let exe = dir.join(&self.name);
        fs::copy(&self.exe, &exe)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", self.exe.display(), exe.display()));
        Workload {
            name: self.name.clone(),
            exe,
        }
    }

    /// The workload's name (its source file's stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path of the compiled executable.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// The kernel's process name (`comm`) of the running workload: the
    /// executable's name cut to 15 bytes.
    pub fn comm(&self) -> String {
        self.name.chars().take(15).collect()
    }

    /// Starts the workload with `args` (the first is its run time in
    /// seconds) and waits, at most 20 s, until it prints `ready` on stdout.
    /// The child is killed when the returned handle is dropped.
    pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S]) -> Running {
        self.spawn_in(args, None)
    }

    /// Like [`Workload::spawn`], with the child's working directory set to
    /// `cwd`.
    pub fn spawn_in<S: AsRef<OsStr>>(&self, args: &[S], cwd: Option<&Path>) -> Running {
        let mut command = Command::new(&self.exe);
        command.args(args);
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        Running::start(command, &self.name, &self.comm())
    }
}

/// A running workload process; killed (and reaped) on drop.
#[derive(Debug)]
pub struct Running {
    name: String,
    comm: String,
    child: Child,
    exited: Option<ExitStatus>,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<Vec<Line>>>,
}

/// One line a workload printed on stdout, and when the harness read it.
#[derive(Debug, Clone)]
pub struct Line {
    /// When the line was read.
    pub at: Instant,
    /// The line, without its newline.
    pub text: String,
}

impl Running {
    /// Starts `command` (stdin closed, stdout and stderr captured) as the
    /// workload `name` whose process is called `comm`, and waits, at most
    /// 20 s, until it prints `ready` on stdout.
    ///
    /// # Panics
    ///
    /// If it cannot be started, or exits or stays silent instead of getting
    /// ready; the message carries its stderr.
    pub fn start(mut command: Command, name: &str, comm: &str) -> Running {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
        let stderr = Arc::new(Mutex::new(String::new()));
        read_as_it_comes(child.stderr.take().expect("stderr is piped"), &stderr);
        let stdout = Arc::new(Mutex::new(Vec::new()));
        {
            let pipe = child.stdout.take().expect("stdout is piped");
            let stdout = Arc::clone(&stdout);
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(text) = line else { break };
                    let at = Instant::now();
                    stdout.lock().unwrap().push(Line { at, text });
                }
            });
        }
        let mut running = Running {
            name: name.to_owned(),
            comm: comm.to_owned(),
            child,
            exited: None,
            stderr,
            stdout,
        };
        running.wait_for_line("ready", Duration::from_secs(20));
        running
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's `comm`.
    pub fn comm(&self) -> &str {
        &self.comm
    }

    /// The root frame Stoke gives this process's stacks: `<comm> [<pid>]`.
    pub fn root_frame(&self) -> String {
        format!("{} [{}]", self.comm, self.pid())
    }

    /// What the workload wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The lines the workload wrote on stdout so far.
    pub fn stdout_lines(&self) -> Vec<Line> {
        self.stdout.lock().unwrap().clone()
    }

    /// The number of stdout lines starting with `prefix` that were read
    /// after `since`.
    pub fn lines_since(&self, prefix: &str, since: Instant) -> usize {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.at > since && line.text.starts_with(prefix))
            .count()
    }

    /// Waits at most `timeout` for a stdout line that starts with `prefix`,
    /// and returns it (the first such line, if it was printed already).
    ///
    /// # Panics
    ///
    /// If the process exits or `timeout` passes first; the message carries
    /// its stderr.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let mut last_look = false;
        loop {
            if let Some(line) = self
                .stdout
                .lock()
                .unwrap()
                .iter()
                .find(|line| line.text.starts_with(prefix))
            {
                return line.text.clone();
            }
            if last_look {
                panic!(
                    "workload {} (pid {}) printed no line starting with {prefix:?} \
                     (exit status {:?}); stdout:\n{}\nstderr:\n{}",
                    self.name,
                    self.pid(),
                    self.exited,
                    self.stdout_text(),
                    self.stderr()
                );
            }
            if !self.is_alive() || Instant::now() >= deadline {
                // One more look once the readers caught up with what it
                // printed before.
                last_look = true;
                thread::sleep(Duration::from_millis(100));
            } else {
                thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// The thread id a workload printed as `tid N` (the Java workloads
    /// print the thread that runs their hot loop, see `Support.java`).
    pub fn printed_tid(&mut self) -> u32 {
        let line = self.wait_for_line("tid ", Duration::from_secs(20));
        line["tid ".len()..]
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("bad `tid N` line {line:?}: {e}"))
    }

    /// Waits at most `timeout` for the process to exit on its own
    /// ([`Running::wait_exit`]) and panics unless it exited with status 0;
    /// the message carries its stdout and stderr.
    pub fn wait_success(&mut self, timeout: Duration) {
        let status = self.wait_exit(timeout);
        assert!(
            status.success(),
            "workload {} failed ({status}); stdout:\n{}\nstderr:\n{}",
            self.name,
            self.stdout_text(),
            self.stderr()
        );
    }

    /// Everything the workload wrote on stdout so far, as text.
    pub fn stdout_text(&self) -> String {
        let lines = self.stdout.lock().unwrap();
        lines
            .iter()
            .map(|line| format!("{}\n", line.text))
            .collect()
    }

    /// Whether the process is still running (not exited, not a zombie
    /// waiting to be reaped).
    pub fn is_alive(&mut self) -> bool {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().expect("waiting for a workload");
        }
        self.exited.is_none()
    }

    /// The process's threads as `(tid, thread comm)`, read from
    /// `/proc/<pid>/task`.
    pub fn threads(&self) -> Vec<(u32, String)> {
        let task_dir = format!("/proc/{}/task", self.pid());
        let mut threads: Vec<(u32, String)> = fs::read_dir(&task_dir)
            .unwrap_or_else(|e| panic!("reading {task_dir}: {e}"))
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let comm = fs::read_to_string(entry.path().join("comm")).ok()?;
                Some((tid, comm.trim_end_matches('\n').to_owned()))
            })
            .collect();
        threads.sort();
        threads
    }

    /// Waits at most `timeout` for the process to exit on its own.
    ///
    /// # Panics
    ///
    /// If it is still running after `timeout` (it is killed on drop).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.exited {
            return status;
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for a workload") {
                self.exited = Some(status);
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "workload {} (pid {}) still running after {timeout:?}",
                self.name,
                self.pid()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A JDK the Java tests run their workloads on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jdk {
    /// A short name for messages and directory names.
    pub label: &'static str,
    /// The JDK's home directory (holding `bin/java` and `bin/javac`).
    pub home: &'static str,
}

/// Debian's OpenJDK 17.
pub const JDK_17: Jdk = Jdk {
    label: "jdk17",
    home: "/usr/lib/jvm/java-17-openjdk-amd64",
};

/// Eclipse Temurin 25.
pub const TEMURIN_25: Jdk = Jdk {
    label: "temurin25",
    home: "/usr/lib/jvm/temurin-25-jdk-amd64",
};

impl Jdk {
    /// The path of `bin/<tool>` in this JDK.
    ///
    /// # Panics
    ///
    /// If it does not exist: a missing JDK fails the test, it is never
    /// silently skipped.
    pub fn tool(&self, tool: &str) -> PathBuf {
        let path = Path::new(self.home).join("bin").join(tool);
        assert!(
            path.is_file(),
            "{} is missing: the Java tests need the JDK {} at {}",
            path.display(),
            self.label,
            self.home
        );
        path
    }

    /// HotSpot's `libjvm.so` in this JDK.
    pub fn libjvm(&self) -> PathBuf {
        let path = Path::new(self.home).join("lib/server/libjvm.so");
        assert!(path.is_file(), "{} is missing", path.display());
        path
    }
}

/// The directory holding the Java workloads.
pub fn java_workloads_dir() -> PathBuf {
    workloads_dir().join("java")
}

/// A Java program from `tests/workloads/java/`, compiled with one JDK.
#[derive(Debug, Clone)]
pub struct JavaWorkload {
    class: String,
    classes: PathBuf,
    jdk: Jdk,
}

impl JavaWorkload {
    /// Compiles `tests/workloads/java/<class>.java`, with the `Support`
    /// class every workload uses, with `jdk`'s javac into
    /// `dir/<jdk label>-<class>/`.
    ///
    /// # Panics
    ///
    /// If javac fails; the panic message carries its output.
    pub fn build(class: &str, jdk: Jdk, dir: &Path) -> Self {
        let classes = dir.join(format!("{}-{class}", jdk.label));
        fs::create_dir_all(&classes)
            .unwrap_or_else(|e| panic!("creating {}: {e}", classes.display()));
        let sources =
            [class, "Support"].map(|name| java_workloads_dir().join(format!("{name}.java")));
        let output = Command::new(jdk.tool("javac"))
            .arg("-d")
            .arg(&classes)
            .args(&sources)
            .output()
            .unwrap_or_else(|e| panic!("running javac for {class}: {e}"));
        assert!(
            output.status.success(),
            "javac ({}) failed to build {class}:\n{}",
            jdk.label,
            String::from_utf8_lossy(&output.stderr)
        );
        JavaWorkload {
            class: class.to_owned(),
            classes,
            jdk,
        }
    }

    /// The directory of its classes: its class path.
    pub fn classes(&self) -> &Path {
        &self.classes
    }

    /// The workload's main class.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// The JDK it runs on.
    pub fn jdk(&self) -> Jdk {
        self.jdk
    }

    /// Starts `java -cp <classes> <class> <args>` with no JVM option at all
    /// (stoke must attach to JVMs as they are) and waits, at most 20 s,
    /// until it prints `ready`. The JVM is killed when the returned handle
    /// is dropped.
    pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S]) -> Running {
        self.spawn_with_options::<&str, S>(&[], args)
    }

    /// [`JavaWorkload::spawn`] with JVM options before the class: for the
    /// controls of a test, whose JVM must behave otherwise.
    pub fn spawn_with_options<O: AsRef<OsStr>, S: AsRef<OsStr>>(
        &self,
        options: &[O],
        args: &[S],
    ) -> Running {
        let mut command = Command::new(self.jdk.tool("java"));
        command
            .args(options)
            .arg("-cp")
            .arg(&self.classes)
            .arg(&self.class)
            .args(args)
            // The JVM's own settings must not come from the environment.
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .env_remove("_JAVA_OPTIONS");
        let name = format!("{} ({})", self.class, self.jdk.label);
        Running::start(command, &name, "java")
    }
}

/// The method of a Java frame (`pkg.Class.method_[j]` JIT-compiled,
/// `_[i]` inlined or `_[0]` interpreted): the name without its suffix, or
/// `None` for any other frame.
pub fn java_method(frame: &str) -> Option<&str> {
    frame
        .strip_suffix("_[j]")
        .or_else(|| frame.strip_suffix("_[i]"))
        .or_else(|| frame.strip_suffix("_[0]"))
        .filter(|method| !method.is_empty())
}

/// Whether a frame is a Java frame ([`java_method`]).
pub fn is_java_frame(frame: &str) -> bool {
    java_method(frame).is_some()
}

/// The common start of a Java test: [`require_root`], then a fresh
/// [`TempDir`] named after `label` and `jdk` with
/// `tests/workloads/java/<class>.java` built in it by `jdk`
/// ([`JavaWorkload::build`]).
pub fn prepare_java(label: &str, class: &str, jdk: Jdk) -> (TempDir, JavaWorkload) {
    require_root();
    let dir = TempDir::new(&format!("{label}-{}", jdk.label));
    let workload = JavaWorkload::build(class, jdk, dir.path());
    (dir, workload)
}

/// The Java summary lines of a txt report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JavaReport {
    /// `JVMs profiled: N`.
    pub jvms: u64,
    /// `Samples with Java frames: N`.
    pub java_samples: u64,
    /// `Samples of non-Java JVM threads: N`.
    pub non_java_samples: u64,
    /// The `Java stack missing (<reason>): N` lines.
    pub missing: Vec<(String, u64)>,
}

impl JavaReport {
    /// Reads the Java lines of a txt report's header.
    ///
    /// # Panics
    ///
    /// If the report has no `JVMs profiled:` line (stoke writes the Java
    /// lines only when it profiled a JVM), or a Java line has no count.
    pub fn parse(txt: &str) -> Self {
        let value = |line: &str| -> u64 {
            let (_, rest) = line.split_once(':').expect("a summary line has a colon");
            rest.split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no count on the txt line {line:?}"))
        };
        let mut report = JavaReport::default();
        let mut found = false;
        for line in txt.lines() {
            if line.starts_with("JVMs profiled:") {
                found = true;
                report.jvms = value(line);
            } else if line.starts_with("Samples with Java frames:") {
                report.java_samples = value(line);
            } else if line.starts_with("Samples of non-Java JVM threads:") {
                report.non_java_samples = value(line);
            } else if let Some(rest) = line.strip_prefix("Java stack missing (") {
                let (reason, _) = rest
                    .split_once("):")
                    .expect("`Java stack missing (<reason>): N`");
                report.missing.push((reason.to_owned(), value(line)));
            }
        }
        assert!(found, "the txt report has no `JVMs profiled:` line:\n{txt}");
        report
    }

    /// The samples of JVM threads whose Java stack is missing, all reasons
    /// together.
    pub fn missing_total(&self) -> u64 {
        self.missing.iter().map(|(_, n)| n).sum()
    }
}

/// The distinct paths of Stoke's agent (`.../libstoke_agent*.so`) that
/// process `pid` maps: empty before any attach, one path once attached.
pub fn agent_paths(pid: u32) -> Vec<String> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/maps: {e}"));
    let mut paths: Vec<String> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.contains("/libstoke_agent"))
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// What a finished `stoke` run left behind.
#[derive(Debug)]
pub struct StokeOutput {
    /// How it exited.
    pub status: ExitStatus,
    /// Everything it wrote on stdout.
    pub stdout: String,
    /// Everything it wrote on stderr.
    pub stderr: String,
    /// Wall time from start to exit.
    pub elapsed: Duration,
}

impl StokeOutput {
    /// The exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics if stderr shows a Rust panic or a backtrace.
    pub fn assert_no_panic(&self) {
        let lower = self.stderr.to_lowercase();
        assert!(
            !lower.contains("panicked") && !lower.contains("backtrace"),
            "stoke panicked or printed a backtrace:\n{}",
            self.stderr
        );
    }

    /// Panics unless stoke exited with status 0 without panicking.
    pub fn assert_success(&self) {
        self.assert_no_panic();
        assert_eq!(
            self.code(),
            Some(0),
            "stoke failed ({}); stderr:\n{}",
            self.status,
            self.stderr
        );
    }

    /// Panics unless this is a user error as Stoke reports it: exit status
    /// 1, exactly one line on stderr (ignoring a trailing newline) that
    /// starts with `stoke: error: ` and contains each of `words` (see
    /// [`contains_word`]), and no panic or backtrace.
    pub fn assert_user_error(&self, words: &[&str]) {
        self.assert_no_panic();
        assert_eq!(
            self.code(),
            Some(1),
            "expected exit status 1 for a user error, got {}; stderr:\n{}",
            self.status,
            self.stderr
        );
        let text = self.stderr.strip_suffix('\n').unwrap_or(&self.stderr);
        assert!(
            !text.contains('\n'),
            "expected exactly one line on stderr, got:\n{}",
            self.stderr
        );
        assert!(
            text.starts_with("stoke: error: "),
            "expected stderr to start with `stoke: error: `, got:\n{}",
            self.stderr
        );
        assert_contains_words(text, words);
    }

    /// Panics unless this is a clap argument-parsing error: exit status 2,
    /// a first line starting with `error:`, stderr containing each of
    /// `words` (see [`contains_word`]), and no panic or backtrace.
    pub fn assert_usage_error(&self, words: &[&str]) {
        self.assert_no_panic();
        assert_eq!(
            self.code(),
            Some(2),
            "expected exit status 2 for an argument-parsing error, got {}; stderr:\n{}",
            self.status,
            self.stderr
        );
        assert!(
            self.stderr.starts_with("error:"),
            "expected stderr to start with `error:`, got:\n{}",
            self.stderr
        );
        assert_contains_words(&self.stderr, words);
    }

    /// Panics unless the invocation was refused either as a user error
    /// ([`StokeOutput::assert_user_error`], exit 1) or by the argument
    /// parser ([`StokeOutput::assert_usage_error`], exit 2), mentioning
    /// each of `words`.
    pub fn assert_rejected(&self, words: &[&str]) {
        match self.code() {
            Some(2) => self.assert_usage_error(words),
            _ => self.assert_user_error(words),
        }
    }
}

fn assert_contains_words(text: &str, words: &[&str]) {
    for word in words {
        assert!(
            contains_word(text, word),
            "expected the error message to mention {word:?} (as a whole word), got:\n{text}"
        );
    }
}

/// Whether `text` contains `word`, compared case-insensitively (ASCII), as a
/// whole word: not preceded or followed by a letter, digit or `_` (so
/// `perf_event_open` is not found in `perf_event_open_trace_point`, nor
/// `123` in `41234`).
pub fn contains_word(text: &str, word: &str) -> bool {
    let text = text.to_ascii_lowercase();
    let word = word.to_ascii_lowercase();
    if word.is_empty() {
        return true;
    }
    let is_word_char = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(&word).any(|(start, _)| {
        let before = text[..start].chars().next_back();
        let after = text[start + word.len()..].chars().next();
        !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
    })
}

/// A `stoke` process being run by a test; killed on drop if still running.
#[derive(Debug)]
pub struct Stoke {
    child: Option<Child>,
    started: Instant,
    stdout: Option<JoinHandle<String>>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<JoinHandle<()>>,
}

impl Stoke {
    /// Starts `stoke` (see [`stoke_bin`]) with `args`.
    pub fn spawn<S: AsRef<OsStr>>(args: &[S]) -> Self {
        let mut command = Command::new(stoke_bin());
        command.args(args);
        Self::spawn_command(command)
    }

    /// Starts a prepared command (for running `stoke` under a wrapper such
    /// as `setpriv` or `unshare`), with stdin closed and stdout and stderr
    /// captured.
    pub fn spawn_command(mut command: Command) -> Self {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
        let stdout = read_in_background(child.stdout.take().expect("stdout is piped"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_reader =
            read_as_it_comes(child.stderr.take().expect("stderr is piped"), &stderr);
        Stoke {
            child: Some(child),
            started,
            stdout: Some(stdout),
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// What stoke wrote on stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits at most `timeout` (from now) until stoke's stderr contains
    /// `text`, e.g. `stoke: sampling` once its BPF programs are attached.
    ///
    /// # Panics
    ///
    /// If stoke exits or `timeout` passes first, with its stderr.
    pub fn wait_for_stderr(&mut self, text: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.stderr_so_far().contains(text) {
            let child = self.child.as_mut().expect("stoke is running");
            let status = child.try_wait().expect("waiting for stoke");
            if status.is_some() || Instant::now() >= deadline {
                thread::sleep(Duration::from_millis(100));
                panic!(
                    "stoke did not print {text:?} (exit status {status:?}); stderr:\n{}",
                    self.stderr_so_far()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("stoke is running").id()
    }

    /// Sends `signal` (e.g. `libc::SIGINT`) to the process.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.pid()).expect("pid fits in pid_t");
        // SAFETY: kill has no memory-safety preconditions; the pid is our
        // own not-yet-reaped child, so it cannot have been reused.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    /// Waits for a recording that is expected to succeed and to last
    /// `seconds` (its `-d`): at most `seconds + 60` s from its start, then
    /// asserts exit status 0, no panic, and that it did not stop before
    /// `seconds` had passed.
    pub fn wait_recording(self, seconds: f64) -> StokeOutput {
        let output = self.wait(Duration::from_secs_f64(seconds + 60.0));
        output.assert_success();
        assert!(
            output.elapsed.as_secs_f64() >= seconds - 0.05,
            "stoke exited after {:?}, before the {seconds} s recording could have finished",
            output.elapsed
        );
        output
    }

    /// Waits for the process to exit and collects its output.
    ///
    /// # Panics
    ///
    /// If it runs longer than `timeout` (measured from its start); it is
    /// killed first, and the panic message carries its stderr.
    pub fn wait(mut self, timeout: Duration) -> StokeOutput {
        let mut child = self.child.take().expect("stoke is running");
        let deadline = self.started + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("waiting for stoke") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                let _ = self.stderr_reader.take().unwrap().join();
                let stderr = self.stderr_so_far();
                panic!("stoke did not finish within {timeout:?} and was killed; stderr:\n{stderr}");
            }
            thread::sleep(Duration::from_millis(10));
        };
        let elapsed = self.started.elapsed();
        StokeOutput {
            status,
            stdout: self.stdout.take().unwrap().join().unwrap_or_default(),
            stderr: {
                let _ = self.stderr_reader.take().unwrap().join();
                self.stderr_so_far()
            },
            elapsed,
        }
    }
}

impl Drop for Stoke {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Appends what `pipe` yields to `text` as it comes (not only at the end:
/// a test may look at what a process that is still running said so far).
fn read_as_it_comes(
    mut pipe: impl Read + Send + 'static,
    text: &Arc<Mutex<String>>,
) -> JoinHandle<()> {
    let text = Arc::clone(text);
    thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut buffer) {
            text.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    })
}

fn read_in_background(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Runs a recording that is expected to succeed and to last `seconds` (the
/// `-d` given in `args`), checked by [`Stoke::wait_recording`]: exit status
/// 0, no panic, and not stopped before `seconds` had passed.
pub fn record<S: AsRef<OsStr>>(args: &[S], seconds: f64) -> StokeOutput {
    Stoke::spawn(args).wait_recording(seconds)
}

/// The arguments of `stoke record <select> -F <hz> -d <seconds> -o <out>`:
/// a recording of what `select` names (`-a`, `-p <pid>`, plus any other
/// options) at `hz` samples per second for `seconds`, written to `out`.
pub fn record_args(select: &[String], hz: u32, seconds: f64, out: &Path) -> Vec<String> {
    let mut args = vec!["record".to_owned()];
    args.extend_from_slice(select);
    args.extend(args!["-F", hz, "-d", seconds, "-o", out.display()]);
    args
}

/// Runs the recording that [`record_args`] describes with [`record`],
/// which asserts that it succeeds and lasts `seconds`.
pub fn record_to(select: &[String], hz: u32, seconds: f64, out: &Path) -> StokeOutput {
    record(&record_args(select, hz, seconds, out), seconds)
}

/// Records `running` alone (`-p <pid>`) at `hz` for `seconds` into the
/// folded profile `out` ([`record_to`]), prints its heaviest stacks, and
/// returns them ([`read_folded`]) after [`assert_all_of_process`] with the
/// workload's root frame.
pub fn record_process(running: &Running, hz: u32, seconds: f64, out: &Path) -> Vec<Stack> {
    record_to(&args!["-p", running.pid()], hz, seconds, out);
    let stacks = read_folded(out);
    println!("{}", describe(&stacks, 15));
    assert_all_of_process(&stacks, &running.root_frame());
    stacks
}

/// One line of a folded profile: the frames, root first, and the number of
/// samples with exactly that stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// The frames, root (the process frame) first, leaf last.
    pub frames: Vec<String>,
    /// The number of samples.
    pub count: u64,
}

impl Stack {
    /// The root frame (`<comm> [<pid>]`).
    pub fn root(&self) -> &str {
        &self.frames[0]
    }

    /// Whether some frame is exactly `frame`.
    pub fn contains(&self, frame: &str) -> bool {
        self.frames.iter().any(|f| f == frame)
    }

    /// The index of the first frame that is exactly `frame`.
    pub fn position(&self, frame: &str) -> Option<usize> {
        self.frames.iter().position(|f| f == frame)
    }

    /// The index of the first Java frame of `method` (`pkg.Class.method`,
    /// JIT-compiled or interpreted: see [`java_method`]).
    pub fn java_position(&self, method: &str) -> Option<usize> {
        self.frames
            .iter()
            .position(|frame| java_method(frame) == Some(method))
    }

    /// The Java method of frame `index` ([`java_method`]), if that frame
    /// exists and is a Java frame.
    pub fn java_at(&self, index: usize) -> Option<&str> {
        self.frames.get(index).and_then(|frame| java_method(frame))
    }

    /// Whether some frame is a Java frame of `method` ([`java_method`]).
    pub fn has_java(&self, method: &str) -> bool {
        self.java_position(method).is_some()
    }

    /// The leaf (last) frame.
    pub fn leaf(&self) -> &str {
        self.frames.last().expect("stacks are never empty")
    }

    /// Whether `frames` occur in this stack as a contiguous run, in order.
    pub fn contains_run(&self, frames: &[&str]) -> bool {
        self.frames
            .windows(frames.len())
            .any(|w| w.iter().zip(frames).all(|(a, b)| a == b))
    }

    /// The frames joined as in the folded format.
    pub fn joined(&self) -> String {
        self.frames.join(";")
    }
}

/// Whether a frame is a kernel frame (its name ends in `_[k]`).
pub fn is_kernel_frame(frame: &str) -> bool {
    frame.ends_with("_[k]")
}

/// Parses Stoke's folded output, asserting that every line is well formed:
/// `frame;frame;... count`, with a positive integer count, no empty frame,
/// and no stack listed twice.
///
/// # Panics
///
/// On the first malformed line, quoting it.
pub fn parse_folded(text: &str) -> Vec<Stack> {
    let mut stacks = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        assert!(!line.is_empty(), "folded line {n} is empty");
        let (stack, count) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("folded line {n} has no sample count: {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|e| panic!("folded line {n} has a bad sample count ({e}): {line:?}"));
        assert!(count > 0, "folded line {n} has a zero count: {line:?}");
        let frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
        for frame in &frames {
            assert!(
                !frame.trim().is_empty(),
                "folded line {n} has an empty frame: {line:?}"
            );
        }
        assert!(
            seen.insert(stack.to_owned()),
            "folded line {n} repeats a stack already listed: {line:?}"
        );
        stacks.push(Stack { frames, count });
    }
    stacks
}

/// Reads and parses ([`parse_folded`]) a folded profile file.
pub fn read_folded(path: &Path) -> Vec<Stack> {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the folded profile {}: {e}", path.display()));
    parse_folded(&text)
}

/// Splits a root frame `<comm> [<pid>]` into its parts.
pub fn parse_process_frame(frame: &str) -> Option<(&str, u32)> {
    let (comm, rest) = frame.rsplit_once(" [")?;
    let pid = rest.strip_suffix(']')?.parse().ok()?;
    (!comm.is_empty()).then_some((comm, pid))
}

/// Splits a thread frame `<thread comm> [tid <tid>]` into its parts.
pub fn parse_thread_frame(frame: &str) -> Option<(&str, u32)> {
    let (comm, rest) = frame.rsplit_once(" [tid ")?;
    let tid = rest.strip_suffix(']')?.parse().ok()?;
    (!comm.is_empty()).then_some((comm, tid))
}

/// The total number of samples in `stacks`.
pub fn total_samples<'a>(stacks: impl IntoIterator<Item = &'a Stack>) -> u64 {
    stacks.into_iter().map(|s| s.count).sum()
}

/// The number of samples in the stacks for which `pred` holds.
pub fn samples_where<'a>(
    stacks: impl IntoIterator<Item = &'a Stack>,
    mut pred: impl FnMut(&Stack) -> bool,
) -> u64 {
    stacks
        .into_iter()
        .filter(|s| pred(s))
        .map(|s| s.count)
        .sum()
}

/// The number of samples whose stack contains `frame`.
pub fn samples_with_frame<'a>(stacks: impl IntoIterator<Item = &'a Stack>, frame: &str) -> u64 {
    samples_where(stacks, |s| s.contains(frame))
}

/// The stacks whose root frame is exactly `root`.
pub fn stacks_of<'a>(stacks: &'a [Stack], root: &str) -> Vec<&'a Stack> {
    stacks.iter().filter(|s| s.root() == root).collect()
}

/// The stacks of thread `tid`, in a profile recorded with `-t` (whose
/// second frame is `<thread comm> [tid N]`).
pub fn stacks_of_thread(stacks: &[Stack], tid: u32) -> Vec<&Stack> {
    stacks
        .iter()
        .filter(|s| {
            s.frames
                .get(1)
                .and_then(|frame| parse_thread_frame(frame))
                .is_some_and(|(_, t)| t == tid)
        })
        .collect()
}

/// Panics unless every stack's root frame is `root`: a recording with
/// `-p <pid>` holds that process's stacks and nothing else.
pub fn assert_all_of_process(stacks: &[Stack], root: &str) {
    for stack in stacks {
        assert_eq!(
            stack.root(),
            root,
            "with -p, a stack of another process: {}\n{}",
            stack.joined(),
            describe(stacks, 10)
        );
    }
}

/// Panics unless `part` samples are at least `fraction` of `whole`, with
/// the message `only <part> of <whole> samples <what>`.
pub fn assert_share(part: u64, whole: u64, fraction: f64, what: impl std::fmt::Display) {
    assert!(
        part as f64 >= fraction * whole as f64,
        "only {part} of {whole} samples {what}"
    );
}

/// Panics unless at least `fraction` of the samples in `stacks` (those of
/// the process frame `root`) have the frames `run` in a row, e.g.
/// `["main", "other_work", "other_spin"]`.
pub fn assert_run_share(stacks: &[&Stack], root: &str, run: &[&str], fraction: f64) {
    let total = total_samples(stacks.iter().copied());
    let in_run = samples_where(stacks.iter().copied(), |s| s.contains_run(run));
    assert_share(
        in_run,
        total,
        fraction,
        format_args!(
            "of {root} are in {}\n{}",
            run.join(";"),
            describe(stacks.iter().copied(), 10)
        ),
    );
}

/// The stacks under the process frame `root` and their total number of
/// samples, printed; asserts that there are more than `min` samples.
pub fn process_stacks<'a>(stacks: &'a [Stack], root: &str, min: u64) -> (Vec<&'a Stack>, u64) {
    let mine = stacks_of(stacks, root);
    let total = total_samples(mine.iter().copied());
    println!("{root}: {}", describe(mine.iter().copied(), 10));
    assert!(
        total > min,
        "only {total} samples under `{root}` (more than {min} expected)\n{}",
        describe(stacks, 20)
    );
    (mine, total)
}

/// A readable summary of the `n` heaviest stacks, for assertion messages.
pub fn describe<'a>(stacks: impl IntoIterator<Item = &'a Stack>, n: usize) -> String {
    let mut sorted: Vec<&Stack> = stacks.into_iter().collect();
    let total = total_samples(sorted.iter().copied());
    sorted.sort_by_key(|s| std::cmp::Reverse(s.count));
    let mut text = format!(
        "{total} samples in {} distinct stacks; heaviest:\n",
        sorted.len()
    );
    for stack in sorted.iter().take(n) {
        let _ = writeln!(text, "  {:>6} {}", stack.count, stack.joined());
    }
    text
}

/// The kernel's `pid_max`.
pub fn pid_max() -> u32 {
    fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("reading /proc/sys/kernel/pid_max")
        .trim()
        .parse()
        .expect("parsing /proc/sys/kernel/pid_max")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_folded_lines() {
        let stacks = parse_folded(
            "fp_split [12];main;hot_seventy;spin 7\nfp_split [12];main;vfs_read_[k] 3\n",
        );
        assert_eq!(stacks.len(), 2);
        assert_eq!(
            stacks[0].frames,
            ["fp_split [12]", "main", "hot_seventy", "spin"]
        );
        assert_eq!(stacks[0].count, 7);
        assert!(stacks[0].contains_run(&["main", "hot_seventy", "spin"]));
        assert!(!stacks[0].contains_run(&["main", "spin"]));
        assert_eq!(samples_with_frame(&stacks, "main"), 10);
        assert!(is_kernel_frame(stacks[1].leaf()));
        assert_eq!(
            parse_process_frame(stacks[0].root()),
            Some(("fp_split", 12))
        );
        assert_eq!(
            parse_thread_frame("worker_a [tid 99]"),
            Some(("worker_a", 99))
        );
        assert_eq!(
            parse_process_frame("Web Content [7]"),
            Some(("Web Content", 7))
        );
    }

    #[test]
    fn matches_whole_words() {
        assert!(contains_word("needs root, or CAP_BPF", "cap_bpf"));
        assert!(contains_word("no process with pid 41: gone", "41"));
        assert!(!contains_word("no process with pid 4123", "41"));
        assert!(contains_word("perf_event_open: EPERM", "perf_event_open"));
        assert!(!contains_word(
            "`perf_event_open_trace_point` failed",
            "perf_event_open"
        ));
        assert!(contains_word("cannot write /x/y.svg: denied", "/x/y.svg"));
    }

    #[test]
    #[should_panic(expected = "empty frame")]
    fn rejects_empty_frames() {
        parse_folded("a [1];;b 3\n");
    }

    #[test]
    #[should_panic(expected = "bad sample count")]
    fn rejects_bad_counts() {
        parse_folded("a [1];b x\n");
    }

    #[test]
    #[should_panic(expected = "repeats a stack")]
    fn rejects_repeated_stacks() {
        parse_folded("a [1];b 1\na [1];b 2\n");
    }
}
pub mod docker;
