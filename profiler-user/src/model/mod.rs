//! What the stages hand each other, which every stage may use and which
//! uses no stage's code: a sample as the sampler gives it ([`sample`],
//! with its thread's name, [`comm`]), the Java and Python frames it
//! carries ([`frame`]), the merged sample aggregation counts ([`merged`]),
//! the profile it produces and the writers consume ([`profile`]), and how
//! the recording went ([`summary`]), each stage's counts in a type of its
//! own here.

mod comm;
mod frame;
mod merged;
mod profile;
mod sample;
mod summary;

pub use comm::Comm;
pub use frame::{FrameKind, JavaStackFrame, NamedFrame};
pub use merged::{ImageId, MergedSample};
pub use profile::{clean_frame, FoldedStack, FrameFilter, FrameModules, Labels, Module, Profile};
pub use sample::{Measure, PythonFrame, Sample};
pub use summary::{
    JavaSummary, OffCpuUserStacks, PythonSummary, RecordingSummary, StackQuality, UnwindSummary,
};
