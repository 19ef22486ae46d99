//! `stoke attach`: one attach command run against a JVM, as jattach runs
//! it, but through the code a recording attaches with (pidfd, namespaces,
//! the JVM's credentials, stale sockets), so that a user can check what a
//! recording would meet, and the end-to-end tests can drive it.

use std::{
    io::{self, Write},
    path::Path,
};

use anyhow::{Context, Result};

use crate::{
    cli::AttachArgs,
    jvm::attach::{execute_judged, install_agent, JvmTarget},
};

/// Runs the command (or installs the file) and prints the JVM's answer (or
/// the installed file's path) on stdout.
pub fn run(args: &AttachArgs) -> Result<()> {
    let target = JvmTarget::inspect(args.pid)?;
    let output = match &args.install {
        Some(file) => install(&target, file)? + "\n",
        None => {
            let command_args: Vec<&str> = args.args.iter().map(String::as_str).collect();
            execute_judged(&target, &args.command, &command_args, args.timeout)?
        }
    };
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(output.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the JVM's answer to stdout")
}

/// Copies `file` into the JVM's `/tmp` under its own name, or another if
/// that is taken; returns the path the JVM sees.
fn install(target: &JvmTarget, file: &Path) -> Result<String> {
    let name = file
        .file_name()
        .and_then(|name| name.to_str())
        .with_context(|| format!("{} has no file name in UTF-8", file.display()))?;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    Ok(install_agent(target, name, &bytes)?)
}
