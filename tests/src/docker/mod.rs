//! Docker (and podman) for the container tests: a daemon that answers,
//! images built from local files, and containers removed when the test
//! ends.
//!
//! No registry is reachable from the test machines, so an image is a
//! tarball of files of this host ([`Rootfs`]) given to `docker import`.
//! Every image and container gets a name unique to the test run
//! ([`unique_name`]), so that a rerun or a test running beside it never
//! meets them, and is removed by the guard that created it ([`Image`],
//! [`Container`]) when it is dropped.
//!
//! The clients are named by path: another `docker` may come first on
//! `PATH`.

mod rootfs;

use std::fs;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

pub use rootfs::Rootfs;

/// Debian's docker daemon.
const DOCKERD: &str = "/usr/sbin/dockerd";

/// Longest wait for a client command: importing a JDK image takes a while
/// on a loaded machine, a hung daemon must still fail the test.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// Longest wait for a daemon started here to answer.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(60);

/// A container engine, driven through its command-line client (podman's
/// takes docker's commands and options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Debian's `docker.io`: `/usr/bin/docker`, talking to a `dockerd`.
    Docker,
    /// Debian's `podman`, rootful, with no daemon.
    Podman,
}

impl Engine {
    /// The path of its client.
    pub fn client(self) -> &'static str {
        match self {
            Engine::Docker => "/usr/bin/docker",
            Engine::Podman => "/usr/bin/podman",
        }
    }

    /// Runs the client with `args` (for docker after [`ensure_daemon`])
    /// and returns its stdout, trimmed.
    ///
    /// # Panics
    ///
    /// If it fails or runs longer than [`COMMAND_TIMEOUT`]; the message
    /// carries its stderr.
    pub fn output(self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.try_output(args);
        assert!(ok, "{} {} failed:\n{stderr}", self.client(), args.join(" "));
        stdout.trim().to_owned()
    }

    /// Runs the client with `args` under [`COMMAND_TIMEOUT`] and returns
    /// (success, stdout, stderr).
    fn try_output(self, args: &[&str]) -> (bool, String, String) {
        if self == Engine::Docker {
            ensure_daemon();
        }
        self.run_client(args)
    }

    fn run_client(self, args: &[&str]) -> (bool, String, String) {
        let output = Command::new("timeout")
            .arg(COMMAND_TIMEOUT.as_secs().to_string())
            .arg(self.client())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.client()));
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

/// A name no other test, run or rerun uses: `stoke-test-<label>-<pid>-<n>`
/// (lower case, as image names must be).
pub fn unique_name(label: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "stoke-test-{}-{}-{n}",
        label.to_ascii_lowercase(),
        std::process::id()
    )
}

fn daemon_answers() -> bool {
    Engine::Docker
        .run_client(&["info", "--format", "{{.ServerVersion}}"])
        .0
}

/// Makes sure a docker daemon answers on `/var/run/docker.sock`: the one
/// running already, or else one started here (`dockerd --iptables=false
/// --bridge=none`, as the containers need no network), logging to
/// `<temp dir>/stoke-tests-dockerd-<pid>.log`. A daemon started here is
/// left running when the tests end: it takes seconds to start, and the
/// next test binary uses it.
///
/// # Panics
///
/// If none answers [`DAEMON_TIMEOUT`] after starting one; the message
/// carries the end of its log.
pub fn ensure_daemon() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        if daemon_answers() {
            return;
        }
        let log_path =
            std::env::temp_dir().join(format!("stoke-tests-dockerd-{}.log", std::process::id()));
        let log = fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log_path.display()));
        // Started by `setsid --fork`: in a session of its own and not a
        // child of the tests, so it outlives them and Ctrl-C leaves it be.
        let status = Command::new("setsid")
            .arg("--fork")
            .arg(DOCKERD)
            .args(["--iptables=false", "--bridge=none"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("duplicating the log's descriptor"))
            .stderr(log)
            .status()
            .unwrap_or_else(|e| panic!("starting {DOCKERD} with setsid (util-linux): {e}"));
        assert!(status.success(), "setsid --fork {DOCKERD} failed: {status}");
        let deadline = Instant::now() + DAEMON_TIMEOUT;
        while !daemon_answers() {
            if Instant::now() >= deadline {
                let log = fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                panic!(
                    "no docker daemon answers, and the one started here ({DOCKERD}) did not \
                     answer within {DAEMON_TIMEOUT:?}; the end of {}:\n{}",
                    log_path.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "started a docker daemon, left running (log {})",
            log_path.display()
        );
    });
}

/// An image made here; removed (`rmi -f`) on drop.
#[derive(Debug)]
pub struct Image {
    engine: Engine,
    name: String,
}

impl Image {
    /// Imports `rootfs` into `engine` as the image
    /// [`unique_name`]`(label)`.
    pub fn import(engine: Engine, label: &str, rootfs: &Rootfs) -> Self {
        let name = unique_name(label);
        let tarball = rootfs.write_tarball();
        let started = Instant::now();
        engine.output(&["import", &tarball.display().to_string(), &name]);
        println!(
            "imported image {name} ({} MB) in {:.1} s",
            fs::metadata(&tarball).map(|m| m.len() >> 20).unwrap_or(0),
            started.elapsed().as_secs_f64()
        );
        let _ = fs::remove_file(&tarball);
        Image { engine, name }
    }

    /// The name it was imported as (no tag: `latest`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = self.engine.try_output(&["rmi", "-f", &self.name]);
    }
}

impl Image {
    /// Runs `command` in a container of this image, with `options` (mounts,
    /// namespaces, capabilities) before the image, to its end at most
    /// [`COMMAND_TIMEOUT`] later; the container is removed. Returns
    /// (success, stdout, stderr).
    pub fn run_to_end(&self, options: &[&str], command: &[&str]) -> (bool, String, String) {
        let name = unique_name("once");
        let mut args = vec!["run", "--rm", "--network", "none", "--name", &name];
        args.extend_from_slice(options);
        args.push(&self.name);
        args.extend_from_slice(command);
        let result = self.engine.try_output(&args);
        let _ = self.engine.try_output(&["rm", "-f", &name]);
        result
    }
}

/// A container started here, detached, without network; removed (`rm -f`)
/// on drop.
#[derive(Debug)]
pub struct Container {
    engine: Engine,
    name: String,
    id: String,
    pid: u32,
}

impl Container {
    /// Runs `command` in `image` as the container [`unique_name`]`(label)`
    /// and waits, at most 30 s, until it prints `ready` (as every workload
    /// does once in its hot loop).
    ///
    /// # Panics
    ///
    /// If it cannot be started or exits or stays silent instead of getting
    /// ready; the message carries its output.
    pub fn run(label: &str, image: &Image, command: &[&str]) -> Self {
        Self::run_with(label, image, &[], command)
    }

    /// [`Container::run`] with `options` (`--cpus 0.5`...) before the
    /// image.
    pub fn run_with(label: &str, image: &Image, options: &[&str], command: &[&str]) -> Self {
        let engine = image.engine;
        let name = unique_name(label);
        let mut args = vec!["run", "-d", "--network", "none", "--name", &name];
        if engine == Engine::Podman {
            // Podman asks for open-file and process limits above what a
            // sandbox may allow (the container then fails to start); the
            // workloads need few of either.
            args.extend([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
            ]);
        }
        args.extend_from_slice(options);
        args.push(&image.name);
        args.extend_from_slice(command);
        let (ok, stdout, stderr) = engine.try_output(&args);
        let failure = format!("{} {} failed:\n{stderr}", engine.client(), args.join(" "));
        // Removed on drop even if it was created but did not start.
        let mut container = Container {
            engine,
            name,
            id: stdout.trim().to_owned(),
            pid: 0,
        };
        assert!(ok, "{failure}");
        container.wait_ready(Duration::from_secs(30));
        container.pid = container
            .inspect("{{.State.Pid}}")
            .parse()
            .expect("inspect gives the pid as a number");
        assert!(
            container.pid > 0,
            "container {} is not running",
            container.name
        );
        container
    }

    fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let (_, logs, errors) = self.engine.try_output(&["logs", &self.name]);
            if logs.lines().any(|line| line == "ready") {
                return;
            }
            let running = self.inspect("{{.State.Running}}");
            assert!(
                running == "true" && Instant::now() < deadline,
                "container {} did not print `ready` (running: {running}); stdout:\n{logs}\n\
                 stderr:\n{errors}",
                self.name
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// What `inspect -f <format>` says of it, e.g. `{{.State.Pid}}`.
    pub fn inspect(&self, format: &str) -> String {
        self.engine.output(&["inspect", "-f", format, &self.name])
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its full id (64 hex digits), as `run` printed it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its id as `docker ps` shows it: the first 12 digits.
    pub fn short_id(&self) -> &str {
        &self.id[..12]
    }

    /// The host's pid of its first process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The frame Stoke puts above its processes with `--group-by
    /// container`: `NAME [container SHORTID]`.
    pub fn container_frame(&self) -> String {
        format!("{} [container {}]", self.name, self.short_id())
    }

    /// The frame Stoke puts above its processes with `--group-by service`:
    /// `NAME [service]`.
    pub fn service_frame(&self) -> String {
        format!("{} [service]", self.name)
    }

    /// The process frame of its first process, `comm [host pid]`, for a
    /// program whose `comm` is `comm`.
    pub fn process_frame(&self, comm: &str) -> String {
        format!("{comm} [{}]", self.pid)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // Docker's `rm -f` kills at once; podman's first sends SIGTERM,
        // which the workload (its pid 1) ignores, and waits 10 s.
        let args: &[&str] = match self.engine {
            Engine::Docker => &["rm", "-f", &self.name],
            Engine::Podman => &["rm", "-f", "--time", "0", &self.name],
        };
        let _ = self.engine.try_output(args);
    }
}
