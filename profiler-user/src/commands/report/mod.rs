//! `stoke report`: an incident sweep of the host in one HTML file to pass
//! around: what the host is, CPU by container and by process (JVMs marked
//! with their agent's status), the whole-host flame graph, the hottest
//! functions, how complete the stacks were, and, given a baseline, what
//! changed. The same headline is printed on the terminal.

mod baseline;
mod page;
mod sweep;

use std::{io::Write, sync::Arc, time::Instant};

use anyhow::{bail, Context, Result};

use self::{baseline::Baseline, sweep::Sweep};
use crate::{
    cli::ReportArgs,
    event::Event,
    process::{identity::host_name, procfs},
    profile::{Profile, RecordingSummary},
    recording::{announce, check_sampling, raise_open_file_limit, stop_on_signals, Recording},
    write::{write_profile, Format, OutputFile},
};

/// What the report says of the host and the recording.
pub struct Facts {
    pub host: Arc<str>,
    pub kernel: String,
    pub summary: RecordingSummary,
}

/// Records as `args` says and writes the report.
pub fn run(args: &ReportArgs) -> Result<()> {
    // A bad baseline or output path fails now, not after the recording.
    let baseline = args.baseline.as_deref().map(Baseline::read).transpose()?;
    let mut output = OutputFile::create(&args.output, 0o644)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    check_sampling(&args.sampling)?;
    if !args.sampling.events.contains(&Event::Cpu) {
        bail!("stoke report's tables count CPU samples: give -e cpu among the events");
    }
    raise_open_file_limit();
    let stop = stop_on_signals()?;

    let mut recording = Recording::start(&args.sampling)?;
    announce(&args.sampling, Some(args.duration), recording.cpus());
    recording.sample_until(
        &stop,
        Some(Instant::now() + args.duration),
        Some(Some(args.duration)),
    )?;
    let profiles = recording.finish()?;
    let profile = profiles
        .iter()
        .find(|profile| profile.event == Event::Cpu)
        .context("the recording gave no CPU profile")?;

    let facts = Facts {
        host: host_name(),
        kernel: procfs::kernel_release().unwrap_or_else(|| "unknown".into()),
        summary: profile.summary.clone(),
    };
    let sweep = Sweep::of(profile);
    let changes = baseline
        .as_ref()
        .map(|baseline| anyhow::Ok((baseline.changes(profile), baseline.flame_graph(profile)?)))
        .transpose()?;
    let flame_graphs = profiles
        .iter()
        .map(|profile| Ok((profile.event, flame_graph(profile)?)))
        .collect::<Result<Vec<_>>>()?;
    let html = page::render(&facts, &sweep, changes.as_ref(), &flame_graphs);
    output.file().write_all(html.as_bytes())?;
    output
        .commit()
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    print_headline(&facts, &sweep);
    eprintln!("stoke: report written to {}", args.output.display());
    Ok(())
}

/// A whole-host flame graph, Stoke's HTML page (search, zoom, transforms),
/// as the report embeds it.
fn flame_graph(profile: &Profile) -> Result<String> {
    let mut html = Vec::new();
    write_profile(profile, Format::Html, &Default::default(), &mut html)?;
    Ok(String::from_utf8_lossy(&html).into_owned())
}

/// The report's headline figures, on the terminal.
fn print_headline(facts: &Facts, sweep: &Sweep) {
    let summary = &facts.summary;
    eprintln!(
        "stoke: {} (kernel {}, {} CPUs): {} samples in {:.1} s ({} lost), {} processes",
        facts.host,
        facts.kernel,
        summary.cpus,
        summary.samples,
        summary.duration.as_secs_f64(),
        summary.lost(),
        summary.processes
    );
    let top = |items: Vec<String>| items.into_iter().take(5).collect::<Vec<_>>().join(", ");
    let percent = |samples: u64| format!("{:.1}%", sweep.share(samples) * 100.0);
    eprintln!(
        "stoke: by container: {}",
        top(sweep
            .containers
            .iter()
            .map(|row| format!("{} {}", row.name, percent(row.samples)))
            .collect())
    );
    eprintln!(
        "stoke: by process: {}",
        top(sweep
            .processes
            .iter()
            .map(|row| format!("{} [{}] {}", row.comm, row.pid, percent(row.samples)))
            .collect())
    );
    eprintln!(
        "stoke: hottest functions (self): {}",
        top(sweep
            .functions
            .iter()
            .map(|row| format!("{} {}", row.name, percent(row.self_samples)))
            .collect())
    );
}
