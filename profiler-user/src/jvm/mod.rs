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

use std::hash::{Hash, Hasher};

use profiler_common::jvm::JavaFrame;

use self::symbols::FrameKind;

/// One Java frame of a sample, as the agent took it, before naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JavaStackFrame {
    /// The method's `jmethodID`.
    pub method_id: u64,
    /// Bytecode index (0 when lines are not shown).
    pub bci: i32,
    /// JIT-compiled or interpreted.
    pub kind: FrameKind,
}

/// One word a frame, where a derived hash would take three: every sample's
/// Java frames are hashed when its stack is counted (a sixth of stoke's
/// time on a JVM sampled at 999 Hz).
impl Hash for JavaStackFrame {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let bci_and_kind = u64::from(self.bci as u32) | (self.kind as u64) << 32;
        state.write_u64(self.method_id.rotate_left(32) ^ bci_and_kind);
    }
}

impl JavaStackFrame {
    /// The frame as the agent's ring holds it.
    pub fn frame(&self) -> JavaFrame {
        JavaFrame::new(self.method_id, self.bci)
    }
}
