//! The bench's child processes: started with their output captured, reaped
//! with `wait4` for their CPU time, their peak RSS read while waiting, and
//! killed when dropped, so that no error path leaves a workload or a
//! profiler running; and killed by the kernel when the bench itself dies,
//! so that no signal to it does either.

use std::{
    fs::{self, File},
    io::{self, BufRead, BufReader, Read, Write},
    os::unix::process::CommandExt,
    process::{ChildStdin, Command, Stdio},
    str::FromStr,
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// A running child process. Dropping it kills it (SIGKILL) and reaps it,
/// unless [`Process::wait`] already reaped it.
pub struct Process {
    pid: libc::pid_t,
    name: String,
    reaped: bool,
    stdout: Lines,
    stderr: Lines,
    /// Its stdin, for a process that reads commands there.
    stdin: Option<ChildStdin>,
}

/// What `wait4` tells about an ended process.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    /// The raw wait status.
    status: libc::c_int,
    /// CPU time (user + system) of the process and the children it reaped.
    pub cpu: Duration,
    /// Peak resident set size, in bytes: the last VmHWM read while the
    /// wait polled, if any. Not `wait4`'s ru_maxrss: Linux counts in it the
    /// memory the child had before exec, a copy of the bench's own (tens of
    /// MB after a few parts), whatever the program it ran.
    pub max_rss: u64,
}

impl Exit {
    /// Whether the process exited with status 0.
    pub fn success(&self) -> bool {
        libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0
    }

    /// Whether the process ended as a SIGINT sent to it asks: exit status 0,
    /// or the conventional 130 (perf), or killed by the signal itself.
    pub fn ended_by_interrupt(&self) -> bool {
        self.success()
            || (libc::WIFEXITED(self.status)
                && libc::WEXITSTATUS(self.status) == 128 + libc::SIGINT)
            || (libc::WIFSIGNALED(self.status) && libc::WTERMSIG(self.status) == libc::SIGINT)
    }

    /// The status in words, for error messages.
    pub fn describe(&self) -> String {
        if libc::WIFEXITED(self.status) {
            format!("exit status {}", libc::WEXITSTATUS(self.status))
        } else if libc::WIFSIGNALED(self.status) {
            format!("killed by signal {}", libc::WTERMSIG(self.status))
        } else {
            format!("wait status {:#x}", self.status)
        }
    }
}

impl Process {
    /// Starts `command` with stdin from /dev/null and stdout and stderr
    /// captured line by line; `name` names it in messages.
    pub fn spawn(name: &str, command: &mut Command) -> Result<Self> {
        Self::start(name, command.stdout(Stdio::piped()).stdin(Stdio::null()))
    }

    /// Starts `command` like [`Process::spawn`], its stdout going to `file`.
    pub fn spawn_to_file(name: &str, command: &mut Command, file: File) -> Result<Self> {
        Self::start(name, command.stdout(file).stdin(Stdio::null()))
    }

    /// Starts `command` like [`Process::spawn`], with a pipe to its stdin
    /// for [`Process::send_line`].
    pub fn spawn_with_input(name: &str, command: &mut Command) -> Result<Self> {
        Self::start(name, command.stdout(Stdio::piped()).stdin(Stdio::piped()))
    }

    fn start(name: &str, command: &mut Command) -> Result<Self> {
        // SAFETY: `die_with_parent` makes only async-signal-safe calls.
        let command = unsafe { command.pre_exec(die_with_parent(std::process::id())) };
        let mut child = command
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {name} ({command:?})"))?;
        let pid = libc::pid_t::try_from(child.id()).context("pid out of range")?;
        let stdout = child.stdout.take().map_or_else(Lines::none, Lines::read);
        let stderr = Lines::read(child.stderr.take().expect("stderr is piped"));
        let stdin = child.stdin.take();
        // `child` is dropped here without waiting: this struct reaps the pid
        // itself with wait4, which std's Child cannot do.
        Ok(Self {
            pid,
            name: name.to_owned(),
            reaped: false,
            stdout,
            stderr,
            stdin,
        })
    }

    /// The process id.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Writes `line` and a newline to the process's stdin (started by
    /// [`Process::spawn_with_input`]).
    pub fn send_line(&mut self, line: &str) -> Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .with_context(|| format!("{} was started without a pipe to its stdin", self.name))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .with_context(|| format!("writing to {}'s stdin", self.name))
    }

    /// Closes its stdin: a process reading commands there sees their end.
    pub fn close_input(&mut self) {
        self.stdin = None;
    }

    /// The lines the process printed on stdout.
    pub fn stdout(&mut self) -> &mut Lines {
        &mut self.stdout
    }

    /// The lines the process printed on stderr.
    pub fn stderr(&mut self) -> &mut Lines {
        &mut self.stderr
    }

    /// Waits until the process prints a line equal to `line` on stdout;
    /// fails if it ends or `timeout` passes first.
    pub fn wait_for_stdout(&mut self, line: &str, timeout: Duration) -> Result<()> {
        if self
            .stdout
            .wait_for(|seen| seen == line, timeout)?
            .is_some()
        {
            return Ok(());
        }
        bail!(
            "{} did not print {line:?} within {timeout:?}; stderr: {}",
            self.name,
            self.stderr.seen_so_far().join(" / ")
        )
    }

    /// The `key=value` field named `key` the process printed on stdout, as
    /// the bench workloads print what they did.
    pub fn printed<T: FromStr>(&mut self, key: &str) -> Result<T> {
        self.stdout
            .field(key)
            .and_then(|value| value.parse().ok())
            .with_context(|| format!("{} printed no {key}=", self.name))
    }

    /// Sends `signal` to the process, if it has not been reaped yet.
    pub fn signal(&self, signal: libc::c_int) {
        if !self.reaped {
            // SAFETY: kill has no memory-safety preconditions; the pid is our
            // unreaped child, so it cannot have been reused.
            unsafe { libc::kill(self.pid, signal) };
        }
    }

    /// Waits for the process to end, at most `timeout` (then kills it and
    /// fails), and returns its exit status and resource usage.
    pub fn wait(&mut self, timeout: Duration) -> Result<Exit> {
        let deadline = Instant::now() + timeout;
        let mut peak_rss = None;
        loop {
            // A zombie has no VmHWM: the last read is from just before the
            // end, short by what the last 2 ms added at most.
            if let Ok(peak) = self.peak_rss_now() {
                peak_rss = Some(peak);
            }
            if let Some(mut exit) = self.try_wait()? {
                exit.max_rss = peak_rss.unwrap_or(exit.max_rss);
                // The pipes close with the process: collect their last lines.
                self.stdout.finish();
                self.stderr.finish();
                return Ok(exit);
            }
            if Instant::now() >= deadline {
                self.signal(libc::SIGKILL);
                bail!("{} did not end within {timeout:?}", self.name);
            }
            // Polling keeps the timeout simple; 2 ms bounds the error of the
            // stop latencies measured through this wait.
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Reaps the process if it has ended.
    fn try_wait(&mut self) -> Result<Option<Exit>> {
        if self.reaped {
            bail!("{} was already reaped", self.name);
        }
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to a status and a rusage for the call.
        let reaped = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut usage) };
        match reaped {
            0 => Ok(None),
            pid if pid == self.pid => {
                self.reaped = true;
                Ok(Some(Exit {
                    status,
                    cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
                    // ru_maxrss is in KiB on Linux.
                    max_rss: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
                }))
            }
            _ => Err(std::io::Error::last_os_error())
                .with_context(|| format!("waiting for {}", self.name)),
        }
    }

    /// CPU time the process has used so far, from the scheduler's exact
    /// per-thread counters (`/proc/PID/task/*/schedstat`), not the 10 ms
    /// ticks of `/proc/PID/stat`. Threads that already ended are not counted.
    pub fn cpu_now(&self) -> Result<Duration> {
        let tasks = format!("/proc/{}/task", self.pid);
        let mut total = 0u64;
        for task in fs::read_dir(&tasks).with_context(|| format!("reading {tasks}"))? {
            let path = task?.path().join("schedstat");
            // A thread that ended since the listing has no file any more.
            if let Ok(text) = fs::read_to_string(&path) {
                total += text
                    .split_whitespace()
                    .next()
                    .and_then(|ns| ns.parse::<u64>().ok())
                    .with_context(|| format!("parsing {}", path.display()))?;
            }
        }
        Ok(Duration::from_nanos(total))
    }

    /// Peak resident set size so far (VmHWM), in bytes.
    pub fn peak_rss_now(&self) -> Result<u64> {
        self.status_bytes("VmHWM")
    }

    /// A size field of `/proc/PID/status` (`VmRSS`, `RssAnon`...), in bytes.
    pub fn status_bytes(&self, field: &str) -> Result<u64> {
        let path = format!("/proc/{}/status", self.pid);
        let status = fs::read_to_string(&path)
            .with_context(|| format!("reading {path} (did {} end?)", self.name))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .with_context(|| format!("no {field} in {path}"))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(libc::SIGKILL);
            // SAFETY: waiting for our own child; null rusage is allowed.
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
            self.reaped = true;
        }
    }
}

/// What a child runs before exec so that the kernel kills it when the bench
/// dies: a SIGINT or SIGTERM sent to the bench alone (not to its process
/// group, as a terminal's Ctrl-C is) ends it without dropping its
/// [`Process`]es, and would leave a recording and its workload running.
/// The kernel's signal follows the thread that forked, and the bench forks
/// from its main thread only. `parent` is the bench's pid: if it died
/// before the child asked, the child fails to start (ESRCH).
fn die_with_parent(parent: u32) -> impl FnMut() -> io::Result<()> {
    move || {
        // SAFETY: prctl and getppid are async-signal-safe system calls.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if u32::try_from(unsafe { libc::getppid() }).ok() != Some(parent) {
            // Without allocating: this runs between fork and exec.
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    }
}

fn timeval(time: libc::timeval) -> Duration {
    Duration::from_secs(u64::try_from(time.tv_sec).unwrap_or(0))
        + Duration::from_micros(u64::try_from(time.tv_usec).unwrap_or(0))
}

/// The lines of one output pipe, read by a thread of their own so that a
/// chatty child never blocks on a full pipe.
pub struct Lines {
    receiver: Receiver<String>,
    seen: Vec<String>,
    reader: Option<JoinHandle<()>>,
}

impl Lines {
    fn read(pipe: impl Read + Send + 'static) -> Self {
        let (sender, receiver) = mpsc::channel();
        let reader = thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            receiver,
            seen: Vec::new(),
            reader: Some(reader),
        }
    }

    /// No lines: the output goes elsewhere.
    fn none() -> Self {
        let (_, receiver) = mpsc::channel();
        Self {
            receiver,
            seen: Vec::new(),
            reader: None,
        }
    }

    /// Waits for a line that `wanted` accepts and returns it; `None` if the
    /// pipe closed first. Fails if `timeout` passes first.
    pub fn wait_for(
        &mut self,
        wanted: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<Option<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.receiver.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if wanted(&line) {
                        return Ok(Some(line));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(None),
                Err(RecvTimeoutError::Timeout) => bail!(
                    "no expected line within {timeout:?}; got: {}",
                    self.seen.join(" / ")
                ),
            }
        }
    }

    /// The lines received up to now (without waiting).
    pub fn seen_so_far(&mut self) -> &[String] {
        self.seen.extend(self.receiver.try_iter());
        &self.seen
    }

    /// Reads the pipe to its end (the process has exited).
    fn finish(&mut self) {
        if let Some(reader) = self.reader.take() {
            // A grandchild holding the pipe open would block the join: the
            // workloads' children all die with them, so this ends.
            let _ = reader.join();
        }
        self.seen.extend(self.receiver.try_iter());
    }

    /// Every line read, once the process has been waited for.
    pub fn all(&mut self) -> &[String] {
        self.seen_so_far()
    }

    /// The value of the first `key=value` field named `key` in any line, as
    /// the bench workloads print them.
    pub fn field(&mut self, key: &str) -> Option<String> {
        let prefix = format!("{key}=");
        self.seen_so_far().iter().find_map(|line| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(&prefix))
                .map(str::to_owned)
        })
    }
}
