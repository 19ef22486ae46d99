//! A sample with its frames of every kind, merged, as the Java side
//! ([`crate::jvm`]) and the Python namer ([`crate::interpreter::python`])
//! give it to aggregation.

use super::{JavaStackFrame, NamedFrame, Sample};

/// A process image's index in the recording's registry of them
/// (`crate::process::ProcessRegistry`).
pub type ImageId = usize;

/// A sample as aggregation counts it: the process image it is of, its
/// native stack, and the Java or Python frames that go into it.
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
}
