//! A kernel tracepoint's perf id, which only tracefs tells
//! (`events/SYSTEM/NAME/id`). Where the host has not mounted tracefs, it is
//! mounted for a moment in a mount namespace of one thread of stoke's own:
//! the host's mounts never change.

use std::{ffi::CString, io, path::Path, thread};

use crate::procfs;

/// Where tracefs is mounted, when it is.
const MOUNTED: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The perf id of tracepoint `system:name` (each of letters, digits and
/// `_`, as `Probe` checks), or why there is none.
pub fn tracepoint_id(system: &str, name: &str) -> io::Result<u64> {
    let relative = format!("events/{system}/{name}/id");
    for root in MOUNTED {
        if Path::new(root).join("events").is_dir() {
            return read_id(&Path::new(root).join(&relative));
        }
    }
    thread::scope(|scope| {
        scope
            .spawn(|| {
                mount_private_tracefs()?;
                read_id(&Path::new(MOUNTED[0]).join(&relative))
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("reading tracefs failed")))
    })
}

fn read_id(path: &Path) -> io::Result<u64> {
    let (bytes, _) = procfs::read_bounded(path, 32).map_err(|error| {
        if error.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                error.kind(),
                "no such tracepoint (see `ls /sys/kernel/tracing/events`)",
            )
        } else {
            error
        }
    })?;
    String::from_utf8_lossy(&bytes)
        .trim()
        .parse()
        .map_err(|_| io::Error::other(format!("{} holds no id", path.display())))
}

/// Gives the calling thread a mount namespace of its own, private to it,
/// with tracefs mounted at [`MOUNTED`]`[0]`. The namespace goes with the
/// thread.
fn mount_private_tracefs() -> io::Result<()> {
    let check = |result: libc::c_int| {
        if result == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    let root = CString::new("/").expect("no NUL");
    let target = CString::new(MOUNTED[0]).expect("no NUL");
    let tracefs = CString::new("tracefs").expect("no NUL");
    // SAFETY: plain syscalls with NUL-terminated strings; they change
    // this thread's mount namespace only, which the unshare made its own.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNS))?;
        // Nothing mounted here propagates back to the host's namespace.
        check(libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            tracefs.as_ptr(),
            target.as_ptr(),
            tracefs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))
    }
}
