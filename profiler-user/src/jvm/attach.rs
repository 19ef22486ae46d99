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

use std::{
    ffi::{CStr, CString},
    fs::{File, Permissions},
    io::{self, Read, Write},
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::{
            fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt},
            net::UnixStream,
        },
    },
    time::{Duration, Instant},
};

use crate::{
    process::maps::{self as proc_maps, MapsEntry},
    rootfs::openat2,
};

/// How long a JVM gets to start its attach listener after SIGQUIT.
const LISTENER_START_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait for the listener's socket; later waits grow to `POLL_MAX`.
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(200);
/// Longer timeouts are cut to this, which keeps deadline arithmetic finite.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// The largest answer read from a JVM.
const MAX_REPLY: usize = 64 * 1024;
/// The largest `/proc/PID/status` read.
pub(crate) const MAX_STATUS: u64 = 64 * 1024;
/// The largest command line or environment read: Java class paths are
/// long, and the kernel bounds both (2 MiB together with the default stack
/// limit).
const MAX_ARGS: u64 = 4 * 1024 * 1024;
/// The longest piece of a JVM's answer quoted in an error.
const MAX_QUOTE_CHARS: usize = 500;

/// Protocol version 1, which every HotSpot since JDK 6 accepts. HotSpot
/// drops without an answer a request whose command or arguments exceed
/// these limits, so they are checked before sending.
const PROTOCOL_VERSION: &str = "1";
const MAX_COMMAND_LEN: usize = 16;
const MAX_ARG_LEN: usize = 1024;
const ARG_COUNT: usize = 3;
/// HotSpot's `ATTACH_ERROR_BADVERSION`: the JVM does not speak version 1.
const STATUS_BAD_VERSION: i32 = 101;

/// SIGQUIT's bit in the `SigCgt:` mask of `/proc/PID/status`.
const SIGQUIT_MASK: u64 = 1 << (libc::SIGQUIT - 1);

/// Agent file names leave room for the temporary and alternative names
/// derived from them within NAME_MAX (255).
const MAX_AGENT_NAME_LEN: usize = 180;
/// How many other names `install_agent` tries when the name is taken.
const NAME_ALTERNATIVES: usize = 16;

/// Resolution of a name inside the JVM's `/tmp`: no symlink, no `/proc`
/// magic link, nothing outside the directory.
const RESOLVE_SAFE: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

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
    let pid = target.pid;
    match execute(target, "load", &[agent_path, "true", options], timeout) {
        Ok(answer) => load_outcome(pid, agent_path, &answer),
        // Up to JDK 20, a library that cannot be loaded fails the command.
        Err(AttachError::CommandFailed { message, .. }) => {
            Err(load_failure(pid, agent_path, message))
        }
        Err(error) => Err(error),
    }
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
    #[error("JVM {pid} did not start its attach listener within {waited:?}")]
    ListenerTimeout { pid: u32, waited: Duration },
    #[error("JVM {pid} has no usable /tmp ({source}), where HotSpot keeps its attach socket: it cannot be attached")]
    NoTmp { pid: u32, source: io::Error },
    #[error("JVM {pid}: /tmp/{name} is not a socket of uid {uid} (symlink or foreign file): not connecting")]
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
    #[error("JVM {pid} loaded the agent {path}, but its Agent_OnAttach returned {code}: the agent did not start")]
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

// ---------------------------------------------------------------------------
// Requests and replies

/// A JVM's answer: the status line, then the rest.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) status: i32,
    pub(crate) body: String,
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

/// `1\0<command>\0<arg1>\0<arg2>\0<arg3>\0`: always three arguments,
/// missing ones empty.
fn encode_request(command: &str, args: &[&str]) -> Result<Vec<u8>, AttachError> {
    let invalid = |why: String| Err(AttachError::InvalidRequest(why));
    if command.is_empty() || command.len() > MAX_COMMAND_LEN {
        return invalid(format!(
            "the command {command:?} must have 1 to {MAX_COMMAND_LEN} bytes"
        ));
    }
    if args.len() > ARG_COUNT {
        return invalid(format!(
            "{} arguments to {command:?}, at most {ARG_COUNT} allowed",
            args.len()
        ));
    }
    if let Some(arg) = args.iter().find(|arg| arg.len() > MAX_ARG_LEN) {
        return invalid(format!(
            "an argument of {} bytes, at most {MAX_ARG_LEN} allowed",
            arg.len()
        ));
    }
    if command.contains('\0') || args.iter().any(|arg| arg.contains('\0')) {
        return invalid("a NUL byte in the command or an argument".to_owned());
    }
    let arguments = (0..ARG_COUNT).map(|i| args.get(i).copied().unwrap_or(""));
    let mut request = Vec::new();
    for field in [PROTOCOL_VERSION, command].into_iter().chain(arguments) {
        request.extend_from_slice(field.as_bytes());
        request.push(0);
    }
    Ok(request)
}

pub(crate) fn parse_reply(pid: u32, bytes: &[u8]) -> Result<Reply, AttachError> {
    if bytes.is_empty() {
        return Err(AttachError::NoAnswer { pid });
    }
    let mut parts = bytes.splitn(2, |&byte| byte == b'\n');
    let line = parts.next().unwrap_or_default();
    let rest = parts.next().unwrap_or_default();
    let body = String::from_utf8_lossy(rest).into_owned();
    let status = std::str::from_utf8(line)
        .ok()
        .and_then(|line| line.trim().parse::<i32>().ok())
        .ok_or_else(|| AttachError::BadReply {
            pid,
            detail: "no numeric status line",
            quote: one_line(&String::from_utf8_lossy(bytes)),
        })?;
    if status == STATUS_BAD_VERSION {
        return Err(AttachError::ProtocolMismatch {
            pid,
            status,
            message: one_line(&body),
        });
    }
    Ok(Reply { status, body })
}

/// What a successful `load` command's answer says. JDK 9+ answer
/// `return code: N`, the agent's result; JDK 8 the bare number. From JDK
/// 21, a library that cannot be loaded is an answer too, the loader's
/// error.
pub(crate) fn load_outcome(pid: u32, path: &str, answer: &str) -> Result<(), AttachError> {
    let Some(first_line) = answer.lines().map(str::trim).find(|line| !line.is_empty()) else {
        return Err(AttachError::BadReply {
            pid,
            detail: "no agent return code",
            quote: String::new(),
        });
    };
    let number = first_line
        .strip_prefix("return code:")
        .unwrap_or(first_line);
    match number.trim().parse::<i32>() {
        Ok(0) => Ok(()),
        Ok(code) => Err(AttachError::AgentInit {
            pid,
            path: path.to_owned(),
            code,
        }),
        Err(_) => Err(load_failure(pid, path, one_line(answer))),
    }
}

/// The error for a JVM's refusal to load the agent, from its message.
pub(crate) fn load_failure(pid: u32, path: &str, message: String) -> AttachError {
    if message.contains("Dynamic agent loading is not enabled") {
        return AttachError::DynamicLoadingDisabled { pid };
    }
    AttachError::AgentLoad {
        pid,
        path: path.to_owned(),
        hint: load_hint(&message),
        message,
    }
}

/// The likely cause behind a loader's error message.
fn load_hint(message: &str) -> &'static str {
    if message.contains("failed to map segment") {
        " (is /tmp mounted noexec?)"
    } else if message.contains("cannot open shared object file") {
        " (the path must exist in the JVM's own filesystem)"
    } else {
        ""
    }
}

/// A JVM's text made into one bounded line of printable characters, to
/// quote in an error.
pub(crate) fn one_line(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let mut quote: String = joined
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_QUOTE_CHARS)
        .collect();
    if joined.chars().nth(MAX_QUOTE_CHARS).is_some() {
        quote.push_str("...");
    }
    quote
}

// ---------------------------------------------------------------------------
// The connection

/// A connection to the JVM's attach listener, started if needed.
///
/// A socket that refuses connections was left by a JVM that died without
/// cleaning up (SIGKILL) and had the same pid, or by a listener that is
/// gone. It is removed, so that the wait for the new listener's socket does
/// not find it again, then the listener is started as for a fresh JVM,
/// once: a second refusal is [`AttachError::StaleSocket`].
fn open_connection(handle: &TargetHandle, timeout: Duration) -> Result<UnixStream, AttachError> {
    handle.check_attach_enabled()?;
    let existing = as_target(&handle.target, || {
        let Some(socket) = find_socket(handle)? else {
            return Ok(AtSocket::Absent);
        };
        match connect(handle, &socket, timeout) {
            Ok(stream) => Ok(AtSocket::Listening(stream)),
            Err(AttachError::StaleSocket { .. }) => Ok(AtSocket::Refused(socket)),
            Err(error) => Err(error),
        }
    })?;
    match existing {
        AtSocket::Listening(stream) => Ok(stream),
        AtSocket::Absent => start_listener(handle, timeout),
        AtSocket::Refused(socket) => {
            // Removing the socket helps only if SIGQUIT may then start a
            // listener: if not, it is left, and the error says why.
            handle.check_sigquit_safe()?;
            as_target(&handle.target, || remove_stale_socket(handle, &socket))?;
            signal_and_connect(handle, timeout)
        }
    }
}

/// What `open_connection` finds at the JVM's socket name.
enum AtSocket {
    Absent,
    /// A listener answered.
    Listening(UnixStream),
    /// A socket of the JVM's user that refused the connection, opened
    /// `O_PATH`.
    Refused(File),
}

/// Asks the JVM to start its attach listener (trigger file, SIGQUIT), then
/// connects to it.
fn start_listener(handle: &TargetHandle, timeout: Duration) -> Result<UnixStream, AttachError> {
    handle.check_sigquit_safe()?;
    signal_and_connect(handle, timeout)
}

/// `start_listener` once SIGQUIT was found safe.
fn signal_and_connect(handle: &TargetHandle, timeout: Duration) -> Result<UnixStream, AttachError> {
    let trigger = c_name(&format!(".attach_pid{}", handle.target.ns_pid))?;
    // Looking again after the trigger is in place: a listener another
    // client started meanwhile would answer SIGQUIT with a thread dump.
    let started = as_target(&handle.target, || {
        create_trigger(handle, &trigger)?;
        let found = find_socket(handle);
        if found.is_err() {
            let _ = remove_file(handle, &trigger);
        }
        found
    })?;
    let signalled = match started {
        Some(_) => Ok(()),
        None => handle.send_sigquit(),
    };
    if let Err(error) = signalled {
        // Best effort: the error that matters is the signal's.
        let _ = as_target(&handle.target, || remove_file(handle, &trigger));
        return Err(error);
    }
    as_target(&handle.target, || {
        let connected =
            wait_for_socket(handle).and_then(|socket| connect(handle, &socket, timeout));
        // The JVM reads the trigger only while it handles our SIGQUIT.
        // Removing it is best effort: a leftover only makes a later SIGQUIT
        // start the listener again.
        let _ = remove_file(handle, &trigger);
        connected
    })
}

/// The JVM's attach socket, if it exists: opened `O_PATH` without
/// following symlinks, and checked to be a socket of the JVM's user.
fn find_socket(handle: &TargetHandle) -> Result<Option<File>, AttachError> {
    let target = &handle.target;
    let name = format!(".java_pid{}", target.ns_pid);
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let suspicious = || AttachError::SuspiciousSocket {
        pid: target.pid,
        name: name.clone(),
        uid: target.uid,
    };
    let fd = match openat2(handle.tmp.as_fd(), &c_name(&name)?, flags, 0, RESOLVE_SAFE) {
        Ok(fd) => fd,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => return Err(suspicious()),
        Err(error) => return Err(handle.fs_error(format!("look up /tmp/{name}"), error)),
    };
    let socket = File::from(fd);
    let metadata = socket
        .metadata()
        .map_err(|error| handle.fs_error(format!("stat /tmp/{name}"), error))?;
    if !metadata.file_type().is_socket() || metadata.uid() != target.uid {
        return Err(suspicious());
    }
    Ok(Some(socket))
}

/// Removes the JVM's socket `refused` (an `O_PATH` descriptor) that
/// refused a connection, if its name still holds that very socket, of the
/// JVM's user. Runs as the JVM's user, relative to the JVM's `/tmp` opened
/// without symlinks, and never follows one: nothing else can be removed,
/// but what that user could. Anything else found under the name (nothing,
/// the listener's new socket, another file) is left; true if removed.
fn remove_stale_socket(handle: &TargetHandle, refused: &File) -> Result<bool, AttachError> {
    let target = &handle.target;
    let name = format!(".java_pid{}", target.ns_pid);
    let c_socket = c_name(&name)?;
    let refused = refused
        .metadata()
        .map_err(|error| handle.fs_error(format!("stat /tmp/{name}"), error))?;
    let found = match stat_at(handle.tmp.as_fd(), &c_socket) {
        Ok(found) => found,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(handle.fs_error(format!("stat /tmp/{name}"), error)),
    };
    let same_socket = found.st_mode & libc::S_IFMT == libc::S_IFSOCK
        && found.st_uid == target.uid
        && (found.st_dev, found.st_ino) == (refused.dev(), refused.ino());
    if !same_socket {
        return Ok(false);
    }
    remove_file(handle, &c_socket)?;
    Ok(true)
}

/// `fstatat` of `name` in `dir`, not following a symlink.
fn stat_at(dir: BorrowedFd, name: &CStr) -> io::Result<libc::stat> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a live C string, relative to our directory descriptor;
    // fstatat fills `stat` when it returns 0.
    let result = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            stat.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded.
    Ok(unsafe { stat.assume_init() })
}

/// Polls for the socket after SIGQUIT, with growing steps.
fn wait_for_socket(handle: &TargetHandle) -> Result<File, AttachError> {
    let start = Instant::now();
    let mut step = POLL_FIRST;
    loop {
        if let Some(socket) = find_socket(handle)? {
            return Ok(socket);
        }
        let waited = start.elapsed();
        if waited >= LISTENER_START_TIMEOUT {
            return Err(AttachError::ListenerTimeout {
                pid: handle.target.pid,
                waited: LISTENER_START_TIMEOUT,
            });
        }
        if handle.wait_for_exit(step.min(LISTENER_START_TIMEOUT - waited)) {
            return Err(AttachError::Gone {
                pid: handle.target.pid,
            });
        }
        step = (step * 3 / 2).min(POLL_MAX);
    }
}

/// Connects to the socket `socket` (an `O_PATH` descriptor) through
/// `/proc/self/fd`, so that the path checked is the path connected to.
/// The connecting thread's credentials are what the JVM checks.
fn connect(
    handle: &TargetHandle,
    socket: &File,
    timeout: Duration,
) -> Result<UnixStream, AttachError> {
    let pid = handle.target.pid;
    let io_error = |step, source| AttachError::Io { pid, step, source };
    // SAFETY: socket() takes no pointers; the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io_error("create a socket", io::Error::last_os_error()));
    }
    // SAFETY: a new descriptor nothing else owns.
    let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    // SO_SNDTIMEO also bounds connect(), which waits while the listener's
    // backlog is full (it serves one client at a time).
    stream
        .set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
        .map_err(|error| io_error("set a socket timeout", error))?;
    let address = unix_address(&format!("/proc/self/fd/{}", socket.as_raw_fd()));
    loop {
        // SAFETY: `address` is a complete sockaddr_un of the length given.
        let result = unsafe {
            libc::connect(
                stream.as_raw_fd(),
                std::ptr::from_ref(&address).cast(),
                size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if result == 0 {
            return Ok(stream);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EISCONN) => return Ok(stream),
            Some(libc::ECONNREFUSED) => {
                return Err(AttachError::StaleSocket {
                    pid,
                    name: format!(".java_pid{}", handle.target.ns_pid),
                })
            }
            Some(libc::EAGAIN) => return Err(AttachError::Timeout { pid, timeout }),
            _ => return Err(io_error("connect to the attach socket", error)),
        }
    }
}

/// A UNIX socket address; `path` is short (`/proc/self/fd/N`).
fn unix_address(path: &str) -> libc::sockaddr_un {
    // SAFETY: sockaddr_un is plain data, valid all zeroes.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let room = address.sun_path.len() - 1;
    for (slot, byte) in address.sun_path.iter_mut().zip(path.bytes().take(room)) {
        *slot = byte as libc::c_char;
    }
    address
}

/// Sends `request` and reads the answer until the JVM hangs up, all before
/// `timeout` from now.
fn exchange(
    pid: u32,
    stream: &UnixStream,
    request: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, AttachError> {
    let deadline = Instant::now() + timeout;
    send_all(pid, stream, request, deadline, timeout)?;
    receive_all(pid, stream, deadline, timeout)
}

fn send_all(
    pid: u32,
    stream: &UnixStream,
    mut rest: &[u8],
    deadline: Instant,
    timeout: Duration,
) -> Result<(), AttachError> {
    while !rest.is_empty() {
        let left = time_left(deadline).ok_or(AttachError::Timeout { pid, timeout })?;
        stream
            .set_write_timeout(Some(left))
            .map_err(|source| AttachError::Io {
                pid,
                step: "set a socket timeout",
                source,
            })?;
        // SAFETY: sending from a live buffer of the length given.
        // MSG_NOSIGNAL: a JVM that hung up must not kill stoke with SIGPIPE.
        let sent = unsafe {
            libc::send(
                stream.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent < 0 {
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Err(AttachError::Timeout { pid, timeout }),
                Some(libc::EPIPE | libc::ECONNRESET) => return Err(AttachError::NoAnswer { pid }),
                _ => {
                    return Err(AttachError::Io {
                        pid,
                        step: "send the request",
                        source: error,
                    })
                }
            }
        }
        rest = rest.get(sent.unsigned_abs()..).unwrap_or_default();
    }
    Ok(())
}

fn receive_all(
    pid: u32,
    mut stream: &UnixStream,
    deadline: Instant,
    timeout: Duration,
) -> Result<Vec<u8>, AttachError> {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = time_left(deadline).ok_or(AttachError::Timeout { pid, timeout })?;
        stream
            .set_read_timeout(Some(left))
            .map_err(|source| AttachError::Io {
                pid,
                step: "set a socket timeout",
                source,
            })?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(reply),
            Ok(read) => {
                if reply.len() + read > MAX_REPLY {
                    return Err(AttachError::ReplyTooLarge {
                        pid,
                        limit: MAX_REPLY,
                    });
                }
                reply.extend_from_slice(chunk.get(..read).unwrap_or_default());
            }
            Err(error) => match error.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    return Err(AttachError::Timeout { pid, timeout })
                }
                // The JVM closes without reading a request it rejects.
                io::ErrorKind::ConnectionReset if reply.is_empty() => {
                    return Err(AttachError::NoAnswer { pid })
                }
                io::ErrorKind::ConnectionReset => return Ok(reply),
                _ => {
                    return Err(AttachError::Io {
                        pid,
                        step: "read the answer",
                        source: error,
                    })
                }
            },
        }
    }
}

/// The time until `deadline`, if any is left.
fn time_left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
}

// ---------------------------------------------------------------------------
// The target process

/// A JVM pinned by a pidfd, with its `/tmp` open.
struct TargetHandle {
    target: JvmTarget,
    pidfd: OwnedFd,
    /// `O_PATH` descriptor of the JVM's `/tmp`, opened as root through
    /// `/proc/PID/root` without following symlinks.
    tmp: OwnedFd,
}

impl TargetHandle {
    /// Pins the process with a pidfd, then checks it still has the ids
    /// `target` holds. The pidfd makes the checks hold until this handle is
    /// dropped: had the process exited before them, the pidfd would show it.
    fn open(target: &JvmTarget) -> Result<Self, AttachError> {
        let pid = target.pid;
        let pidfd = pidfd_open(pid)?;
        let root = File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(format!("/proc/{pid}/root"))
            .map_err(|source| proc_error(pid, "root", source))?;
        let status = ProcStatus::read(pid)?;
        if (status.ns_pid, status.uid, status.gid) != (target.ns_pid, target.uid, target.gid) {
            return Err(AttachError::Changed { pid });
        }
        let handle_tmp = openat2(
            root.as_fd(),
            c"tmp",
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
            libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        );
        let tmp = match handle_tmp {
            Ok(tmp) => tmp,
            Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => {
                return Err(AttachError::KernelTooOld { what: "openat2" })
            }
            Err(source) => return Err(AttachError::NoTmp { pid, source }),
        };
        let handle = Self {
            target: *target,
            pidfd,
            tmp,
        };
        if handle.wait_for_exit(Duration::ZERO) {
            return Err(AttachError::Gone { pid });
        }
        Ok(handle)
    }

    /// Waits up to `timeout` for the process to exit; true if it did.
    fn wait_for_exit(&self, timeout: Duration) -> bool {
        let mut poll = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: polling one descriptor we own; a pidfd turns readable
        // when its process exits.
        unsafe { libc::poll(&mut poll, 1, millis) > 0 }
    }

    /// Refuses SIGQUIT to anything it could kill or disturb: a process that
    /// is not HotSpot, that has no SIGQUIT handler (the default action
    /// kills), that runs with -Xrs (the JVM then installs none), or that
    /// disabled attach (SIGQUIT would print a thread dump).
    fn check_sigquit_safe(&self) -> Result<(), AttachError> {
        let pid = self.target.pid;
        if !maps_libjvm(pid)? {
            return Err(AttachError::NotHotSpot { pid });
        }
        let status = ProcStatus::read(pid)?;
        let (flags, cut) = self.vm_flags()?;
        sigquit_verdict(pid, status.caught, flags, cut)
    }

    /// Refuses a JVM started with -XX:+DisableAttachMechanism, before
    /// anything at its socket name is looked at: it never listens, so
    /// whatever is there was left by an earlier process with its pid.
    fn check_attach_enabled(&self) -> Result<(), AttachError> {
        let pid = self.target.pid;
        match self.vm_flags()? {
            (flags, _) if flags.attach_disabled => Err(AttachError::AttachDisabled { pid }),
            _ => Ok(()),
        }
    }

    /// The JVM's options as its launcher and environment give them, and
    /// whether they were too long to read whole.
    fn vm_flags(&self) -> Result<(VmFlags, bool), AttachError> {
        let pid = self.target.pid;
        let (cmdline, cmdline_cut) = read_proc(pid, "cmdline", MAX_ARGS)?;
        let (environ, environ_cut) = read_proc(pid, "environ", MAX_ARGS)?;
        let flags = VmFlags::from_options(launcher_options(&cmdline, &environ));
        Ok((flags, cmdline_cut || environ_cut))
    }

    /// SIGQUIT through the pidfd: a process that exited since the checks
    /// fails with ESRCH instead of a newcomer with the same pid getting it.
    fn send_sigquit(&self) -> Result<(), AttachError> {
        let pid = self.target.pid;
        // SAFETY: pidfd_send_signal on a pidfd we own, without siginfo.
        let result = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                libc::SIGQUIT,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if result == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        Err(match error.raw_os_error() {
            Some(libc::ESRCH) => AttachError::Gone { pid },
            _ => AttachError::Io {
                pid,
                step: "send SIGQUIT",
                source: error,
            },
        })
    }

    fn fs_error(&self, step: String, source: io::Error) -> AttachError {
        if source.raw_os_error() == Some(libc::ENOSYS) {
            return AttachError::KernelTooOld { what: "openat2" };
        }
        AttachError::TargetFs {
            pid: self.target.pid,
            step,
            source,
        }
    }
}

fn pidfd_open(pid: u32) -> Result<OwnedFd, AttachError> {
    let raw_pid = libc::pid_t::try_from(pid).map_err(|_| AttachError::Gone { pid })?;
    // SAFETY: pidfd_open takes a pid and flags, no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, 0) };
    if fd < 0 {
        let error = io::Error::last_os_error();
        return Err(match error.raw_os_error() {
            Some(libc::ESRCH) => AttachError::Gone { pid },
            Some(libc::ENOSYS) => AttachError::KernelTooOld { what: "pidfd_open" },
            _ => AttachError::Io {
                pid,
                step: "open a pidfd",
                source: error,
            },
        });
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What stoke needs from `/proc/PID/status`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ProcStatus {
    uid: u32,
    gid: u32,
    pub(crate) ns_pid: u32,
    /// Signals with a handler (`SigCgt:`).
    caught: u64,
}

impl ProcStatus {
    fn read(pid: u32) -> Result<Self, AttachError> {
        let (bytes, _) = read_proc(pid, "status", MAX_STATUS)?;
        Self::parse(&String::from_utf8_lossy(&bytes))
            .map_err(|field| AttachError::ProcStatus { pid, field })
    }

    /// The effective ids (2nd fields), the innermost pid, the caught signals.
    pub(crate) fn parse(text: &str) -> Result<Self, &'static str> {
        let field = |name: &'static str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::split_whitespace)
                .ok_or(name)
        };
        let number = |name: &'static str, value: Option<&str>| {
            value
                .and_then(|value| value.parse::<u32>().ok())
                .ok_or(name)
        };
        Ok(Self {
            uid: number("Uid:", field("Uid:")?.nth(1))?,
            gid: number("Gid:", field("Gid:")?.nth(1))?,
            ns_pid: innermost_pid(text).ok_or("NSpid:")?,
            caught: field("SigCgt:")?
                .next()
                .and_then(|mask| u64::from_str_radix(mask, 16).ok())
                .ok_or("SigCgt:")?,
        })
    }
}

/// The last field of a status file's `NSpid:` line: the id in the
/// innermost pid namespace.
pub(crate) fn innermost_pid(text: &str) -> Option<u32> {
    let line = text.lines().find_map(|line| line.strip_prefix("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// At most `limit` bytes of `/proc/PID/<file>`, and whether there was more.
fn read_proc(pid: u32, file: &'static str, limit: u64) -> Result<(Vec<u8>, bool), AttachError> {
    let mut bytes = Vec::new();
    File::open(format!("/proc/{pid}/{file}"))
        .and_then(|opened| opened.take(limit + 1).read_to_end(&mut bytes))
        .map_err(|source| proc_error(pid, file, source))?;
    let cut = bytes.len() as u64 > limit;
    bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((bytes, cut))
}

fn proc_error(pid: u32, file: &'static str, source: io::Error) -> AttachError {
    match source.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => AttachError::Gone { pid },
        _ => AttachError::ProcRead { pid, file, source },
    }
}

/// Whether the process maps HotSpot's libjvm.so (even deleted by an
/// upgrade since). OpenJ9 maps a libjvm.so too, but attaches otherwise and
/// answers SIGQUIT with a javacore file: its libj9vm rules it out.
fn maps_libjvm(pid: u32) -> Result<bool, AttachError> {
    let maps = proc_maps::read(pid).map_err(|source| proc_error(pid, "maps", source))?;
    hotspot_in_maps(maps).map_err(|source| proc_error(pid, "maps", source))
}

/// Whether `maps`, a process's mappings, include HotSpot's libjvm.so.
pub(crate) fn hotspot_in_maps(
    maps: impl IntoIterator<Item = io::Result<MapsEntry>>,
) -> io::Result<bool> {
    let mut libjvm = false;
    for map in maps {
        let path = map?.path;
        if file_name(path.as_bytes()).starts_with(b"libj9vm") {
            return Ok(false);
        }
        libjvm |= is_libjvm(path.as_bytes());
    }
    Ok(libjvm)
}

/// Whether a mapped path is a libjvm.so, even one deleted by an upgrade since it was mapped.
pub fn is_libjvm(path: &[u8]) -> bool {
    file_name(path) == b"libjvm.so"
}

/// The last component of a mapped path, without the ` (deleted)` mark.
fn file_name(path: &[u8]) -> &[u8] {
    let path = path.strip_suffix(b" (deleted)").unwrap_or(path);
    path.rsplit(|&byte| byte == b'/').next().unwrap_or_default()
}

/// The JVM options that decide whether SIGQUIT is safe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct VmFlags {
    attach_disabled: bool,
    reduce_signal_usage: bool,
}

impl VmFlags {
    /// As HotSpot reads them: the last setting of a flag wins.
    pub(crate) fn from_options<'a>(options: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut flags = Self::default();
        for option in options {
            match option {
                b"-XX:+DisableAttachMechanism" => flags.attach_disabled = true,
                b"-XX:-DisableAttachMechanism" => flags.attach_disabled = false,
                b"-Xrs" | b"-XX:+ReduceSignalUsage" => flags.reduce_signal_usage = true,
                b"-XX:-ReduceSignalUsage" => flags.reduce_signal_usage = false,
                _ => {}
            }
        }
        flags
    }
}

/// The JVM's options in the order HotSpot applies them:
/// `JAVA_TOOL_OPTIONS`, then `JDK_JAVA_OPTIONS` (which the launcher puts
/// first on the command line), the command line, then `_JAVA_OPTIONS`.
/// Options in `@argfiles`, `-XX:Flags=` or `-XX:VMOptionsFile=` files are
/// not seen. Application arguments are scanned too: a false match only
/// makes stoke refuse.
pub(crate) fn launcher_options<'a>(cmdline: &'a [u8], environ: &'a [u8]) -> Vec<&'a [u8]> {
    let variable = |name: &[u8]| {
        environ
            .split(|&byte| byte == 0)
            .find_map(|entry| entry.strip_prefix(name)?.strip_prefix(b"="))
    };
    let words = |value: Option<&'a [u8]>| {
        value
            .into_iter()
            .flat_map(|value| value.split(u8::is_ascii_whitespace))
            .filter(|word| !word.is_empty())
    };
    words(variable(b"JAVA_TOOL_OPTIONS"))
        .chain(words(variable(b"JDK_JAVA_OPTIONS")))
        .chain(cmdline.split(|&byte| byte == 0).skip(1))
        .chain(words(variable(b"_JAVA_OPTIONS")))
        .collect()
}

/// Whether SIGQUIT may be sent, from the process's caught signals and
/// options; `cut` says the options were too long to read whole.
fn sigquit_verdict(pid: u32, caught: u64, flags: VmFlags, cut: bool) -> Result<(), AttachError> {
    let unsafe_because = |reason| Err(AttachError::SigquitUnsafe { pid, reason });
    if flags.attach_disabled {
        return Err(AttachError::AttachDisabled { pid });
    }
    if cut {
        return unsafe_because("its command line is too long to check for -Xrs");
    }
    if flags.reduce_signal_usage {
        return unsafe_because("started with -Xrs");
    }
    if caught & SIGQUIT_MASK == 0 {
        return unsafe_because("it has no SIGQUIT handler, or is still starting");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Acting as the JVM's user

/// Runs `work` on a new thread that first takes the JVM's effective uid
/// and gid, without supplementary groups. Raw syscalls change only that
/// thread (glibc's wrappers would change every thread of stoke). Changing
/// the effective uid also changes the filesystem uid and clears the
/// effective capabilities, so the kernel checks every access as the JVM's
/// user's, and SO_PEERCRED shows the JVM its own ids. The thread ends with
/// `work`, so its credentials need no restoring.
fn as_target<T: Send>(
    target: &JvmTarget,
    work: impl FnOnce() -> Result<T, AttachError> + Send,
) -> Result<T, AttachError> {
    let JvmTarget { pid, uid, gid, .. } = *target;
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("stoke-attach".to_owned())
            .spawn_scoped(scope, move || {
                become_user(uid, gid).map_err(|source| AttachError::Credentials {
                    pid,
                    uid,
                    gid,
                    source,
                })?;
                work()
            })
            .map_err(|source| AttachError::Io {
                pid,
                step: "start the attach thread",
                source,
            })?;
        worker
            .join()
            .unwrap_or(Err(AttachError::ThreadPanicked { pid }))
    })
}

/// Takes `uid` and `gid` as effective ids of the calling thread only.
fn become_user(uid: u32, gid: u32) -> io::Result<()> {
    const UNCHANGED: libc::c_long = -1;
    // SAFETY: credential syscalls with integer arguments (setgroups gets an
    // empty list); they affect the calling thread only.
    unsafe {
        check_syscall(libc::syscall(
            libc::SYS_setgroups,
            0,
            std::ptr::null::<libc::gid_t>(),
        ))?;
        check_syscall(libc::syscall(
            libc::SYS_setresgid,
            UNCHANGED,
            libc::c_long::from(gid),
            UNCHANGED,
        ))?;
        check_syscall(libc::syscall(
            libc::SYS_setresuid,
            UNCHANGED,
            libc::c_long::from(uid),
            UNCHANGED,
        ))?;
    }
    Ok(())
}

fn check_syscall(result: libc::c_long) -> io::Result<libc::c_long> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

// ---------------------------------------------------------------------------
// Files in the JVM's /tmp, written as the JVM's user

fn c_name(name: &str) -> Result<CString, AttachError> {
    CString::new(name).map_err(|_| AttachError::InvalidRequest(format!("a NUL byte in {name:?}")))
}

/// The trigger file, as the JVM's user. One left by a client that died is
/// reused if it is the JVM's user's, as the JVM requires.
fn create_trigger(handle: &TargetHandle, trigger: &CStr) -> Result<(), AttachError> {
    let name = trigger.to_string_lossy();
    let tmp = handle.tmp.as_fd();
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
    match openat2(tmp, trigger, flags, 0o600, RESOLVE_SAFE) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            let ours = openat2(tmp, trigger, flags, 0, RESOLVE_SAFE)
                .and_then(|fd| File::from(fd).metadata())
                .is_ok_and(|metadata| metadata.is_file() && metadata.uid() == handle.target.uid);
            if ours {
                Ok(())
            } else {
                Err(AttachError::ForeignFile {
                    pid: handle.target.pid,
                    name: name.into_owned(),
                })
            }
        }
        Err(error) => Err(handle.fs_error(format!("create /tmp/{name}"), error)),
    }
}

fn remove_file(handle: &TargetHandle, name: &CStr) -> Result<(), AttachError> {
    // SAFETY: unlinkat with a live C string, relative to our directory
    // descriptor; it never follows a symlink in the last component.
    let result = unsafe { libc::unlinkat(handle.tmp.as_raw_fd(), name.as_ptr(), 0) };
    let error = io::Error::last_os_error();
    if result == 0 || error.kind() == io::ErrorKind::NotFound {
        return Ok(());
    }
    Err(handle.fs_error(format!("remove /tmp/{}", name.to_string_lossy()), error))
}

/// Whether the directory is on a mount that forbids mapping code.
fn mounted_noexec(dir: BorrowedFd) -> bool {
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: fstatvfs fills `stat` when it returns 0.
    unsafe {
        libc::fstatvfs(dir.as_raw_fd(), stat.as_mut_ptr()) == 0
            && stat.assume_init().f_flag & libc::ST_NOEXEC != 0
    }
}

/// A plain file name, with room for the names derived from it.
fn check_file_name(name: &str) -> Result<(), AttachError> {
    let plain = !name.is_empty()
        && name.len() <= MAX_AGENT_NAME_LEN
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0']);
    if plain {
        Ok(())
    } else {
        Err(AttachError::InvalidRequest(format!(
            "{name:?} is not a plain file name of at most {MAX_AGENT_NAME_LEN} bytes"
        )))
    }
}

/// `name`, then `<stem>-1<.ext>`, `<stem>-2<.ext>`...
fn candidate_names(name: &str) -> impl Iterator<Item = String> + '_ {
    let (stem, extension) = match name.rfind('.') {
        Some(dot) if dot > 0 => name.split_at(dot),
        _ => (name, ""),
    };
    std::iter::once(name.to_owned())
        .chain((1..=NAME_ALTERNATIVES).map(move |n| format!("{stem}-{n}{extension}")))
}

/// What is found under a candidate name.
#[derive(Debug, PartialEq, Eq)]
enum Existing {
    Absent,
    /// The same bytes, in a file only the JVM's user can change.
    Same,
    /// Anything else: never touched.
    Other,
}

/// Writes the agent under the first free name, or finds it already there;
/// returns the name. Runs as the JVM's user.
fn place_agent(
    handle: &TargetHandle,
    file_name: &str,
    agent: &[u8],
) -> Result<String, AttachError> {
    let mut temporary = None;
    let placed = place_under_free_name(handle, file_name, agent, &mut temporary);
    if let Some(temporary) = temporary {
        // Left only when it was not renamed into place; best effort.
        let _ = remove_file(handle, &temporary);
    }
    placed
}

fn place_under_free_name(
    handle: &TargetHandle,
    file_name: &str,
    agent: &[u8],
    temporary: &mut Option<CString>,
) -> Result<String, AttachError> {
    for name in candidate_names(file_name) {
        let c_candidate = c_name(&name)?;
        // Twice: a rename that lost a race finds the winner's file next.
        for _ in 0..2 {
            match existing_agent(handle, &c_candidate, agent)? {
                Existing::Same => return Ok(name),
                Existing::Other => break,
                Existing::Absent => {}
            }
            let from = match temporary {
                Some(from) => from,
                None => temporary.insert(write_temporary(handle, file_name, agent)?),
            };
            match rename_noreplace(handle.tmp.as_fd(), from, &c_candidate) {
                Ok(()) => {
                    *temporary = None;
                    return Ok(name);
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => {
                    return Err(handle.fs_error(format!("rename into /tmp/{name}"), error))
                }
            }
        }
    }
    Err(AttachError::NoFreeName {
        pid: handle.target.pid,
        name: file_name.to_owned(),
    })
}

/// Looks at `name` without following a symlink or blocking on a FIFO.
fn existing_agent(
    handle: &TargetHandle,
    name: &CStr,
    agent: &[u8],
) -> Result<Existing, AttachError> {
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let fd = match openat2(handle.tmp.as_fd(), name, flags, 0, RESOLVE_SAFE) {
        Ok(fd) => fd,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => {
            return Err(AttachError::KernelTooOld { what: "openat2" })
        }
        // A symlink (ELOOP), another user's private file...
        Err(_) => return Ok(Existing::Other),
    };
    let mut file = File::from(fd);
    let Ok(metadata) = file.metadata() else {
        return Ok(Existing::Other);
    };
    // A file another user owns, or may write, could change after the check.
    let trusted = metadata.is_file()
        && metadata.uid() == handle.target.uid
        && metadata.mode() & 0o022 == 0
        && metadata.len() == agent.len() as u64;
    if trusted && same_content(&mut file, agent) {
        Ok(Existing::Same)
    } else {
        Ok(Existing::Other)
    }
}

fn same_content(file: &mut impl Read, expected: &[u8]) -> bool {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut offset = 0;
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return offset == expected.len(),
            Ok(read) => {
                let (Some(want), Some(got)) =
                    (expected.get(offset..offset + read), buffer.get(..read))
                else {
                    return false;
                };
                if want != got {
                    return false;
                }
                offset += read;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// The agent in a new hidden file next to its final place, mode 0644
/// whatever the umask, so that the JVM's user can map it.
fn write_temporary(
    handle: &TargetHandle,
    file_name: &str,
    agent: &[u8],
) -> Result<CString, AttachError> {
    let tmp = handle.tmp.as_fd();
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
    for attempt in 0..8 {
        let name = format!(".{file_name}.{}-{attempt}.tmp", std::process::id());
        let c_temporary = c_name(&name)?;
        let fd = match openat2(tmp, &c_temporary, flags, 0o644, RESOLVE_SAFE) {
            Ok(fd) => fd,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(handle.fs_error(format!("create /tmp/{name}"), error)),
        };
        let mut file = File::from(fd);
        let written = file
            .write_all(agent)
            .and_then(|()| file.set_permissions(Permissions::from_mode(0o644)));
        if let Err(error) = written {
            let _ = remove_file(handle, &c_temporary);
            return Err(handle.fs_error(format!("write /tmp/{name}"), error));
        }
        return Ok(c_temporary);
    }
    Err(handle.fs_error(
        format!("create a temporary file for {file_name}"),
        io::ErrorKind::AlreadyExists.into(),
    ))
}

/// Renames `from` to `to` in `dir` unless `to` exists (EEXIST then).
/// Filesystems without RENAME_NOREPLACE get link + unlink, which is as
/// atomic for this purpose.
fn rename_noreplace(dir: BorrowedFd, from: &CStr, to: &CStr) -> io::Result<()> {
    let dir = dir.as_raw_fd();
    // SAFETY: live C strings, relative to our directory descriptor.
    let renamed = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            dir,
            from.as_ptr(),
            dir,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if renamed == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EINVAL) {
        return Err(error);
    }
    // SAFETY: as above; linkat does not follow a symlink without AT_SYMLINK_FOLLOW.
    if unsafe { libc::linkat(dir, from.as_ptr(), dir, to.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    unsafe { libc::unlinkat(dir, from.as_ptr(), 0) };
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The JVM tests start real JVMs (JDK 17 and Temurin 25, which must be
    //! installed) and need root, like stoke.

    use std::{
        cell::RefCell,
        fs,
        path::{Path, PathBuf},
        process::{Child, Command, Stdio},
        sync::{
            atomic::{AtomicU32, Ordering},
            Arc, Mutex, OnceLock,
        },
        thread::sleep,
    };

    use super::*;

    const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
    const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";
    const TIMEOUT: Duration = Duration::from_secs(20);
    const NOBODY: u32 = 65534;
    /// How long a test JVM lives if its test died without killing it.
    const GUEST_LIFETIME_SECS: &str = "120";
    /// Enough for a stray SIGQUIT to show: death, or a thread dump.
    const SETTLE: Duration = Duration::from_millis(300);

    const JAVA_TARGET: &str = r#"
public class StokeAttachTarget {
    public static void main(String[] args) throws Exception {
        System.out.println("ready");
        System.out.flush();
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        while (System.nanoTime() < end) {
            Thread.sleep(20);
        }
    }
}
"#;

    /// A JVMTI agent reduced to its entry point: `mark=PATH` writes PATH
    /// from inside the JVM, anything else fails with 42.
    const TEST_AGENT: &str = r#"
#include <stdio.h>
#include <string.h>

int Agent_OnAttach(void *vm, char *options, void *reserved) {
    (void)vm;
    (void)reserved;
    if (options == NULL || strncmp(options, "mark=", 5) != 0) {
        return 42;
    }
    FILE *file = fopen(options + 5, "w");
    if (file == NULL) {
        return 43;
    }
    fputs("loaded\n", file);
    return fclose(file) == 0 ? 0 : 44;
}
"#;

    // -----------------------------------------------------------------------
    // Protocol, parsing and decisions

    #[test]
    fn requests_always_carry_three_arguments() {
        assert_eq!(
            encode_request("properties", &[]).unwrap(),
            b"1\0properties\0\0\0\0"
        );
        assert_eq!(
            encode_request("load", &["/tmp/a.so", "true", "x=1"]).unwrap(),
            b"1\0load\0/tmp/a.so\0true\0x=1\0"
        );
        let long = "x".repeat(MAX_ARG_LEN + 1);
        for (command, args) in [
            ("", &[][..]),
            ("a-command-too-long", &[]),
            ("load", &["a", "b", "c", "d"]),
            ("load", &[long.as_str()]),
            ("load", &["a\0b"]),
        ] {
            let error = encode_request(command, args).unwrap_err();
            assert!(matches!(error, AttachError::InvalidRequest(_)), "{error}");
        }
    }

    #[test]
    fn replies_split_into_status_and_answer() {
        let reply = parse_reply(7, b"0\nline 1\nline 2\n").unwrap();
        assert_eq!((reply.status, reply.body.as_str()), (0, "line 1\nline 2\n"));
        let reply = parse_reply(7, b"-1\nOperation x not recognized!").unwrap();
        assert_eq!(reply.status, -1);
        assert_eq!(parse_reply(7, b"0").unwrap().body, "");
        assert!(matches!(
            parse_reply(7, b""),
            Err(AttachError::NoAnswer { pid: 7 })
        ));
        assert!(matches!(
            parse_reply(7, b"HTTP/1.1 400\n"),
            Err(AttachError::BadReply { .. })
        ));
        let error = parse_reply(7, b"101\nunknown version").unwrap_err();
        assert!(
            matches!(error, AttachError::ProtocolMismatch { status: 101, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("version 1"), "{error}");
    }

    #[test]
    fn load_answers_of_every_jdk_are_understood() {
        let path = "/tmp/a.so";
        assert!(load_outcome(1, path, "return code: 0\n").is_ok());
        // JDK 8.
        assert!(load_outcome(1, path, "0\n").is_ok());
        assert!(matches!(
            load_outcome(1, path, "return code: 42\n"),
            Err(AttachError::AgentInit { code: 42, .. })
        ));
        // JDK 21+: status 0, the loader's error as the answer.
        let answer = "/tmp/a.so was not loaded.\n/tmp/a.so: cannot open shared object file: No such file or directory\n";
        let error = load_outcome(1, path, answer).unwrap_err();
        assert!(matches!(error, AttachError::AgentLoad { .. }), "{error}");
        let text = error.to_string();
        assert!(
            text.contains("No such file") && !text.contains('\n'),
            "{text}"
        );
        let noexec = "/tmp/a.so: failed to map segment from shared object";
        let error = load_outcome(1, path, noexec).unwrap_err();
        assert!(error.to_string().contains("noexec"), "{error}");
        assert!(matches!(
            load_failure(
                1,
                path,
                "Dynamic agent loading is not enabled. Use ...".to_owned()
            ),
            AttachError::DynamicLoadingDisabled { pid: 1 }
        ));
        assert!(matches!(
            load_outcome(1, path, "\n"),
            Err(AttachError::BadReply { .. })
        ));
    }

    #[test]
    fn quotes_are_one_bounded_line() {
        assert_eq!(one_line("a\n\n  b \r\nc\u{7}"), "a; b; c ");
        let quote = one_line(&"y".repeat(10_000));
        assert_eq!(quote.len(), MAX_QUOTE_CHARS + 3);
    }

    #[test]
    fn status_gives_effective_ids_innermost_pid_and_handlers() {
        let text = "Name:\tjava\nPid:\t4242\nNSpid:\t4242\t17\nUid:\t1000\t1001\t1002\t1003\n\
                    Gid:\t2000\t2001\t2002\t2003\nSigCgt:\t0000000181005ccf\n";
        let status = ProcStatus::parse(text).unwrap();
        assert_eq!(
            status,
            ProcStatus {
                uid: 1001,
                gid: 2001,
                ns_pid: 17,
                caught: 0x1_8100_5ccf
            }
        );
        assert_ne!(status.caught & SIGQUIT_MASK, 0);
        assert_eq!(ProcStatus::parse("Uid:\t1\t2\n"), Err("Gid:"));
        assert_eq!(
            ProcStatus::parse(&text.replace("NSpid:\t4242\t17", "NSpid:")),
            Err("NSpid:")
        );
    }

    #[test]
    fn hotspot_is_told_by_its_libjvm() {
        let hotspot = "5581c000-5581d000 r-xp 00000000 fe:01 1 /usr/bin/java\n\
                       7f00-7f01 r-xp 00000000 fe:01 2 /usr/lib/jvm/j/lib/server/libjvm.so\n\
                       7f02-7f03 rw-p 00000000 00:00 0\n";
        assert!(hotspot_in_maps(proc_maps::Entries::new(hotspot.as_bytes())).unwrap());
        let upgraded = "7f00-7f01 r-xp 0 fe:01 2 /opt/j/lib/server/libjvm.so (deleted)";
        assert!(hotspot_in_maps(proc_maps::Entries::new(upgraded.as_bytes())).unwrap());
        let openj9 =
            format!("{hotspot}7f04-7f05 r-xp 0 fe:01 3 /opt/j9/lib/default/libj9vm29.so\n");
        assert!(!hotspot_in_maps(proc_maps::Entries::new(openj9.as_bytes())).unwrap());
        let other =
            "7f00-7f01 r-xp 0 fe:01 2 /usr/lib/libjvm.so.bak\n7f02-7f03 r-xp 0 0:0 0 [vdso]\n";
        assert!(!hotspot_in_maps(proc_maps::Entries::new(other.as_bytes())).unwrap());
    }

    #[test]
    fn options_are_read_in_hotspot_order_and_the_last_wins() {
        let cmdline = b"java\0-Xmx1g\0-XX:+DisableAttachMechanism\0-cp\0x\0Main\0";
        let flags = VmFlags::from_options(launcher_options(cmdline, b""));
        assert!(flags.attach_disabled && !flags.reduce_signal_usage);
        // _JAVA_OPTIONS comes after the command line.
        let environ = b"PATH=/bin\0_JAVA_OPTIONS=-XX:-DisableAttachMechanism -Xrs\0";
        let flags = VmFlags::from_options(launcher_options(cmdline, environ));
        assert!(!flags.attach_disabled && flags.reduce_signal_usage);
        // JAVA_TOOL_OPTIONS comes before it.
        let environ = b"JAVA_TOOL_OPTIONS=-XX:-DisableAttachMechanism\0";
        let flags = VmFlags::from_options(launcher_options(cmdline, environ));
        assert!(flags.attach_disabled);
        // argv[0] and look-alike variables do not count.
        let flags = VmFlags::from_options(launcher_options(
            b"-Xrs\0Main\0",
            b"MY_JAVA_TOOL_OPTIONS=-Xrs\0",
        ));
        assert_eq!(flags, VmFlags::default());
    }

    #[test]
    fn sigquit_only_to_a_jvm_that_handles_it() {
        let handled = SIGQUIT_MASK | 1;
        let plain = VmFlags::default();
        assert!(sigquit_verdict(1, handled, plain, false).is_ok());
        let disabled = VmFlags {
            attach_disabled: true,
            ..plain
        };
        assert!(matches!(
            sigquit_verdict(1, handled, disabled, true),
            Err(AttachError::AttachDisabled { pid: 1 })
        ));
        let xrs = VmFlags {
            reduce_signal_usage: true,
            ..plain
        };
        for (caught, flags, cut) in [
            (handled, xrs, false),
            (1, plain, false),
            (handled, plain, true),
        ] {
            let error = sigquit_verdict(1, caught, flags, cut).unwrap_err();
            assert!(
                matches!(error, AttachError::SigquitUnsafe { .. }),
                "{error}"
            );
        }
    }

    #[test]
    fn agent_names_are_plain_and_alternatives_keep_the_extension() {
        let names: Vec<_> = candidate_names("libstoke_agent-ab12.so").take(3).collect();
        assert_eq!(
            names,
            [
                "libstoke_agent-ab12.so",
                "libstoke_agent-ab12-1.so",
                "libstoke_agent-ab12-2.so"
            ]
        );
        assert_eq!(candidate_names(".hidden").nth(1).unwrap(), ".hidden-1");
        assert_eq!(candidate_names("agent").count(), NAME_ALTERNATIVES + 1);
        assert!(check_file_name("libstoke_agent-ab12.so").is_ok());
        let long = "a".repeat(MAX_AGENT_NAME_LEN + 1);
        for bad in ["", ".", "..", "../x.so", "a/b.so", "a\0b", long.as_str()] {
            assert!(check_file_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn answers_are_bounded_in_size_and_time() {
        let request = encode_request("properties", &[]).unwrap();

        let (client, server) = UnixStream::pair().unwrap();
        let talker = std::thread::spawn(move || {
            let mut server = server;
            let mut request = [0u8; 64];
            let _ = server.read(&mut request);
            let _ = server.write_all(&vec![b'x'; MAX_REPLY + 10]);
        });
        let error = exchange(1, &client, &request, TIMEOUT).unwrap_err();
        assert!(
            matches!(error, AttachError::ReplyTooLarge { .. }),
            "{error}"
        );
        drop(client);
        talker.join().unwrap();

        let (client, _silent) = UnixStream::pair().unwrap();
        let start = Instant::now();
        let error = exchange(1, &client, &request, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(error, AttachError::Timeout { .. }), "{error}");
        assert!(start.elapsed() < Duration::from_secs(2));

        let (client, server) = UnixStream::pair().unwrap();
        drop(server);
        let error = exchange(1, &client, &request, TIMEOUT).unwrap_err();
        assert!(matches!(error, AttachError::NoAnswer { pid: 1 }), "{error}");
    }

    // -----------------------------------------------------------------------
    // Credentials, and processes that are not JVMs

    /// The `Uid:`, `Gid:`, `Groups:` and `CapEff:` lines of the calling thread.
    fn thread_credentials() -> Vec<String> {
        let status = fs::read_to_string("/proc/thread-self/status").unwrap();
        ["Uid:", "Gid:", "Groups:", "CapEff:"]
            .iter()
            .map(|name| {
                let line = status.lines().find(|line| line.starts_with(name)).unwrap();
                line.split_whitespace().collect::<Vec<_>>().join(" ")
            })
            .collect()
    }

    #[test]
    fn credentials_change_on_the_attach_thread_only() {
        let before = thread_credentials();
        assert!(
            before[0].starts_with("Uid: 0 0"),
            "the tests need root: {before:?}"
        );
        let target = JvmTarget {
            pid: std::process::id(),
            ns_pid: std::process::id(),
            uid: NOBODY,
            gid: NOBODY,
        };
        let during = as_target(&target, || Ok(thread_credentials())).unwrap();
        assert_eq!(
            during,
            [
                "Uid: 0 65534 0 65534",
                "Gid: 0 65534 0 65534",
                "Groups:",
                "CapEff: 0000000000000000"
            ]
        );
        assert_eq!(thread_credentials(), before);
    }

    #[test]
    fn never_signals_a_process_that_is_not_a_jvm() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo ready; exec sleep \"$0\"", GUEST_LIFETIME_SECS]);
        let sleeper = Guest::spawn(command, "ready");
        let pid = sleeper.pid;
        let error = JvmTarget::inspect(pid).unwrap_err();
        assert!(matches!(error, AttachError::NotHotSpot { .. }), "{error}");
        // Even a target made up by hand: SIGQUIT would kill sleep.
        let target = JvmTarget {
            pid,
            ns_pid: pid,
            uid: 0,
            gid: 0,
        };
        let error = execute(&target, "properties", &[], TIMEOUT).unwrap_err();
        assert!(matches!(error, AttachError::NotHotSpot { .. }), "{error}");
        sleep(SETTLE);
        assert!(sleeper.is_alive());
        assert!(!trigger_path(&target).exists());
    }

    #[test]
    fn refuses_a_noexec_tmp() {
        let mut command = Command::new("unshare");
        command.args([
            "--mount",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
            "mount -t tmpfs -o noexec none /tmp && echo ready && exec sleep \"$0\"",
            GUEST_LIFETIME_SECS,
        ]);
        let mut guest = Guest::spawn(command, "ready");
        guest.follow_fork();
        let target = JvmTarget {
            pid: guest.pid,
            ns_pid: guest.pid,
            uid: 0,
            gid: 0,
        };
        let error = install_agent(&target, "agent.so", b"bytes").unwrap_err();
        assert!(matches!(error, AttachError::NoexecTmp { .. }), "{error}");
    }

    /// Removing a refused socket removes that socket only: not a new one
    /// under its name, nor a symlink to it, nor it once another user's.
    #[test]
    fn removes_only_the_stale_socket_that_refused() {
        let mut command = Command::new("unshare");
        command.args([
            "--mount",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
            "mount -t tmpfs none /tmp && echo ready && exec sleep \"$0\"",
            GUEST_LIFETIME_SECS,
        ]);
        let mut guest = Guest::spawn(command, "ready");
        guest.follow_fork();
        let target = JvmTarget {
            pid: guest.pid,
            ns_pid: guest.pid,
            uid: 0,
            gid: 0,
        };
        let handle = TargetHandle::open(&target).unwrap();
        let socket = socket_path(&target);
        let refused = || {
            plant_stale_socket(&target);
            let found = find_socket(&handle).unwrap().unwrap();
            let error = connect(&handle, &found, TIMEOUT).unwrap_err();
            assert!(matches!(error, AttachError::StaleSocket { .. }), "{error}");
            found
        };
        let remove =
            |found: &File| as_target(&target, || remove_stale_socket(&handle, found)).unwrap();
        let inode = || fs::symlink_metadata(&socket).unwrap().ino();

        let stale = refused();
        assert!(remove(&stale), "the stale socket was kept");
        assert!(!socket.exists());
        assert!(!remove(&stale), "nothing to remove");

        // Replaced after the refusal: `first` keeps its inode in use.
        let first = refused();
        fs::remove_file(&socket).unwrap();
        plant_stale_socket(&target);
        let replacement = inode();
        assert_ne!(replacement, first.metadata().unwrap().ino());
        assert!(!remove(&first), "a socket that did not refuse was removed");
        assert_eq!(inode(), replacement);
        fs::remove_file(&socket).unwrap();

        let linked = refused();
        let moved = host_path(&target, "/tmp/moved-socket");
        fs::rename(&socket, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &socket).unwrap();
        assert!(!remove(&linked), "a symlink was removed");
        assert!(fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_symlink());
        fs::remove_file(&socket).unwrap();

        let chowned = refused();
        std::os::unix::fs::lchown(&socket, Some(NOBODY), Some(NOBODY)).unwrap();
        assert!(!remove(&chowned), "another user's socket was removed");
        assert_eq!(fs::symlink_metadata(&socket).unwrap().uid(), NOBODY);
    }

    // -----------------------------------------------------------------------
    // Real JVMs

    macro_rules! on_each_jdk {
        ($($test:ident),* $(,)?) => {
            mod jdk17 {
                $( #[test] fn $test() { super::$test(super::JDK17) } )*
            }
            mod jdk25 {
                $( #[test] fn $test() { super::$test(super::JDK25) } )*
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
    );

    /// A fresh JVM gets its listener started (trigger file, SIGQUIT), and
    /// later commands reuse the socket without signalling again.
    fn attaches_and_reuses_the_socket(jdk: &str) {
        let jvm = start_jvm(jdk, &[], Launch::Root);
        let target = JvmTarget::inspect(jvm.pid).unwrap();
        assert_eq!(
            target,
            JvmTarget {
                pid: jvm.pid,
                ns_pid: jvm.pid,
                uid: 0,
                gid: 0
            }
        );
        let socket = socket_path(&target);
        // The tests kill their JVMs with SIGKILL, which leaves their sockets
        // behind, and this JVM may have the pid of one of them. HotSpot
        // removes such a leftover as it starts, but only as best effort:
        // one found here is no listener of this JVM, and refuses
        // connections; it is removed, so that the test still sees the
        // listener started. A socket that accepts a connection fails the
        // test, as any socket there did before.
        let refused = UnixStream::connect(&socket)
            .is_err_and(|error| error.kind() == io::ErrorKind::ConnectionRefused);
        if refused {
            fs::remove_file(&socket).unwrap();
        }
        assert!(
            !socket.exists(),
            "a fresh JVM has no attach socket yet (another attach client, a whole-host stoke, started its listener?)"
        );

        let properties = execute(&target, "properties", &[], TIMEOUT).unwrap();
        assert!(properties.contains("java.version"), "{properties}");
        let inode = fs::metadata(&socket).unwrap().ino();
        assert!(!trigger_path(&target).exists(), "the trigger file was left");

        let version = execute(&target, "jcmd", &["VM.version"], TIMEOUT).unwrap();
        assert!(version.contains("JDK"), "{version}");
        assert_eq!(
            fs::metadata(&socket).unwrap().ino(),
            inode,
            "the socket was not reused"
        );

        let error = execute(&target, "nosuchcommand", &[], TIMEOUT).unwrap_err();
        assert!(
            matches!(&error, AttachError::CommandFailed { status, .. } if *status != 0),
            "{error}"
        );
        assert!(error.to_string().contains("not recognized"), "{error}");
        jvm.assert_undisturbed();
    }

    /// A socket left under the JVM's name by a dead JVM with the same pid
    /// refuses connections: it is removed, and the listener started (the
    /// trigger file and SIGQUIT) as for a fresh JVM; of a JVM of root and
    /// of another user.
    fn replaces_a_stale_socket(jdk: &str) {
        for launch in [Launch::Root, Launch::AsNobody] {
            let jvm = start_jvm(jdk, &[], launch);
            // Declared after the JVM, so dropped before it.
            let files = Cleanup::default();
            let target = JvmTarget::inspect(jvm.pid).unwrap();
            let socket = socket_path(&target);
            files.add(socket.clone());
            // HotSpot removes a leftover socket with its pid as it starts,
            // but starts no listener unless signalled: planted now, this
            // one stays until attaching.
            let _ = fs::remove_file(&socket);
            plant_stale_socket(&target);
            // Held open: its inode cannot be reused by the new socket.
            let stale = File::options()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
                .open(&socket)
                .unwrap();
            let metadata = stale.metadata().unwrap();
            assert!(metadata.file_type().is_socket());
            assert_eq!(metadata.uid(), target.uid);
            let error = UnixStream::connect(&socket).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::ConnectionRefused, "{error}");

            let properties = execute(&target, "properties", &[], TIMEOUT).unwrap();
            assert!(properties.contains("java.version"), "{properties}");
            let live = fs::symlink_metadata(&socket).unwrap();
            assert!(live.file_type().is_socket());
            assert_eq!(live.uid(), target.uid);
            assert_ne!(
                live.ino(),
                metadata.ino(),
                "the stale socket is still there"
            );
            assert!(!trigger_path(&target).exists(), "the trigger file was left");

            let version = execute(&target, "jcmd", &["VM.version"], TIMEOUT).unwrap();
            assert!(version.contains("JDK"), "{version}");
            assert_eq!(
                fs::symlink_metadata(&socket).unwrap().ino(),
                live.ino(),
                "the new socket was not reused"
            );
            jvm.assert_undisturbed();
        }
    }

    /// Loading reports a missing library, a library without
    /// `Agent_OnAttach`, and the agent's own failure; a real agent runs
    /// inside the JVM.
    fn loads_agents(jdk: &str) {
        let jvm = start_jvm(jdk, &[], Launch::Root);
        let files = Cleanup::default();
        let target = JvmTarget::inspect(jvm.pid).unwrap();

        let missing = format!("/tmp/{}.so", unique("stoke-no-such-agent"));
        let error = load_agent(&target, &missing, "", TIMEOUT).unwrap_err();
        assert!(matches!(error, AttachError::AgentLoad { .. }), "{error}");
        let text = error.to_string();
        assert!(text.contains(&missing) && !text.contains('\n'), "{text}");

        let jdwp = format!("{jdk}/lib/libjdwp.so");
        let error = load_agent(&target, &jdwp, "", TIMEOUT).unwrap_err();
        assert!(matches!(error, AttachError::AgentLoad { .. }), "{error}");
        assert!(error.to_string().contains("Agent_OnAttach"), "{error}");

        let name = format!("{}.so", unique("libstoke-test-agent"));
        let path = install_agent(&target, &name, &fixtures().agent).unwrap();
        files.add(host_path(&target, &path));
        let marker = format!("/tmp/{}", unique("stoke-agent-marker"));
        files.add(host_path(&target, &marker));
        load_agent(&target, &path, &format!("mark={marker}"), TIMEOUT).unwrap();
        assert_eq!(
            fs::read_to_string(host_path(&target, &marker)).unwrap(),
            "loaded\n"
        );

        let error = load_agent(&target, &path, "fail", TIMEOUT).unwrap_err();
        assert!(
            matches!(error, AttachError::AgentInit { code: 42, .. }),
            "{error}"
        );
        jvm.assert_undisturbed();
    }

    /// -XX:+DisableAttachMechanism is refused without any signal.
    fn refuses_a_jvm_that_disabled_attach(jdk: &str) {
        let jvm = start_jvm(jdk, &["-XX:+DisableAttachMechanism"], Launch::Root);
        let files = Cleanup::default();
        let target = JvmTarget::inspect(jvm.pid).unwrap();
        // What another user's process with this pid left at the socket
        // name does not change the answer.
        let leftover = host_path(&target, &format!("/tmp/.java_pid{}", target.ns_pid));
        fs::write(&leftover, b"").unwrap();
        files.add(leftover.clone());
        std::os::unix::fs::chown(&leftover, Some(NOBODY), Some(NOBODY)).unwrap();
        let error = execute(&target, "properties", &[], TIMEOUT).unwrap_err();
        assert!(
            matches!(error, AttachError::AttachDisabled { pid } if pid == jvm.pid),
            "{error}"
        );
        assert!(
            error.to_string().contains("DisableAttachMechanism"),
            "{error}"
        );
        let error = load_agent(&target, "/tmp/agent.so", "", TIMEOUT).unwrap_err();
        assert!(
            matches!(error, AttachError::AttachDisabled { .. }),
            "{error}"
        );
        assert!(!trigger_path(&target).exists());
        jvm.assert_undisturbed();
    }

    /// A JVM of another user: the trigger file, the socket and the agent
    /// file all work as its user; installing reuses identical files and
    /// never follows a planted symlink.
    fn attaches_to_another_users_jvm(jdk: &str) {
        let jvm = start_jvm(jdk, &[], Launch::AsNobody);
        // Declared after the JVM, so dropped before it: /proc/PID/root
        // still leads to the files.
        let files = Cleanup::default();
        let target = JvmTarget::inspect(jvm.pid).unwrap();
        assert_eq!((target.uid, target.gid), (NOBODY, NOBODY));

        let properties = execute(&target, "properties", &[], TIMEOUT).unwrap();
        assert!(properties.contains("user.name=nobody"), "{properties}");
        assert_eq!(fs::metadata(socket_path(&target)).unwrap().uid(), NOBODY);

        let agent = &fixtures().agent;
        let name = format!("{}.so", unique("libstoke-test-agent"));
        let path = install_agent(&target, &name, agent).unwrap();
        assert_eq!(path, format!("/tmp/{name}"));
        let installed = host_path(&target, &path);
        files.add(installed.clone());
        let metadata = fs::metadata(&installed).unwrap();
        assert_eq!(
            (metadata.uid(), metadata.gid(), metadata.mode() & 0o7777),
            (NOBODY, NOBODY, 0o644)
        );
        assert_eq!(&fs::read(&installed).unwrap(), agent);

        assert_eq!(install_agent(&target, &name, agent).unwrap(), path);
        assert_eq!(
            fs::metadata(&installed).unwrap().ino(),
            metadata.ino(),
            "not reused"
        );

        let other = install_agent(&target, &name, b"another agent").unwrap();
        files.add(host_path(&target, &other));
        assert_ne!(other, path);
        assert_eq!(
            fs::read(host_path(&target, &other)).unwrap(),
            b"another agent"
        );
        assert_eq!(
            &fs::read(&installed).unwrap(),
            agent,
            "the first file changed"
        );

        let link_name = format!("{}.so", unique("libstoke-test-link"));
        let link = host_path(&target, &format!("/tmp/{link_name}"));
        let victim = format!("/tmp/{}", unique("stoke-link-victim"));
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        files.add(link.clone());
        files.add(host_path(&target, &victim));
        let placed = install_agent(&target, &link_name, agent).unwrap();
        files.add(host_path(&target, &placed));
        assert_ne!(placed, format!("/tmp/{link_name}"));
        assert!(
            !host_path(&target, &victim).exists(),
            "the symlink was followed"
        );
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(&fs::read(host_path(&target, &placed)).unwrap(), agent);

        let marker = format!("/tmp/{}", unique("stoke-agent-marker"));
        files.add(host_path(&target, &marker));
        load_agent(&target, &path, &format!("mark={marker}"), TIMEOUT).unwrap();
        assert_eq!(
            fs::metadata(host_path(&target, &marker)).unwrap().uid(),
            NOBODY
        );
        jvm.assert_undisturbed();
    }

    /// A JVM in its own pid and mount namespaces, with a private /tmp.
    fn attaches_across_namespaces(jdk: &str) {
        let jvm = start_jvm(jdk, &[], Launch::Namespaced);
        let target = JvmTarget::inspect(jvm.pid).unwrap();
        assert_eq!(target.ns_pid, 1);
        assert_ne!(target.pid, 1);

        let properties = execute(&target, "properties", &[], TIMEOUT).unwrap();
        assert!(properties.contains("java.version"), "{properties}");
        let socket = fs::metadata(socket_path(&target)).unwrap();
        assert!(socket.file_type().is_socket());
        assert!(
            !Path::new("/tmp/.java_pid1").exists(),
            "the socket is in the host's /tmp"
        );

        let name = format!("{}.so", unique("libstoke-test-agent"));
        let path = install_agent(&target, &name, &fixtures().agent).unwrap();
        assert!(host_path(&target, &path).exists());
        assert!(
            !Path::new(&path).exists(),
            "the agent went to the host's /tmp"
        );
        let marker = format!("/tmp/{}", unique("stoke-agent-marker"));
        load_agent(&target, &path, &format!("mark={marker}"), TIMEOUT).unwrap();
        assert_eq!(
            fs::read_to_string(host_path(&target, &marker)).unwrap(),
            "loaded\n"
        );
        jvm.assert_undisturbed();
    }

    /// -Xrs JVMs start their listener at startup: attached through it; but
    /// once it is gone only SIGQUIT could restart it, and that would kill.
    fn attaches_to_an_xrs_jvm_only_through_its_socket(jdk: &str) {
        let jvm = start_jvm(jdk, &["-Xrs"], Launch::Root);
        let target = JvmTarget::inspect(jvm.pid).unwrap();
        let socket = socket_path(&target);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() && Instant::now() < deadline {
            sleep(Duration::from_millis(20));
        }
        let properties = execute(&target, "properties", &[], TIMEOUT).unwrap();
        assert!(properties.contains("java.version"), "{properties}");

        fs::remove_file(&socket).unwrap();
        let error = execute(&target, "properties", &[], TIMEOUT).unwrap_err();
        assert!(
            matches!(error, AttachError::SigquitUnsafe { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("-Xrs"), "{error}");
        assert!(!trigger_path(&target).exists());
        jvm.assert_undisturbed();
    }

    // -----------------------------------------------------------------------
    // Helpers

    /// The Java target class and the test agent, built once per run in a
    /// directory every user can read, outside /tmp (namespaced tests hide
    /// the host's /tmp).
    struct Fixtures {
        dir: PathBuf,
        agent: Vec<u8>,
    }

    fn fixtures_dir() -> PathBuf {
        PathBuf::from(format!("/var/tmp/stoke-attach-test-{}", std::process::id()))
    }

    extern "C" fn remove_fixtures() {
        let _ = fs::remove_dir_all(fixtures_dir());
    }

    fn fixtures() -> &'static Fixtures {
        static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
        FIXTURES.get_or_init(|| {
            let dir = fixtures_dir();
            fs::create_dir_all(&dir).unwrap();
            fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
            // SAFETY: registers a function that only removes the directory.
            unsafe { libc::atexit(remove_fixtures) };
            fs::write(dir.join("StokeAttachTarget.java"), JAVA_TARGET).unwrap();
            run(Command::new(format!("{JDK17}/bin/javac"))
                .arg("-d")
                .arg(&dir)
                .arg(dir.join("StokeAttachTarget.java")));
            fs::write(dir.join("agent.c"), TEST_AGENT).unwrap();
            run(Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-o"])
                .arg(dir.join("agent.so"))
                .arg(dir.join("agent.c")));
            Fixtures {
                agent: fs::read(dir.join("agent.so")).unwrap(),
                dir,
            }
        })
    }

    fn run(command: &mut Command) {
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("{command:?}: {e}"));
        assert!(
            output.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    enum Launch {
        Root,
        /// `setpriv` to uid and gid 65534.
        AsNobody,
        /// New pid and mount namespaces, a tmpfs on /tmp.
        Namespaced,
    }

    fn start_jvm(jdk: &str, flags: &[&str], launch: Launch) -> Guest {
        let java = format!("{jdk}/bin/java");
        assert!(Path::new(&java).exists(), "the attach tests need {java}");
        let mut command = match launch {
            Launch::Root => Command::new(&java),
            Launch::AsNobody => {
                let mut command = Command::new("setpriv");
                command.args(["--reuid=65534", "--regid=65534", "--clear-groups", &java]);
                command
            }
            Launch::Namespaced => {
                let mut command = Command::new("unshare");
                command.args([
                    "--mount",
                    "--pid",
                    "--fork",
                    "--mount-proc",
                    "--kill-child",
                    "sh",
                    "-c",
                    "mount -t tmpfs none /tmp && cd /tmp && exec \"$@\"",
                    "sh",
                    &java,
                ]);
                command
            }
        };
        command
            .args(flags)
            .arg("-cp")
            .arg(&fixtures().dir)
            .args(["StokeAttachTarget", GUEST_LIFETIME_SECS]);
        let mut guest = Guest::spawn(command, "ready");
        if matches!(launch, Launch::Namespaced) {
            guest.follow_fork();
        }
        guest
    }

    /// A process started for a test, killed when dropped.
    struct Guest {
        child: Child,
        /// The process under test: the child, or its child.
        pid: u32,
        /// Its stdout and stderr.
        output: Arc<Mutex<String>>,
    }

    impl Guest {
        fn spawn(mut command: Command, ready: &str) -> Guest {
            command
                .current_dir("/tmp")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = command
                .spawn()
                .unwrap_or_else(|e| panic!("{command:?}: {e}"));
            let output = Arc::new(Mutex::new(String::new()));
            collect(child.stdout.take(), &output);
            collect(child.stderr.take(), &output);
            let mut guest = Guest {
                pid: child.id(),
                child,
                output,
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            while !guest.output().contains(ready) {
                if let Ok(Some(status)) = guest.child.try_wait() {
                    panic!("{command:?} exited ({status}): {}", guest.output());
                }
                assert!(
                    Instant::now() < deadline,
                    "{command:?} not ready: {}",
                    guest.output()
                );
                sleep(Duration::from_millis(10));
            }
            guest
        }

        /// Makes the process under test the child's child (`unshare --fork`).
        fn follow_fork(&mut self) {
            let id = self.child.id();
            let children = fs::read_to_string(format!("/proc/{id}/task/{id}/children")).unwrap();
            self.pid = children.split_whitespace().next().unwrap().parse().unwrap();
        }

        fn output(&self) -> String {
            self.output.lock().unwrap().clone()
        }

        fn is_alive(&self) -> bool {
            fs::read_to_string(format!("/proc/{}/stat", self.pid)).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            })
        }

        /// Still running, and no SIGQUIT printed a thread dump.
        fn assert_undisturbed(&self) {
            sleep(SETTLE);
            assert!(self.is_alive(), "the JVM died: {}", self.output());
            let output = self.output();
            assert!(!output.contains("Full thread dump"), "{output}");
        }
    }

    impl Drop for Guest {
        fn drop(&mut self) {
            if let Ok(pid) = libc::pid_t::try_from(self.pid) {
                // SAFETY: kill takes no pointers; the pid is our guest's.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn collect(stream: Option<impl Read + Send + 'static>, into: &Arc<Mutex<String>>) {
        let Some(mut stream) = stream else { return };
        let into = Arc::clone(into);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read @ 1..) = stream.read(&mut buffer) {
                let text = String::from_utf8_lossy(&buffer[..read]).into_owned();
                into.lock().unwrap().push_str(&text);
            }
        });
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

    /// Where the host reaches a path of the JVM's filesystem.
    fn host_path(target: &JvmTarget, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", target.pid))
    }

    fn socket_path(target: &JvmTarget) -> PathBuf {
        host_path(target, &format!("/tmp/.java_pid{}", target.ns_pid))
    }

    fn trigger_path(target: &JvmTarget) -> PathBuf {
        host_path(target, &format!("/tmp/.attach_pid{}", target.ns_pid))
    }

    /// What a JVM killed by SIGKILL leaves: a socket under the target's
    /// socket name, of its user, bound and closed without ever listening,
    /// so that connecting to it is refused.
    fn plant_stale_socket(target: &JvmTarget) {
        let path = socket_path(target);
        let path = path.to_str().unwrap();
        let address = unix_address(path);
        assert!(path.len() < address.sun_path.len(), "{path} is too long");
        let bind = || {
            // SAFETY: socket() takes no pointers; the descriptor is owned at once.
            let fd =
                unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
            assert!(fd >= 0, "{}", io::Error::last_os_error());
            // SAFETY: a new descriptor nothing else owns; closed when dropped.
            let socket = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: `address` is a complete sockaddr_un of the length given.
            let result = unsafe {
                libc::bind(
                    socket.as_raw_fd(),
                    std::ptr::from_ref(&address).cast(),
                    size_of::<libc::sockaddr_un>() as libc::socklen_t,
                )
            };
            if result == 0 {
                Ok(())
            } else {
                Err(AttachError::Io {
                    pid: target.pid,
                    step: "plant a stale socket",
                    source: io::Error::last_os_error(),
                })
            }
        };
        as_target(target, bind).unwrap();
    }
}
