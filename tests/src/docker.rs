//! Docker for the container tests: a daemon that answers, images built
//! from local files, and containers removed when the test ends.
//!
//! No registry is reachable from the test machines, so an image is a
//! tarball of files of this host ([`Rootfs`]: a workload, the libraries
//! `ldd` lists for it, a JDK) given to `docker import`. Every image and
//! container gets a name unique to the test run ([`unique_name`]), so that
//! a rerun or a test running beside it never meets them, and is removed by
//! the guard that created it ([`Image`], [`Container`]) when it is dropped.
//!
//! The client is `/usr/bin/docker` (Debian's `docker.io`), named by path:
//! another `docker` may come first on `PATH`.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::run_tool;

/// Debian's docker client.
pub const DOCKER: &str = "/usr/bin/docker";

/// Debian's docker daemon.
pub const DOCKERD: &str = "/usr/sbin/dockerd";

/// Longest wait for a docker command: importing a JDK image takes a while
/// on a loaded machine, a hung daemon must still fail the test.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// Longest wait for a daemon started here to answer.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(60);

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

/// Runs `docker <args>` (after [`ensure_daemon`]) and returns its stdout,
/// trimmed.
///
/// # Panics
///
/// If it fails or runs longer than [`COMMAND_TIMEOUT`]; the message
/// carries its stderr.
pub fn docker(args: &[&str]) -> String {
    ensure_daemon();
    let (ok, stdout, stderr) = run_docker(args);
    assert!(ok, "docker {} failed:\n{stderr}", args.join(" "));
    stdout.trim().to_owned()
}

/// Runs the client with `args` under `timeout` and returns (success,
/// stdout, stderr).
fn run_docker(args: &[&str]) -> (bool, String, String) {
    let output = Command::new("timeout")
        .arg(COMMAND_TIMEOUT.as_secs().to_string())
        .arg(DOCKER)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {DOCKER} (Debian's docker.io): {e}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn daemon_answers() -> bool {
    run_docker(&["info", "--format", "{{.ServerVersion}}"]).0
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

/// The files of an image's root filesystem, gathered before
/// [`Image::import`]: files of this host at the same paths (dereferenced),
/// plus files made for the image in a staging directory.
#[derive(Debug)]
pub struct Rootfs {
    staging: PathBuf,
    host_paths: BTreeSet<PathBuf>,
    excludes: Vec<String>,
}

impl Rootfs {
    /// An empty root filesystem staged in `dir` (which must not exist
    /// yet), with a `/tmp` as a JVM needs it (its attach files live there).
    pub fn new(dir: &Path) -> Self {
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("creating {}: {e}", tmp.display()));
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", tmp.display()));
        Rootfs {
            staging: dir.to_owned(),
            host_paths: BTreeSet::new(),
            excludes: Vec::new(),
        }
    }

    /// Copies `file` to `at` (an absolute path in the image), and adds the
    /// libraries it needs ([`Rootfs::libraries_of`]).
    pub fn add_program(&mut self, file: &Path, at: &str) -> &mut Self {
        let target = self.staging.join(at.trim_start_matches('/'));
        fs::create_dir_all(target.parent().expect("a path in the image has a parent"))
            .unwrap_or_else(|e| panic!("creating the parent of {}: {e}", target.display()));
        fs::copy(file, &target)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", file.display(), target.display()));
        self.libraries_of(&[file])
    }

    /// Copies the directory `dir` to the same place in the image, without
    /// the entries matching the tar patterns `excludes`.
    pub fn add_host_tree(&mut self, dir: &Path, excludes: &[&str]) -> &mut Self {
        assert!(dir.is_dir(), "{} is not a directory", dir.display());
        self.host_paths.insert(dir.to_owned());
        self.excludes
            .extend(excludes.iter().map(|e| (*e).to_owned()));
        self
    }

    /// Adds the shared libraries and the loader that `ldd` lists for each
    /// of `objects`, at their paths on this host; a library `ldd` does not
    /// find is left out (an optional part of a JDK may need one).
    pub fn libraries_of(&mut self, objects: &[&Path]) -> &mut Self {
        for object in objects {
            let listing = run_tool("ldd", &[object.as_os_str()]);
            for line in listing.lines() {
                // `libc.so.6 => /lib/.../libc.so.6 (0x...)` or
                // `/lib64/ld-linux-x86-64.so.2 (0x...)`.
                let path = match line.split_once("=>") {
                    Some((_, rest)) => rest.split_whitespace().next(),
                    None => line.split_whitespace().next(),
                };
                if let Some(path) = path.filter(|p| p.starts_with('/')) {
                    self.host_paths.insert(PathBuf::from(path));
                }
            }
        }
        self
    }

    /// Writes the root filesystem as a tarball at `tarball`: the staging
    /// directory, then the host's files with symlinks followed (`tar -h`),
    /// so that the image holds the files and not links out of it.
    fn write_tarball(&self, tarball: &Path) {
        let list = self.staging.with_extension("files");
        // A path inside another one listed (a JDK's own library that `ldd`
        // lists) would be archived twice.
        let names: String = self
            .host_paths
            .iter()
            .filter(|p| !self.host_paths.iter().any(|q| q != *p && p.starts_with(q)))
            .map(|p| format!("{}\n", p.display().to_string().trim_start_matches('/')))
            .collect();
        fs::write(&list, names).unwrap_or_else(|e| panic!("writing {}: {e}", list.display()));
        let mut command = Command::new("tar");
        // Whole files, not hard links: two paths of one library (or one
        // file linked twice) each become a file of the image.
        command
            .args(["-c", "-h", "--hard-dereference", "-f"])
            .arg(tarball);
        for pattern in &self.excludes {
            command.arg(format!("--exclude={pattern}"));
        }
        command
            .arg("-C")
            .arg(&self.staging)
            .arg(".")
            .args(["-C", "/", "-T"])
            .arg(&list);
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("running tar: {e}"));
        assert!(
            output.status.success(),
            "{command:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// An image made here; removed (`docker rmi -f`) on drop.
#[derive(Debug)]
pub struct Image {
    name: String,
}

impl Image {
    /// Imports `rootfs` as the image [`unique_name`]`(label)`, its tarball
    /// written next to the staging directory.
    pub fn import(label: &str, rootfs: &Rootfs) -> Self {
        let name = unique_name(label);
        let tarball = rootfs.staging.with_extension("tar");
        rootfs.write_tarball(&tarball);
        let started = Instant::now();
        docker(&["import", &tarball.display().to_string(), &name]);
        println!(
            "imported image {name} ({} MB) in {:.1} s",
            fs::metadata(&tarball).map(|m| m.len() >> 20).unwrap_or(0),
            started.elapsed().as_secs_f64()
        );
        let _ = fs::remove_file(&tarball);
        Image { name }
    }

    /// The name the image was imported as (no tag: `latest`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = run_docker(&["rmi", "-f", &self.name]);
    }
}

/// A container started here, detached, without network; removed (`docker
/// rm -f`) on drop.
#[derive(Debug)]
pub struct Container {
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
        let name = unique_name(label);
        let mut args = vec![
            "run",
            "-d",
            "--network",
            "none",
            "--name",
            &name,
            &image.name,
        ];
        args.extend_from_slice(command);
        ensure_daemon();
        let (ok, stdout, stderr) = run_docker(&args);
        let failure = format!("docker {} failed:\n{stderr}", args.join(" "));
        // Removed on drop even if it was created but did not start.
        let mut container = Container {
            name,
            id: stdout.trim().to_owned(),
            pid: 0,
        };
        assert!(ok, "{failure}");
        container.wait_ready(Duration::from_secs(30));
        container.pid = docker(&["inspect", "-f", "{{.State.Pid}}", &container.name])
            .parse()
            .expect("docker inspect gives the pid as a number");
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
            let (_, logs, errors) = run_docker(&["logs", &self.name]);
            if logs.lines().any(|line| line == "ready") {
                return;
            }
            let running = docker(&["inspect", "-f", "{{.State.Running}}", &self.name]);
            assert!(
                running == "true" && Instant::now() < deadline,
                "container {} did not print `ready` (running: {running}); stdout:\n{logs}\n\
                 stderr:\n{errors}",
                self.name
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its full id (64 hex digits), as `docker run` printed it.
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
        let _ = run_docker(&["rm", "-f", &self.name]);
    }
}
