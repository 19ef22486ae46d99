//! `stoke list`: the events `-e` takes, and whether this host has each.

use anyhow::{anyhow, Result};

use crate::{
    event::{Counter, Event},
    sample::counter_events::{self, Unavailable},
};

/// Prints each event with what it counts; a counter this host cannot
/// sample says why.
pub fn run() -> Result<()> {
    let cpu = aya::util::online_cpus()
        .map_err(|(path, error)| anyhow!("reading {path}: {error}"))?
        .first()
        .copied()
        .unwrap_or(0);
    let mut no_pmu = false;
    let mut out = String::from("Events (-e NAME; several comma-separated):\n");
    for (event, about) in Event::own() {
        out.push_str(&format!("  {:<26}{about}\n", event.name()));
    }
    for (title, hardware) in [("Software counters", false), ("Hardware counters", true)] {
        out.push_str(&format!(
            "{title} (sampled at -F, or every --period N events):\n"
        ));
        for counter in Counter::all().filter(|counter| counter.hardware() == hardware) {
            let state = match counter_events::probe(Event::Counter(counter), cpu) {
                Ok(()) => String::new(),
                Err(why) => {
                    no_pmu |= matches!(why, Unavailable::NotCounted { hardware: true, .. });
                    format!(" (not available: {})", why.brief())
                }
            };
            out.push_str(&format!(
                "  {:<26}{}{state}\n",
                counter.name(),
                counter.about()
            ));
        }
    }
    out.push_str(concat!(
        "  rHEX                      a raw PMU event: the CPU's own event code, e.g. r3c\n",
        "Probes (every call counted):\n",
        "  kprobe:FUNC               calls of kernel function FUNC\n",
        "  uprobe:PATH:SYMBOL        calls of function SYMBOL of ELF file PATH, in every process\n",
        "  SYSTEM:NAME               hits of kernel tracepoint NAME, e.g. sched:sched_switch\n",
    ));
    if no_pmu {
        out.push_str("A virtual machine without a PMU counts no hardware events.\n");
    }
    print!("{out}");
    Ok(())
}
