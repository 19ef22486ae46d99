//! `stoke diff`: how a profile changed from BEFORE to AFTER, normalized by
//! their totals, as a differential flame graph page or as folded text with
//! both counts.

use std::{
    io::{BufWriter, Write},
    path::Path,
};

use anyhow::{bail, Result};

use crate::{
    aggregate::diff::diff,
    cli::DiffArgs,
    event::Event,
    read::read_profile,
    write::{write_diff_folded, write_diff_html, Format, OutputPlan},
};

/// Compares as `args` says.
pub fn run(args: &DiffArgs) -> Result<()> {
    let format = args.format.map(Format::from);
    let outputs = OutputPlan::new(&args.outputs, format, &[Event::Cpu])?;
    if let Some(format) = outputs
        .formats()
        .find(|format| !matches!(format, Format::Html | Format::Folded))
    {
        bail!(
            "stoke diff writes .html or .folded, not {}: name the output FILE.html or FILE.folded",
            format!("{format:?}").to_lowercase()
        );
    }
    let stdin = Path::new("-");
    if args.before == stdin && args.after == stdin {
        bail!("BEFORE and AFTER cannot both be standard input (-): give one of them as a file");
    }
    let before = read_profile(&args.before)?;
    let after = read_profile(&args.after)?;
    let diff = diff(
        &before,
        &after,
        args.before.display().to_string(),
        args.after.display().to_string(),
    );
    let outputs = outputs.create()?;
    let written = outputs.names();
    outputs.write_with(|format, _, out| {
        let mut out = BufWriter::new(out);
        match format {
            Format::Html => write_diff_html(&diff, &mut out)?,
            _ => write_diff_folded(&diff, &mut out)?,
        }
        out.flush()?;
        Ok(())
    })?;
    eprintln!(
        "stoke: {} stacks, {} samples before, {} after, written to {written}",
        diff.stacks.len(),
        diff.before_samples,
        diff.after_samples
    );
    Ok(())
}
