//! One aggregation per event of a recording (cpu, offcpu, wall, runqueue,
//! alloc, lock and each perf counter), and the summary each event's
//! profile gets.

use anyhow::{bail, Result};
use profiler_common::{
    java_events::{WANT_ALLOC, WANT_LOCK},
    Counter as SamplerCounter,
};

use crate::{
    aggregate::{AggregateOptions, Aggregator},
    cli::SamplingArgs,
    event::{period_ns, Event},
    jvm::java_events::{JavaEventSample, JavaEventSettings},
    model::{Measure, MergedSample, Profile, RecordingSummary},
    process::ProcessRegistry,
    sample::sampler::CounterTotals,
    symbolize::names::StackAddresses,
};

/// What each event has counted since the recording, or its last cut, began.
pub struct EventAggregators {
    options: AggregateOptions,
    /// Whether CPU samples make a profile of their own (`-e cpu`).
    cpu_profile: bool,
    /// With `-e offcpu`, the shortest wait its profile counts.
    offcpu_from_ns: Option<u64>,
    /// With `-e wall`, what a CPU sample is worth: the sampling period,
    /// in nanoseconds.
    wall_sample_ns: Option<u64>,
    /// Whether the off-CPU records are run-queue time (`-e runqueue`, which
    /// is recorded apart from offcpu, wall and lock).
    runqueue_profile: bool,
    /// With `-e lock`, the shortest Java park counted as a lock wait.
    parks_from_ns: Option<u64>,
    /// CPU samples taken.
    cpu_samples: u64,
    /// CPU samples.
    cpu: Aggregator,
    /// Off-CPU waits, weighed by their nanoseconds.
    offcpu: Aggregator,
    /// Wall-clock time: CPU samples weighed by the period, and the time
    /// threads spent off the CPU, waiting or runnable.
    wall: Aggregator,
    /// Time on the run queue, by the nanosecond.
    runqueue: Aggregator,
    /// Java allocations, weighed by their bytes.
    alloc: Aggregator,
    /// Contended Java locks, weighed by the nanoseconds waited.
    lock: Aggregator,
    /// Each perf counter's samples, weighed by their events, in the order
    /// of the sampler's counters.
    counters: Vec<Aggregator>,
}

impl EventAggregators {
    /// Aggregations for `events`, with the thresholds and rate of `args`
    /// (with `lock`, JVM threads' parks on locks of `--lock-threshold` or
    /// more are lock waits).
    pub fn new(options: AggregateOptions, events: &[Event], args: &SamplingArgs) -> Self {
        Self {
            options,
            cpu_profile: events.contains(&Event::Cpu),
            offcpu_from_ns: events.contains(&Event::Offcpu).then_some(args.offcpu_min),
            wall_sample_ns: events
                .contains(&Event::Wall)
                .then(|| period_ns(args.frequency)),
            runqueue_profile: events.contains(&Event::Runqueue),
            parks_from_ns: events.contains(&Event::Lock).then_some(args.lock_threshold),
            cpu_samples: 0,
            cpu: Aggregator::new(options, Event::Cpu),
            offcpu: Aggregator::new(options, Event::Offcpu),
            wall: Aggregator::new(options, Event::Wall),
            runqueue: Aggregator::new(options, Event::Runqueue),
            alloc: Aggregator::new(options, Event::Alloc),
            lock: Aggregator::new(options, Event::Lock),
            counters: counter_aggregators(options, events),
        }
    }

    /// What was counted so far; counting starts anew.
    pub fn take(&mut self) -> Self {
        let fresh = Self {
            cpu_samples: 0,
            cpu: Aggregator::new(self.options, Event::Cpu),
            offcpu: Aggregator::new(self.options, Event::Offcpu),
            wall: Aggregator::new(self.options, Event::Wall),
            runqueue: Aggregator::new(self.options, Event::Runqueue),
            alloc: Aggregator::new(self.options, Event::Alloc),
            lock: Aggregator::new(self.options, Event::Lock),
            counters: self
                .counters
                .iter()
                .map(|counter| Aggregator::new(self.options, counter.event()))
                .collect(),
            ..*self
        };
        std::mem::replace(self, fresh)
    }

    /// The CPU samples taken so far.
    pub fn cpu_samples(&self) -> u64 {
        self.cpu_samples
    }

    /// Counts a CPU sample, or an off-CPU record by the time it waited
    /// (and a Java thread's as a lock wait, if it parked on a lock), in
    /// each event's aggregation that counts it.
    pub fn add(&mut self, merged: MergedSample) {
        let waited = match merged.sample.measure {
            Measure::Cpu => {
                self.cpu_samples += 1;
                return match (self.cpu_profile, self.wall_sample_ns) {
                    (true, Some(period)) => {
                        self.wall.add_weighted(merged.clone(), period);
                        self.cpu.add(merged);
                    }
                    (false, Some(period)) => self.wall.add_weighted(merged, period),
                    (true, None) => self.cpu.add(merged),
                    // Only there to find the JVMs of Java events.
                    (false, None) => {}
                };
            }
            Measure::Counted { index, events } => {
                if let Some(counter) = self.counters.get_mut(usize::from(index)) {
                    counter.add_weighted(merged, events);
                }
                return;
            }
            Measure::OffCpu(queued) | Measure::WallOnly(queued) if self.runqueue_profile => {
                return self.runqueue.add_weighted(merged, queued);
            }
            Measure::WallOnly(waited) => return self.wall.add_weighted(merged, waited),
            Measure::OffCpu(waited) => waited,
        };
        if self
            .parks_from_ns
            .is_some_and(|least| waited >= least && !merged.java.is_empty())
        {
            self.lock.add_parked(&merged, waited);
        }
        let offcpu = self.offcpu_from_ns.is_some_and(|least| waited >= least);
        match (offcpu, self.wall_sample_ns.is_some()) {
            (true, true) => {
                self.wall.add_weighted(merged.clone(), waited);
                self.offcpu.add_weighted(merged, waited);
            }
            (true, false) => self.offcpu.add_weighted(merged, waited),
            (false, true) => self.wall.add_weighted(merged, waited),
            (false, false) => {}
        }
    }

    /// Counts each Java event (allocation, lock) in its event's aggregation.
    pub fn add_java_events(&mut self, events: Vec<JavaEventSample>) {
        for java_event in events {
            match JavaEventSettings::event_of(java_event.kind) {
                Event::Alloc => self.alloc.add_java_event(java_event),
                _ => self.lock.add_java_event(java_event),
            }
        }
    }

    /// The native addresses to name: the Java events come with none.
    pub fn addresses<'a>(
        &'a self,
        processes: &'a ProcessRegistry,
    ) -> impl Iterator<Item = StackAddresses<'a>> {
        self.cpu
            .addresses(processes)
            .chain(self.offcpu.addresses(processes))
            .chain(self.wall.addresses(processes))
            .chain(self.runqueue.addresses(processes))
            .chain(
                self.counters
                    .iter()
                    .flat_map(|counter| counter.addresses(processes)),
            )
    }

    /// A profile per event of `events`, in their order: `fold` folds an
    /// aggregation with its summary, made from the recording's (`summary`)
    /// and the sampler's counters over the same time.
    pub fn fold(
        self,
        events: &[Event],
        summary: RecordingSummary,
        counters: &CounterTotals,
        mut fold: impl FnMut(Aggregator, RecordingSummary) -> Profile,
    ) -> Vec<Profile> {
        let mut counted = self.counters.into_iter();
        let mut aggregators = [
            Some(self.cpu),
            Some(self.offcpu),
            Some(self.wall),
            Some(self.runqueue),
            Some(self.alloc),
            Some(self.lock),
        ];
        events
            .iter()
            .filter_map(|&event| {
                let aggregator = match event {
                    Event::Cpu => aggregators[0].take(),
                    Event::Offcpu => aggregators[1].take(),
                    Event::Wall => aggregators[2].take(),
                    Event::Runqueue => aggregators[3].take(),
                    Event::Alloc => aggregators[4].take(),
                    Event::Lock => aggregators[5].take(),
                    Event::Counter(_) | Event::Probe(_) => counted.next(),
                }?;
                Some(fold(aggregator, summary_of(event, &summary, counters)))
            })
            .collect()
    }
}

/// The counted events (perf counters, probes) among `events`, in order:
/// the sampler's counters.
pub fn counters(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .copied()
        .filter(|event| event.counted())
        .collect()
}

fn counter_aggregators(options: AggregateOptions, events: &[Event]) -> Vec<Aggregator> {
    counters(events)
        .into_iter()
        .map(|event| Aggregator::new(options, event))
        .collect()
}

/// An event's profile summary: the recording's for cpu; for the others
/// without what only CPU samples have, and with the off-CPU records' own
/// losses for offcpu and runqueue, and both kinds' for wall (the Java
/// events come with no native stack).
fn summary_of(
    event: Event,
    summary: &RecordingSummary,
    counters: &CounterTotals,
) -> RecordingSummary {
    let mut summary = summary.clone();
    let waits = matches!(event, Event::Offcpu | Event::Wall | Event::Runqueue);
    if !waits {
        summary.waits_in_progress = 0;
        summary.offcpu_user_stacks = None;
    }
    if event == Event::Cpu {
        return summary;
    }
    if event != Event::Wall {
        summary.idle_skipped = 0;
        summary.stack_quality = Default::default();
    }
    if waits {
        let lost_offcpu = counters[SamplerCounter::OffCpuLostRingFull as usize];
        summary.lost_ring_full = match event {
            Event::Wall => summary.lost_ring_full + lost_offcpu,
            _ => lost_offcpu,
        };
        summary.over_budget = counters[SamplerCounter::OffCpuOverBudget as usize];
    }
    summary
}

/// What `-e`, `--alloc-interval` and `--lock-threshold` ask of the agents;
/// refused with `--no-jvm`, which leaves JVMs without one.
pub fn java_event_settings(args: &SamplingArgs) -> Result<JavaEventSettings> {
    let wanted = args.events.iter().fold(0, |wanted, event| match event {
        Event::Alloc => wanted | WANT_ALLOC,
        Event::Lock => wanted | WANT_LOCK,
        _ => wanted,
    });
    if wanted != 0 && args.no_jvm {
        bail!("-e alloc and -e lock need the JVM agent, which --no-jvm leaves out: drop one or the other");
    }
    Ok(JavaEventSettings {
        wanted,
        alloc_interval: args.alloc_interval,
        lock_threshold_ns: args.lock_threshold,
    })
}
