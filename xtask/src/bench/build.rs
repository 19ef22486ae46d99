//! What the bench runs: stoke built from this tree, the C workloads, perf.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use super::Workloads;
use crate::{cargo, run};

/// Frame pointers everywhere, so both profilers unwind the workloads fully;
/// -O2 for the bench's own workloads, as shipped code is built.
const CFLAGS: &[&str] = &[
    "-O2",
    "-Wall",
    "-Wextra",
    "-g",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-pthread",
];

/// As shipped code is often built: no frame pointers, so only unwind tables
/// (or DWARF) get past a frame (the unwind part).
const NO_FP_CFLAGS: &[&str] = &[
    "-O2",
    "-Wall",
    "-Wextra",
    "-g",
    "-fomit-frame-pointer",
    "-pthread",
];

/// Builds stoke (release) and copies it to `bench_dir/stoke`: other work in
/// the same tree may rebuild target/release/stoke while the bench runs.
pub fn stoke(root: &Path, bench_dir: &Path) -> Result<PathBuf> {
    run(cargo().args(["build", "--release", "--package", "profiler-user"]))?;
    fs::create_dir_all(bench_dir)?;
    let copy = bench_dir.join("stoke");
    let _ = fs::remove_file(&copy);
    fs::copy(root.join("target/release/stoke"), &copy)
        .with_context(|| format!("copying stoke to {}", copy.display()))?;
    Ok(copy)
}

/// Compiles the workloads of `bench/workloads` into `bin_dir`, and the
/// 70:30 workload of the end-to-end tests (built with the tests' flags).
pub fn workloads(root: &Path, bin_dir: &Path) -> Result<Workloads> {
    fs::create_dir_all(bin_dir)?;
    let sources = root.join("bench/workloads");
    let bench_workload =
        |name: &str| compile(&sources.join(format!("{name}.c")), bin_dir, name, CFLAGS);
    Ok(Workloads {
        fixed_work: bench_workload("fixed_work")?,
        deep_recursion: bench_workload("deep_recursion")?,
        deep_recursion_no_fp: compile(
            &sources.join("deep_recursion.c"),
            bin_dir,
            "deep_recursion_no_fp",
            NO_FP_CFLAGS,
        )?,
        scale_host: bench_workload("scale_host")?,
        spawner: bench_workload("spawner")?,
        short_lived: bench_workload("short_lived")?,
        switch_storm: bench_workload("switch_storm")?,
        fault_storm: bench_workload("fault_storm")?,
        java_fixed_work: java_workload(&sources.join("FixedWork.java"), &bin_dir.join("java"))?,
        fp_split: compile(
            &root.join("tests/workloads/fp_split.c"),
            bin_dir,
            "fp_split",
            stoke_tests::FRAME_POINTER_FLAGS,
        )?,
        busy_other: compile(
            &root.join("tests/workloads/busy_other.c"),
            bin_dir,
            "busy_other",
            stoke_tests::FRAME_POINTER_FLAGS,
        )?,
    })
}

/// Compiles `source` with `flags`; its `#include "common.h"` finds the
/// helpers the bench's and the tests' workloads share in tests/workloads.
fn compile(source: &Path, bin_dir: &Path, name: &str, flags: &[&str]) -> Result<PathBuf> {
    let binary = bin_dir.join(name);
    run(Command::new("cc")
        .args(flags)
        .arg("-I")
        .arg(stoke_tests::workloads_dir())
        .arg("-o")
        .arg(&binary)
        .arg(source))
    .with_context(|| {
        format!(
            "compiling {} (cargo xtask setup installs gcc)",
            source.display()
        )
    })?;
    Ok(binary)
}

/// Compiles the Java workload into `class_dir` and returns that directory,
/// or `None` when this machine has no JDK (the Java rows are then left out,
/// and the report says why).
fn java_workload(source: &Path, class_dir: &Path) -> Result<Option<PathBuf>> {
    let have_jdk = ["java", "javac"].iter().all(|tool| {
        Command::new(tool)
            .arg("-version")
            .output()
            .is_ok_and(|output| output.status.success())
    });
    if !have_jdk {
        eprintln!("bench: no JDK (java and javac): the Java workload is left out");
        return Ok(None);
    }
    fs::create_dir_all(class_dir)?;
    run(Command::new("javac").arg("-d").arg(class_dir).arg(source))
        .with_context(|| format!("compiling {}", source.display()))?;
    Ok(Some(class_dir.to_owned()))
}

/// A command running the Java workload `FixedWork`, with `jvm_options`;
/// its arguments follow.
/// A fixed heap and the serial collector: no concurrent GC threads
/// competing with the workers for the CPUs, so less noise between runs.
pub fn java_command(class_dir: &Path, jvm_options: &[String]) -> Command {
    let mut command = Command::new("java");
    command
        .args(["-XX:+UseSerialGC", "-Xms256m", "-Xmx256m"])
        .args(jvm_options)
        .arg("-cp")
        .arg(class_dir)
        .arg("FixedWork");
    command
}

/// perf (Debian's linux-perf) must be there: the bench compares with it.
pub fn check_perf() -> Result<()> {
    let version = Command::new("perf").arg("--version").output();
    match version {
        Ok(output) if output.status.success() => Ok(()),
        _ => bail!(
            "perf is not installed: `cargo xtask setup` installs it (Debian package linux-perf)"
        ),
    }
}
