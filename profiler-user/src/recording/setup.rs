//! What every command that samples does around a recording: its checks,
//! its signals, its announcement, its file limit.

use std::{
    sync::{atomic::AtomicBool, Arc},
    time::Duration,
};

use anyhow::{bail, Result};
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::{cli::SamplingArgs, event::Event, preflight};

/// The checks every command that samples makes before it starts.
pub fn check_sampling(args: &SamplingArgs) -> Result<()> {
    preflight::check_frequency(args.frequency)?;
    preflight::check_privileges()?;
    preflight::check_btf()?;
    preflight::check_pids(&args.pids)?;
    check_events(&args.events)
}

/// Refuses events that cannot be recorded together: run-queue time counts
/// the switches that off-CPU time, wall-clock time and Java locks count,
/// differently.
fn check_events(events: &[Event]) -> Result<()> {
    let waits = [Event::Offcpu, Event::Wall, Event::Lock];
    if events.contains(&Event::Runqueue) && events.iter().any(|event| waits.contains(event)) {
        bail!("-e runqueue cannot be recorded with offcpu, wall or lock: record it in a stoke of its own");
    }
    Ok(())
}

/// The flag SIGINT and SIGTERM raise; a second one ends stoke at once,
/// without output.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, stop.clone())?;
        signal_hook::flag::register(signal, stop.clone())?;
    }
    Ok(stop)
}

/// Says on stderr that sampling has begun, and what it covers.
pub fn announce(args: &SamplingArgs, duration: Option<Duration>, cpus: usize) {
    let scope = match args.pids.as_slice() {
        [] => "every process".to_owned(),
        pids => {
            let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("pids {}", pids.join(","))
        }
    };
    let until = match duration {
        Some(duration) => format!("for {:.1} s", duration.as_secs_f64()),
        None => "until Ctrl-C".to_owned(),
    };
    let rate = match args.period {
        Some(period) if has_counter(&args.events) => {
            format!("{} Hz (counters every {period} events)", args.frequency)
        }
        _ => format!("{} Hz", args.frequency),
    };
    eprintln!("stoke: sampling {scope} on {cpus} CPUs at {rate} {until}");
}

fn has_counter(events: &[Event]) -> bool {
    events
        .iter()
        .any(|event| matches!(event, Event::Counter(_)))
}

/// Every mapped file of every sampled process is held open until the end:
/// a busy host needs more descriptors than the usual soft limit.
pub fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
