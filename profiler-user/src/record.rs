//! `stoke record`: one recording ([`Recording`]) from start to stop, its
//! profile written where `-o` says.

use std::time::Instant;

use anyhow::Result;

use crate::{
    cli::RecordArgs,
    recording::{announce, check_sampling, raise_open_file_limit, stop_on_signals, Recording},
    write::OutputPlan,
};

/// Records as `args` says and writes the profile.
pub fn run(args: &RecordArgs) -> Result<()> {
    let outputs = OutputPlan::new(&args.outputs, args.format)?;
    check_sampling(&args.sampling)?;
    // Opened now, so that a bad path fails before the recording, not after;
    // named only once written whole.
    let outputs = outputs.create()?;
    raise_open_file_limit();
    let stop = stop_on_signals()?;

    let mut recording = Recording::start(&args.sampling)?;
    announce(&args.sampling, args.duration, recording.cpus());
    let until = args.duration.map(|duration| Instant::now() + duration);
    recording.sample_until(&stop, until, Some(args.duration))?;
    let (mut profile, java_events) = recording.finish_with_java_events()?;
    // Until `-e`: the hidden `--java-event` writes that event's profile.
    if let Some((_, events)) = java_events.into_iter().next() {
        profile = events;
    }

    let written = outputs.names();
    outputs.write(&profile)?;
    eprintln!(
        "stoke: {} samples from {} processes in {:.1} s ({} lost), written to {}",
        profile.summary.samples,
        profile.summary.processes,
        profile.summary.duration.as_secs_f64(),
        profile.summary.lost(),
        written
    );
    Ok(())
}
