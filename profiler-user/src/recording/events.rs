//! One aggregation per event of a recording (cpu, offcpu, alloc, lock and
//! each perf counter), and the summary each event's profile gets.

use crate::{
    aggregate::{AggregateOptions, Aggregator},
    event::Event,
    jvm::{
        java_events::{JavaEventSample, JavaEventSettings},
        MergedSample,
    },
    process::ProcessRegistry,
    profile::{Profile, RecordingSummary},
    sample::{ring_record::Measure, sampler::CounterTotals},
    symbolize::names::StackAddresses,
};
use profiler_common::Counter as SamplerCounter;

/// What each event has counted since the recording, or its last cut, began.
pub struct EventAggregators {
    options: AggregateOptions,
    /// Whether off-CPU waits make a profile of their own (`-e offcpu`).
    offcpu_profile: bool,
    /// With `-e lock`, the shortest Java park counted as a lock wait.
    parks_from_ns: Option<u64>,
    /// CPU samples.
    pub cpu: Aggregator,
    /// Off-CPU waits, weighed by their nanoseconds.
    offcpu: Aggregator,
    /// Java allocations, weighed by their bytes.
    alloc: Aggregator,
    /// Contended Java locks, weighed by the nanoseconds waited.
    lock: Aggregator,
    /// Each perf counter's samples, weighed by their events, in the order
    /// of the sampler's counters.
    counters: Vec<Aggregator>,
}

impl EventAggregators {
    /// Aggregations for `events`; with `lock`, JVM threads' parks on locks
    /// of `lock_threshold_ns` or more are lock waits.
    pub fn new(options: AggregateOptions, events: &[Event], lock_threshold_ns: u64) -> Self {
        Self {
            options,
            offcpu_profile: events.contains(&Event::Offcpu),
            parks_from_ns: events.contains(&Event::Lock).then_some(lock_threshold_ns),
            cpu: Aggregator::new(options, Event::Cpu),
            offcpu: Aggregator::new(options, Event::Offcpu),
            alloc: Aggregator::new(options, Event::Alloc),
            lock: Aggregator::new(options, Event::Lock),
            counters: counter_aggregators(options, events),
        }
    }

    /// What was counted so far; counting starts anew.
    pub fn take(&mut self) -> Self {
        let fresh = Self {
            cpu: Aggregator::new(self.options, Event::Cpu),
            offcpu: Aggregator::new(self.options, Event::Offcpu),
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

    /// Counts a CPU sample, or an off-CPU record by the time it waited
    /// (and a Java thread's as a lock wait, if it parked on a lock).
    pub fn add(&mut self, merged: MergedSample) {
        let waited = match merged.sample.measure {
            Measure::Cpu => return self.cpu.add(merged),
            Measure::Counted { index, events } => {
                if let Some(counter) = self.counters.get_mut(usize::from(index)) {
                    counter.add_weighted(merged, events);
                }
                return;
            }
            Measure::OffCpu(waited) => waited,
        };
        if self
            .parks_from_ns
            .is_some_and(|least| waited >= least && !merged.java.is_empty())
        {
            self.lock.add_parked(&merged, waited);
        }
        if self.offcpu_profile {
            self.offcpu.add_weighted(merged, waited);
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
            Some(self.alloc),
            Some(self.lock),
        ];
        events
            .iter()
            .filter_map(|&event| {
                let aggregator = match event {
                    Event::Cpu => aggregators[0].take(),
                    Event::Offcpu => aggregators[1].take(),
                    Event::Alloc => aggregators[2].take(),
                    Event::Lock => aggregators[3].take(),
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
/// losses for offcpu (the Java events come with no native stack).
fn summary_of(
    event: Event,
    summary: &RecordingSummary,
    counters: &CounterTotals,
) -> RecordingSummary {
    let mut summary = summary.clone();
    if event != Event::Offcpu {
        summary.waits_in_progress = 0;
        summary.offcpu_user_stacks = None;
    }
    if event == Event::Cpu {
        return summary;
    }
    summary.idle_skipped = 0;
    summary.stack_quality = Default::default();
    if event == Event::Offcpu {
        summary.lost_ring_full = counters[SamplerCounter::OffCpuLostRingFull as usize];
        summary.over_budget = counters[SamplerCounter::OffCpuOverBudget as usize];
    }
    summary
}
