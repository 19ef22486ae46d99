//! `stoke record`: one recording ([`Recording`]) from start to stop, its
//! profile written where `-o` says.

use std::{collections::HashSet, time::Instant};

use anyhow::Result;

use crate::{
    cli::RecordArgs,
    event::{self, Event},
    model::Profile,
    recording::{announce, check_sampling, raise_open_file_limit, stop_on_signals, Recording},
    write::OutputPlan,
};

/// Records as `args` says and writes the profile.
pub fn run(args: &RecordArgs) -> Result<()> {
    check_sampling(&args.sampling)?;
    let events = event::distinct(&args.sampling.events);
    let outputs = OutputPlan::new(&args.outputs, args.format, &events)?;
    // Opened now, so that a bad path fails before the recording, not after;
    // named only once written whole.
    let outputs = outputs.create()?;
    raise_open_file_limit();
    let stop = stop_on_signals()?;

    let mut recording = Recording::start(&args.sampling)?;
    announce(&args.sampling, args.duration, recording.cpus());
    let until = args.duration.map(|duration| Instant::now() + duration);
    recording.sample_until(&stop, until, Some(args.duration))?;
    let mut profiles = recording.finish()?;
    if let Some(filter) = args.view.frame_filter() {
        profiles
            .iter_mut()
            .for_each(|profile| profile.filter_frames(filter));
    }

    let written = outputs.names();
    outputs.write(&profiles, &args.view.graph())?;
    match profiles.as_slice() {
        [profile] => eprintln!("stoke: {}, written to {written}", headline(profile)),
        profiles => {
            for profile in profiles {
                eprintln!("stoke: {}", headline(profile));
            }
            eprintln!("stoke: written to {written}");
        }
    }
    for why in why_no_java_events(&profiles, args) {
        eprintln!("stoke: {why}");
    }
    Ok(())
}

/// Why Java event profiles came out empty, if any did: the profile alone
/// cannot tell a quiet JVM from none at all. One line for all of them when
/// there was no JVM, else one line each.
fn why_no_java_events(profiles: &[Profile], args: &RecordArgs) -> Vec<String> {
    let empty: Vec<&Profile> = profiles
        .iter()
        .filter(|profile| matches!(profile.event, Event::Alloc | Event::Lock))
        .filter(|profile| profile.stacks.iter().all(|stack| stack.samples == 0))
        .collect();
    let Some(first) = empty.first() else {
        return Vec::new();
    };
    let jvms = first.summary.java.jvms;
    if jvms == 0 {
        let events: Vec<&str> = empty.iter().map(|profile| profile.event.name()).collect();
        return vec![format!(
            "{}: no JVM was profiled: stoke attaches to the JVMs it samples on a CPU while it \
             records (HotSpot; JDK 11 or later for alloc); -p PID takes an idle one",
            events.join(", ")
        )];
    }
    empty
        .iter()
        .map(|profile| {
            let what = match profile.event {
                Event::Lock => format!(
                    "no thread waited on a Java lock for {} ns or more (--lock-threshold)",
                    args.sampling.lock_threshold
                ),
                _ => format!(
                    "no allocation reached a sample (one every {} bytes on average, \
                     --alloc-interval)",
                    args.sampling.alloc_interval
                ),
            };
            format!(
                "{}: {jvms} JVM(s) profiled, but {what}",
                profile.event.name()
            )
        })
        .collect()
}

/// What a profile holds, in a line.
fn headline(profile: &Profile) -> String {
    let summary = &profile.summary;
    let (what, processes) = if profile.event == Event::Cpu {
        (format!("{} samples", summary.samples), summary.processes)
    } else {
        // The processes this event's stacks came from (the JVMs, for Java
        // events), not every process sampled.
        let total: u64 = profile.stacks.iter().map(|stack| stack.samples).sum();
        let pids: HashSet<&str> = profile
            .stacks
            .iter()
            .filter_map(|stack| {
                let (_, pid) = stack.labels.iter().find(|(key, _)| *key == "pid")?;
                Some(&**pid)
            })
            .collect();
        let what = format!("{}: {total} {}", profile.event.name(), profile.event.unit());
        (what, pids.len())
    };
    format!(
        "{what} from {processes} processes in {:.1} s ({} lost)",
        summary.duration.as_secs_f64(),
        summary.lost()
    )
}
