//! JDK Flight Recorder files, as the JDK's `jfr` tool, Java Mission Control
//! and other JFR readers open them: one chunk, whose header says where its
//! checkpoint (the constant pools, [`pools`]) and its metadata (the types,
//! [`metadata`]) are, holding the profile's events.
//!
//! A profile counts stacks, so its events are made up from the counts: a
//! CPU stack of N samples is N `jdk.ExecutionSample` events, spread evenly
//! over the recording's duration and written in time order (at most
//! [`MAX_EVENTS`] in all: past that, every stack's count is scaled down
//! alike, and Stoke says so); a wall-clock stack, one event per sampling
//! period of its time, rounded. The other events weigh their stack in one
//! event each: `jdk.ObjectAllocationSample` (its weight the bytes, its
//! class the allocated one), `jdk.JavaMonitorEnter` (its duration the time
//! waited, its class the lock's) and `stoke.OffCPU` (its duration the time
//! off the CPU). An event's thread is named after the stack's context
//! frames (container, process, thread) and has the thread's id with `-t`,
//! else the process's.

mod encode;
mod metadata;
mod pools;

use std::{
    io::{self, Write},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use encode::Buffer;
use metadata::TypeId;
use pools::Pools;

use crate::{
    event::{period_ns, Event},
    model::{FoldedStack, Profile},
};

/// Most events in one file: some 25 MB of CPU samples.
const MAX_EVENTS: u64 = 2_000_000;

/// Ticks are nanoseconds.
const TICKS_PER_SECOND: u64 = 1_000_000_000;

/// The chunk header's size.
const HEADER_SIZE: usize = 68;

/// The header's last byte: the chunk is final, and holds compressed
/// integers (the flag older readers look for).
const FLAGS: u8 = 0b11;

/// The event type of `event`'s profile.
fn event_type(event: Event) -> TypeId {
    match event {
        // A counter's events and a probe's calls are execution samples
        // where they happened.
        Event::Cpu | Event::Wall | Event::Counter(_) | Event::Probe(_) => TypeId::ExecutionSample,
        Event::Alloc => TypeId::AllocationSample,
        Event::Lock => TypeId::MonitorEnter,
        // Time on the run queue is time off the CPU.
        Event::Offcpu | Event::Runqueue => TypeId::OffCpu,
    }
}

/// Writes `profile` as a JFR recording.
pub(super) fn write(profile: &Profile, out: &mut dyn Write) -> io::Result<()> {
    let event_type = event_type(profile.event);
    let mut pools = Pools::default();
    let stacks: Vec<Stack> = profile
        .stacks
        .iter()
        .filter(|stack| stack.samples > 0)
        .map(|stack| Stack::new(stack, profile.event, &mut pools))
        .collect();
    let counts = event_counts(profile, &stacks);
    let events: u64 = counts.iter().sum();
    let span = match profile.summary.duration {
        Duration::ZERO => Duration::from_millis(events),
        duration => duration,
    };
    let span_ticks = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);

    let mut chunk = Buffer::default();
    chunk.bytes.resize(HEADER_SIZE, 0);
    let mut body = Buffer::default();
    for (ticks, index) in timeline(&counts, span_ticks) {
        let stack = &stacks[index];
        body.bytes.clear();
        body.varint(event_type.id()).varint(ticks);
        match profile.event {
            Event::Cpu | Event::Wall | Event::Counter(_) | Event::Probe(_) => {
                let state = pools.runnable();
                body.varint(stack.thread).varint(stack.trace).varint(state);
            }
            Event::Alloc => {
                body.varint(stack.thread).varint(stack.trace);
                body.varint(stack.class).varint(stack.value);
            }
            Event::Lock => {
                body.varint(stack.value)
                    .varint(stack.thread)
                    .varint(stack.trace);
                body.varint(stack.class);
            }
            Event::Offcpu | Event::Runqueue => {
                body.varint(stack.value)
                    .varint(stack.thread)
                    .varint(stack.trace);
            }
        }
        chunk.event(&body.bytes);
    }
    let checkpoint_at = chunk.bytes.len();
    chunk.event(&pools.checkpoint());
    let metadata_at = chunk.bytes.len();
    chunk.event(&metadata::body(event_type));

    let started = profile.summary.started.unwrap_or_else(SystemTime::now);
    let start_nanos = started
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_nanos()).unwrap_or(0));
    let mut header = Vec::with_capacity(HEADER_SIZE);
    header.extend_from_slice(b"FLR\0");
    header.extend_from_slice(&2u16.to_be_bytes());
    header.extend_from_slice(&0u16.to_be_bytes());
    for value in [
        chunk.bytes.len() as u64,
        checkpoint_at as u64,
        metadata_at as u64,
        start_nanos,
        span_ticks,
        0,
        TICKS_PER_SECOND,
    ] {
        header.extend_from_slice(&value.to_be_bytes());
    }
    // The file state (0: finished), two bytes unused, the flags.
    header.extend_from_slice(&[0, 0, 0, FLAGS]);
    chunk.bytes[..HEADER_SIZE].copy_from_slice(&header);
    out.write_all(&chunk.bytes)
}

/// A stack's pool keys and value.
struct Stack {
    thread: u64,
    trace: u64,
    /// The class allocated or locked, for allocation and lock events.
    class: u64,
    value: u64,
}

impl Stack {
    fn new(stack: &FoldedStack, event: Event, pools: &mut Pools) -> Self {
        let context = stack.context_frames.min(stack.frames.len());
        let name = match stack.frames[..context].join(" / ") {
            name if name.is_empty() => "[all threads]".to_owned(),
            name => name,
        };
        let id = ["tid", "pid"]
            .iter()
            .find_map(|key| stack.labels.iter().find(|(label, _)| label == key))
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        let thread = pools.thread(name, id);
        let mut code = &stack.frames[context..];
        // Allocation and lock stacks have their class on top.
        let mut class = 0;
        if let (Event::Alloc | Event::Lock, [rest @ .., top]) = (event, code) {
            class = pools.class(top);
            code = rest;
        }
        let trace = pools.stack_trace(code.iter().rev().map(|frame| &**frame));
        Self {
            thread,
            trace,
            class,
            value: stack.samples,
        }
    }
}

/// How many events each of `stacks` gets: a CPU stack one per sample
/// (scaled down alike if they are more than [`MAX_EVENTS`]), a wall-clock
/// one per sampling period of its time, any other one event.
fn event_counts(profile: &Profile, stacks: &[Stack]) -> Vec<u64> {
    let samples: Vec<u64> = match profile.event {
        Event::Wall => {
            let period = period_ns(profile.summary.frequency_hz);
            stacks
                .iter()
                .map(|stack| (stack.value + period / 2) / period)
                .collect()
        }
        Event::Cpu | Event::Counter(_) | Event::Probe(_) => {
            stacks.iter().map(|stack| stack.value).collect()
        }
        Event::Offcpu | Event::Runqueue | Event::Alloc | Event::Lock => {
            return vec![1; stacks.len()]
        }
    };
    let total: u64 = samples.iter().sum();
    if total <= MAX_EVENTS {
        return samples;
    }
    eprintln!(
        "stoke: the JFR output holds {MAX_EVENTS} of the {total} samples, each stack's count scaled down alike"
    );
    samples
        .iter()
        .map(|&count| (u128::from(count) * u128::from(MAX_EVENTS) / u128::from(total)) as u64)
        .collect()
}

/// Every event as (time in ticks, index of its stack), in time order: the
/// `count` events of each stack spread evenly over the recording, then all
/// of them, in that order, `span` ticks evenly.
fn timeline(counts: &[u64], span: u64) -> Vec<(u64, usize)> {
    let total: u64 = counts.iter().sum();
    let mut events = Vec::with_capacity(total as usize);
    for (index, &count) in counts.iter().enumerate() {
        events.extend((0..count).map(|nth| (spread(nth, count, u64::MAX), index)));
    }
    events.sort_unstable();
    for (nth, event) in (0..).zip(&mut events) {
        event.0 = spread(nth, total, span);
    }
    events
}

/// Where the `nth` of `count` things evenly spread over `span` goes: the
/// middle of its share.
fn spread(nth: u64, count: u64, span: u64) -> u64 {
    ((2 * u128::from(nth) + 1) * u128::from(span) / (2 * u128::from(count))) as u64
}

#[cfg(test)]
mod tests;
