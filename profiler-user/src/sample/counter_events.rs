//! Counted events: perf counters (`-e page-faults`, `-e cycles`...) on
//! every CPU, and probes (`-e kprobe:FUNC`, `-e uprobe:PATH:SYMBOL`), each
//! linked to the CPUs' sampler with a cookie that names it: its samples
//! are weighed by the events each stands for.

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
};

use anyhow::{Context, Result};
use aya::{programs::Program, Ebpf};
use aya_obj::generated::perf_event_attr;
use profiler_common::{bpf_names as names, COUNTER_COOKIE_BASE, COUNTER_COOKIE_QUIET};

use super::{
    thread_event::{attach_program, link, link_program, perf_event_open},
    tracepoint_id::tracepoint_id,
};
use crate::{
    event::{Counter, Event, Probe, ProbeTarget},
    procfs,
};

/// The sampler's program for kprobes and uprobes, loaded when a
/// recording has any.
pub const PROBE_PROGRAM: &str = names::program::sample_probe;

/// The sampler's program for tracepoints, loaded when a recording has any.
pub const TRACEPOINT_PROGRAM: &str = names::program::sample_tracepoint;

/// The programs each counted event's events go to on kernels without
/// bpf_loop, whose events before 5.15 carry no cookie: by index, for
/// counters, kprobes and uprobes, and tracepoints. Each sets its cookie and
/// tail-calls the program of its kind that takes the sample.
const LEGACY_PROGRAMS: [[&str; 8]; 3] = [
    [
        names::program::sample_counter_legacy_0,
        names::program::sample_counter_legacy_1,
        names::program::sample_counter_legacy_2,
        names::program::sample_counter_legacy_3,
        names::program::sample_counter_legacy_4,
        names::program::sample_counter_legacy_5,
        names::program::sample_counter_legacy_6,
        names::program::sample_counter_legacy_7,
    ],
    [
        names::program::sample_probe_legacy_0,
        names::program::sample_probe_legacy_1,
        names::program::sample_probe_legacy_2,
        names::program::sample_probe_legacy_3,
        names::program::sample_probe_legacy_4,
        names::program::sample_probe_legacy_5,
        names::program::sample_probe_legacy_6,
        names::program::sample_probe_legacy_7,
    ],
    [
        names::program::sample_tracepoint_legacy_0,
        names::program::sample_tracepoint_legacy_1,
        names::program::sample_tracepoint_legacy_2,
        names::program::sample_tracepoint_legacy_3,
        names::program::sample_tracepoint_legacy_4,
        names::program::sample_tracepoint_legacy_5,
        names::program::sample_tracepoint_legacy_6,
        names::program::sample_tracepoint_legacy_7,
    ],
];

/// The kind of program that takes `event`'s samples: 0 perf events, 1
/// kprobes and uprobes, 2 tracepoints (the order of [`LEGACY_PROGRAMS`]);
/// `None` for an event no counted program takes.
pub fn program_kind(event: Event) -> Option<usize> {
    match event {
        Event::Counter(_) => Some(0),
        Event::Probe(probe) if matches!(probe.target, ProbeTarget::Tracepoint { .. }) => Some(2),
        Event::Probe(_) => Some(1),
        _ => None,
    }
}

/// The legacy program of `event`, the recording's counted event at
/// `index` (see [`LEGACY_PROGRAMS`]).
pub fn legacy_program(event: Event, index: usize) -> Option<&'static str> {
    LEGACY_PROGRAMS[program_kind(event)?].get(index).copied()
}

/// perf's `PERF_TYPE_TRACEPOINT`.
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// How often a counter is sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// About this many samples a second on each CPU, the kernel adjusting
    /// the period (each sample weighs the period it ended).
    Frequency(u64),
    /// Every this many events.
    Period(u64),
}

/// Why an event cannot be sampled here.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// Neither the CPU nor the kernel counts it, or there is nothing to
    /// probe where the probe says.
    #[error("this host does not count it ({error}){}", if *hardware { "; a virtual machine without a PMU counts no hardware events" } else { "" })]
    NotCounted {
        /// What perf_event_open said.
        error: io::Error,
        /// Whether the CPU would count it.
        hardware: bool,
    },
    /// The kernel does not let stoke open it.
    #[error("perf_event_open was refused ({0}): run as root or with CAP_PERFMON")]
    Refused(io::Error),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl Unavailable {
    /// Why, in a few words.
    pub fn brief(&self) -> String {
        match self {
            Self::NotCounted { hardware: true, .. } => "no PMU counts it here".into(),
            Self::NotCounted { .. } => "this kernel does not count it".into(),
            Self::Refused(_) => "refused (run as root or with CAP_PERFMON)".into(),
            Self::Other(why) => why.clone(),
        }
    }
}

/// The counted events sampling; they stop when dropped.
pub struct CounterEvents {
    /// Each event with its link to the sampler (none where the program is
    /// attached to the event itself).
    _open: Vec<(OwnedFd, Option<OwnedFd>)>,
}

/// The attributes of an event of perf type `perf_type` and `config`,
/// sampled every event.
fn attributes(perf_type: u32, config: u64) -> perf_event_attr {
    // SAFETY: a zeroed perf_event_attr is valid; fields set below.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = perf_type;
    attr.config = config;
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.__bindgen_anon_1.sample_period = 1;
    attr
}

/// The attributes of `counter`'s event at `rate`.
fn counter_attributes(counter: Counter, rate: Rate) -> perf_event_attr {
    let mut attr = attributes(counter.perf_type(), counter.config());
    match rate {
        Rate::Frequency(hz) => {
            attr.set_freq(1);
            attr.__bindgen_anon_1.sample_freq = hz.max(1);
        }
        Rate::Period(events) => attr.__bindgen_anon_1.sample_period = events.max(1),
    }
    attr
}

/// The perf type of the kernel's `kprobe` or `uprobe` PMU.
fn probe_pmu(kind: &str) -> Result<u32, Unavailable> {
    let path = format!("/sys/bus/event_source/devices/{kind}/type");
    let (bytes, _) = procfs::read_bounded(&path, 64).map_err(|error| {
        Unavailable::Other(if error.kind() == io::ErrorKind::NotFound {
            let config = kind.to_ascii_uppercase();
            format!("this kernel places no {kind}s (it has no {kind} PMU: CONFIG_{config}_EVENTS is off)")
        } else {
            format!("reading {path}: {error}")
        })
    })?;
    String::from_utf8_lossy(&bytes)
        .trim()
        .parse()
        .map_err(|_| Unavailable::Other(format!("{path} holds no perf type")))
}

/// Opens `event` on `cpu` (a probe: every CPU's calls, whichever `cpu`).
fn open_on(event: Event, rate: Rate, cpu: u32, disabled: bool) -> Result<OwnedFd, Unavailable> {
    // Kept alive until the event is open: the kernel reads the string then.
    let mut target_name = CString::default();
    let mut attr = match event {
        Event::Counter(counter) => counter_attributes(counter, rate),
        Event::Probe(Probe {
            target: ProbeTarget::Tracepoint { system, name },
            ..
        }) => {
            let id = tracepoint_id(system, name).map_err(|error| {
                Unavailable::Other(format!("tracepoint {system}:{name}: {error}"))
            })?;
            attributes(PERF_TYPE_TRACEPOINT, id)
        }
        Event::Probe(probe) => {
            let (kind, name, offset) = match &probe.target {
                ProbeTarget::Kernel { function } => ("kprobe", function.as_bytes(), 0),
                ProbeTarget::User { path, offset } => {
                    ("uprobe", path.as_os_str().as_bytes(), *offset)
                }
                ProbeTarget::Tracepoint { .. } => unreachable!("matched above"),
            };
            target_name = CString::new(name)
                .map_err(|_| Unavailable::Other("a NUL in the probe's name".into()))?;
            let mut attr = attributes(probe_pmu(kind)?, 0);
            attr.__bindgen_anon_3.config1 = target_name.as_ptr() as u64;
            attr.__bindgen_anon_4.config2 = offset;
            attr
        }
        _ => {
            return Err(Unavailable::Other(format!(
                "{} is not counted",
                event.name()
            )))
        }
    };
    attr.set_disabled(u64::from(disabled));
    let fd = perf_event_open(&attr, -1, cpu as i32);
    drop(target_name);
    if fd < 0 {
        let error = io::Error::last_os_error();
        let hardware = matches!(event, Event::Counter(counter) if counter.hardware());
        return Err(match error.raw_os_error() {
            Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV | libc::EINVAL) => {
                Unavailable::NotCounted { error, hardware }
            }
            Some(libc::EACCES | libc::EPERM) => Unavailable::Refused(error),
            _ => Unavailable::Other(format!("perf_event_open: {error}")),
        });
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether this host can sample `event`: its event opened, disabled, on
/// `cpu`, and closed.
pub fn probe(event: Event, cpu: u32) -> Result<(), Unavailable> {
    open_on(event, Rate::Period(u64::MAX >> 1), cpu, true).map(drop)
}

/// Samples `events` (the recording's counted events, in order: the cookie
/// of each is its index): a counter on every CPU of `cpus` at `rate`, a
/// probe once. `legacy` (kernels without bpf_loop): each event attached to
/// its own program of [`LEGACY_PROGRAMS`], with no link and no cookie.
pub fn open(
    ebpf: &Ebpf,
    events: &[Event],
    cpus: &[u32],
    rate: Rate,
    legacy: bool,
) -> Result<CounterEvents> {
    let mut open = Vec::with_capacity(events.len() * cpus.len());
    for (index, &event) in (0u64..).zip(events) {
        let on: &[u32] = match event {
            Event::Counter(_) => cpus,
            Event::Probe(_) => &cpus[..1.min(cpus.len())],
            _ => continue,
        };
        let cookie = COUNTER_COOKIE_BASE
            + index
            + if quiet(event) {
                COUNTER_COOKIE_QUIET
            } else {
                0
            };
        let program = if legacy {
            Some(legacy_program_fd(ebpf, event, index)?)
        } else {
            program_of(ebpf, event)?
        };
        for &cpu in on {
            let opened = open_on(event, rate, cpu, false)
                .with_context(|| format!("opening event {} on CPU {cpu}", event.name()))?;
            let link = match program {
                Some(program) if legacy => attach_program(program, &opened).map(|()| None),
                Some(program) => link_program(program, &opened, cookie).map(Some),
                None => link(ebpf, &opened, cookie).map(Some),
            }
            .with_context(|| format!("sampling event {} on CPU {cpu}", event.name()))?;
            open.push((opened, link));
        }
    }
    Ok(CounterEvents { _open: open })
}

/// Whether `event`'s samples send no JVM its signal: a counter whose
/// events come as a thread leaves the CPU, or a kernel probe, which may
/// fire where its thread is about to wait (a signal for its Java stack
/// would cut the wait short).
fn quiet(event: Event) -> bool {
    match event {
        Event::Counter(counter) => counter.at_switch(),
        Event::Probe(probe) => probe.in_kernel(),
        _ => false,
    }
}

/// The legacy programs' quiet bits (`legacy_quiet_counters`), by index in
/// `events`.
pub fn quiet_counters(events: &[Event]) -> u32 {
    (0u32..)
        .zip(events)
        .filter(|&(_, &event)| quiet(event))
        .fold(0, |mask, (index, _)| {
            mask | 1u32.checked_shl(index).unwrap_or(0)
        })
}

/// The descriptor of the legacy program of `event`, the counted event at
/// `index`, loaded.
fn legacy_program_fd(ebpf: &Ebpf, event: Event, index: u64) -> Result<i32> {
    let name = usize::try_from(index)
        .ok()
        .and_then(|index| legacy_program(event, index))
        .with_context(|| format!("no legacy program for event {}", event.name()))?;
    let fd = match ebpf.program(name) {
        Some(Program::PerfEvent(program)) => program.fd(),
        Some(Program::KProbe(program)) => program.fd(),
        Some(Program::TracePoint(program)) => program.fd(),
        _ => anyhow::bail!("the program {name} is missing"),
    };
    Ok(fd?.as_fd().as_raw_fd())
}

/// The descriptor of the program a probe's event is linked to (loaded only
/// when the recording has probes of its kind); `None` for a counter, which
/// the CPUs' sampler takes.
fn program_of(ebpf: &Ebpf, event: Event) -> Result<Option<i32>> {
    let Event::Probe(probe) = event else {
        return Ok(None);
    };
    let fd = match (
        &probe.target,
        ebpf.program(PROBE_PROGRAM),
        ebpf.program(TRACEPOINT_PROGRAM),
    ) {
        (ProbeTarget::Tracepoint { .. }, _, Some(Program::TracePoint(program))) => program.fd(),
        (
            ProbeTarget::Kernel { .. } | ProbeTarget::User { .. },
            Some(Program::KProbe(program)),
            _,
        ) => program.fd(),
        _ => anyhow::bail!("the program of probe {} is missing", probe.name()),
    };
    Ok(Some(fd?.as_fd().as_raw_fd()))
}

/// What the start says of `probe` when it cannot be placed.
pub fn probe_missing(probe: &Probe) -> &'static str {
    if matches!(probe.target, ProbeTarget::Tracepoint { .. }) {
        "the kernel refused the tracepoint"
    } else if probe.in_kernel() {
        "no such kernel function can be probed (see /proc/kallsyms; inlined and notrace functions cannot)"
    } else {
        "the kernel refused a probe there"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legacy_programs_quiet_bits_follow_the_events_order() {
        let events: Vec<Event> = [
            "page-faults",
            "context-switches",
            "cpu-migrations",
            "cycles",
        ]
        .iter()
        .map(|name| Event::parse(name).unwrap())
        .collect();
        // Context switches and migrations come as a thread leaves its CPU.
        assert_eq!(quiet_counters(&events), 0b0110);
        assert_eq!(quiet_counters(&[]), 0);
    }
}
