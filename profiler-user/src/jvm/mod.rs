//! Java in every stack: Stoke's JVMTI agent ([`agent`]) is loaded into
//! each JVM ([`attach`]), shares memory with stoke ([`agent_memory`]) and answers
//! the BPF sampler's signals with Java stacks, which are paired with the
//! samples ([`merge`]) and named ([`symbols`]); [`profiler`] runs it all
//! during a recording and hands back [`crate::model::MergedSample`]s,
//! starting with the
//! JVMs [`running`] before the first sample. With `-e alloc` or
//! `-e lock`, the agents also record allocations and contended locks
//! ([`java_event_ring`]), which become weighted stacks ([`java_events`]).

pub mod agent;
pub mod agent_memory;
pub mod attach;
mod broadcast;
pub mod coverage;
pub mod java_event_ring;
pub mod java_events;
mod memory_lock;
pub mod merge;
pub mod park;
pub mod profiler;
pub mod running;
pub mod symbols;
pub mod thread_ids;
