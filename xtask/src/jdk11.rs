//! JDK 11 for the Java tests: bookworm has none, so Debian bullseye's
//! OpenJDK 11 packages are downloaded (not installed: they would pull
//! bullseye's libraries into the system) and extracted under
//! [`ROOT`], where the JDK's home is `stoke_tests::JDK_11.home`.

use std::{path::Path, process::Command};

use anyhow::{Context, Result};

use crate::run;

/// Where the packages are extracted: their `usr/` and `etc/`.
const ROOT: &str = "/opt/stoke-jdk11";

/// The packages of a headless JDK 11: the JDK and the runtime it adds to.
const PACKAGES: [&str; 2] = ["openjdk-11-jdk-headless", "openjdk-11-jre-headless"];

/// Fetches and extracts JDK 11, unless it is there already.
pub fn install() -> Result<()> {
    let java = Path::new(stoke_tests::JDK_11.home).join("bin/java");
    if java.exists() {
        return Ok(());
    }
    crate::debs::extract(&|| Command::new("apt-get"), &PACKAGES, Path::new(ROOT))?;
    keep_links_inside(Path::new(ROOT), Path::new(ROOT))?;
    run(Command::new(&java).arg("-version"))
}

/// Points the absolute links under `dir` (the JDK's `conf/` files link to
/// `/etc/java-11-openjdk/`) at their targets under `root`, where the
/// packages' files are, when they are there.
fn keep_links_inside(dir: &Path, root: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let metadata = std::fs::symlink_metadata(&path)?;
        if metadata.is_dir() {
            keep_links_inside(&path, root)?;
        } else if metadata.is_symlink() {
            let target = std::fs::read_link(&path)?;
            let Ok(relative) = target.strip_prefix("/") else {
                continue;
            };
            let inside = root.join(relative);
            if std::fs::symlink_metadata(&inside).is_ok() {
                std::fs::remove_file(&path)?;
                std::os::unix::fs::symlink(&inside, &path)
                    .with_context(|| format!("linking {}", path.display()))?;
            }
        }
    }
    Ok(())
}
