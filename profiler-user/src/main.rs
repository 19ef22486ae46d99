//! `stoke`, a system-wide CPU profiler. The modules follow the data flow:
//! [`sample`] → [`process`] (who each sampled process is and what it maps)
//! → [`unwind`] (tables for the BPF unwinder, while sampling) →
//! [`aggregate`] (counting) → [`symbolize`] → [`aggregate`] (folding) →
//! [`write`](mod@write) or [`export`], with [`jvm`] joining at the sample and
//! symbolize stages; [`elf`] reads the files processes map, for unwind and
//! symbolize. [`recording`] runs the stages; [`commands`] are the
//! subcommands: `record` (one profile), `continuous` (a profile per
//! interval) and `report` (an incident sweep in one HTML file) record;
//! `convert` writes a folded or pprof file in any output format, and `diff`
//! compares two.

mod aggregate;
mod cli;
mod commands;
mod duration;
mod elf;
mod event;
mod export;
mod heap;
mod interpreter;
mod jvm;
mod metrics;
mod model;
mod module_table;
mod preflight;
mod process;
mod procfs;
mod progress;
mod read;
mod recording;
mod rootfs;
mod sample;
mod symbolize;
mod unwind;
mod write;

#[cfg(test)]
mod fuzz;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| eprintln!("stoke: internal error: {info}")));
    heap::bound();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Record(args) => commands::record::run(args),
        Command::Continuous(args) => commands::continuous::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::Convert(args) => commands::convert::run(args),
        Command::Diff(args) => commands::diff::run(args),
        Command::Agent { output } => commands::agent::run(output),
        Command::Attach(args) => commands::attach::run(args),
        Command::List => commands::list::run(),
        // Reports its own errors, one line per file.
        Command::Tables(args) => return commands::tables::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("stoke: error: {}", message(&error));
            ExitCode::FAILURE
        }
    }
}

/// Errors from the kernel (a verifier log) can span lines: keep one.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The error and its causes on one line, each cause said once: an error
/// whose message already names its source (`cannot open X: {source}`) is
/// not followed by that source again.
fn message(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = one_line(&cause.to_string());
        if cause.is_empty() || text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

#[cfg(test)]
mod tests {
    use std::io;

    use anyhow::Context;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot create the agent's file in its /tmp: {source}")]
    struct NamesItsSource {
        source: io::Error,
    }

    #[test]
    fn each_cause_is_said_once() {
        let denied = || io::Error::from_raw_os_error(libc::EACCES);
        let error = anyhow::Error::new(NamesItsSource { source: denied() })
            .context("JVM 42: cannot attach");
        let text = message(&error);
        assert_eq!(text.matches("Permission denied").count(), 1, "{text}");
        assert!(
            text.starts_with("JVM 42: cannot attach: cannot create"),
            "{text}"
        );
        let error = Err::<(), _>(denied())
            .context("cannot write x.svg")
            .unwrap_err();
        assert_eq!(
            message(&error),
            "cannot write x.svg: Permission denied (os error 13)"
        );
    }

    #[test]
    fn a_kernel_log_becomes_one_line() {
        let error = anyhow::anyhow!("verifier said:\n0: r1 = 0\n\n1: exit");
        assert_eq!(message(&error), "verifier said: 0: r1 = 0 1: exit");
    }
}
