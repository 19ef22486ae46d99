//! The kernel matrix (`cargo xtask test --kernels`): Debian's own kernels,
//! fetched with `apt-get download`, booted under qemu's software emulation
//! by virtme-ng with the host's root shared read-only, each running the
//! smoke suite (kernels/smoke.sh) into a read-write share whose results
//! are checked here.

mod checks;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::{run, workspace_root};

/// A kernel of the matrix: Debian's `linux-image-amd64` of a suite.
pub struct Kernel {
    pub name: &'static str,
    pub suite: &'static str,
}

/// The kernels every change is tested on: the oldest Stoke supports and
/// the LTS kernels fleets run.
pub const KERNELS: &[Kernel] = &[
    Kernel {
        name: "5.10",
        suite: "bullseye",
    },
    Kernel {
        name: "6.1",
        suite: "bookworm",
    },
    Kernel {
        name: "6.12",
        suite: "bookworm-backports",
    },
];

/// Checks known to fail on a kernel, with why: reported loudly as
/// expected failures, not failing the matrix. Each is a gap to close.
const EXPECTED_FAILURES: &[(&str, &str, &str)] = &[
    (
        "5.10",
        "offcpu",
        "no bpf_loop (5.17) nor task storage (5.11): off-CPU time refused",
    ),
    (
        "5.10",
        "runqueue",
        "no bpf_loop (5.17) nor task storage (5.11): run-queue time refused",
    ),
    (
        "5.10",
        "wall",
        "no bpf_loop (5.17) nor task storage (5.11): wall-clock time refused",
    ),
];

/// Packages the matrix needs: qemu from bookworm-backports, whose version
/// matches the qemu-utils Debian bookworm machines carry.
pub const PACKAGES: &[&str] = &["busybox-static", "kmod"];
pub const BACKPORTS_PACKAGES: &[&str] = &["qemu-system-x86"];

/// The apt source file `cargo xtask setup` writes the kernels' suites to.
const SOURCES: &str = "/etc/apt/sources.list.d/stoke-kernels.list";

/// Where fetched kernels are kept between runs.
fn cache_dir() -> PathBuf {
    std::env::var_os("STOKE_KERNEL_CACHE")
        .map_or_else(|| PathBuf::from("/var/cache/stoke-kernels"), PathBuf::from)
}

/// Adds the apt sources of the suites no source lists yet (the kernels'
/// and bookworm-backports' for qemu); true if it wrote any.
pub fn add_sources() -> Result<bool> {
    let mut listed = String::new();
    for path in std::iter::once(PathBuf::from("/etc/apt/sources.list")).chain(
        std::fs::read_dir("/etc/apt/sources.list.d")
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.as_path() != Path::new(SOURCES)),
    ) {
        listed.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        listed.push('\n');
    }
    let missing: Vec<&str> = KERNELS
        .iter()
        .map(|kernel| kernel.suite)
        .filter(|suite| !suite_listed(&listed, suite))
        .collect();
    if missing.is_empty() {
        return Ok(false);
    }
    let text: String = missing
        .iter()
        .map(|suite| format!("deb http://deb.debian.org/debian {suite} main\n"))
        .collect();
    std::fs::write(SOURCES, text).with_context(|| format!("writing {SOURCES}"))?;
    Ok(true)
}

/// Whether apt source text (one-line or deb822) lists `suite` itself.
fn suite_listed(sources: &str, suite: &str) -> bool {
    sources
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .any(|word| word == suite)
}

/// Installs virtme-ng, which boots a kernel with the host's root.
pub fn install_virtme() -> Result<()> {
    if crate::which("vng").is_some() {
        return Ok(());
    }
    run(Command::new("pip").args(["install", "-q", "virtme-ng"]))
}

/// The kernel image of `kernel`, fetched and unpacked into the cache if
/// it is not there yet.
fn fetch(kernel: &Kernel) -> Result<PathBuf> {
    let output = Command::new("apt-cache")
        .args(["show", &format!("linux-image-amd64/{}", kernel.suite)])
        .output()
        .context("running apt-cache")?;
    let text = String::from_utf8_lossy(&output.stdout);
    // `Depends: linux-image-5.10.0-32-amd64 (= 5.10.223-1)`
    let depends = text
        .lines()
        .find_map(|line| line.strip_prefix("Depends: "))
        .with_context(|| {
            format!(
                "apt knows no linux-image-amd64 in {}: run `cargo xtask setup`",
                kernel.suite
            )
        })?;
    let mut words = depends.split_whitespace();
    let (Some(package), Some("(="), Some(version)) = (words.next(), words.next(), words.next())
    else {
        bail!(
            "unexpected Depends of linux-image-amd64/{}: {depends}",
            kernel.suite
        );
    };
    let version = version.trim_end_matches(')');
    let dir = cache_dir().join(format!("{package}_{version}"));
    let release = package.trim_start_matches("linux-image-");
    let image = dir.join(format!("boot/vmlinuz-{release}"));
    if image.is_file() {
        return Ok(image);
    }
    let partial = cache_dir().join(format!("{package}.partial"));
    let _ = std::fs::remove_dir_all(&partial);
    crate::debs::extract(
        &|| Command::new("apt-get"),
        &[&format!("{package}={version}")],
        &partial,
    )?;
    std::fs::rename(&partial, &dir)?;
    Ok(image)
}

/// Builds what the guests run: stoke, and the workloads in `work`.
fn build(work: &Path) -> Result<()> {
    run(crate::cargo().args(["build", "--release", "--package", "profiler-user"]))?;
    std::fs::create_dir_all(work)?;
    let workloads = workspace_root().join("tests/workloads");
    let bench = workspace_root().join("bench/workloads");
    let (no_fp, fp) = (
        &["-O2", "-fomit-frame-pointer"][..],
        &["-O2", "-fno-omit-frame-pointer"][..],
    );
    for (dir, name, flags) in [
        // Unwound by tables alone: no frame pointers.
        (&workloads, "fp_split", no_fp),
        (&workloads, "read_loop", fp),
        (&workloads, "page_faults", fp),
        // A hundred frames without frame pointers: the legacy unwinder's
        // chain of programs.
        (&bench, "deep_recursion", no_fp),
    ] {
        run(Command::new("cc")
            .args(flags)
            .args(["-pthread", "-I"])
            .arg(&workloads)
            .arg("-o")
            .arg(work.join(name))
            .arg(dir.join(format!("{name}.c"))))?;
    }
    let java = workloads.join("java");
    run(
        Command::new(Path::new(stoke_tests::JDK_17.home).join("bin/javac"))
            .arg("-d")
            .arg(work)
            .arg(java.join("JavaSplit.java"))
            .arg(java.join("Support.java")),
    )
}

/// Longest a guest may run: a boot and the suite take 1.5-2 min under
/// software emulation.
const GUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Boots `image` and runs the smoke suite into `out`.
fn boot(image: &Path, out: &Path, work: &Path) -> Result<()> {
    let script = out.join("smoke.sh");
    std::fs::write(&script, include_str!("kernels/smoke.sh"))?;
    let stoke = workspace_root().join("target/release/stoke");
    let command = format!(
        "sh {} {} {} {} {} {}",
        script.display(),
        out.display(),
        stoke.display(),
        work.display(),
        stoke_tests::JDK_17.home,
        stoke_tests::workloads_dir()
            .join("python/split.py")
            .display()
    );
    let log = std::fs::File::create(out.join("vng.log"))?;
    let status = Command::new("timeout")
        .arg(GUEST_TIMEOUT.as_secs().to_string())
        .args([
            "vng",
            "--disable-kvm",
            "--cpus",
            "1",
            "--memory",
            "2G",
            "--run",
        ])
        .arg(image)
        .arg("--rwdir")
        .arg(out)
        .args(["--exec", &command])
        .current_dir(out)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .context("running vng (`cargo xtask setup` installs virtme-ng)")?;
    if !out.join("done").is_file() {
        bail!(
            "the guest did not finish its smoke suite ({status}); see {}",
            out.join("vng.log").display()
        );
    }
    Ok(())
}

/// Runs the matrix: every kernel whose name contains `filter`.
pub fn test(filter: Option<&str>) -> Result<()> {
    let root = workspace_root().join("target/kernels");
    let work = root.join("work");
    build(&work)?;
    let mut failed = Vec::new();
    for kernel in KERNELS
        .iter()
        .filter(|kernel| filter.is_none_or(|filter| kernel.name.contains(filter)))
    {
        let image = fetch(kernel)?;
        let out = root.join(kernel.name);
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out)?;
        let start = Instant::now();
        let booted = boot(&image, &out, &work);
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "== kernel {} ({}): {seconds:.0} s",
            kernel.name,
            image.display()
        );
        if let Err(error) = booted {
            println!("FAIL {error:#}");
            failed.push(format!("{}: boot", kernel.name));
            continue;
        }
        for result in checks::all(&out) {
            println!("{result}");
            let expected = EXPECTED_FAILURES
                .iter()
                .find(|(name, check, _)| *name == kernel.name && *check == result.name);
            match (result.passed(), expected) {
                (false, Some((_, _, why))) => {
                    println!("  ^^^^ EXPECTED FAILURE on {}: {why}", kernel.name);
                }
                (false, None) => failed.push(format!("{}: {}", kernel.name, result.name)),
                (true, Some(_)) => println!(
                    "  ^^^^ passes now: take it out of EXPECTED_FAILURES (xtask/src/kernels.rs)"
                ),
                (true, None) => {}
            }
        }
    }
    if !failed.is_empty() {
        bail!("kernel matrix failures: {}", failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suite_is_listed_only_by_its_own_name() {
        let sources = "deb http://deb.debian.org/debian bookworm main\n\
                       Suites: bookworm bookworm-updates\n\
                       # deb http://deb.debian.org/debian bullseye main\n";
        assert!(suite_listed(sources, "bookworm"));
        assert!(!suite_listed(sources, "bookworm-backports"));
        assert!(!suite_listed(sources, "bullseye"));
    }
}
