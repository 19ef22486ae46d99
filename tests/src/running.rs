//! A running workload process: started, watched (its output, its threads,
//! its exit) and killed when the test is done with it.

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::pipes::read_as_it_comes;

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
