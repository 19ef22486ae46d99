//! What a profile counts (`-e/--event`): one recording can count several
//! events, and gives one profile per event, each valued in its event's unit.
//! A new event only has to produce counted stacks (a stack and a value in
//! its unit); aggregation, symbolization and every writer are shared.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use serde::Serialize;

/// An event a profile counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// CPU time, sampled at `-F` Hz: values are samples.
    #[default]
    Cpu,
    /// Time threads spent off the CPU, blocked (sleeping, waiting for I/O
    /// or a lock), with the stack where they blocked: values are
    /// nanoseconds.
    Offcpu,
    /// Java heap allocations, sampled: values are bytes.
    Alloc,
    /// Java lock contention: values are nanoseconds waited.
    Lock,
}

/// The kind of the value each of a profile's stacks carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Units {
    /// What the value measures, as pprof's value type names it.
    pub value: (&'static str, &'static str),
    /// What the count of events behind a value is, as pprof names it.
    pub count: (&'static str, &'static str),
}

impl Event {
    /// Its name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Event::Cpu => "cpu",
            Event::Offcpu => "offcpu",
            Event::Alloc => "alloc",
            Event::Lock => "lock",
        }
    }

    /// What a profile of it is called: `Stoke {title} profile`.
    pub fn title(self) -> &'static str {
        match self {
            Event::Cpu => "CPU",
            Event::Offcpu => "off-CPU",
            Event::Alloc => "allocation",
            Event::Lock => "lock",
        }
    }

    /// The unit of a folded stack's value: `samples`, `nanoseconds` or
    /// `bytes`.
    pub fn unit(self) -> &'static str {
        match self {
            Event::Cpu => "samples",
            Event::Offcpu | Event::Lock => "nanoseconds",
            Event::Alloc => "bytes",
        }
    }

    /// The pprof sample types, named as Go's runtime and async-profiler
    /// name them so that pprof tools and Pyroscope know them: the count
    /// first, the value last (pprof's default). cpu's value (samples) is
    /// written times the period, as `cpu/nanoseconds`.
    pub fn units(self) -> Units {
        match self {
            Event::Cpu => Units {
                count: ("samples", "count"),
                value: ("cpu", "nanoseconds"),
            },
            Event::Offcpu => Units {
                count: ("events", "count"),
                value: ("offcpu", "nanoseconds"),
            },
            Event::Alloc => Units {
                count: ("alloc_objects", "count"),
                value: ("alloc_space", "bytes"),
            },
            Event::Lock => Units {
                count: ("contentions", "count"),
                value: ("delay", "nanoseconds"),
            },
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `events` without repeats, in the order first given (`-e cpu,offcpu,cpu`
/// is `cpu,offcpu`).
pub fn distinct(events: &[Event]) -> Vec<Event> {
    let mut distinct = Vec::with_capacity(events.len());
    for &event in events {
        if !distinct.contains(&event) {
            distinct.push(event);
        }
    }
    distinct
}

/// Refuses the events this stoke cannot record yet, in one line.
pub fn check_supported(events: &[Event]) -> anyhow::Result<()> {
    match events.iter().find(|event| matches!(event, Event::Offcpu)) {
        Some(event) => anyhow::bail!("-e {event} is not supported yet: record cpu"),
        None => Ok(()),
    }
}

/// Where `event`'s profile goes when one recording writes several: `path`
/// with the event's name before the format's extension (`stoke.svg` →
/// `stoke.offcpu.svg`, `out.pb.gz` → `out.offcpu.pb.gz`; a name without
/// an extension gets it at the end).
pub fn output_path(path: &Path, event: Event) -> PathBuf {
    let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
        return path.to_owned();
    };
    let lower = name.to_ascii_lowercase();
    let stem_len = if lower.ends_with(".pb.gz") && name.len() > ".pb.gz".len() {
        name.len() - ".pb.gz".len()
    } else {
        match name.rfind('.') {
            Some(dot) if dot > 0 => dot,
            _ => name.len(),
        }
    };
    let (stem, extension) = name.split_at(stem_len);
    path.with_file_name(format!("{stem}.{event}{extension}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_go_and_order_stays() {
        use Event::*;
        assert_eq!(distinct(&[Offcpu, Cpu, Offcpu, Cpu]), [Offcpu, Cpu]);
        assert_eq!(distinct(&[Cpu]), [Cpu]);
    }

    #[test]
    fn the_event_goes_before_the_formats_extension() {
        for (path, event, expected) in [
            ("stoke.svg", Event::Cpu, "stoke.cpu.svg"),
            ("stoke.svg", Event::Offcpu, "stoke.offcpu.svg"),
            ("dir/out.pb.gz", Event::Offcpu, "dir/out.offcpu.pb.gz"),
            ("dir/OUT.PB.GZ", Event::Cpu, "dir/OUT.cpu.PB.GZ"),
            ("a.b/profile", Event::Lock, "a.b/profile.lock"),
            (".folded", Event::Alloc, ".folded.alloc"),
        ] {
            assert_eq!(
                output_path(Path::new(path), event),
                Path::new(expected),
                "{path}"
            );
        }
    }

    #[test]
    fn offcpu_is_refused_in_one_line() {
        assert!(check_supported(&[Event::Cpu, Event::Alloc, Event::Lock]).is_ok());
        let error = check_supported(&[Event::Cpu, Event::Offcpu])
            .unwrap_err()
            .to_string();
        assert!(error.contains("offcpu") && !error.contains('\n'), "{error}");
    }
}
