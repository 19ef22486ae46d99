//! Processes held by pidfds: a descriptor that names one process, never
//! another that reuses its pid, and turns readable once it has exited (a
//! zombie its parent has not reaped included).

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    time::Duration,
};

/// A pidfd of process `pid`.
pub fn open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: pidfd_open takes a pid and flags, no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A copy of descriptor `number` of the process `pidfd` holds.
pub fn get_fd(pidfd: BorrowedFd, number: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes descriptors and flags, no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), number, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits up to `timeout` for the process `pidfd` holds to exit; whether it
/// has.
pub fn wait_for_exit(pidfd: BorrowedFd, timeout: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: polling one descriptor we own.
    unsafe { libc::poll(&mut poll, 1, millis) > 0 }
}

#[cfg(test)]
mod tests {
    use std::{os::fd::AsFd, process::Command};

    use super::*;

    #[test]
    fn a_pidfd_turns_readable_at_exit_before_the_reaping() {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let pidfd = open(child.id()).unwrap();
        assert!(!wait_for_exit(pidfd.as_fd(), Duration::ZERO));
        assert!(wait_for_exit(pidfd.as_fd(), Duration::from_secs(10)));
        // A zombie still: exited all the same.
        assert!(wait_for_exit(pidfd.as_fd(), Duration::ZERO));
        child.wait().unwrap();
        assert!(wait_for_exit(pidfd.as_fd(), Duration::ZERO));
    }

    #[test]
    fn no_pidfd_for_a_pid_that_does_not_exist() {
        let error = open(u32::MAX).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(open(4_194_305).is_err(), "beyond pid_max");
    }
}
