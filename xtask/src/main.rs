//! Developer tasks: `cargo xtask <task>`. See `cargo xtask --help`.

mod bench;
mod codegen;
mod debs;
mod fuzz;
mod jdk11;
mod kernels;
mod python313;

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
    // perf and bcc's offcputime (as libbpf-tools builds it), which
    // `cargo xtask bench` measures stoke against.
    "linux-perf",
    "libbpf-tools",
    // javac and a JDK for the Java tests and bench workloads.
    "openjdk-17-jdk-headless",
    // libc's own symbol names (start_thread, __libc_start_call_main...).
    "libc6-dbg",
    // Container engines for the container tests (tests/tests/containers.rs):
    // dockerd and its client, and podman.
    "docker.io",
    "podman",
    // `go tool pprof`, which the pprof output's tests read it with.
    "golang-go",
    // A headless browser and its WebDriver, for the HTML flame graph's
    // tests (tests/tests/html.rs).
    "chromium",
    "chromium-driver",
    // Prometheus, which scrapes `--metrics-addr` in tests/tests/metrics.rs.
    "prometheus",
    // A debugger's ptrace for tests/tests/java_thread_timers.rs.
    "strace",
    // Node.js, whose JIT writes perf maps (tests/tests/jit_perf_map.rs).
    "nodejs",
    // Debian's CPython, static (tests/tests/python.rs).
    "python3.11",
];

/// PyPI packages the tests use, installed apart from the system's Python
/// under [`stoke_tests::PYTHON_PATH`].
const PYTHON_PACKAGES: &[&str] = &[
    // OpenTelemetry's own decoder of OTLP profiles (tests/tests/otlp.rs).
    "opentelemetry-proto==1.45.2",
    // py-spy, which Python frames are compared with (tests/tests/python.rs).
    "py-spy==0.4.3",
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
    /// Regenerate profiler-common/include/stoke_abi.h from the Rust types and
    /// the pprof writer's types from profile.proto.
    Codegen,
    /// Regenerate agent/src/jvmti_sys.rs from JDK 17's jvmti.h (bindgen-cli).
    JvmtiBindings,
    /// Check formatting and lints as CI does.
    Lint,
    /// Build stoke and run every test, the privileged ones included (as root).
    Test {
        /// Instead, boot Debian's kernels (5.10, 6.1, 6.12) under qemu and
        /// run the kernel smoke suite in each; a trailing argument picks
        /// the kernels whose name contains it.
        #[arg(long)]
        kernels: bool,
        /// Extra arguments for `cargo test`, e.g. a test name filter.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cargo_args: Vec<String>,
    },
    /// Fuzz the parsers of untrusted input (profiler-user/src/fuzz) for a
    /// budget of seconds per target, each in a process of its own.
    Fuzz(fuzz::FuzzArgs),
    /// Measure stoke's overhead, cost, accuracy and scale side by side with
    /// perf, and write bench/RESULTS.md (as root; see bench/README.md).
    Bench(Box<bench::BenchArgs>),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup(),
        Task::Vmlinux => vmlinux(),
        Task::Codegen => codegen::write(),
        Task::JvmtiBindings => jvmti_bindings(),
        Task::Lint => lint(),
        Task::Test {
            kernels: true,
            cargo_args,
        } => kernels::test(cargo_args.first().map(String::as_str)),
        Task::Test {
            kernels: false,
            cargo_args,
        } => test(&cargo_args),
        Task::Fuzz(args) => fuzz::run(&args),
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
    kernels::add_sources()?;
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(PACKAGES)
        .args(kernels::PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(["-t", "bookworm-backports"])
        .args(kernels::BACKPORTS_PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    run(Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--upgrade", "--target"])
        .arg(stoke_tests::PYTHON_PATH)
        .args(PYTHON_PACKAGES)
        .env("PIP_ROOT_USER_ACTION", "ignore"))?;
    kernels::install_virtme()?;
    python313::install()?;
    // From bullseye, whose source the kernels' added.
    jdk11::install()
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

/// What precedes bindgen's output in agent/src/jvmti_sys.rs.
const JVMTI_BINDINGS_HEADER: &str = "\
//! JVMTI and JNI bindings, generated by bindgen from JDK 17's `jvmti.h` (`cargo xtask
//! jvmti-bindings` regenerates them). Not edited by hand.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all
)]

";

fn jvmti_bindings() -> Result<()> {
    let bindgen = which("bindgen")
        .or_else(|| {
            let installed = Path::new(&std::env::var_os("HOME")?).join(".cargo/bin/bindgen");
            installed.is_file().then_some(installed)
        })
        .context("bindgen is not installed: `cargo install bindgen-cli`")?;
    // The agent's bindings come from JDK 17's headers.
    let include = Path::new(stoke_tests::JDK_17.home).join("include");
    let header = include.join("jvmti.h");
    if !header.is_file() {
        bail!(
            "{} not found: `cargo xtask setup` installs JDK 17 (openjdk-17-jdk-headless)",
            header.display()
        );
    }
    // The JNI and JVMTI types (`j...`, `J...`) and constants, and what they
    // use: not the C library that jni.h includes. jvmticmlr.h adds the
    // records CompiledMethodLoad passes (its inlining: `PCStackInfo`).
    let output = Command::new(&bindgen)
        .arg(&header)
        .args([
            "--use-core",
            "--no-layout-tests",
            "--allowlist-type",
            "j.*|J.*|PCStackInfo",
            "--allowlist-var",
            "JNI_.*|JVMTI_.*",
            "--",
            "-include",
            "jvmti.h",
            "-include",
            "jvmticmlr.h",
        ])
        .arg(format!("-I{}", include.display()))
        .arg(format!("-I{}", include.join("linux").display()))
        .output()
        .with_context(|| format!("running {}", bindgen.display()))?;
    if !output.status.success() {
        bail!(
            "bindgen failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let target = workspace_root().join("agent/src/jvmti_sys.rs");
    let mut text = JVMTI_BINDINGS_HEADER.as_bytes().to_vec();
    text.extend_from_slice(&output.stdout);
    std::fs::write(&target, text).with_context(|| format!("writing {}", target.display()))?;
    println!("wrote {}", target.display());
    Ok(())
}

/// `name`'s path in a directory of PATH, if it is there.
fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

fn lint() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--check"]))?;
    codegen::check()?;
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
