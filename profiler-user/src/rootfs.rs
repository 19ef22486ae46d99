//! Opening files of another process's filesystem: its root directory
//! (`/proc/PID/root`, a container's) taken as `/`, with `openat2(2)`
//! resolving every name inside it, so that a symlink planted there (even
//! `../../..` or an absolute one) never leads out.

use std::{
    ffi::{CStr, CString},
    fs::File,
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::{ffi::OsStrExt, fs::OpenOptionsExt},
    },
    path::Path,
};

/// `openat2(2)`'s `struct open_how` (libc's is not constructible).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2` relative to `dir`, retrying when the kernel asks to (EAGAIN:
/// a rename raced a scoped lookup).
pub fn openat2(
    dir: BorrowedFd,
    path: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: u64::from(flags.unsigned_abs()),
        mode: u64::from(mode),
        resolve,
    };
    let mut retries = 16;
    loop {
        // SAFETY: `path` and `how` outlive the call, which gets how's size.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                std::ptr::from_ref(&how),
                size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a new descriptor nothing else owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let error = io::Error::last_os_error();
        let again = matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EINTR));
        if !again || retries == 0 {
            return Err(error);
        }
        retries -= 1;
    }
}

/// A process's root directory, held open (`O_PATH`): it stays usable after
/// the process exits.
#[derive(Debug)]
pub struct Root(OwnedFd);

impl Root {
    /// The root directory of process `pid`.
    pub fn of_process(pid: u32) -> io::Result<Self> {
        Self::open(Path::new(&format!("/proc/{pid}/root")))
    }

    /// This process's own root directory.
    pub fn host() -> io::Result<Self> {
        Self::open(Path::new("/"))
    }

    /// The directory at `path`, as a root.
    #[cfg(test)]
    pub fn at(path: &Path) -> io::Result<Self> {
        Self::open(path)
    }

    fn open(path: &Path) -> io::Result<Self> {
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(path)?;
        Ok(Self(file.into()))
    }

    /// Opens the regular file at `path` (absolute or not, both taken from
    /// this root) for reading. Symlinks are followed, but inside the root
    /// (an absolute target starts at it, `..` stops at it); `/proc` magic
    /// links are refused. Anything but a regular file is refused before it
    /// is opened for reading: a FIFO would block, and opening some devices
    /// has effects (a watchdog arms itself).
    pub fn open_file(&self, path: &Path) -> io::Result<File> {
        let name = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a path"))?;
        let handle = File::from(openat2(
            self.0.as_fd(),
            &name,
            libc::O_PATH | libc::O_CLOEXEC,
            0,
            libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
        )?);
        reopen_regular(&handle)
    }
}

impl Root {
    /// The names of at most `max` entries of the directory at `path` of
    /// this root, resolved as [`Root::open_file`] resolves files.
    pub fn dir_names(&self, path: &Path, max: usize) -> io::Result<Vec<String>> {
        let name = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a path"))?;
        let dir = File::from(openat2(
            self.0.as_fd(),
            &name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
            libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
        )?);
        // Listed through the descriptor: no second lookup by name.
        let entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
        Ok(entries
            .take(max)
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect())
    }
}

/// Opens the regular file at `path` for reading, following symlinks (the
/// `/proc/PID/map_files/` and `/proc/self/fd/` links included). Like
/// [`Root::open_file`], anything but a regular file is refused before it is
/// opened for reading: a process can map `/dev/zero` or a device, and name
/// a FIFO where a file is expected.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let handle = File::options()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)?;
    reopen_regular(&handle)
}

/// Reopens what the `O_PATH` descriptor `handle` holds for reading, if it
/// is a regular file (checked on the descriptor, so no rename in between
/// can swap it).
fn reopen_regular(handle: &File) -> io::Result<File> {
    if !handle.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    // Reopening the very inode the O_PATH descriptor holds: no lookup by
    // name happens again. Non-blocking and no controlling terminal, though
    // a regular file needs neither: nothing a file does may stall stoke.
    File::options()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use tempfile::TempDir;

    use super::*;
    use crate::process::maps::MappedPage;

    /// A fresh directory, removed however the test ends.
    fn temp_dir() -> TempDir {
        tempfile::Builder::new()
            .prefix("stoke-rootfs-")
            .tempdir()
            .unwrap()
    }

    #[test]
    fn symlinks_stay_inside_the_root() {
        let temp = temp_dir();
        let dir = temp.path();
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::fs::write(dir.join("etc/inside"), b"inside").unwrap();
        // Outside the root, these would name the host's files.
        std::os::unix::fs::symlink("/etc/hostname", dir.join("absolute")).unwrap();
        std::os::unix::fs::symlink("../../../../../etc/hostname", dir.join("dotdot")).unwrap();
        std::os::unix::fs::symlink("/etc/inside", dir.join("good")).unwrap();
        std::os::unix::fs::symlink("/proc/self/exe", dir.join("magic")).unwrap();
        let root = Root::open(dir).unwrap();
        let read = |name: &str| {
            root.open_file(Path::new(name))
                .map(|file| std::io::read_to_string(file).unwrap())
                .map_err(|error| error.kind())
        };
        assert_eq!(read("/etc/inside"), Ok("inside".into()));
        assert_eq!(read("good"), Ok("inside".into()));
        assert_eq!(read("/good"), Ok("inside".into()));
        assert_eq!(read("absolute"), Err(io::ErrorKind::NotFound));
        assert_eq!(read("dotdot"), Err(io::ErrorKind::NotFound));
        assert_eq!(read("/../../etc/hostname"), Err(io::ErrorKind::NotFound));
        // /proc is not in the root; a directory is no file.
        assert!(read("magic").is_err());
        assert_eq!(read("/etc"), Err(io::ErrorKind::InvalidInput));
        // Neither waits for a FIFO's writer nor opens a device.
        let fifo = CString::new(dir.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(read("fifo"), Err(io::ErrorKind::InvalidInput));
        let device = CString::new(dir.join("null").as_os_str().as_bytes()).unwrap();
        // SAFETY: as above; /dev/null's numbers. Creating a device node
        // needs root: without it, nothing to check.
        if unsafe { libc::mknod(device.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) } == 0
        {
            assert_eq!(read("null"), Err(io::ErrorKind::InvalidInput));
        }
    }

    #[test]
    fn only_regular_files_are_opened() {
        let temp = temp_dir();
        let dir = temp.path();
        std::fs::write(dir.join("file"), b"file").unwrap();
        let fifo = CString::new(dir.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink(dir.join("fifo"), dir.join("to-fifo")).unwrap();
        std::os::unix::fs::symlink(dir.join("file"), dir.join("to-file")).unwrap();
        let opened = |name: &str| open_regular(&dir.join(name)).map_err(|error| error.kind());
        assert!(opened("file").is_ok());
        assert!(opened("to-file").is_ok());
        // Refused without waiting for a writer.
        assert_eq!(opened("fifo").unwrap_err(), io::ErrorKind::InvalidInput);
        assert_eq!(opened("to-fifo").unwrap_err(), io::ErrorKind::InvalidInput);
        for device in ["/dev/zero", "/dev/null", "/dev/tty"] {
            assert!(open_regular(Path::new(device)).is_err(), "{device}");
        }
        // A process's mapping of /dev/zero, as stoke meets it.
        let zero = MappedPage::of(&File::open("/dev/zero").unwrap(), true);
        let link = format!("/proc/self/map_files/{:x}-{:x}", zero.start(), zero.end());
        assert!(std::fs::symlink_metadata(&link).is_ok(), "{link}");
        assert_eq!(
            open_regular(Path::new(&link)).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
