//! Which Java waits are lock contention: a thread parked under a
//! java.util.concurrent lock (ReentrantLock, ReentrantReadWriteLock,
//! Semaphore...: `Unsafe.park` called by `LockSupport`, called by the
//! lock). Its waits come as off-CPU records with Java frames; the lock
//! profile keeps those, with the lock's class on top, as it keeps contended
//! monitors with theirs.

/// Classes of the java.util.concurrent locks.
const LOCKS: &str = "java.util.concurrent.locks.";

/// The class of the java.util.concurrent lock a thread waited for, from
/// its Java stack's method names (`package.Class.method`, innermost
/// first): the outermost lock class of the run of lock frames above
/// `LockSupport` (`java.util.concurrent.locks.ReentrantLock` for a wait
/// in `ReentrantLock.lock`). `None` for any other wait, and for a wait on
/// a condition (`await`), which waits for a signal, not for the lock.
pub fn contended_lock<'a>(mut methods: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    // jdk.internal.misc.Unsafe.park, or sun.misc.Unsafe.park before JDK 9.
    if !methods.next()?.ends_with(".Unsafe.park") {
        return None;
    }
    let mut lock = None;
    for method in methods {
        let (class, _) = method.rsplit_once('.')?;
        if class == "java.util.concurrent.locks.LockSupport" {
            continue;
        }
        if !class.starts_with(LOCKS) {
            break;
        }
        if class.contains("$ConditionObject") {
            return None;
        }
        lock = Some(class);
    }
    lock
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock_of(stack: &[&'static str]) -> Option<&'static str> {
        contended_lock(stack.iter().copied())
    }

    #[test]
    fn a_park_under_a_lock_names_the_outermost_lock_class() {
        assert_eq!(
            lock_of(&[
                "jdk.internal.misc.Unsafe.park",
                "java.util.concurrent.locks.LockSupport.park",
                "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire",
                "java.util.concurrent.locks.ReentrantLock$Sync.lock",
                "java.util.concurrent.locks.ReentrantLock.lock",
                "JavaLocks.reentrantLoop",
            ]),
            Some("java.util.concurrent.locks.ReentrantLock")
        );
    }

    #[test]
    fn other_parks_and_waits_are_no_lock_contention() {
        // A park of the program's own.
        assert_eq!(
            lock_of(&[
                "jdk.internal.misc.Unsafe.park",
                "java.util.concurrent.locks.LockSupport.parkNanos",
                "JavaWaits.parkThirty",
            ]),
            None
        );
        // Waiting on a condition: for a signal, not for the lock.
        assert_eq!(
            lock_of(&[
                "jdk.internal.misc.Unsafe.park",
                "java.util.concurrent.locks.LockSupport.park",
                "java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject.await",
                "java.util.concurrent.LinkedBlockingQueue.take",
            ]),
            None
        );
        assert_eq!(lock_of(&["java.lang.Thread.sleep", "Main.main"]), None);
        assert_eq!(lock_of(&[]), None);
    }
}
