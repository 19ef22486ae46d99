//! Output files that appear whole or not at all. A regular file (or a new
//! name) is written under no name (or a temporary one) in its directory and
//! renamed over the target only once complete, so a failed or interrupted
//! run leaves no file and never clobbers an existing one. Standard output, a
//! character device (`/dev/null`, a terminal) or a FIFO is never renamed
//! over: the profile is kept in memory until complete, then written through.
//! A symlink is resolved once, and the decision made on what it points to.

use std::{
    ffi::CString,
    fs::{File, OpenOptions},
    io::{self, Seek, Write},
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::{
            ffi::OsStrExt,
            fs::{FileTypeExt, OpenOptionsExt, PermissionsExt},
        },
    },
    path::{Path, PathBuf},
};

/// Whether `path` names standard output: `-` or `/dev/stdout`.
pub fn is_standard_output(path: &Path) -> bool {
    path == Path::new("-") || path == Path::new("/dev/stdout")
}

/// Where an output path leads, decided before anything is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A regular file (symlinks resolved) or a new name: replaced whole.
    File(PathBuf),
    /// Standard output.
    Stdout,
    /// A character device or a FIFO: opened for writing, written through.
    Stream(PathBuf),
}

impl Destination {
    /// Where `path` leads. Fails for what a profile cannot be written to:
    /// a directory, a block device, a socket, a symlink to nothing.
    pub fn of(path: &Path) -> io::Result<Self> {
        if is_standard_output(path) {
            return Ok(Self::Stdout);
        }
        let kind = match std::fs::metadata(path) {
            Ok(metadata) => metadata.file_type(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return match std::fs::symlink_metadata(path) {
                    Ok(_) => Err(refused("it is a symlink to nothing")),
                    Err(_) => Ok(Self::File(path.to_owned())),
                };
            }
            Err(error) => return Err(error),
        };
        if kind.is_file() {
            Ok(Self::File(std::fs::canonicalize(path)?))
        } else if kind.is_char_device() || kind.is_fifo() {
            Ok(Self::Stream(path.to_owned()))
        } else if kind.is_dir() {
            Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            ))
        } else {
            let what = if kind.is_block_device() {
                "a block device"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "neither a file nor a character device"
            };
            Err(refused(&format!(
                "it is {what}: give a file, a character device, a FIFO or - (standard output)"
            )))
        }
    }

    /// Whether the profile is replaced whole, rather than written through.
    pub fn is_file(&self) -> bool {
        matches!(self, Self::File(_))
    }
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.to_owned())
}

/// A profile being written, that reaches its destination on
/// [`OutputFile::commit`].
pub struct OutputFile {
    file: File,
    destination: Destination,
    /// Where the temporary file has a name (filesystems without
    /// `O_TMPFILE`); it is removed if the file is dropped uncommitted.
    named: Option<tempfile::TempPath>,
}

impl OutputFile {
    /// Starts writing what will reach `target`, a file with `mode` (less
    /// the umask) if it becomes one. Fails now, not after a recording,
    /// where `target` cannot be written: a directory missing or read-only,
    /// a directory or a socket in its way, a device that cannot be opened.
    pub fn create(target: &Path, mode: u32) -> io::Result<Self> {
        let destination = Destination::of(target)?;
        let path = match &destination {
            Destination::File(path) => path.clone(),
            Destination::Stdout => return Self::in_memory(destination),
            Destination::Stream(path) => {
                check_writable(path)?;
                return Self::in_memory(destination);
            }
        };
        let dir = directory_of(&path);
        let file = match unnamed_in(dir, mode) {
            Ok(file) => {
                return Ok(Self {
                    file,
                    destination,
                    named: None,
                })
            }
            // Filesystems without O_TMPFILE (NFS, older FUSE) say so thus.
            Err(error)
                if matches!(
                    error.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) =>
            {
                tempfile::Builder::new()
                    .prefix(".stoke-")
                    .suffix(".tmp")
                    .permissions(std::fs::Permissions::from_mode(mode))
                    .tempfile_in(dir)?
            }
            Err(error) => return Err(error),
        };
        let (file, named) = file.into_parts();
        Ok(Self {
            file,
            destination,
            named: Some(named),
        })
    }

    /// A profile kept in memory until written through to `destination`.
    fn in_memory(destination: Destination) -> io::Result<Self> {
        // SAFETY: a NUL-terminated name; the result is checked below.
        let fd = unsafe { libc::memfd_create(c"stoke-profile".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: a new descriptor that nothing else owns.
            file: File::from(unsafe { OwnedFd::from_raw_fd(fd) }),
            destination,
            named: None,
        })
    }

    /// The file to write into.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Makes the written profile reach its destination: a file replaced in
    /// one step, or the whole profile written through.
    pub fn commit(mut self) -> io::Result<()> {
        let target = match &self.destination {
            Destination::File(target) => target,
            Destination::Stdout => return self.write_through(&mut io::stdout().lock()),
            Destination::Stream(path) => {
                let mut stream = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOCTTY)
                    .open(path)?;
                return self.write_through(&mut stream);
            }
        };
        self.file.sync_all()?;
        match self.named {
            Some(path) => path.persist(target).map_err(|error| error.error),
            None => {
                // An unnamed file can only be linked to a name that does not
                // exist: link it beside the target, then rename over it.
                let temporary = tempfile::Builder::new()
                    .prefix(".stoke-")
                    .suffix(".tmp")
                    .make_in(directory_of(target), |path| link_unnamed(&self.file, path))?;
                temporary
                    .into_temp_path()
                    .persist(target)
                    .map_err(|error| error.error)
            }
        }
    }

    /// Copies the whole profile to `out`. A reader that has gone (`| head`)
    /// took what it wanted: that is not a failure.
    fn write_through(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.file.rewind()?;
        match io::copy(&mut self.file, out).and_then(|_| out.flush()) {
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            result => result,
        }
    }
}

/// Fails where a device or FIFO cannot be opened for writing (a read-only
/// filesystem, permissions), without opening it: a FIFO's open would wait
/// for a reader.
fn check_writable(path: &Path) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The directory `path` is in.
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// An `O_TMPFILE` file in `dir`: it has no name until linked, so a run
/// killed at any point leaves nothing behind.
fn unnamed_in(dir: &Path, mode: u32) -> io::Result<File> {
    let dir = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    // SAFETY: a NUL-terminated path; the result is checked below.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Gives the unnamed `file` the name `path`, which must not exist.
fn link_unnamed(file: &File, path: &Path) -> io::Result<()> {
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let to = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: NUL-terminated paths; /proc's link names the open file.
    let linked = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if linked != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_file_appears_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.txt");
        let mut output = OutputFile::create(&target, 0o644).unwrap();
        output.file().write_all(b"profile").unwrap();
        assert!(
            names(dir.path()).is_empty(),
            "nothing named before the commit"
        );
        output.commit().unwrap();
        assert_eq!(names(dir.path()), ["out.txt"]);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "profile");
    }

    #[test]
    fn an_uncommitted_file_leaves_the_old_one_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.txt");
        std::fs::write(&target, "old").unwrap();
        let mut output = OutputFile::create(&target, 0o644).unwrap();
        output.file().write_all(b"partial").unwrap();
        drop(output);
        assert_eq!(names(dir.path()), ["out.txt"]);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
        let mut output = OutputFile::create(&target, 0o644).unwrap();
        output.file().write_all(b"new").unwrap();
        output.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(names(dir.path()), ["out.txt"]);
    }

    #[test]
    fn unwritable_targets_fail_at_once() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            OutputFile::create(dir.path(), 0o644).is_err(),
            "a directory"
        );
        assert!(OutputFile::create(&dir.path().join("missing/out.txt"), 0o644).is_err());
    }

    #[test]
    fn the_fallback_without_o_tmpfile_cleans_up_too() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.txt");
        let file = tempfile::Builder::new()
            .prefix(".stoke-")
            .tempfile_in(dir.path())
            .unwrap();
        let (file, path) = file.into_parts();
        let output = OutputFile {
            file,
            destination: Destination::File(target.clone()),
            named: Some(path),
        };
        assert_eq!(names(dir.path()).len(), 1);
        drop(output);
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn a_symlink_to_a_file_keeps_the_link_and_replaces_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.txt");
        let link = dir.path().join("link.txt");
        std::fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut output = OutputFile::create(&link, 0o644).unwrap();
        output.file().write_all(b"new").unwrap();
        output.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
    }

    #[test]
    fn a_fifo_is_written_through_and_stays_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f.folded");
        let name = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let mut output = OutputFile::create(&fifo, 0o644).unwrap();
        output.file().write_all(b"a;b 1\n").unwrap();
        let reader = std::thread::spawn({
            let fifo = fifo.clone();
            move || std::fs::read_to_string(fifo).unwrap()
        });
        output.commit().unwrap();
        assert_eq!(reader.join().unwrap(), "a;b 1\n");
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo());
    }

    #[test]
    fn sockets_and_dangling_links_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.folded");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let error = OutputFile::create(&socket, 0o644).err().unwrap();
        assert!(error.to_string().contains("a socket"), "{error}");
        let dangling = dir.path().join("d.folded");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let error = OutputFile::create(&dangling, 0o644).err().unwrap();
        assert!(error.to_string().contains("symlink to nothing"), "{error}");
    }

    #[test]
    fn standard_output_is_named_by_a_dash_or_dev_stdout() {
        for path in ["-", "/dev/stdout"] {
            assert_eq!(
                Destination::of(Path::new(path)).unwrap(),
                Destination::Stdout
            );
        }
        assert!(Destination::of(Path::new("new.svg")).unwrap().is_file());
    }
}
