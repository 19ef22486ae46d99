//! An image's root filesystem made of this host's files: a workload, the
//! libraries `ldd` lists for it, a JDK; written as the tarball that
//! `docker import` (or `podman import`) makes an image of.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run_tool;

/// The files of an image's root filesystem, gathered before
/// [`Image::import`]: files of this host at the same paths (dereferenced),
/// plus files made for the image in a staging directory.
#[derive(Debug)]
pub struct Rootfs {
    staging: PathBuf,
    host_paths: BTreeSet<PathBuf>,
    excludes: Vec<String>,
}

impl Rootfs {
    /// An empty root filesystem staged in `dir` (which must not exist
    /// yet), with a `/tmp` as a JVM needs it (its attach files live there).
    pub fn new(dir: &Path) -> Self {
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("creating {}: {e}", tmp.display()));
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", tmp.display()));
        Rootfs {
            staging: dir.to_owned(),
            host_paths: BTreeSet::new(),
            excludes: Vec::new(),
        }
    }

    /// Copies `file` to `at` (an absolute path in the image), and adds the
    /// libraries it needs ([`Rootfs::libraries_of`]).
    pub fn add_program(&mut self, file: &Path, at: &str) -> &mut Self {
        let target = self.staging.join(at.trim_start_matches('/'));
        fs::create_dir_all(target.parent().expect("a path in the image has a parent"))
            .unwrap_or_else(|e| panic!("creating the parent of {}: {e}", target.display()));
        fs::copy(file, &target)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", file.display(), target.display()));
        self.libraries_of(&[file])
    }

    /// Copies the directory `dir` to the same place in the image, without
    /// the entries matching the tar patterns `excludes`.
    pub fn add_host_tree(&mut self, dir: &Path, excludes: &[&str]) -> &mut Self {
        assert!(dir.is_dir(), "{} is not a directory", dir.display());
        self.host_paths.insert(dir.to_owned());
        self.excludes
            .extend(excludes.iter().map(|e| (*e).to_owned()));
        self
    }

    /// Adds the shared libraries and the loader that `ldd` lists for each
    /// of `objects`, at their paths on this host; a library `ldd` does not
    /// find is left out (an optional part of a JDK may need one).
    pub fn libraries_of(&mut self, objects: &[&Path]) -> &mut Self {
        for object in objects {
            let listing = run_tool("ldd", &[object.as_os_str()]);
            for line in listing.lines() {
                // `libc.so.6 => /lib/.../libc.so.6 (0x...)` or
                // `/lib64/ld-linux-x86-64.so.2 (0x...)`.
                let path = match line.split_once("=>") {
                    Some((_, rest)) => rest.split_whitespace().next(),
                    None => line.split_whitespace().next(),
                };
                if let Some(path) = path.filter(|p| p.starts_with('/')) {
                    self.host_paths.insert(PathBuf::from(path));
                }
            }
        }
        self
    }

    /// Writes the root filesystem as a tarball next to the staging
    /// directory, and returns its path: the staging directory, then the
    /// host's files with symlinks followed (`tar -h`), so that the image
    /// holds the files and not links out of it.
    pub(super) fn write_tarball(&self) -> PathBuf {
        let tarball = self.staging.with_extension("tar");
        let list = self.staging.with_extension("files");
        // A path inside another one listed (a JDK's own library that `ldd`
        // lists) would be archived twice.
        let names: String = self
            .host_paths
            .iter()
            .filter(|p| !self.host_paths.iter().any(|q| q != *p && p.starts_with(q)))
            .map(|p| format!("{}\n", p.display().to_string().trim_start_matches('/')))
            .collect();
        fs::write(&list, names).unwrap_or_else(|e| panic!("writing {}: {e}", list.display()));
        let mut command = Command::new("tar");
        // Whole files, not hard links: two paths of one library (or one
        // file linked twice) each become a file of the image.
        command
            .args(["-c", "-h", "--hard-dereference", "-f"])
            .arg(&tarball);
        for pattern in &self.excludes {
            command.arg(format!("--exclude={pattern}"));
        }
        command
            .arg("-C")
            .arg(&self.staging)
            .arg(".")
            .args(["-C", "/", "-T"])
            .arg(&list);
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("running tar: {e}"));
        assert!(
            output.status.success(),
            "{command:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        tarball
    }
}
