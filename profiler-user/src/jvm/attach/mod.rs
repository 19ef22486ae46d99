//! HotSpot's dynamic attach protocol, to load Stoke's JVMTI agent into
//! running JVMs, on the host and in containers, without jattach or jcmd.
//!
//! A JVM listens on the UNIX socket `/tmp/.java_pid<pid>` of its own mount
//! and pid namespaces, but only once asked: a file `/tmp/.attach_pid<pid>`
//! owned by the JVM's user, then SIGQUIT, makes it start its attach
//! listener. A request is `1\0<command>\0<arg>\0<arg>\0<arg>\0`; the answer
//! is a status line then the command's output, until the JVM hangs up.
//!
//! The JVM, and everything in its filesystem, is untrusted:
//! - its `/tmp` is reached through `/proc/PID/root`, and every name in it is
//!   resolved with `openat2` refusing symlinks, so that nothing planted
//!   there can redirect a write elsewhere;
//! - files are written, and the socket connected, by a short-lived thread
//!   that took the JVM's own uid and gid: the JVM trusts the trigger file and
//!   the connection only from its user, and stoke never writes what that
//!   user could not;
//! - SIGQUIT, whose default action kills, goes only to a process that maps
//!   libjvm.so and handles SIGQUIT, and through a pidfd, so that a pid
//!   reused meanwhile is never signalled;
//! - reads of `/proc` files and of answers are bounded, and every socket
//!   operation has a deadline.
//!
//! The work is split by what it deals with: [`protocol`] (requests and
//! answers as bytes), [`target`] (the process, pinned by a pidfd, and what
//! `/proc` says of it), [`vm_flags`] (whether SIGQUIT is safe),
//! [`connection`] (finding or starting the listener, and connecting),
//! [`exchange`](mod@exchange) (one request and its answer, within a deadline),
//! [`credentials`] (acting as the JVM's user) and [`tmp_files`] (the files
//! written into the JVM's `/tmp`). `stoke attach` drives it from
//! `crate::commands::attach`.

mod connection;
mod credentials;
mod exchange;
pub(crate) mod protocol;
pub(crate) mod target;
mod tmp_files;
pub(crate) mod vm_flags;

use std::{io, os::fd::AsFd, time::Duration};

use profiler_common::jvm::AgentStartError;

pub use self::target::{is_java_launcher, is_libjvm};
use self::{
    connection::open_connection,
    credentials::as_target,
    exchange::exchange,
    protocol::{encode_request, load_failure, load_outcome, one_line, parse_reply, Reply},
    target::{maps_libjvm, ProcStatus, TargetHandle},
    tmp_files::{check_file_name, mounted_noexec, place_agent, NAME_ALTERNATIVES},
};

/// Longer timeouts are cut to this, which keeps deadline arithmetic finite.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// A JVM found on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JvmTarget {
    /// The pid on the host (stoke's pid namespace).
    pub pid: u32,
    /// The pid in the JVM's own pid namespace (the last field of `NSpid:`
    /// in `/proc/PID/status`), which names its attach files.
    pub ns_pid: u32,
    /// The JVM's effective uid, as the host sees it.
    pub uid: u32,
    /// The JVM's effective gid, as the host sees it.
    pub gid: u32,
}

impl JvmTarget {
    /// The JVM with host pid `pid`: its ids, after checking that it is a
    /// HotSpot JVM (it maps libjvm.so).
    pub fn inspect(pid: u32) -> Result<JvmTarget, AttachError> {
        let status = ProcStatus::read(pid)?;
        if !maps_libjvm(pid)? {
            return Err(AttachError::NotHotSpot { pid });
        }
        Ok(JvmTarget {
            pid,
            ns_pid: status.ns_pid,
            uid: status.uid,
            gid: status.gid,
        })
    }
}

/// Copies `agent` (the bytes of a .so) into the JVM's `/tmp` as
/// `file_name`, or reuses an identical file already there, and returns the
/// path to give [`load_agent`], as the JVM sees it: `/tmp/<file_name>`,
/// unless that name was taken.
///
/// The file is written as the JVM's user, mode 0644, to a temporary name
/// then renamed into place, so that the JVM never sees part of it. A name
/// taken by anything else (another content, a symlink, another user's
/// file) is never overwritten: the agent goes to `<stem>-1.so`,
/// `<stem>-2.so`... instead. A `/tmp` mounted noexec, from which the JVM
/// could not map the agent, is an error.
pub fn install_agent(
    target: &JvmTarget,
    file_name: &str,
    agent: &[u8],
) -> Result<String, AttachError> {
    check_file_name(file_name)?;
    let handle = TargetHandle::open(target)?;
    if mounted_noexec(handle.tmp.as_fd()) {
        return Err(AttachError::NoexecTmp { pid: target.pid });
    }
    let name = as_target(target, || place_agent(&handle, file_name, agent))?;
    Ok(format!("/tmp/{name}"))
}

/// Loads the agent at `agent_path` (absolute, as the JVM sees it) into the
/// JVM with `options`: the attach command `load <path> true <options>`,
/// starting the JVM's attach listener if needed. Succeeds when the agent's
/// `Agent_OnAttach` returned 0.
///
/// Starting the listener may take up to 5 s; `timeout` bounds connecting,
/// then again the request and its answer, which waits for the agent's
/// `Agent_OnAttach`. JDK 21+ print a warning on the JVM's stderr for an
/// agent loaded this way, unless started with
/// `-XX:+EnableDynamicAgentLoading`.
pub fn load_agent(
    target: &JvmTarget,
    agent_path: &str,
    options: &str,
    timeout: Duration,
) -> Result<(), AttachError> {
    if !agent_path.starts_with('/') {
        return Err(AttachError::InvalidRequest(format!(
            "the agent path {agent_path:?} is not absolute"
        )));
    }
    execute_judged(target, "load", &[agent_path, "true", options], timeout).map(drop)
}

/// Runs one attach command (`properties`, or `jcmd` with `VM.version`...)
/// with at most 3 arguments, and returns the JVM's answer after its status
/// line. A non-zero status is an error carrying the answer.
///
/// Starting the listener may take up to 5 s; `timeout` bounds connecting,
/// then again the request and its answer.
pub fn execute(
    target: &JvmTarget,
    command: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<String, AttachError> {
    let reply = request(target, command, args, timeout)?;
    if reply.status != 0 {
        return Err(AttachError::CommandFailed {
            pid: target.pid,
            command: command.to_owned(),
            status: reply.status,
            message: one_line(&reply.body),
        });
    }
    Ok(reply.body)
}

/// [`execute`], with a `load` command's answer judged as [`load_agent`]
/// judges it: an error unless the agent's `Agent_OnAttach` returned 0.
pub fn execute_judged(
    target: &JvmTarget,
    command: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<String, AttachError> {
    let executed = execute(target, command, args, timeout);
    if command != "load" {
        return executed;
    }
    let pid = target.pid;
    let path = args.first().copied().unwrap_or_default();
    match executed {
        Ok(answer) => load_outcome(pid, path, &answer).map(|()| answer),
        // Up to JDK 20, a library that cannot be loaded fails the command.
        Err(AttachError::CommandFailed { message, .. }) => Err(load_failure(pid, path, message)),
        Err(error) => Err(error),
    }
}

/// One attach command: its status and answer.
fn request(
    target: &JvmTarget,
    command: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<Reply, AttachError> {
    let request = encode_request(command, args)?;
    let timeout = timeout.min(MAX_TIMEOUT);
    let handle = TargetHandle::open(target)?;
    let stream = open_connection(&handle, timeout)?;
    let bytes = exchange(target.pid, &stream, &request, timeout)?;
    parse_reply(target.pid, &bytes)
}

/// Why a JVM could not be attached to, in one line naming the cause and
/// what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("process {pid} is gone")]
    Gone { pid: u32 },
    #[error("cannot read /proc/{pid}/{file}: {source}")]
    ProcRead {
        pid: u32,
        file: &'static str,
        source: io::Error,
    },
    #[error("cannot parse /proc/{pid}/status: no valid {field} line")]
    ProcStatus { pid: u32, field: &'static str },
    #[error("process {pid} is not a HotSpot JVM (no libjvm.so mapped): not attaching")]
    NotHotSpot { pid: u32 },
    #[error("process {pid} is no longer the JVM inspected (its pid was reused?): not attaching")]
    Changed { pid: u32 },
    #[error("JVM {pid} refuses dynamic attach (-XX:+DisableAttachMechanism)")]
    AttachDisabled { pid: u32 },
    #[error("JVM {pid} would be killed by SIGQUIT ({reason}): not attaching")]
    SigquitUnsafe { pid: u32, reason: &'static str },
    #[error("JVM {pid} is still starting: its attach mechanism is not set up yet")]
    AttachNotSetUp { pid: u32 },
    #[error("JVM {pid} did not start its attach listener within {waited:?}")]
    ListenerTimeout { pid: u32, waited: Duration },
    #[error("JVM {pid} has no usable /tmp ({source}), where HotSpot keeps its attach socket: it cannot be attached")]
    NoTmp { pid: u32, source: io::Error },
    #[error("JVM {pid}: /tmp/{name} is not a socket of uid {uid} but a symlink, another file or another user's socket in use: not connecting (remove it to attach)")]
    SuspiciousSocket { pid: u32, name: String, uid: u32 },
    #[error("JVM {pid}: /tmp/{name} refuses connections, even after a stale socket there was removed and a new listener asked for: not retrying")]
    StaleSocket { pid: u32, name: String },
    #[error("JVM {pid}: /tmp/{name} belongs to another user or is not a regular file: delete it to attach")]
    ForeignFile { pid: u32, name: String },
    #[error("JVM {pid} did not answer within {timeout:?}")]
    Timeout { pid: u32, timeout: Duration },
    #[error("JVM {pid}: cannot {step}: {source}")]
    Io {
        pid: u32,
        step: &'static str,
        source: io::Error,
    },
    #[error("JVM {pid} hung up without answering (it takes requests only from its own uid and gid, or root)")]
    NoAnswer { pid: u32 },
    #[error("JVM {pid} does not accept attach protocol version 1 (status {status}: {message}): stoke needs a newer attach client for it")]
    ProtocolMismatch {
        pid: u32,
        status: i32,
        message: String,
    },
    #[error("JVM {pid} answered more than {limit} bytes: not reading further")]
    ReplyTooLarge { pid: u32, limit: usize },
    #[error("JVM {pid} gave an answer that is not an attach reply ({detail}): {quote}")]
    BadReply {
        pid: u32,
        detail: &'static str,
        quote: String,
    },
    #[error("JVM {pid} failed attach command {command:?} (status {status}): {message}")]
    CommandFailed {
        pid: u32,
        command: String,
        status: i32,
        message: String,
    },
    #[error("JVM {pid} cannot load the agent {path}: {message}{hint}")]
    AgentLoad {
        pid: u32,
        path: String,
        message: String,
        hint: &'static str,
    },
    #[error("JVM {pid} loaded the agent {path}, but it did not start: {}", describe_start_error(*code))]
    AgentInit { pid: u32, path: String, code: i32 },
    #[error("JVM {pid} forbids loading agents at run time (-XX:-EnableDynamicAgentLoading): restart it without that flag")]
    DynamicLoadingDisabled { pid: u32 },
    #[error("JVM {pid} cannot load an agent from its /tmp, which is mounted noexec: remount it exec to profile Java")]
    NoexecTmp { pid: u32 },
    #[error("JVM {pid}: cannot {step} in its /tmp: {source}")]
    TargetFs {
        pid: u32,
        step: String,
        source: io::Error,
    },
    #[error("JVM {pid}: /tmp/{name} and its {NAME_ALTERNATIVES} alternative names are taken by other files: cannot install the agent")]
    NoFreeName { pid: u32, name: String },
    #[error("cannot act as uid {uid} gid {gid} to attach to JVM {pid}: {source} (stoke must run as root)")]
    Credentials {
        pid: u32,
        uid: u32,
        gid: u32,
        source: io::Error,
    },
    #[error("this kernel lacks {what} (Linux 5.6 or newer), which attaching to JVMs safely needs")]
    KernelTooOld { what: &'static str },
    #[error("invalid attach request: {0}")]
    InvalidRequest(String),
    #[error("the attach thread for JVM {pid} panicked")]
    ThreadPanicked { pid: u32 },
}

impl AttachError {
    /// Whether the JVM was still starting: an attach a little later can
    /// succeed.
    pub fn jvm_starting(&self) -> bool {
        match self {
            Self::SigquitUnsafe { .. } | Self::AttachNotSetUp { .. } => true,
            // The listener answers before the VM is live (JVMTI's start
            // phase); HotSpot refuses the load before opening the library.
            Self::AgentLoad { message, .. } => message.contains(NOT_LIVE_YET),
            Self::AgentInit { code, .. } => {
                AgentStartError::from_raw(*code) == Some(AgentStartError::NoJvmti)
            }
            _ => false,
        }
    }
}

/// HotSpot's answer to a `load` before the VM is live.
const NOT_LIVE_YET: &str = "only permitted in the live phase";

/// An `Agent_OnAttach` return value, said.
fn describe_start_error(code: i32) -> String {
    AgentStartError::from_raw(code).map_or_else(
        || format!("Agent_OnAttach returned {code}"),
        |error| error.describe().to_owned(),
    )
}

#[cfg(test)]
pub(super) mod tests {
    //! The test process as its own target, as root (stoke's condition): a
    //! process that is no JVM, whose socket name in the host's `/tmp` is
    //! its own while it runs. Real JVMs are attached to by the end-to-end
    //! tests (`tests/tests/java_attach.rs`), through `stoke attach`.

    use std::{path::Path, sync::Mutex};

    use super::*;
    use crate::procfs;

    /// Held by the tests that use this process's socket name.
    pub(crate) static OWN_SOCKET: Mutex<()> = Mutex::new(());

    /// This test process, as a target.
    pub(crate) fn this_process() -> JvmTarget {
        let status = procfs::read_status("/proc/self/status").unwrap();
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        JvmTarget {
            pid: std::process::id(),
            ns_pid: procfs::innermost_pid(&status).unwrap(),
            uid,
            gid,
        }
    }

    /// A JVM whose listener answers a load before the VM is live is still
    /// starting: the attach is tried again later; other load failures are
    /// final.
    #[test]
    fn a_load_refused_before_the_live_phase_is_tried_again() {
        let refused = |message: &str| AttachError::AgentLoad {
            pid: 1,
            path: "/tmp/libstoke_agent.so".into(),
            message: message.into(),
            hint: "",
        };
        assert!(
            refused("Dynamic agent loading is only permitted in the live phase").jvm_starting()
        );
        assert!(!refused("Could not find agent library /tmp/libstoke_agent.so").jvm_starting());
    }

    /// Even a target made up by hand, past [`JvmTarget::inspect`], gets no
    /// SIGQUIT, which would kill this test process.
    #[test]
    fn never_signals_a_process_that_is_not_a_jvm() {
        let _alone = OWN_SOCKET.lock().unwrap();
        let target = this_process();
        let error = JvmTarget::inspect(target.pid).unwrap_err();
        assert!(matches!(error, AttachError::NotHotSpot { .. }), "{error}");
        let timeout = Duration::from_secs(20);
        let error = execute(&target, "properties", &[], timeout).unwrap_err();
        assert!(matches!(error, AttachError::NotHotSpot { .. }), "{error}");
        let trigger = format!("/tmp/.attach_pid{}", target.ns_pid);
        assert!(!Path::new(&trigger).exists(), "the trigger file was left");
    }
}
