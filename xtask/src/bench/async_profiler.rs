//! async-profiler, the JVM profiler stoke is measured against on Java
//! workloads: built by the person running the bench from its public source
//! (tag v4.5, `make` with JAVA_HOME at JDK 17) outside this tree, and given
//! as `--async-profiler DIR`. It is never copied into ours, nor built by us.
//!
//! It runs as its own JVM agent, started with the JVM (`-agentpath:` with
//! `start`): its CPU is spent in the JVM's threads, so a workload's
//! slowdown is all of its cost.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};

/// Where a build puts the library: a `make` in the source tree, or an
/// unpacked release.
const LIBRARY_PATHS: [&str; 2] = ["build/lib/libasyncProfiler.so", "lib/libasyncProfiler.so"];

/// An async-profiler build.
#[derive(Debug, Clone)]
pub struct AsyncProfiler {
    library: PathBuf,
}

impl AsyncProfiler {
    /// The build in `dir`: its source tree after `make`, or an unpacked
    /// release.
    pub fn find(dir: &Path) -> Result<Self> {
        for relative in LIBRARY_PATHS {
            let library = dir.join(relative);
            if library.is_file() {
                let library = fs::canonicalize(&library)
                    .with_context(|| format!("resolving {}", library.display()))?;
                return Ok(Self { library });
            }
        }
        bail!(
            "--async-profiler {}: no {} nor {} there; build async-profiler (tag v4.5) with \
             `make` and JAVA_HOME at JDK 17, outside this tree, and give its directory",
            dir.display(),
            LIBRARY_PATHS[0],
            LIBRARY_PATHS[1]
        )
    }

    /// The JVM option that starts CPU profiling at `frequency_hz` (the
    /// cpu-clock interval in nanoseconds, as stoke's `-F` samples) from the
    /// JVM's start, writing collapsed stacks to `output` when it exits.
    pub fn cpu_agent_option(&self, frequency_hz: u64, output: &Path) -> String {
        format!(
            "-agentpath:{}=start,event=cpu,interval={},collapsed,file={}",
            self.library.display(),
            1_000_000_000 / frequency_hz.max(1),
            output.display()
        )
    }

    /// The samples in a collapsed-stacks file it wrote (each line ends
    /// in its count).
    pub fn samples(output: &Path) -> Result<u64> {
        let text = fs::read_to_string(output)
            .with_context(|| format!("async-profiler wrote no {}", output.display()))?;
        text.lines()
            .filter(|line| !line.is_empty())
            .map(|line| {
                line.rsplit_once(' ')
                    .and_then(|(_, count)| count.parse::<u64>().ok())
                    .with_context(|| format!("{}: not a collapsed stack: {line}", output.display()))
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapsed_samples_are_summed_and_garbage_refused() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("out.collapsed");
        fs::write(&output, "a;b 3\na;c d 4\n\n").unwrap();
        assert_eq!(AsyncProfiler::samples(&output).unwrap(), 7);
        fs::write(&output, "a;b three\n").unwrap();
        assert!(AsyncProfiler::samples(&output).is_err());
    }

    #[test]
    fn a_directory_without_a_build_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let error = AsyncProfiler::find(dir.path()).unwrap_err().to_string();
        assert!(error.contains("make") && error.contains("v4.5"), "{error}");
    }
}
