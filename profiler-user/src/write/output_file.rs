//! Output files that appear whole or not at all: written under no name (or
//! a temporary one) in the target's directory, and renamed over the target
//! only once complete. A failed or interrupted run leaves no file and never
//! clobbers an existing one.

use std::{
    ffi::CString,
    fs::File,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::{ffi::OsStrExt, fs::PermissionsExt},
    },
    path::{Path, PathBuf},
};

/// A file being written, that becomes `target` on [`OutputFile::commit`].
pub struct OutputFile {
    file: File,
    target: PathBuf,
    /// Where the temporary file has a name (filesystems without
    /// `O_TMPFILE`); it is removed if the file is dropped uncommitted.
    named: Option<tempfile::TempPath>,
}

impl OutputFile {
    /// Starts writing what will become `target`, with `mode` (less the
    /// umask). Fails now, not after a recording, where `target` cannot be
    /// written: a directory missing or read-only, or a directory in its way.
    pub fn create(target: &Path, mode: u32) -> io::Result<Self> {
        if target.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            ));
        }
        let dir = directory_of(target);
        let file = match unnamed_in(dir, mode) {
            Ok(file) => {
                return Ok(Self {
                    file,
                    target: target.to_owned(),
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
        let (file, path) = file.into_parts();
        Ok(Self {
            file,
            target: target.to_owned(),
            named: Some(path),
        })
    }

    /// The file to write into.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Makes the written file `target`, replacing any file there in one step.
    pub fn commit(self) -> io::Result<()> {
        self.file.sync_all()?;
        match self.named {
            Some(path) => path.persist(&self.target).map_err(|error| error.error),
            None => {
                // An unnamed file can only be linked to a name that does not
                // exist: link it beside the target, then rename over it.
                let temporary = tempfile::Builder::new()
                    .prefix(".stoke-")
                    .suffix(".tmp")
                    .make_in(directory_of(&self.target), |path| {
                        link_unnamed(&self.file, path)
                    })?;
                temporary
                    .into_temp_path()
                    .persist(&self.target)
                    .map_err(|error| error.error)
            }
        }
    }
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
            target: target.clone(),
            named: Some(path),
        };
        assert_eq!(names(dir.path()).len(), 1);
        drop(output);
        assert!(names(dir.path()).is_empty());
    }
}
