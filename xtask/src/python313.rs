//! CPython 3.13 for the Python tests: bookworm's is 3.11, so Debian
//! trixie's interpreter is downloaded with the C library it was built
//! against and extracted into a root of its own,
//! [`stoke_tests::PYTHON_3_13_ROOT`], which the tests `chroot` into. Not
//! installed: trixie's libraries would replace bookworm's, so apt reads
//! trixie's package lists into a configuration of its own, never the
//! system's.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use crate::run;

/// The interpreter, its minimal standard library and the libraries it
/// links.
const PACKAGES: [&str; 5] = [
    "python3.13-minimal",
    "libpython3.13-minimal",
    "libc6",
    "zlib1g",
    "libexpat1",
];

/// Fetches and extracts the root, unless it is there already.
pub fn install() -> Result<()> {
    let root = Path::new(stoke_tests::PYTHON_3_13_ROOT);
    if root.join("usr/bin/python3.13").exists() {
        return Ok(());
    }
    let apt = tempfile::tempdir()?;
    // apt downloads as its own user, `_apt`, where it may.
    std::fs::set_permissions(apt.path(), std::fs::Permissions::from_mode(0o755))?;
    let sources = apt.path().join("sources.list");
    std::fs::write(&sources, "deb http://deb.debian.org/debian trixie main\n")?;
    for dir in ["lists/partial", "cache/archives/partial", "parts"] {
        std::fs::create_dir_all(apt.path().join(dir))?;
    }
    let options = [
        format!("Dir::Etc::SourceList={}", sources.display()),
        format!(
            "Dir::Etc::SourceParts={}",
            apt.path().join("parts").display()
        ),
        format!("Dir::State::Lists={}", apt.path().join("lists").display()),
        format!("Dir::Cache={}", apt.path().join("cache").display()),
    ];
    let apt_get = || {
        let mut command = Command::new("apt-get");
        for option in &options {
            command.arg("-o").arg(option);
        }
        command
    };
    run(apt_get().args(["update", "-q"]))?;
    let partial = PathBuf::from(format!("{}.partial", root.display()));
    let _ = std::fs::remove_dir_all(&partial);
    crate::debs::extract(&apt_get, &PACKAGES, &partial)?;
    // A merged /usr, as trixie's base files make it: the interpreter
    // names its loader /lib64/ld-linux-x86-64.so.2.
    for (link, target) in [("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        std::os::unix::fs::symlink(target, partial.join(link))
            .with_context(|| format!("linking {link} in {}", partial.display()))?;
    }
    let tmp = partial.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))?;
    std::fs::rename(&partial, root)
        .with_context(|| format!("moving {} into place", partial.display()))?;
    run(Command::new("chroot")
        .arg(root)
        .args(["/usr/bin/python3.13", "-c", "pass"]))
}
