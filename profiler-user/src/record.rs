//! `stoke record`: one recording ([`Recording`]) from start to stop, its
//! profile written where `-o` says.

use std::time::Instant;

use anyhow::Result;

use crate::{
    cli::RecordArgs,
    event::Event,
    profile::RecordingSummary,
    recording::{announce, check_sampling, raise_open_file_limit, stop_on_signals, Recording},
    write::OutputPlan,
};

/// Records as `args` says and writes the profile.
pub fn run(args: &RecordArgs) -> Result<()> {
    let outputs = OutputPlan::new(&args.outputs, args.format, &args.sampling.events)?;
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
    let profiles = recording.finish()?;

    let written = outputs.names();
    outputs.write(&profiles)?;
    match profiles.as_slice() {
        [profile] => eprintln!("stoke: {}, written to {written}", counted(&profile.summary)),
        profiles => {
            for profile in profiles {
                eprintln!(
                    "stoke: {}: {}",
                    profile.summary.event,
                    counted(&profile.summary)
                );
            }
            eprintln!("stoke: written to {written}");
        }
    }
    Ok(())
}

/// What a profile counted, in one line: `412 samples from 3 processes in
/// 2.0 s (0 lost)`, or for offcpu `1.234 s off-CPU in 810 events from ...`.
fn counted(summary: &RecordingSummary) -> String {
    let what = match summary.event {
        Event::Cpu => format!("{} samples", summary.samples),
        Event::Offcpu => format!(
            "{:.3} s off-CPU in {} events ({} dropped over budget)",
            summary.total as f64 / 1e9,
            summary.samples,
            summary.dropped_events
        ),
        event => format!(
            "{} {} in {} {event} events",
            summary.total,
            event.unit(),
            summary.samples
        ),
    };
    format!(
        "{what} from {} processes in {:.1} s ({} lost)",
        summary.processes,
        summary.duration.as_secs_f64(),
        summary.lost()
    )
}
