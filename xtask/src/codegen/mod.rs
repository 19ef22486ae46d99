//! `cargo xtask codegen`: generates the files that are made from another
//! source, so that the two cannot disagree: the BPF side's ABI header from
//! the Rust types, and the pprof writer's types from `profile.proto`. They
//! are committed; `cargo xtask lint` (and a test) fail when one is not what
//! its source makes.

mod abi;
mod pprof;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

/// Every generated file, with its contents as its source makes them.
fn generated() -> Result<[(PathBuf, String); 2]> {
    Ok([
        (abi::path(), abi::abi_header()?),
        (pprof::path(), pprof::types()?),
    ])
}

/// Writes every generated file.
pub fn write() -> Result<()> {
    for (path, text) in generated()? {
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Fails unless every committed file is the generated one.
pub fn check() -> Result<()> {
    for (path, text) in generated()? {
        let committed = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if committed != text {
            bail!(
                "{} is not what its source generates: run `cargo xtask codegen`",
                path.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_committed_generated_files_are_what_their_sources_make() {
        super::check().unwrap();
    }
}
