//! A connection to the JVM's attach listener, started if needed: the socket
//! `/tmp/.java_pid<pid>` found (and a stale one removed), or the listener
//! asked for with the trigger file and SIGQUIT; then connected to as the
//! JVM's user.

use std::{
    ffi::CStr,
    fs::File,
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::{
            fs::{FileTypeExt, MetadataExt},
            net::UnixStream,
        },
    },
    time::{Duration, Instant},
};

use super::{
    credentials::as_target,
    target::{TargetHandle, RESOLVE_SAFE},
    tmp_files::{c_name, create_trigger, remove_file},
    AttachError,
};
use crate::rootfs::openat2;

/// How long a JVM gets to start its attach listener after SIGQUIT.
const LISTENER_START_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait for the listener's socket; later waits grow to `POLL_MAX`.
/// A JVM past its start makes it within a few milliseconds.
const POLL_FIRST: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(200);
/// When SIGQUIT is sent again while the listener's socket is missing (see
/// [`wait_for_socket`]); a listener starts within tens of milliseconds.
const SIGNAL_AGAIN_AFTER: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];
/// How long a foreign socket gets to accept a connection, which says that
/// someone listens there.
const FOREIGN_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection to the JVM's attach listener, started if needed.
///
/// A socket that refuses connections was left by a JVM that died without
/// cleaning up (SIGKILL) and had the same pid, or by a listener that is
/// gone. It is removed, so that the wait for the new listener's socket does
/// not find it again, then the listener is started as for a fresh JVM,
/// once: a second refusal is [`AttachError::StaleSocket`].
pub(super) fn open_connection(
    handle: &TargetHandle,
    timeout: Duration,
) -> Result<UnixStream, AttachError> {
    handle.check_attach_enabled()?;
    clear_foreign_stale_socket(handle, timeout)?;
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
            let owner = handle.target.uid;
            as_target(&handle.target, || {
                remove_stale_socket(handle, &socket, owner)
            })?;
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
    // Another stoke starting the listener holds the trigger's lock until
    // its socket is there: a SIGQUIT of this one meanwhile, once the
    // listener had begun, would print a thread dump. Held to the end.
    let trigger_file = as_target(&handle.target, || create_trigger(handle, &trigger))?;
    lock_trigger(&trigger_file);
    let started = as_target(&handle.target, || {
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

/// Takes the exclusive `flock` on the trigger file, which stays held as
/// long as the file is open (the kernel drops it when stoke dies), waiting
/// for another stoke's listener start at most [`LISTENER_START_TIMEOUT`]
/// and a second; past that, goes on without it (the SIGQUIT guard still
/// holds off most dumps).
fn lock_trigger(trigger: &File) {
    let deadline = Instant::now() + LISTENER_START_TIMEOUT + Duration::from_secs(1);
    // SAFETY: flock on a descriptor we own.
    while unsafe { libc::flock(trigger.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0
        && Instant::now() < deadline
    {
        std::thread::sleep(POLL_FIRST * 5);
    }
}

/// Clears the way for the JVM's own listener: a socket of another user
/// under the JVM's socket name that refuses connections is removed, as root.
///
/// Such a socket is what a JVM of another user, killed (no clean-up) with
/// the same pid, left; pids wrap at 32768 on small hosts. HotSpot binds its
/// socket under a temporary name and renames it into place, which in the
/// sticky `/tmp` fails while another user's file holds the name: without
/// this, the JVM could never be attached. Only a socket nobody listens on
/// is removed, and only if the name still holds that very socket; anything
/// else is left, and [`find_socket`] refuses it.
fn clear_foreign_stale_socket(handle: &TargetHandle, timeout: Duration) -> Result<(), AttachError> {
    let Some(socket) = open_socket_name(handle)? else {
        return Ok(());
    };
    let Ok(metadata) = socket.metadata() else {
        return Ok(());
    };
    if !metadata.file_type().is_socket() || metadata.uid() == handle.target.uid {
        return Ok(());
    }
    // Connecting as root, which any socket accepts: a listener would be
    // another process's, kept; a refusal means nobody listens.
    let probe = timeout.min(FOREIGN_PROBE_TIMEOUT);
    if let Err(AttachError::StaleSocket { .. }) = connect(handle, &socket, probe) {
        remove_stale_socket(handle, &socket, metadata.uid())?;
    }
    Ok(())
}

/// The JVM's attach socket, if it exists: opened `O_PATH` without
/// following symlinks, and checked to be a socket of the JVM's user.
fn find_socket(handle: &TargetHandle) -> Result<Option<File>, AttachError> {
    let Some(socket) = open_socket_name(handle)? else {
        return Ok(None);
    };
    let target = &handle.target;
    let name = format!(".java_pid{}", target.ns_pid);
    let metadata = socket
        .metadata()
        .map_err(|error| handle.fs_error(format!("stat /tmp/{name}"), error))?;
    if !metadata.file_type().is_socket() || metadata.uid() != target.uid {
        return Err(suspicious_socket(handle));
    }
    Ok(Some(socket))
}

/// Whatever is under the JVM's socket name, opened `O_PATH` without
/// following a symlink (a symlink is refused); `None` if nothing is.
fn open_socket_name(handle: &TargetHandle) -> Result<Option<File>, AttachError> {
    let name = format!(".java_pid{}", handle.target.ns_pid);
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    match openat2(handle.tmp.as_fd(), &c_name(&name)?, flags, 0, RESOLVE_SAFE) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => Err(suspicious_socket(handle)),
        Err(error) => Err(handle.fs_error(format!("look up /tmp/{name}"), error)),
    }
}

fn suspicious_socket(handle: &TargetHandle) -> AttachError {
    let target = &handle.target;
    AttachError::SuspiciousSocket {
        pid: target.pid,
        name: format!(".java_pid{}", target.ns_pid),
        uid: target.uid,
    }
}

/// Removes the socket `refused` (an `O_PATH` descriptor) that refused a
/// connection, if the JVM's socket name still holds that very socket, of
/// uid `owner`. Relative to the JVM's `/tmp` opened without symlinks, and
/// never follows one. The JVM's own socket is removed as the JVM's user:
/// nothing else can be removed, but what that user could. Anything else
/// found under the name (nothing, the listener's new socket, another file)
/// is left; true if removed.
fn remove_stale_socket(
    handle: &TargetHandle,
    refused: &File,
    owner: u32,
) -> Result<bool, AttachError> {
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
        && found.st_uid == owner
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

/// Polls for the socket after SIGQUIT, with growing steps; signals again
/// at each of [`SIGNAL_AGAIN_AFTER`] while there is none.
///
/// HotSpot installs its SIGQUIT handler, then removes any socket left
/// under its name (`AttachListener::vm_start`): a listener started by a
/// SIGQUIT in between, as stoke sends it to a JVM seen starting, loses its
/// fresh socket and waits on a name no one can find. Another SIGQUIT, with
/// the trigger file still there, has HotSpot find the socket gone and
/// start the listener again (`check_socket_file`). While the listener is
/// still starting, a SIGQUIT is ignored; only once it made its socket
/// would one print a thread dump, and stoke looked for the socket just
/// before.
fn wait_for_socket(handle: &TargetHandle) -> Result<File, AttachError> {
    let start = Instant::now();
    let mut step = POLL_FIRST;
    let mut signals_again = SIGNAL_AGAIN_AFTER.iter().peekable();
    loop {
        if let Some(socket) = find_socket(handle)? {
            return Ok(socket);
        }
        if signals_again
            .next_if(|&&after| start.elapsed() >= after)
            .is_some()
        {
            handle.send_sigquit()?;
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

#[cfg(test)]
mod tests {
    //! The test process is its own target, as root (stoke's condition): its
    //! socket name in the host's `/tmp` is its own while it runs, and no
    //! listener ever answers there.

    use std::{fs, path::PathBuf};

    use super::*;
    use crate::jvm::attach::{
        tests::{this_process, OWN_SOCKET},
        JvmTarget,
    };

    const TIMEOUT: Duration = Duration::from_secs(20);
    const NOBODY: u32 = 65534;

    /// Where the host reaches a path of the target's filesystem.
    fn host_path(target: &JvmTarget, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", target.pid))
    }

    fn socket_path(target: &JvmTarget) -> PathBuf {
        host_path(target, &format!("/tmp/.java_pid{}", target.ns_pid))
    }

    /// Files removed when the test ends, however it ends.
    struct Cleanup(Vec<PathBuf>);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            for path in &self.0 {
                let _ = fs::remove_file(path);
            }
        }
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

    /// Removing a refused socket removes that socket only: not a new one
    /// under its name, nor a symlink to it, nor it once another user's.
    #[test]
    fn removes_only_the_stale_socket_that_refused() {
        let _alone = OWN_SOCKET.lock().unwrap();
        let target = this_process();
        let socket = socket_path(&target);
        let moved = host_path(&target, &format!("/tmp/.java_pid{}-moved", target.ns_pid));
        let _cleanup = Cleanup(vec![socket.clone(), moved.clone()]);
        let _ = fs::remove_file(&socket);
        let handle = TargetHandle::open(&target).unwrap();
        let refused = || {
            plant_stale_socket(&target);
            let found = find_socket(&handle).unwrap().unwrap();
            let error = connect(&handle, &found, TIMEOUT).unwrap_err();
            assert!(matches!(error, AttachError::StaleSocket { .. }), "{error}");
            found
        };
        let remove = |found: &File| {
            as_target(&target, || remove_stale_socket(&handle, found, target.uid)).unwrap()
        };
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

    /// Another user's socket under the JVM's socket name is removed when
    /// nobody listens there (a JVM of that user killed with the same pid
    /// left it), kept when someone does.
    #[test]
    fn clears_another_users_stale_socket_only() {
        let _alone = OWN_SOCKET.lock().unwrap();
        let target = this_process();
        let socket = socket_path(&target);
        let _cleanup = Cleanup(vec![socket.clone()]);
        let _ = fs::remove_file(&socket);
        let handle = TargetHandle::open(&target).unwrap();

        plant_stale_socket(&target);
        std::os::unix::fs::lchown(&socket, Some(NOBODY), Some(NOBODY)).unwrap();
        clear_foreign_stale_socket(&handle, TIMEOUT).unwrap();
        assert!(!socket.exists(), "the stale socket was kept");

        let listening = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::os::unix::fs::lchown(&socket, Some(NOBODY), Some(NOBODY)).unwrap();
        clear_foreign_stale_socket(&handle, TIMEOUT).unwrap();
        assert!(socket.exists(), "a socket in use was removed");
        let error = find_socket(&handle).unwrap_err();
        assert!(
            matches!(error, AttachError::SuspiciousSocket { .. }),
            "{error}"
        );
        drop(listening);
    }
}
