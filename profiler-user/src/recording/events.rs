//! One aggregation per event of a recording (cpu, offcpu, alloc, lock),
//! and the summary each event's profile gets.

use crate::{
    aggregate::{AggregateOptions, Aggregator},
    event::Event,
    jvm::{
        java_events::{JavaEventSample, JavaEventSettings},
        MergedSample,
    },
    process::ProcessRegistry,
    profile::{Profile, RecordingSummary},
    sample::sampler::CounterTotals,
    symbolize::names::StackAddresses,
};
use profiler_common::Counter;

/// What each event has counted since the recording, or its last cut, began.
pub struct EventAggregators {
    options: AggregateOptions,
    /// CPU samples.
    pub cpu: Aggregator,
    /// Off-CPU waits, weighed by their nanoseconds.
    offcpu: Aggregator,
    /// Java allocations, weighed by their bytes.
    alloc: Aggregator,
    /// Contended Java locks, weighed by the nanoseconds waited.
    lock: Aggregator,
}

impl EventAggregators {
    pub fn new(options: AggregateOptions) -> Self {
        Self {
            options,
            cpu: Aggregator::new(options, Event::Cpu),
            offcpu: Aggregator::new(options, Event::Offcpu),
            alloc: Aggregator::new(options, Event::Alloc),
            lock: Aggregator::new(options, Event::Lock),
        }
    }

    /// What was counted so far; counting starts anew.
    pub fn take(&mut self) -> Self {
        std::mem::replace(self, Self::new(self.options))
    }

    /// Counts a CPU sample, or an off-CPU record by the time it waited.
    pub fn add(&mut self, merged: MergedSample) {
        match merged.sample.off_cpu_ns {
            Some(waited) => self.offcpu.add_weighted(merged, waited),
            None => self.cpu.add(merged),
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
        let mut aggregators = [
            Some(self.cpu),
            Some(self.offcpu),
            Some(self.alloc),
            Some(self.lock),
        ];
        events
            .iter()
            .filter_map(|&event| {
                let index = match event {
                    Event::Cpu => 0,
                    Event::Offcpu => 1,
                    Event::Alloc => 2,
                    Event::Lock => 3,
                };
                let aggregator = aggregators[index].take()?;
                Some(fold(aggregator, summary_of(event, &summary, counters)))
            })
            .collect()
    }
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
    if event == Event::Cpu {
        return summary;
    }
    summary.idle_skipped = 0;
    summary.stack_quality = Default::default();
    if event == Event::Offcpu {
        summary.lost_ring_full = counters[Counter::OffCpuLostRingFull as usize];
        summary.over_budget = counters[Counter::OffCpuOverBudget as usize];
    }
    summary
}
