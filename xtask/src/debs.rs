//! Debian packages fetched for the tests without installing them (they
//! come from other suites, whose libraries must not replace the system's):
//! downloaded with `apt-get download` and extracted with `dpkg-deb -x`.

use std::{os::unix::fs::PermissionsExt, path::Path, process::Command};

use anyhow::{Context, Result};

use crate::run;

/// Downloads `packages` (`NAME` or `NAME=VERSION`) with the `apt-get`
/// that `apt_get` makes and extracts each into `into`; the downloads are
/// removed.
pub fn extract(apt_get: &dyn Fn() -> Command, packages: &[&str], into: &Path) -> Result<()> {
    std::fs::create_dir_all(into).with_context(|| format!("creating {}", into.display()))?;
    let download = tempfile::tempdir()?;
    // apt downloads as its own user, `_apt`, where it may.
    std::fs::set_permissions(download.path(), std::fs::Permissions::from_mode(0o755))?;
    run(apt_get()
        .args(["download", "-q"])
        .args(packages)
        .current_dir(download.path()))?;
    for entry in std::fs::read_dir(download.path())? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "deb") {
            run(Command::new("dpkg-deb").arg("-x").arg(&path).arg(into))?;
        }
    }
    Ok(())
}
