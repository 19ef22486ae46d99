//! Java in every stack: Stoke's JVMTI agent ([`agent`]) is loaded into
//! each JVM ([`attach`]), shares memory with stoke ([`agent_memory`]) and answers
//! the BPF sampler's signals with Java stacks, which are paired with the
//! samples ([`merge`]) and named ([`symbols`]); [`profiler`] runs it all
//! during a recording and hands back [`MergedSample`]s, starting with the
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
use crate::{
    interpreter::python::NamedFrame,
    process::{ImageId, ProcessImage},
    sample::ring_record::Sample,
};

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

/// A sample as aggregation counts it: the process image it is of, and its
/// native stack with the Java frames merged in.
#[derive(Clone, Debug)]
pub struct MergedSample {
    /// The process image, in the recording's registry.
    pub image: ImageId,
    /// The BPF sample; with Java frames, its user stack ends where JIT
    /// code begins.
    pub sample: Sample,
    /// Java frames from the JVM agent, innermost first.
    pub java: Vec<JavaStackFrame>,
    /// Python frames, named, innermost first.
    pub python: Vec<NamedFrame>,
}

impl MergedSample {
    /// A sample with no Java frames, of process image `image`.
    pub fn native(image: ImageId, sample: Sample) -> Self {
        Self {
            image,
            sample,
            java: Vec::new(),
            python: Vec::new(),
        }
    }

    /// A sample with Python frames `python`.
    pub fn with_python(image: ImageId, sample: Sample, python: Vec<NamedFrame>) -> Self {
        Self {
            python,
            ..Self::native(image, sample)
        }
    }

    /// A sample of `image` with its Java frames: native frames above the
    /// innermost Java frame stay; from the first frame in JIT code (memory
    /// no file maps) on, the Java frames say it better.
    fn with_java(
        image: &ProcessImage,
        id: ImageId,
        mut sample: Sample,
        java: Vec<JavaStackFrame>,
    ) -> Self {
        if !java.is_empty() {
            let java_code = sample
                .user
                .iter()
                .position(|&address| !image.is_file_code(address))
                .unwrap_or(sample.user.len());
            sample.user.truncate(java_code);
        }
        Self {
            image: id,
            sample,
            java,
            python: Vec::new(),
        }
    }
}
