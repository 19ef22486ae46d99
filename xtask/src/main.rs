//! Developer tasks: `cargo xtask <task>`. See `cargo xtask --help`.

mod bench;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

/// Debian packages that building and testing Stoke need.
const PACKAGES: &[&str] = &[
    "clang-19",
    "llvm-19",
    "libbpf-dev",
    "bpftool",
    "gcc",
    "util-linux",
    // perf, which `cargo xtask bench` measures stoke against.
    "linux-perf",
    // javac and a JDK for the Java tests and bench workloads.
    "openjdk-17-jdk-headless",
    // libc's own symbol names (start_thread, __libc_start_call_main...).
    "libc6-dbg",
];

#[derive(Parser)]
#[command(about = "Stoke's development tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing need (Debian packages; as root).
    Setup,
    /// Regenerate profiler-ebpf's vmlinux.h from this kernel's BTF.
    Vmlinux,
    /// Check formatting and lints as CI does.
    Lint,
    /// Build stoke and run every test, the privileged ones included (as root).
    Test {
        /// Extra arguments for `cargo test`, e.g. a test name filter.
        #[arg(trailing_var_arg = true)]
        cargo_args: Vec<String>,
    },
    /// Measure stoke's overhead, cost, accuracy and scale side by side with
    /// perf, and write bench/RESULTS.md (as root; see bench/README.md).
    Bench(bench::BenchArgs),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup(),
        Task::Vmlinux => vmlinux(),
        Task::Lint => lint(),
        Task::Test { cargo_args } => test(&cargo_args),
        Task::Bench(args) => bench::run(&args),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed with {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(workspace_root());
    command
}

fn setup() -> Result<()> {
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn vmlinux() -> Result<()> {
    let output = Command::new("bpftool")
        .args([
            "btf",
            "dump",
            "file",
            "/sys/kernel/btf/vmlinux",
            "format",
            "c",
        ])
        .output()
        .context("running bpftool (cargo xtask setup installs it)")?;
    if !output.status.success() {
        bail!(
            "bpftool failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let target = workspace_root().join("profiler-ebpf/src/bpf/vmlinux.h");
    std::fs::write(&target, output.stdout)
        .with_context(|| format!("writing {}", target.display()))?;
    println!("wrote {}", target.display());
    Ok(())
}

fn lint() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
}

fn test(cargo_args: &[String]) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the end-to-end tests load BPF programs: run `cargo xtask test` as root");
    }
    run(cargo().args(["build", "--release", "--package", "profiler-user"]))?;
    let stoke = workspace_root().join("target/release/stoke");
    // Recordings measure CPU splits: tests run one at a time so that they
    // do not take each other's CPU.
    run(cargo()
        .args(["test", "--release", "--workspace"])
        .args(cargo_args)
        .args(["--", "--test-threads=1"])
        .env("STOKE_BIN", stoke))
}
