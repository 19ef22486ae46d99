//! `stoke attach` against real JVMs (JDK 11, JDK 17 and Temurin 25): the attach
//! protocol as a recording uses it, driven one command at a time. A fresh
//! JVM gets its listener started (trigger file, SIGQUIT) and its socket
//! reused; a stale socket is replaced; agents are installed into the JVM's
//! `/tmp` as its user and loaded, in other users' JVMs and across
//! namespaces; and what must be refused is refused, in one error line,
//! leaving the JVM undisturbed: no SIGQUIT to a process that is not a JVM,
//! to a JVM that disabled attach, or to a JVM started with -Xrs.

use std::cell::RefCell;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

use stoke_tests::{
    require_root, JavaWorkload, Jdk, Running, Stoke, StokeOutput, Workload, JDK_11, JDK_17,
    TEMURIN_25,
};

const NOBODY: u32 = 65534;
/// How long a test JVM lives if its test died without killing it.
const JVM_LIFETIME_SECS: &str = "120";
/// Enough for a stray SIGQUIT to show: death, or a thread dump.
const SETTLE: Duration = Duration::from_millis(300);
/// The longest a `stoke attach` may take (starting a listener takes up to
/// 5 s, then each step has `--timeout`, 10 s).
const STOKE_TIMEOUT: Duration = Duration::from_secs(60);

macro_rules! on_each_jdk {
    ($($test:ident),* $(,)?) => {
        mod jdk11 {
            $( #[test] fn $test() { super::$test(stoke_tests::JDK_11) } )*
        }
        mod jdk17 {
            $( #[test] fn $test() { super::$test(stoke_tests::JDK_17) } )*
        }
        mod temurin25 {
            $( #[test] fn $test() { super::$test(stoke_tests::TEMURIN_25) } )*
        }
    };
}

on_each_jdk!(
    attaches_and_reuses_the_socket,
    replaces_a_stale_socket,
    loads_agents,
    refuses_a_jvm_that_disabled_attach,
    attaches_to_another_users_jvm,
    attaches_across_namespaces,
    attaches_to_an_xrs_jvm_only_through_its_socket,
    refuses_a_noexec_tmp,
    attaches_when_the_first_socket_is_removed,
);

/// HotSpot installs its SIGQUIT handler, then removes any socket under its
/// name: a listener started by a SIGQUIT in between loses its fresh socket.
/// Done here by the test, which removes the first socket as it appears:
/// stoke signals again and the listener makes a new one, undisturbed (no
/// thread dump).
fn attaches_when_the_first_socket_is_removed(jdk: Jdk) {
    let mut jvm = Jvm::start(jdk, &[], Launch::Root);
    let socket = jvm.socket_path();
    let _ = fs::remove_file(&socket);
    let remover = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if fs::remove_file(&socket).is_ok() {
                    return true;
                }
                sleep(Duration::from_micros(200));
            }
            false
        })
    };
    let started = Instant::now();
    let properties = attach_ok(&jvm, &["properties"]);
    assert!(properties.contains("java.version"), "{properties}");
    assert!(remover.join().unwrap(), "no socket appeared to remove");
    assert!(socket.exists(), "the listener made no new socket");
    // A second SIGQUIT after 1 s, not the 5 s timeout.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    jvm.assert_undisturbed();
}

/// A fresh JVM gets its listener started (trigger file, SIGQUIT), and
/// later commands reuse the socket without signalling again.
fn attaches_and_reuses_the_socket(jdk: Jdk) {
    let mut jvm = Jvm::start(jdk, &[], Launch::Root);
    let socket = jvm.socket_path();
    // The tests kill their JVMs with SIGKILL, which leaves their sockets
    // behind, and this JVM may have the pid of one of them. HotSpot removes
    // such a leftover as it starts, but only as best effort: one found here
    // is no listener of this JVM, and refuses connections; it is removed,
    // so that the test still sees the listener started. A socket that
    // accepts a connection fails the test, as any socket there did before.
    let refused = UnixStream::connect(&socket)
        .is_err_and(|error| error.kind() == io::ErrorKind::ConnectionRefused);
    if refused {
        fs::remove_file(&socket).unwrap();
    }
    assert!(
        !socket.exists(),
        "a fresh JVM has no attach socket yet (another attach client, a whole-host stoke, started its listener?)"
    );

    let properties = attach_ok(&jvm, &["properties"]);
    assert!(properties.contains("java.version"), "{properties}");
    let inode = fs::metadata(&socket).unwrap().ino();
    assert!(!jvm.trigger_path().exists(), "the trigger file was left");

    let version = attach_ok(&jvm, &["jcmd", "VM.version"]);
    assert!(version.contains("JDK"), "{version}");
    assert_eq!(
        fs::metadata(&socket).unwrap().ino(),
        inode,
        "the socket was not reused"
    );

    attach(&jvm, &["nosuchcommand"]).assert_user_error(&["nosuchcommand", "recognized"]);
    jvm.assert_undisturbed();
}

/// A socket left under the JVM's name by a dead JVM with the same pid
/// refuses connections: it is removed, and the listener started (the
/// trigger file and SIGQUIT) as for a fresh JVM; of a JVM of root and of
/// another user.
fn replaces_a_stale_socket(jdk: Jdk) {
    for launch in [Launch::Root, Launch::AsNobody] {
        let mut jvm = Jvm::start(jdk, &[], launch);
        // Declared after the JVM, so dropped before it.
        let files = Cleanup::default();
        let socket = jvm.socket_path();
        files.add(socket.clone());
        // HotSpot removes a leftover socket with its pid as it starts, but
        // starts no listener unless signalled: planted now, this one stays
        // until attaching.
        let _ = fs::remove_file(&socket);
        plant_stale_socket(&socket, jvm.uid, jvm.gid);
        // Held open: its inode cannot be reused by the new socket.
        let stale = fs::File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
            .open(&socket)
            .unwrap();
        let metadata = stale.metadata().unwrap();
        assert!(metadata.file_type().is_socket());
        assert_eq!(metadata.uid(), jvm.uid);
        let error = UnixStream::connect(&socket).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionRefused, "{error}");

        let properties = attach_ok(&jvm, &["properties"]);
        assert!(properties.contains("java.version"), "{properties}");
        let live = fs::symlink_metadata(&socket).unwrap();
        assert!(live.file_type().is_socket());
        assert_eq!(live.uid(), jvm.uid);
        assert_ne!(
            live.ino(),
            metadata.ino(),
            "the stale socket is still there"
        );
        assert!(!jvm.trigger_path().exists(), "the trigger file was left");

        let version = attach_ok(&jvm, &["jcmd", "VM.version"]);
        assert!(version.contains("JDK"), "{version}");
        assert_eq!(
            fs::symlink_metadata(&socket).unwrap().ino(),
            live.ino(),
            "the new socket was not reused"
        );
        jvm.assert_undisturbed();
    }
}

/// Loading reports a missing library, a library without `Agent_OnAttach`,
/// and the agent's own failure; a real agent runs inside the JVM.
fn loads_agents(jdk: Jdk) {
    let mut jvm = Jvm::start(jdk, &[], Launch::Root);
    let files = Cleanup::default();

    let missing = format!("/tmp/{}.so", unique("stoke-no-such-agent"));
    attach(&jvm, &["load", &missing, "true"]).assert_user_error(&["load", &missing]);

    let jdwp = format!("{}/lib/libjdwp.so", jdk.home);
    attach(&jvm, &["load", &jdwp, "true"]).assert_user_error(&["Agent_OnAttach"]);

    let path = install(
        &jvm,
        &fixtures(jdk).agent_named(&format!("{}.so", unique("libstoke-test-agent"))),
    );
    files.add(jvm.host_path(&path));
    let marker = format!("/tmp/{}", unique("stoke-agent-marker"));
    files.add(jvm.host_path(&marker));
    let answer = attach_ok(&jvm, &["load", &path, "true", &format!("mark={marker}")]);
    assert!(answer.contains('0'), "{answer}");
    assert_eq!(
        fs::read_to_string(jvm.host_path(&marker)).unwrap(),
        "loaded\n"
    );

    attach(&jvm, &["load", &path, "true", "fail"]).assert_user_error(&["returned", "42"]);
    jvm.assert_undisturbed();
}

/// -XX:+DisableAttachMechanism is refused without any signal.
fn refuses_a_jvm_that_disabled_attach(jdk: Jdk) {
    let mut jvm = Jvm::start(jdk, &["-XX:+DisableAttachMechanism"], Launch::Root);
    let files = Cleanup::default();
    // What another user's process with this pid left at the socket name
    // does not change the answer.
    let leftover = jvm.socket_path();
    // A killed JVM that had this pid before may have left its socket.
    let _ = fs::remove_file(&leftover);
    fs::write(&leftover, b"").unwrap();
    files.add(leftover.clone());
    std::os::unix::fs::chown(&leftover, Some(NOBODY), Some(NOBODY)).unwrap();
    let pid = jvm.pid.to_string();
    attach(&jvm, &["properties"]).assert_user_error(&[&pid, "DisableAttachMechanism"]);
    attach(&jvm, &["load", "/tmp/agent.so", "true"]).assert_user_error(&["DisableAttachMechanism"]);
    assert!(!jvm.trigger_path().exists());
    jvm.assert_undisturbed();
}

/// A JVM of another user: the trigger file, the socket and the agent file
/// all work as its user; installing reuses identical files and never
/// follows a planted symlink.
fn attaches_to_another_users_jvm(jdk: Jdk) {
    let mut jvm = Jvm::start(jdk, &[], Launch::AsNobody);
    // Declared after the JVM, so dropped before it: /proc/PID/root still
    // leads to the files.
    let files = Cleanup::default();
    assert_eq!((jvm.uid, jvm.gid), (NOBODY, NOBODY));
    // What a root JVM killed with this pid left (pids wrap at 32768 here):
    // the JVM cannot rename its own socket over it in the sticky /tmp. A
    // socket an earlier test's JVM of this pid left goes first, as in
    // replaces_a_stale_socket: binding over it fails.
    let _ = fs::remove_file(jvm.socket_path());
    plant_stale_socket(&jvm.socket_path(), 0, 0);
    files.add(jvm.socket_path());

    let properties = attach_ok(&jvm, &["properties"]);
    assert!(properties.contains("user.name=nobody"), "{properties}");
    assert_eq!(fs::metadata(jvm.socket_path()).unwrap().uid(), NOBODY);

    let fixtures = fixtures(jdk);
    let agent = fs::read(&fixtures.agent).unwrap();
    let name = format!("{}.so", unique("libstoke-test-agent"));
    let source = fixtures.agent_named(&name);
    let path = install(&jvm, &source);
    assert_eq!(path, format!("/tmp/{name}"));
    let installed = jvm.host_path(&path);
    files.add(installed.clone());
    let metadata = fs::metadata(&installed).unwrap();
    assert_eq!(
        (metadata.uid(), metadata.gid(), metadata.mode() & 0o7777),
        (NOBODY, NOBODY, 0o644)
    );
    assert_eq!(fs::read(&installed).unwrap(), agent);

    assert_eq!(install(&jvm, &source), path);
    assert_eq!(
        fs::metadata(&installed).unwrap().ino(),
        metadata.ino(),
        "not reused"
    );

    let another = fixtures.other_file(&name, b"another agent");
    let other = install(&jvm, &another);
    files.add(jvm.host_path(&other));
    assert_ne!(other, path);
    assert_eq!(fs::read(jvm.host_path(&other)).unwrap(), b"another agent");
    assert_eq!(
        fs::read(&installed).unwrap(),
        agent,
        "the first file changed"
    );

    let link_name = format!("{}.so", unique("libstoke-test-link"));
    let link = jvm.host_path(&format!("/tmp/{link_name}"));
    let victim = format!("/tmp/{}", unique("stoke-link-victim"));
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    files.add(link.clone());
    files.add(jvm.host_path(&victim));
    let placed = install(&jvm, &fixtures.agent_named(&link_name));
    files.add(jvm.host_path(&placed));
    assert_ne!(placed, format!("/tmp/{link_name}"));
    assert!(!jvm.host_path(&victim).exists(), "the symlink was followed");
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(jvm.host_path(&placed)).unwrap(), agent);

    let marker = format!("/tmp/{}", unique("stoke-agent-marker"));
    files.add(jvm.host_path(&marker));
    attach_ok(&jvm, &["load", &path, "true", &format!("mark={marker}")]);
    assert_eq!(fs::metadata(jvm.host_path(&marker)).unwrap().uid(), NOBODY);
    jvm.assert_undisturbed();
}

/// A JVM in its own pid and mount namespaces, with a private /tmp.
fn attaches_across_namespaces(jdk: Jdk) {
    let mut jvm = Jvm::start(jdk, &[], Launch::Namespaced);
    assert_eq!(jvm.ns_pid, 1);
    assert_ne!(jvm.pid, 1);

    let properties = attach_ok(&jvm, &["properties"]);
    assert!(properties.contains("java.version"), "{properties}");
    let socket = fs::metadata(jvm.socket_path()).unwrap();
    assert!(socket.file_type().is_socket());
    assert!(
        !Path::new("/tmp/.java_pid1").exists(),
        "the socket is in the host's /tmp"
    );

    let path = install(
        &jvm,
        &fixtures(jdk).agent_named(&format!("{}.so", unique("libstoke-test-agent"))),
    );
    assert!(jvm.host_path(&path).exists());
    assert!(
        !Path::new(&path).exists(),
        "the agent went to the host's /tmp"
    );
    let marker = format!("/tmp/{}", unique("stoke-agent-marker"));
    attach_ok(&jvm, &["load", &path, "true", &format!("mark={marker}")]);
    assert_eq!(
        fs::read_to_string(jvm.host_path(&marker)).unwrap(),
        "loaded\n"
    );
    jvm.assert_undisturbed();
}

/// -Xrs JVMs start their listener at startup: attached through it; but
/// once it is gone only SIGQUIT could restart it, and that would kill.
fn attaches_to_an_xrs_jvm_only_through_its_socket(jdk: Jdk) {
    let mut jvm = Jvm::start(jdk, &["-Xrs"], Launch::Root);
    let socket = jvm.socket_path();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() && Instant::now() < deadline {
        sleep(Duration::from_millis(20));
    }
    let properties = attach_ok(&jvm, &["properties"]);
    assert!(properties.contains("java.version"), "{properties}");

    fs::remove_file(&socket).unwrap();
    attach(&jvm, &["properties"]).assert_user_error(&["SIGQUIT", "-Xrs"]);
    assert!(!jvm.trigger_path().exists());
    jvm.assert_undisturbed();
}

/// No agent goes to a /tmp mounted noexec, from which the JVM could not
/// map it.
fn refuses_a_noexec_tmp(jdk: Jdk) {
    let mut jvm = Jvm::start(jdk, &[], Launch::NoexecTmp);
    let agent = fixtures(jdk).agent_named(&format!("{}.so", unique("libstoke-test-agent")));
    Stoke::spawn(&install_args(&jvm, &agent))
        .wait(STOKE_TIMEOUT)
        .assert_user_error(&["noexec"]);
    jvm.assert_undisturbed();
}

/// A process that is not a JVM is refused, and never signalled: SIGQUIT
/// would kill it.
#[test]
fn never_signals_a_process_that_is_not_a_jvm() {
    require_root();
    let mut command = Command::new("sh");
    command.args(["-c", "echo ready; exec sleep \"$0\"", JVM_LIFETIME_SECS]);
    let mut sleeper = Running::start(command, "sleep", "sleep");
    let pid = sleeper.pid();
    let output = Stoke::spawn(&["attach".to_owned(), pid.to_string()]).wait(STOKE_TIMEOUT);
    output.assert_user_error(&[&pid.to_string(), "HotSpot"]);
    sleep(SETTLE);
    assert!(sleeper.is_alive(), "the process died");
    assert!(!Path::new(&format!("/tmp/.attach_pid{pid}")).exists());
}

// ---------------------------------------------------------------------------
// Helpers

/// Runs `stoke attach PID ARGS...` to its end.
fn attach(jvm: &Jvm, args: &[&str]) -> StokeOutput {
    let mut line = vec!["attach".to_owned(), jvm.pid.to_string()];
    line.extend(args.iter().map(|arg| (*arg).to_owned()));
    Stoke::spawn(&line).wait(STOKE_TIMEOUT)
}

/// [`attach`], which must succeed: the JVM's answer.
fn attach_ok(jvm: &Jvm, args: &[&str]) -> String {
    let output = attach(jvm, args);
    output.assert_success();
    output.stdout
}

fn install_args(jvm: &Jvm, file: &Path) -> Vec<String> {
    vec![
        "attach".to_owned(),
        "--install".to_owned(),
        file.display().to_string(),
        jvm.pid.to_string(),
    ]
}

/// `stoke attach --install FILE PID`, which must succeed: the path the JVM
/// sees the file at.
fn install(jvm: &Jvm, file: &Path) -> String {
    let output = Stoke::spawn(&install_args(jvm, file)).wait(STOKE_TIMEOUT);
    output.assert_success();
    let path = output.stdout.trim_end();
    assert!(
        path.starts_with("/tmp/") && !path.contains('\n'),
        "{path:?}"
    );
    path.to_owned()
}

/// The Java class and the test agent, built once per JDK and run, in a
/// directory every user can read, outside /tmp (namespaced JVMs get a /tmp
/// of their own).
struct Fixtures {
    dir: PathBuf,
    workload: JavaWorkload,
    agent: PathBuf,
}

impl Fixtures {
    /// A copy of the agent named `name`: `stoke attach --install` keeps the
    /// file's name.
    fn agent_named(&self, name: &str) -> PathBuf {
        let copy = self.dir.join("named").join(name);
        fs::create_dir_all(copy.parent().unwrap()).unwrap();
        fs::copy(&self.agent, &copy).unwrap();
        copy
    }

    /// A file named `name` holding `bytes`.
    fn other_file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let file = self.dir.join("other").join(name);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, bytes).unwrap();
        file
    }
}

fn fixtures_dir() -> PathBuf {
    PathBuf::from(format!("/var/tmp/stoke-attach-test-{}", std::process::id()))
}

extern "C" fn remove_fixtures() {
    let _ = fs::remove_dir_all(fixtures_dir());
}

fn fixtures(jdk: Jdk) -> &'static Fixtures {
    static JDK_11_FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    static JDK_17_FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    static TEMURIN_25_FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    let cell = if jdk == JDK_11 {
        &JDK_11_FIXTURES
    } else if jdk == JDK_17 {
        &JDK_17_FIXTURES
    } else {
        assert_eq!(jdk, TEMURIN_25);
        &TEMURIN_25_FIXTURES
    };
    cell.get_or_init(|| {
        require_root();
        let dir = fixtures_dir().join(jdk.label);
        fs::create_dir_all(&dir).unwrap();
        // SAFETY: registers a function that only removes the directory.
        unsafe { libc::atexit(remove_fixtures) };
        let workload = JavaWorkload::build("JavaIdle", jdk, &dir);
        let agent = Workload::build_with("attach_agent", &dir, &["-shared", "-fPIC", "-O2"]);
        let agent = agent.exe().to_path_buf();
        readable_by_all(&fixtures_dir());
        Fixtures {
            dir,
            workload,
            agent,
        }
    })
}

/// Makes a tree readable by every user, the JVMs run as nobody included.
fn readable_by_all(path: &Path) {
    let metadata = fs::symlink_metadata(path).unwrap();
    let mode = if metadata.is_dir() { 0o755 } else { 0o644 };
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    if metadata.is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            readable_by_all(&entry.unwrap().path());
        }
    }
}

enum Launch {
    Root,
    /// `setpriv` to uid and gid 65534.
    AsNobody,
    /// New pid and mount namespaces, a tmpfs on /tmp.
    Namespaced,
    /// A new mount namespace, a tmpfs mounted noexec on /tmp.
    NoexecTmp,
}

/// A JVM started for a test (`JavaIdle`), killed when dropped.
struct Jvm {
    running: Running,
    /// The JVM's pid on the host (the child, or its child).
    pid: u32,
    /// Its pid in its own pid namespace.
    ns_pid: u32,
    uid: u32,
    gid: u32,
}

impl Jvm {
    fn start(jdk: Jdk, flags: &[&str], launch: Launch) -> Jvm {
        let fixtures = fixtures(jdk);
        let java = jdk.tool("java");
        let in_namespace = |unshare: &[&str], script: &str| {
            let mut command = Command::new("unshare");
            command
                .args(unshare)
                .args(["--fork", "--kill-child", "sh", "-c", script, "sh"])
                .arg(&java);
            command
        };
        let mut command = match launch {
            Launch::Root => Command::new(&java),
            Launch::AsNobody => {
                let mut command = Command::new("setpriv");
                command
                    .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(&java);
                command
            }
            Launch::Namespaced => in_namespace(
                &["--mount", "--pid", "--mount-proc"],
                "mount -t tmpfs none /tmp && cd /tmp && exec \"$@\"",
            ),
            Launch::NoexecTmp => in_namespace(
                &["--mount"],
                "mount -t tmpfs -o noexec none /tmp && cd /tmp && exec \"$@\"",
            ),
        };
        command
            .current_dir("/tmp")
            .args(flags)
            .arg("-cp")
            .arg(fixtures.workload.classes())
            .args([fixtures.workload.class(), JVM_LIFETIME_SECS])
            // The JVM's own settings must not come from the environment.
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .env_remove("_JAVA_OPTIONS");
        let name = format!("JavaIdle ({})", jdk.label);
        let running = Running::start(command, &name, "java");
        let pid = match launch {
            Launch::Namespaced | Launch::NoexecTmp => only_child(running.pid()),
            Launch::Root | Launch::AsNobody => running.pid(),
        };
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| -> Vec<u32> {
            let line = status.lines().find_map(|line| line.strip_prefix(name));
            let values = line.unwrap_or_else(|| panic!("no {name} in the status of {pid}"));
            values
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect()
        };
        Jvm {
            ns_pid: *field("NSpid:").last().unwrap(),
            uid: field("Uid:")[1],
            gid: field("Gid:")[1],
            pid,
            running,
        }
    }

    /// Where the host reaches a path of the JVM's filesystem.
    fn host_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", self.pid))
    }

    fn socket_path(&self) -> PathBuf {
        self.host_path(&format!("/tmp/.java_pid{}", self.ns_pid))
    }

    fn trigger_path(&self) -> PathBuf {
        self.host_path(&format!("/tmp/.attach_pid{}", self.ns_pid))
    }

    /// Still running, and no SIGQUIT printed a thread dump.
    fn assert_undisturbed(&mut self) {
        sleep(SETTLE);
        let output = format!("{}{}", self.running.stdout_text(), self.running.stderr());
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        let alive = stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'));
        assert!(alive && self.running.is_alive(), "the JVM died: {output}");
        assert!(!output.contains("Full thread dump"), "{output}");
    }
}

/// The one child of process `pid` (`unshare --fork` runs the JVM as one).
fn only_child(pid: u32) -> u32 {
    let children = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    children
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("process {pid} has no child"))
        .parse()
        .unwrap()
}

/// Files removed at the end of a test.
#[derive(Default)]
struct Cleanup(RefCell<Vec<PathBuf>>);

impl Cleanup {
    fn add(&self, path: PathBuf) {
        self.0.borrow_mut().push(path);
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for path in self.0.borrow().iter() {
            let _ = fs::remove_file(path);
        }
    }
}

/// A name no other test of any run uses at the same time.
fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// What a JVM killed by SIGKILL leaves: a socket at `path`, of `uid` and
/// `gid`, bound and closed without ever listening, so that connecting to it
/// is refused.
fn plant_stale_socket(path: &Path, uid: u32, gid: u32) {
    let bytes = path.to_str().unwrap().as_bytes();
    // SAFETY: sockaddr_un is plain data, valid all zeroes.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    assert!(bytes.len() < address.sun_path.len(), "{path:?} is too long");
    for (slot, byte) in address.sun_path.iter_mut().zip(bytes) {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: socket() takes no pointers; the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "{}", io::Error::last_os_error());
    // SAFETY: a new descriptor nothing else owns; closed when dropped.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `address` is a complete sockaddr_un of the length given.
    let bound = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            std::ptr::from_ref(&address).cast(),
            size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    assert_eq!(bound, 0, "{}", io::Error::last_os_error());
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
}
