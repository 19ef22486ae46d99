//! The process attached to: pinned by a pidfd, with its `/tmp` open, and
//! what `/proc` says of it (its ids, whether it is HotSpot, its options).

use std::{
    fs::File,
    io,
    os::{
        fd::{AsFd, AsRawFd, OwnedFd},
        unix::fs::OpenOptionsExt,
    },
    time::Duration,
};

use super::{
    vm_flags::{launcher_options, sigquit_verdict, VmFlags},
    AttachError, JvmTarget,
};
use crate::{
    process::{
        maps::{self as proc_maps, MapsEntry},
        pidfd,
    },
    procfs,
    rootfs::openat2,
};

/// The largest command line or environment read: Java class paths are
/// long, and the kernel bounds both (2 MiB together with the default stack
/// limit).
const MAX_ARGS: u64 = 4 * 1024 * 1024;

/// The thread HotSpot starts after it set up its attach mechanism.
const SET_UP_THREAD: &[u8] = b"Service Thread";

/// A JVM older than this is past its start whatever its threads are named
/// (HotSpot sets its attach mechanism up within tens of milliseconds).
const SET_UP_AGE: Duration = Duration::from_secs(3);

/// The most threads looked through for [`SET_UP_THREAD`] or
/// [`LISTENER_THREAD`] (a starting JVM has a few dozen).
const THREADS_LOOKED: usize = 4096;

/// The thread that HotSpot's attach listener runs in.
const LISTENER_THREAD: &[u8] = b"Attach Listener";

/// How long a listener thread may take to make its socket and wait in
/// `accept` (slowly, on a loaded host); past it, one never seen waiting
/// there does not hold SIGQUIT back.
const LISTENER_SETTLE: Duration = Duration::from_secs(5);

/// Resolution of a name inside the JVM's `/tmp`: no symlink, no `/proc`
/// magic link, nothing outside the directory.
pub(super) const RESOLVE_SAFE: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

/// A JVM pinned by a pidfd, with its `/tmp` open.
pub(super) struct TargetHandle {
    pub(super) target: JvmTarget,
    pidfd: OwnedFd,
    /// `O_PATH` descriptor of the JVM's `/tmp`, opened as root through
    /// `/proc/PID/root` without following symlinks.
    pub(super) tmp: OwnedFd,
}

impl TargetHandle {
    /// Pins the process with a pidfd, then checks it still has the ids
    /// `target` holds. The pidfd makes the checks hold until this handle is
    /// dropped: had the process exited before them, the pidfd would show it.
    pub(super) fn open(target: &JvmTarget) -> Result<Self, AttachError> {
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
    pub(super) fn wait_for_exit(&self, timeout: Duration) -> bool {
        pidfd::wait_for_exit(self.pidfd.as_fd(), timeout)
    }

    /// Refuses SIGQUIT to anything it could kill or disturb: a process that
    /// is not HotSpot, that has no SIGQUIT handler (the default action
    /// kills), that runs with -Xrs (the JVM then installs none), or that
    /// disabled attach (SIGQUIT would print a thread dump); and, as
    /// useless, to a JVM that has not set its attach mechanism up yet.
    ///
    /// HotSpot catches SIGQUIT early in its start, and only tens of
    /// milliseconds later starts the thread that handles it and removes any
    /// socket left under its attach name (`AttachListener::vm_start`),
    /// then starts its Service Thread. A SIGQUIT before the removal is
    /// handled once the thread runs, and the listener it starts can lose
    /// its new socket to the removal: the attach then waits for a socket no
    /// one makes until it signals again, 1 s later.
    pub(super) fn check_sigquit_safe(&self) -> Result<(), AttachError> {
        let pid = self.target.pid;
        if !maps_libjvm(pid)? {
            return Err(AttachError::NotHotSpot { pid });
        }
        let status = ProcStatus::read(pid)?;
        let (flags, cut) = self.vm_flags()?;
        sigquit_verdict(pid, status.caught, flags, cut)?;
        let set_up = procfs::age(pid).is_some_and(|age| age >= SET_UP_AGE)
            || procfs::thread_named(pid, SET_UP_THREAD, THREADS_LOOKED).is_some();
        if !set_up {
            return Err(AttachError::AttachNotSetUp { pid });
        }
        Ok(())
    }

    /// Refuses a JVM started with -XX:+DisableAttachMechanism, before
    /// anything at its socket name is looked at: it never listens, so
    /// whatever is there was left by an earlier process with its pid.
    pub(super) fn check_attach_enabled(&self) -> Result<(), AttachError> {
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
    ///
    /// Not sent while the JVM's attach listener is starting, which this or
    /// another stoke asked for: HotSpot answers a SIGQUIT that arrives once
    /// the listener made its socket with a thread dump on the JVM's
    /// output. The caller waits for the socket as if it had signalled. A
    /// listener waiting in `accept` while its socket is missing lost it (a
    /// `/tmp` cleaner, HotSpot's own start-up removal): SIGQUIT then has
    /// HotSpot make another, with no dump.
    pub(super) fn send_sigquit(&self) -> Result<(), AttachError> {
        let pid = self.target.pid;
        if let Some(tid) = procfs::thread_named(pid, LISTENER_THREAD, THREADS_LOOKED) {
            let accepting = matches!(
                procfs::thread_syscall(pid, tid),
                Some(libc::SYS_accept | libc::SYS_accept4)
            );
            let settled = procfs::thread_age(pid, tid).is_none_or(|age| age >= LISTENER_SETTLE);
            if !accepting && !settled {
                return Ok(());
            }
        }
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

    /// An error of a step in the JVM's `/tmp`; ENOSYS means no `openat2`.
    pub(super) fn fs_error(&self, step: String, source: io::Error) -> AttachError {
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
    pidfd::open(pid).map_err(|error| match error.raw_os_error() {
        Some(libc::ESRCH) | None => AttachError::Gone { pid },
        Some(libc::ENOSYS) => AttachError::KernelTooOld { what: "pidfd_open" },
        _ => AttachError::Io {
            pid,
            step: "open a pidfd",
            source: error,
        },
    })
}

/// What stoke needs from `/proc/PID/status`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ProcStatus {
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(crate) ns_pid: u32,
    /// Signals with a handler (`SigCgt:`).
    caught: u64,
}

impl ProcStatus {
    /// The status of process `pid`.
    pub(super) fn read(pid: u32) -> Result<Self, AttachError> {
        let (bytes, _) = read_proc(pid, "status", procfs::MAX_STATUS)?;
        Self::parse(&String::from_utf8_lossy(&bytes))
            .map_err(|field| AttachError::ProcStatus { pid, field })
    }

    /// The effective ids (2nd fields), the innermost pid, the caught signals.
    pub(crate) fn parse(text: &str) -> Result<Self, &'static str> {
        let field = |name: &'static str| procfs::status_field(text, name).ok_or(name);
        let number = |name: &'static str, value: Option<&str>| {
            value
                .and_then(|value| value.parse::<u32>().ok())
                .ok_or(name)
        };
        Ok(Self {
            uid: number("Uid:", field("Uid:")?.nth(1))?,
            gid: number("Gid:", field("Gid:")?.nth(1))?,
            ns_pid: procfs::innermost_pid(text).ok_or("NSpid:")?,
            caught: procfs::caught_signals(text).ok_or("SigCgt:")?,
        })
    }
}

/// At most `limit` bytes of `/proc/PID/<file>`, and whether there was more.
fn read_proc(pid: u32, file: &'static str, limit: u64) -> Result<(Vec<u8>, bool), AttachError> {
    procfs::read_bounded(format!("/proc/{pid}/{file}"), limit)
        .map_err(|source| proc_error(pid, file, source))
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
pub(super) fn maps_libjvm(pid: u32) -> Result<bool, AttachError> {
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

/// Whether a mapped path is the java launcher's (`bin/java`, or the
/// `libjli.so` every launcher links), which maps libjvm.so within
/// milliseconds.
pub fn is_java_launcher(path: &[u8]) -> bool {
    matches!(file_name(path), b"java" | b"libjli.so")
}

/// The last component of a mapped path, without the ` (deleted)` mark.
fn file_name(path: &[u8]) -> &[u8] {
    let path = path.strip_suffix(b" (deleted)").unwrap_or(path);
    path.rsplit(|&byte| byte == b'/').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jvm::attach::vm_flags::SIGQUIT_MASK;

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
}
