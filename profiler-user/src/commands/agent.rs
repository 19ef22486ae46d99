//! `stoke agent -o FILE`: writes the JVM agent stoke carries, for JVMs
//! started with `-agentpath:`.

use std::{io::Write, path::Path};

use anyhow::{Context, Result};

use crate::{jvm::agent::AGENT, write::OutputFile};

/// Writes the agent to `path`, executable.
pub fn run(path: &Path) -> Result<()> {
    let mut file = OutputFile::create(path, 0o755)
        .with_context(|| format!("cannot write the agent to {}", path.display()))?;
    file.file()
        .write_all(AGENT)
        .and_then(|()| file.commit())
        .with_context(|| format!("writing the agent to {}", path.display()))?;
    eprintln!(
        "stoke: wrote the JVM agent to {0}; start JVMs with -agentpath:{0}",
        path.display()
    );
    Ok(())
}
