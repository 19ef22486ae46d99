//! Java in every stack: Stoke's JVMTI agent is loaded into each JVM
//! ([`attach`]), shares memory with stoke ([`agent_memory`]) and answers
//! the BPF sampler's signals with Java stacks, which are paired with the
//! samples ([`merge`]) and named ([`symbols`]); [`profiler`] runs it all
//! during a recording.

pub mod agent_memory;
pub mod attach;
pub mod merge;
pub mod profiler;
pub mod symbols;

use profiler_common::jvm::JavaFrame;

use self::symbols::FrameKind;

/// One Java frame of a sample, as the agent took it, before naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JavaStackFrame {
    /// The method's `jmethodID`.
    pub method_id: u64,
    /// Bytecode index (0 when lines are not shown).
    pub bci: i32,
    /// JIT-compiled or interpreted.
    pub kind: FrameKind,
}

impl JavaStackFrame {
    /// The frame as the agent's ring holds it.
    pub fn frame(&self) -> JavaFrame {
        JavaFrame::new(self.method_id, self.bci)
    }
}
