//! Perf counter events (`-e page-faults`, `-e cycles`...) on every CPU,
//! linked to the CPUs' sampler with a cookie that names the counter: its
//! samples are weighed by the events each stands for.

use std::{
    io,
    os::fd::{FromRawFd, OwnedFd},
};

use anyhow::{Context, Result};
use aya::Ebpf;
use aya_obj::generated::perf_event_attr;
use profiler_common::{COUNTER_COOKIE_BASE, COUNTER_COOKIE_QUIET};

use super::thread_event::{link, perf_event_open};
use crate::event::Counter;

/// How often a counter is sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// About this many samples a second on each CPU, the kernel adjusting
    /// the period (each sample weighs the period it ended).
    Frequency(u64),
    /// Every this many events.
    Period(u64),
}

/// Why a counter cannot be sampled here.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// Neither the CPU nor the kernel counts it.
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
    /// Anything else the kernel said.
    #[error("perf_event_open: {0}")]
    Other(io::Error),
}

impl Unavailable {
    /// Why, in a few words.
    pub fn brief(&self) -> String {
        match self {
            Self::NotCounted { hardware: true, .. } => "no PMU counts it here".into(),
            Self::NotCounted { .. } => "this kernel does not count it".into(),
            Self::Refused(_) => "refused (run as root or with CAP_PERFMON)".into(),
            Self::Other(error) => format!("perf_event_open: {error}"),
        }
    }
}

/// The counters sampling, every CPU; they stop when dropped.
pub struct CounterEvents {
    /// Each event with its link to the sampler.
    _open: Vec<(OwnedFd, OwnedFd)>,
}

/// The attributes of `counter`'s event at `rate`, disabled if `probe`.
fn attributes(counter: Counter, rate: Rate) -> perf_event_attr {
    // SAFETY: a zeroed perf_event_attr is valid; fields set below.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = counter.perf_type();
    attr.config = counter.config();
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    match rate {
        Rate::Frequency(hz) => {
            attr.set_freq(1);
            attr.__bindgen_anon_1.sample_freq = hz.max(1);
        }
        Rate::Period(events) => attr.__bindgen_anon_1.sample_period = events.max(1),
    }
    attr
}

/// `counter`'s event on `cpu`.
fn open_on(counter: Counter, rate: Rate, cpu: u32, disabled: bool) -> Result<OwnedFd, Unavailable> {
    let mut attr = attributes(counter, rate);
    attr.set_disabled(u64::from(disabled));
    let fd = perf_event_open(&attr, -1, cpu as i32);
    if fd < 0 {
        let error = io::Error::last_os_error();
        return Err(match error.raw_os_error() {
            Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV | libc::EINVAL) => {
                Unavailable::NotCounted {
                    error,
                    hardware: counter.hardware(),
                }
            }
            Some(libc::EACCES | libc::EPERM) => Unavailable::Refused(error),
            _ => Unavailable::Other(error),
        });
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether this host can sample `counter`: its event opened, disabled, on
/// `cpu`, and closed.
pub fn probe(counter: Counter, cpu: u32) -> Result<(), Unavailable> {
    open_on(counter, Rate::Period(u64::MAX >> 1), cpu, true).map(drop)
}

/// Samples `counters` (the recording's, in order: the cookie of each is
/// its index) on every CPU of `cpus` at `rate`.
pub fn open(ebpf: &Ebpf, counters: &[Counter], cpus: &[u32], rate: Rate) -> Result<CounterEvents> {
    let mut open = Vec::with_capacity(counters.len() * cpus.len());
    for (index, &counter) in (0u64..).zip(counters) {
        for &cpu in cpus {
            let event = open_on(counter, rate, cpu, false)
                .with_context(|| format!("opening event {} on CPU {cpu}", counter.name()))?;
            let quiet = if counter.at_switch() {
                COUNTER_COOKIE_QUIET
            } else {
                0
            };
            let link = link(ebpf, &event, COUNTER_COOKIE_BASE + index + quiet)
                .with_context(|| format!("sampling event {} on CPU {cpu}", counter.name()))?;
            open.push((event, link));
        }
    }
    Ok(CounterEvents { _open: open })
}
