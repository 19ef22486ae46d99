//! async-profiler, the JVM profiler stoke is measured against on Java
//! workloads: built by the person running the bench from its public source
//! (tag v4.5, `make` with JAVA_HOME at JDK 17) outside this tree, and given
//! as `--async-profiler DIR`. It is never copied into ours, nor built by us.
//!
//! It runs as a JVM agent, started with the JVM (`-agentpath:` with
//! `start`) or attached to a running one by its `asprof`: its CPU is spent
//! in the JVM's threads, so a workload's slowdown is all of its cost.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};

use super::{jvm_phases::Profiling, stacks::Stack};

/// Where a build puts the library: a `make` in the source tree, or an
/// unpacked release.
const LIBRARY_PATHS: [&str; 2] = ["build/lib/libasyncProfiler.so", "lib/libasyncProfiler.so"];

/// An async-profiler build.
#[derive(Debug, Clone)]
pub struct AsyncProfiler {
    library: PathBuf,
    /// Its command-line client, `bin/` beside the library's `lib/`.
    asprof: PathBuf,
}

impl AsyncProfiler {
    /// The build in `dir`: its source tree after `make`, or an unpacked
    /// release.
    pub fn find(dir: &Path) -> Result<Self> {
        for relative in LIBRARY_PATHS {
            let library = dir.join(relative);
            let Some(asprof) = library
                .parent()
                .and_then(Path::parent)
                .map(|build| build.join("bin/asprof"))
            else {
                continue;
            };
            if library.is_file() && asprof.is_file() {
                let library = fs::canonicalize(&library)
                    .with_context(|| format!("resolving {}", library.display()))?;
                let asprof = fs::canonicalize(&asprof)
                    .with_context(|| format!("resolving {}", asprof.display()))?;
                return Ok(Self { library, asprof });
            }
        }
        bail!(
            "--async-profiler {}: no {} nor {} (with bin/asprof beside lib/) there; build async-profiler (tag v4.5) with \
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

    /// Attaches to the running JVM `pid` and starts CPU profiling at
    /// `frequency_hz`, with a frame per thread if `threads`; returns how
    /// long `asprof start` took (attach, load, start), the figure a user
    /// waits for.
    pub fn start_cpu(&self, pid: u32, frequency_hz: u64, threads: bool) -> Result<Duration> {
        let interval = (1_000_000_000 / frequency_hz.max(1)).to_string();
        let pid = pid.to_string();
        let mut args = vec!["start", "-e", "cpu", "-i", &interval];
        // `-t` takes effect when profiling starts, not at `stop`.
        if threads {
            args.push("-t");
        }
        args.push(&pid);
        let started = Instant::now();
        self.asprof(&args)?;
        Ok(started.elapsed())
    }

    /// Attaches to the running JVM `pid` and starts profiling its
    /// allocations every `interval_bytes` on average.
    pub fn start_alloc(&self, pid: u32, interval_bytes: u64) -> Result<()> {
        self.asprof(&[
            "start",
            "--alloc",
            &interval_bytes.to_string(),
            &pid.to_string(),
        ])
    }

    /// Attaches to the running JVM `pid` and starts profiling `what`.
    pub fn start(&self, pid: u32, what: Profiling) -> Result<()> {
        match what {
            Profiling::Cpu(hz) => self.start_cpu(pid, hz, false).map(drop),
            Profiling::Alloc(bytes) => self.start_alloc(pid, bytes),
        }
    }

    /// Stops profiling the JVM `pid` and returns how many samples it took,
    /// its collapsed stacks written to `output` on the way and removed.
    pub fn stop_samples(&self, pid: u32, output: &Path) -> Result<u64> {
        let file = output
            .to_str()
            .context("a scratch path that is not UTF-8")?;
        self.asprof(&["stop", "-o", "collapsed", "-f", file, &pid.to_string()])?;
        let samples = Self::samples(output);
        let _ = fs::remove_file(output);
        samples
    }

    /// Stops profiling the JVM `pid` and returns its stacks, a frame per
    /// thread first (`-t`) and Java frames annotated as stoke names them
    /// (`_[j]`, `_[i]`, `_[0]`...), class names dotted as stoke's.
    pub fn stop_stacks(&self, pid: u32, output: &Path) -> Result<Vec<Stack>> {
        let file = output
            .to_str()
            .context("a scratch path that is not UTF-8")?;
        self.asprof(&[
            "stop",
            "-a",
            "-o",
            "collapsed",
            "-f",
            file,
            &pid.to_string(),
        ])?;
        let text = fs::read_to_string(output)
            .with_context(|| format!("async-profiler wrote no {}", output.display()))?;
        let _ = fs::remove_file(output);
        text.lines()
            .filter(|line| !line.is_empty())
            .map(|line| thread_stack(line, pid))
            .collect()
    }

    fn asprof(&self, args: &[&str]) -> Result<()> {
        let output = Command::new(&self.asprof)
            .args(args)
            .output()
            .with_context(|| format!("running {}", self.asprof.display()))?;
        ensure!(
            output.status.success(),
            "asprof {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(())
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

/// A collapsed line of `-t` output, `[thread tid=N];frame;... COUNT`, as a
/// stack of process `pid` whose first frame is the thread's name.
fn thread_stack(line: &str, pid: u32) -> Result<Stack> {
    let (stack, count) = line
        .rsplit_once(' ')
        .with_context(|| format!("not a collapsed stack: {line}"))?;
    let samples = count
        .parse()
        .with_context(|| format!("not a collapsed stack: {line}"))?;
    // Its Java frames name classes `java/lang/Thread`; stoke, `java.lang.Thread`.
    let mut frames: Vec<String> = stack
        .split(';')
        .map(|frame| match frame.rsplit_once("_[") {
            Some((method, _)) if !method.contains(' ') => frame.replace('/', "."),
            _ => frame.to_owned(),
        })
        .collect();
    if let Some(thread) = frames.first_mut() {
        let name = thread.trim_start_matches('[').trim_end_matches(']');
        *thread = name
            .rsplit_once(" tid=")
            .map_or(name, |(name, _)| name)
            .to_owned();
    }
    Ok(Stack {
        comm: "java".into(),
        pid,
        frames,
        samples,
    })
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
    fn thread_frames_become_thread_names() {
        let stack = thread_stack(
            "[fixed-work-1 tid=42];java/lang/Thread.run_[j];Work.step_[i];read_[k] 5",
            7,
        )
        .unwrap();
        assert_eq!(
            stack.frames,
            [
                "fixed-work-1",
                "java.lang.Thread.run_[j]",
                "Work.step_[i]",
                "read_[k]"
            ]
        );
        assert_eq!((stack.pid, stack.samples), (7, 5));
    }

    #[test]
    fn a_directory_without_a_build_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let error = AsyncProfiler::find(dir.path()).unwrap_err().to_string();
        assert!(error.contains("make") && error.contains("v4.5"), "{error}");
    }
}
