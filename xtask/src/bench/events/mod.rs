//! Part 10, events beyond CPU: what recording them costs, side by side
//! with the tools that record them otherwise. Off-CPU time costs each
//! context switch (beside perf's `sched:sched_switch -g`); Java allocation
//! profiling costs the allocating threads (beside async-profiler's
//! `alloc`); sampling page faults costs each fault (beside perf's
//! `-e page-faults` at the same period).

mod alloc;
mod faults;
mod offcpu;

use anyhow::Result;

use super::{report::Section, Bench, Part};

pub fn run(bench: &Bench) -> Result<Section> {
    let (offcpu, mut targets) = offcpu::run(bench)?;
    let (alloc, alloc_targets) = alloc::run(bench)?;
    targets.extend(alloc_targets);
    let (faults, fault_targets) = faults::run(bench)?;
    targets.extend(fault_targets);
    Ok(Section::new(
        Part::Events,
        format!("{offcpu}\n{alloc}\n{faults}"),
        targets,
    ))
}
