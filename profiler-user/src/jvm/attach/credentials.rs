//! Acting as the JVM's user: the JVM trusts its trigger file and attach
//! connections only from its own uid and gid, and stoke, as root, must
//! never write into the JVM's filesystem what that user could not.

use std::io;

use super::{AttachError, JvmTarget};

/// Runs `work` on a new thread that first takes the JVM's effective uid
/// and gid, without supplementary groups. Raw syscalls change only that
/// thread (glibc's wrappers would change every thread of stoke). Changing
/// the effective uid also changes the filesystem uid and clears the
/// effective capabilities, so the kernel checks every access as the JVM's
/// user's, and SO_PEERCRED shows the JVM its own ids. The thread ends with
/// `work`, so its credentials need no restoring.
pub(super) fn as_target<T: Send>(
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

#[cfg(test)]
mod tests {
    //! Changing credentials needs root, as stoke does.

    use std::fs;

    use super::*;

    const NOBODY: u32 = 65534;

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
}
