//! `stoke report`: an incident sweep of the host in one HTML file to pass
//! around: what the host is, CPU by container (and how often each one's CPU
//! quota throttled it) and by process (JVMs marked with their agent's
//! status), the whole-host flame graph, the hottest
//! functions, how complete the stacks were, and, given a baseline, what
//! changed. The same headline is printed on the terminal.

mod baseline;
mod page;
mod sweep;

use std::{collections::HashMap, io::Write, path::PathBuf, sync::Arc, time::Instant};

use anyhow::{bail, Context, Result};

use self::{baseline::Baseline, sweep::Sweep};
use crate::{
    cli::ReportArgs,
    event::Event,
    model::{Profile, RecordingSummary},
    process::{
        cpu_quota::{self, Throttling},
        identity::host_name,
    },
    procfs,
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
    let quotas_before = cpu_quota::snapshot(procfs::pids(MAX_PROCESSES));

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
    let mut sweep = Sweep::of(profile);
    add_throttling(&mut sweep, &quotas_before);
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

/// Most processes whose cgroups the report looks at.
const MAX_PROCESSES: usize = 65_536;

/// Each container's CPU quota's periods and throttled ones since
/// `before` (all of them for a cgroup that came after).
fn add_throttling(sweep: &mut Sweep, before: &HashMap<PathBuf, Throttling>) {
    for row in &mut sweep.containers {
        if row.id.is_empty() {
            continue;
        }
        row.throttling = cpu_quota::cpu_stat_path(row.pid).and_then(|path| {
            let now = cpu_quota::read(&path)?;
            Some(now.since(before.get(&path).copied().unwrap_or_default()))
        });
    }
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
    let throttled: Vec<String> = sweep
        .containers
        .iter()
        .filter_map(|row| {
            let share = row.throttling?.share().filter(|&share| share > 0.0)?;
            Some(format!("{} in {:.0}% of periods", row.name, share * 100.0))
        })
        .collect();
    if !throttled.is_empty() {
        eprintln!("stoke: throttled by their CPU quota: {}", top(throttled));
    }
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
