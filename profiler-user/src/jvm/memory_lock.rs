//! The locks a stoke holds on an agent's memfd while it reads it: a shared
//! `flock`, which tells the agent that some stoke reads (the agent takes the
//! lock exclusively for a moment every 0.1 s to see whether any does), and
//! an OFD write lock on one byte, which claims one of the agent's consumer
//! slots (`profiler_common::jvm::Consumer`). The kernel drops both when
//! the stoke dies. When the shared lock cannot be taken, `/proc/locks` says
//! who holds it: a JVM starved of CPU may hold it a while, so its own hold
//! is waited out longer than another process's.

use std::{
    fs::File,
    io::Read,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    time::{Duration, Instant},
};

use profiler_common::jvm::{CONSUMER_LOCKS, MAX_CONSUMERS};

use crate::procfs;

/// How long a lock held by another process is tried for.
const LOCK_TIMEOUT: Duration = Duration::from_millis(300);

/// How long a lock held by the JVM itself (its agent looking) is tried for.
const AGENT_HOLD_TIMEOUT: Duration = Duration::from_secs(3);

/// The most of `/proc/locks` read: a host with more locks than that just
/// gets the message without the holder.
const MAX_LOCKS_BYTES: u64 = 4 << 20;

/// Takes the shared lock on `file`, the agent memory of JVM `jvm`.
///
/// `/proc/locks` is read at most twice: once when the lock has not come
/// within [`LOCK_TIMEOUT`] (a JVM holding it gets until
/// [`AGENT_HOLD_TIMEOUT`]), and once more at that later deadline.
pub fn lock_shared(file: &File, jvm: u32) -> Result<(), LockRefused> {
    let started = Instant::now();
    let mut deadline = LOCK_TIMEOUT;
    loop {
        if try_lock(file) {
            return Ok(());
        }
        if started.elapsed() >= deadline {
            let holder = holder(file);
            if holder == Some(jvm) && deadline < AGENT_HOLD_TIMEOUT {
                deadline = AGENT_HOLD_TIMEOUT;
                continue;
            }
            // The holder may have let go between the try and the read.
            if try_lock(file) {
                return Ok(());
            }
            return Err(refusal(holder, jvm));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One try at the shared lock, without waiting.
fn try_lock(file: &File) -> bool {
    // SAFETY: flock on a descriptor the caller keeps open.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) == 0 }
}

/// Claims the first free consumer slot of the agent memory `file`: its
/// index, or `None` if [`MAX_CONSUMERS`] stokes read the agent already.
pub fn claim_consumer_slot(file: &File) -> Option<usize> {
    (0..MAX_CONSUMERS).find(|&index| {
        // SAFETY: a zeroed flock is valid; fields set below.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = (CONSUMER_LOCKS + index as u64) as libc::off_t;
        lock.l_len = 1;
        // SAFETY: F_OFD_SETLK on a descriptor the caller keeps open, with a
        // valid flock; it fails at once where another description holds it.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) == 0 }
    })
}

/// Why the agent memory's lock was not had.
#[derive(Debug, thiserror::Error)]
pub enum LockRefused {
    #[error("the JVM's agent held its memory's lock for {} s (a JVM starved of CPU?): record again", AGENT_HOLD_TIMEOUT.as_secs())]
    ByTheAgent,
    /// Another process holds the memory exclusively, `pid` if
    /// `/proc/locks` names it (not for a holder in another pid namespace).
    #[error("another process ({}) holds the lock of this JVM's agent memory", holder_name(*.pid))]
    ByAnother { pid: Option<u32> },
    /// Every consumer slot is taken.
    #[error("{MAX_CONSUMERS} stokes read this JVM's agent already, the most one agent serves")]
    Full,
}

/// The other stoke holding the lock, for a message.
fn holder_name(pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("{}, pid {pid}", procfs::process_name(pid)),
        None => "not visible from here".to_owned(),
    }
}

/// Why the lock held by `holder` (if `/proc/locks` named it) was not had.
fn refusal(holder: Option<u32>, jvm: u32) -> LockRefused {
    match holder {
        Some(pid) if pid == jvm => LockRefused::ByTheAgent,
        pid => LockRefused::ByAnother { pid },
    }
}

/// The process holding a `flock` on `file`, from `/proc/locks`.
fn holder(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let mut text = String::new();
    File::open("/proc/locks")
        .ok()?
        .take(MAX_LOCKS_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    holder_in(&text, meta.dev(), meta.ino())
}

/// The holder of a `FLOCK` on inode `ino` of device `dev` in `locks`
/// (`/proc/locks`' text: `1: FLOCK ADVISORY WRITE 1234 00:01:5678 0 EOF`,
/// the device as hexadecimal major:minor; waiters' lines, marked `->`,
/// hold nothing).
fn holder_in(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let file = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, "FLOCK", _, _, pid, id, ..] if *id == file => pid.parse().ok(),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_of_a_flock_is_found_by_device_and_inode() {
        let locks = "1: POSIX  ADVISORY  WRITE 77 00:01:42 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 1234 00:01:42 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 99 00:01:42 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 555 fd:01:42 0 EOF\n";
        let dev = libc::makedev(0, 1);
        assert_eq!(holder_in(locks, dev, 42), Some(1234));
        assert_eq!(holder_in(locks, libc::makedev(0xfd, 1), 42), Some(555));
        assert_eq!(holder_in(locks, dev, 43), None);
        assert_eq!(holder_in("", dev, 42), None);
    }

    #[test]
    fn a_refusal_names_who_held_the_lock() {
        let me = std::process::id();
        let jvm = me + 1;
        let said = |holder| format!("{}", refusal(holder, jvm));
        assert!(said(Some(jvm)).contains("the JVM's agent held"));
        assert!(said(Some(me + 2)).contains(&format!("pid {}", me + 2)));
        assert!(said(None).starts_with("another process (not visible from here) holds"));
    }

    /// Real locks on a real file: shared locks of several descriptions
    /// together, an exclusive one keeps them out, and each description
    /// claims its own consumer slot until closed.
    #[test]
    fn stokes_share_the_lock_and_claim_a_slot_each() {
        let path = std::env::temp_dir().join(format!("stoke-lock-{}", std::process::id()));
        let first = File::create(&path).unwrap();
        let open = || File::options().read(true).write(true).open(&path).unwrap();
        let opened: Vec<File> = (0..MAX_CONSUMERS).map(|_| open()).collect();
        std::fs::remove_file(&path).unwrap();
        lock_shared(&first, 1).unwrap();
        lock_shared(&opened[0], 1).unwrap();
        // SAFETY: flock on a descriptor we own.
        let exclusive =
            unsafe { libc::flock(opened[1].as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_ne!(exclusive, 0, "an exclusive lock beside shared ones");
        assert_eq!(holder(&opened[1]), Some(std::process::id()));

        assert_eq!(claim_consumer_slot(&first), Some(0));
        let claimed: Vec<_> = opened[1..].iter().map(claim_consumer_slot).collect();
        assert!(claimed
            .iter()
            .enumerate()
            .all(|(i, &slot)| slot == Some(i + 1)));
        assert_eq!(claim_consumer_slot(&opened[0]), None, "all taken");
        drop(first);
        assert_eq!(claim_consumer_slot(&opened[0]), Some(0), "freed on close");
    }
}
