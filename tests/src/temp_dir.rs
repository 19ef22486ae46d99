//! A test's temporary directory: [`tempfile`]'s, named after the test and
//! kept when the test fails.

use std::fs::{self, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;

/// A temporary directory under [`std::env::temp_dir`], removed on drop
/// unless the test is panicking (then it is kept, and its path printed, to
/// look at what the failed test left there).
#[derive(Debug)]
pub struct TempDir {
    /// `None` only while being dropped.
    dir: Option<tempfile::TempDir>,
}

impl TempDir {
    /// Creates a fresh, empty directory whose name contains `label`,
    /// readable by every user (workloads may run as another user).
    ///
    /// # Panics
    ///
    /// If it cannot be created.
    pub fn new(label: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("stoke-tests-{label}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("creating a temporary directory for {label}: {e}"));
        // Set after creation: the umask would narrow a mode given to mkdir.
        fs::set_permissions(dir.path(), Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", dir.path().display()));
        TempDir { dir: Some(dir) }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().expect("not dropped yet").path()
    }

    /// A path inside the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path().join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            if thread::panicking() {
                eprintln!("keeping {} for inspection", dir.keep().display());
            }
        }
    }
}
