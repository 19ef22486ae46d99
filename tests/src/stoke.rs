//! Running `stoke`: a process under test ([`Stoke`]), what it left behind
//! ([`StokeOutput`]) and the recordings most tests make.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::pipes::{read_as_it_comes, read_in_background};
use crate::{args, assert_all_of_process, describe, read_folded, stoke_bin, Running, Stack};

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

    /// Waits for a `-p` recording whose `-d` outlasts its targets: it must
    /// succeed, ending when they exit (a zombie not yet reaped counts as
    /// exited), within `timeout` of its start.
    pub fn wait_targets_exit(self, timeout: Duration) -> StokeOutput {
        let output = self.wait(timeout);
        output.assert_success();
        output
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
