//! Builds the JVMTI agent (`agent/`, a cdylib) so that `stoke` can embed it:
//! one file to copy onto a host. Cargo cannot depend on a cdylib's file, so
//! this runs a nested cargo with its own target directory (sharing the outer
//! one would deadlock on its lock).

use std::{env, path::PathBuf, process::Command};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_owned();
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let target_dir = out.join("agent-target");
    for watched in ["agent/src", "agent/Cargo.toml", "profiler-common/src"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&workspace)
        .args([
            "build",
            "--release",
            "--package",
            "stoke-agent",
            "--target-dir",
        ])
        .arg(&target_dir)
        // The agent carries no debug info: it is loaded into other
        // processes, and only its size would grow.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("running cargo to build the JVM agent");
    if !status.success() {
        eprintln!("error: building the JVM agent (agent/) failed");
        std::process::exit(1);
    }
    let agent = target_dir.join("release/libstoke_agent.so");
    println!("cargo:rustc-env=STOKE_AGENT_PATH={}", agent.display());
}
