//! `stoke`, a system-wide CPU profiler. The modules follow the data flow:
//! [`sample`] → [`process`] (who each sampled process is and what it maps)
//! → [`unwind`] (tables for the BPF unwinder, while sampling) →
//! [`aggregate`] (counting) → [`symbolize`] → [`aggregate`] (folding) →
//! [`write`](mod@write) or [`export`], with [`jvm`] joining at the sample and
//! symbolize stages. [`recording`] runs the stages; [`record`] (one
//! profile), [`continuous`] (a profile per interval) and [`report`] (an
//! incident sweep in one HTML file) are its commands; [`convert`] writes a
//! folded or pprof file in any output format, and [`diff`] compares two.

mod aggregate;
mod cli;
mod continuous;
mod convert;
mod diff;
mod event;
mod export;
mod heap;
mod jvm;
mod module_table;
mod preflight;
mod process;
mod profile;
mod progress;
mod read;
mod record;
mod recording;
mod report;
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
        Command::Record(args) => record::run(args),
        Command::Continuous(args) => continuous::run(args),
        Command::Report(args) => report::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Agent { output } => jvm::agent::write_agent(output),
        Command::Attach(args) => jvm::attach::subcommand::run(args),
        // Reports its own errors, one line per file.
        Command::Tables(args) => return unwind::inspect::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("stoke: error: {}", one_line(&format!("{error:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Errors from the kernel (a verifier log) can span lines: keep one.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
