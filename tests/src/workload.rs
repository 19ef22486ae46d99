//! The C workloads of `tests/workloads/`: compiled at test time with `cc`
//! into a test's temporary directory, then started as [`Running`]
//! processes.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{require_root, workloads_dir, Running, TempDir};

/// The common start of a test: [`require_root`], then a fresh [`TempDir`]
/// named after `label` with `tests/workloads/<workload>.c` built in it
/// ([`Workload::build`]).
pub fn prepare(label: &str, workload: &str) -> (TempDir, Workload) {
    require_root();
    let dir = TempDir::new(label);
    let workload = Workload::build(workload, dir.path());
    (dir, workload)
}

/// everywhere (leaf functions too) and debug info, no `-static`.
pub const FRAME_POINTER_FLAGS: &[&str] = &[
    "-O1",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-g",
];

/// A C program from `tests/workloads/`, compiled into a temporary directory.
#[derive(Debug, Clone)]
pub struct Workload {
    name: String,
    exe: PathBuf,
}

impl Workload {
    /// Compiles `tests/workloads/<name>.c` into `dir/<name>` with
    /// [`FRAME_POINTER_FLAGS`].
    pub fn build(name: &str, dir: &Path) -> Self {
        Self::build_with(name, dir, FRAME_POINTER_FLAGS)
    }

    /// Compiles `tests/workloads/<name>.c` into `dir/<name>` with `flags`
    /// (plus warnings, `-pthread` and the workloads directory as include
    /// path).
    ///
    /// # Panics
    ///
    /// If `cc` fails; the panic message carries its output.
    pub fn build_with(name: &str, dir: &Path, flags: &[&str]) -> Self {
        let source = workloads_dir().join(format!("{name}.c"));
        let exe = dir.join(name);
        let output = Command::new("cc")
            .args(flags)
            .args(["-Wall", "-Wextra", "-pthread", "-I"])
            .arg(workloads_dir())
            .arg("-o")
            .arg(&exe)
            .arg(&source)
            .output()
            .unwrap_or_else(|e| panic!("running cc for {}: {e}", source.display()));
        assert!(
            output.status.success(),
            "cc failed to build {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        Workload {
            name: name.to_owned(),
            exe,
        }
    }

    /// A copy of the executable in `dir` (another file, the same bytes).
    ///
    /// # Panics
    ///
    /// If the copy fails.
    pub fn copy_to(&self, dir: &Path) -> Self {
        let exe = dir.join(&self.name);
        fs::copy(&self.exe, &exe)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", self.exe.display(), exe.display()));
        Workload {
            name: self.name.clone(),
            exe,
        }
    }

    /// The workload's name (its source file's stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path of the compiled executable.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// The kernel's process name (`comm`) of the running workload: the
    /// executable's name cut to 15 bytes.
    pub fn comm(&self) -> String {
        self.name.chars().take(15).collect()
    }

    /// Starts the workload with `args` (the first is its run time in
    /// seconds) and waits, at most 20 s, until it prints `ready` on stdout.
    /// The child is killed when the returned handle is dropped.
    pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S]) -> Running {
        self.spawn_in(args, None)
    }

    /// Like [`Workload::spawn`], with the child's working directory set to
    /// `cwd`.
    pub fn spawn_in<S: AsRef<OsStr>>(&self, args: &[S], cwd: Option<&Path>) -> Running {
        let mut command = Command::new(&self.exe);
        command.args(args);
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        Running::start(command, &self.name, &self.comm())
    }
}
