//! What a recording counts: CPU samples (the default), and the events
//! beyond CPU. Each event gives its own profile, whose stacks' values are
//! in the event's unit, and whose output files are told apart by name.

mod counter;
mod probe;

use std::path::{Path, PathBuf};

pub use counter::Counter;
pub use probe::{Probe, ProbeTarget};

/// One kind of event a recording can count (`-e`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Event {
    /// CPU time, sampled at `-F` on every CPU; values are samples.
    #[default]
    Cpu,
    /// Time off the CPU: threads blocked or asleep, with the stack they
    /// waited in; values are nanoseconds.
    Offcpu,
    /// Wall-clock time: every thread's time, running (CPU samples, each
    /// worth the sampling period) or not (off-CPU waits and time on the
    /// run queue), by the stack it spent it in; values are nanoseconds.
    Wall,
    /// Time threads were runnable but not running: queued behind others on
    /// their CPU, or throttled by their cgroup's CPU quota, by the stack
    /// they were in; values are nanoseconds.
    Runqueue,
    /// Java heap allocations, sampled by the JVM; values are bytes.
    Alloc,
    /// Contended Java locks; values are nanoseconds waited.
    Lock,
    /// A perf counter event (page faults, cache misses...), sampled every
    /// so many events; values are events.
    Counter(Counter),
    /// A kernel or user probe, every hit counted; values are calls.
    Probe(&'static Probe),
}

/// The events that are no counter, with what they count.
const OWN: [(Event, &str); 6] = [
    (Event::Cpu, "CPU time, sampled at -F"),
    (Event::Offcpu, "time off the CPU, in nanoseconds"),
    (
        Event::Wall,
        "wall-clock time, running or not, in nanoseconds",
    ),
    (
        Event::Runqueue,
        "time runnable but not running (queued, throttled), in nanoseconds",
    ),
    (Event::Alloc, "Java heap allocations, in bytes"),
    (Event::Lock, "contended Java locks, in nanoseconds waited"),
];

impl Event {
    /// Its name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Offcpu => "offcpu",
            Self::Wall => "wall",
            Self::Runqueue => "runqueue",
            Self::Alloc => "alloc",
            Self::Lock => "lock",
            Self::Counter(counter) => counter.name(),
            Self::Probe(probe) => probe.name(),
        }
    }

    /// Whether its samples come from the sampler's counted events, each
    /// weighed ([`Event::Counter`], [`Event::Probe`]).
    pub fn counted(self) -> bool {
        matches!(self, Self::Counter(_) | Self::Probe(_))
    }

    /// The event named `name` ([`Event::name`], or another of a
    /// counter's names).
    pub fn from_name(name: &str) -> Option<Self> {
        OWN.iter()
            .map(|&(event, _)| event)
            .find(|event| event.name() == name)
            .or_else(|| Counter::from_name(name).map(Self::Counter))
    }

    /// `-e`'s parser: the event named `name`, a probe (`kprobe:FUNC`,
    /// `uprobe:PATH:SYMBOL`), or what to do instead. A probe lives as long
    /// as stoke (a few per command line).
    pub fn parse(name: &str) -> Result<Self, String> {
        if let Some(probe) = Probe::parse(name) {
            return Ok(Self::Probe(Box::leak(Box::new(probe?))));
        }
        Self::from_name(name).ok_or_else(|| {
            format!("no event is named '{name}'; `stoke list` shows the events there are")
        })
    }

    /// The events that are no counter, each with what it counts.
    pub fn own() -> impl Iterator<Item = (Self, &'static str)> {
        OWN.into_iter()
    }

    /// Its name in titles: "Stoke CPU profile", "Stoke off-CPU profile".
    pub fn title(self) -> &'static str {
        match self {
            Self::Cpu => "CPU",
            Self::Offcpu => "off-CPU",
            Self::Wall => "wall-clock",
            Self::Runqueue => "run-queue",
            Self::Alloc => "allocation",
            Self::Lock => "lock",
            Self::Counter(counter) => counter.name(),
            Self::Probe(probe) => probe.name(),
        }
    }

    /// The unit of its stacks' values in folded, SVG, text and JSON
    /// outputs.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Cpu => "samples",
            Self::Offcpu | Self::Wall | Self::Runqueue | Self::Lock => "nanoseconds",
            Self::Alloc => "bytes",
            Self::Counter(_) => "events",
            Self::Probe(_) => "calls",
        }
    }

    /// Its pprof sample type (type, unit), as pprof tools and Pyroscope
    /// name them. CPU profiles carry a second value, CPU time (samples
    /// times the sampling period).
    pub fn pprof_type(self) -> (&'static str, &'static str) {
        match self {
            Self::Cpu => ("samples", "count"),
            Self::Offcpu => ("offcpu", "nanoseconds"),
            Self::Wall => ("wall", "nanoseconds"),
            Self::Runqueue => ("runqueue", "nanoseconds"),
            Self::Alloc => ("alloc_space", "bytes"),
            Self::Lock => ("delay", "nanoseconds"),
            Self::Counter(counter) => (counter.name(), "count"),
            Self::Probe(probe) => (probe.name(), "count"),
        }
    }
}

/// The CPU time a sample at `frequency_hz` stands for, in nanoseconds.
pub fn period_ns(frequency_hz: u64) -> u64 {
    1_000_000_000 / frequency_hz.max(1)
}

/// The events of `-e` as given, each once, in order (CPU when none).
pub fn distinct(events: &[Event]) -> Vec<Event> {
    let mut unique: Vec<Event> = Vec::with_capacity(events.len());
    for &event in events {
        if !unique.contains(&event) {
            unique.push(event);
        }
    }
    if unique.is_empty() {
        unique.push(Event::Cpu);
    }
    unique
}

/// Where the profile of `event` goes when `-o path` is given: `path`
/// itself when one event is recorded, else with the event's name before
/// the format's extension (`stoke.svg` → `stoke.offcpu.svg`, `out.pb.gz`
/// → `out.offcpu.pb.gz`; a name without extension gets it at its end).
pub fn output_path(path: &Path, event: Event, several: bool) -> PathBuf {
    if !several {
        return path.to_owned();
    }
    let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
        return path.with_extension(event.name());
    };
    let lower = name.to_ascii_lowercase();
    let stem_end = if lower.ends_with(".pb.gz") {
        name.len() - ".pb.gz".len()
    } else {
        name.rfind('.').filter(|&dot| dot > 0).unwrap_or(name.len())
    };
    let (stem, extension) = name.split_at(stem_end);
    path.with_file_name(format!("{stem}.{}{extension}", event.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_events_name_their_files_before_the_extension() {
        let named = |path: &str, event| output_path(Path::new(path), event, true);
        assert_eq!(
            named("stoke.svg", Event::Offcpu),
            Path::new("stoke.offcpu.svg")
        );
        assert_eq!(
            named("out/p.pb.gz", Event::Cpu),
            Path::new("out/p.cpu.pb.gz")
        );
        assert_eq!(named("profile", Event::Lock), Path::new("profile.lock"));
        assert_eq!(named(".hidden", Event::Alloc), Path::new(".hidden.alloc"));
        assert_eq!(
            output_path(Path::new("stoke.svg"), Event::Offcpu, false),
            Path::new("stoke.svg")
        );
    }

    #[test]
    fn events_are_kept_once_in_order() {
        assert_eq!(distinct(&[Event::Cpu, Event::Cpu]), [Event::Cpu]);
        assert_eq!(distinct(&[]), [Event::Cpu]);
        assert_eq!(
            distinct(&[Event::Offcpu, Event::Cpu]),
            [Event::Offcpu, Event::Cpu]
        );
    }

    #[test]
    fn counters_are_named_by_any_of_their_names() {
        let faults = Event::parse("faults").unwrap();
        assert_eq!(faults.name(), "page-faults");
        assert_eq!(Event::parse("page-faults"), Ok(faults));
        assert_eq!(Event::parse("offcpu"), Ok(Event::Offcpu));
        let error = Event::parse("wal").unwrap_err();
        assert!(
            error.contains("'wal'") && error.contains("stoke list"),
            "{error}"
        );
    }
}
