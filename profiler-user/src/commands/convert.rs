//! `stoke convert`: a folded file (from Stoke or any other tool that writes
//! collapsed stacks) or a pprof profile, written as any of Stoke's output
//! formats.

use anyhow::Result;

use crate::{cli::ConvertArgs, event::Event, read::read_profile, write::OutputPlan};

/// Converts as `args` says.
pub fn run(args: &ConvertArgs) -> Result<()> {
    // A folded file's counts are taken as CPU samples.
    let outputs = OutputPlan::new(&args.outputs, args.format, &[Event::Cpu])?;
    let mut profile = read_profile(&args.input)?;
    if let Some(filter) = args.view.frame_filter() {
        profile.filter_frames(filter);
    }
    let outputs = outputs.create()?;
    let written = outputs.names();
    outputs.write(std::slice::from_ref(&profile), &args.view.graph())?;
    eprintln!(
        "stoke: {} stacks, {} samples, written to {written}",
        profile.stacks.len(),
        profile.summary.samples
    );
    Ok(())
}
