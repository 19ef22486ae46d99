//! The frames a sample carries beside its native addresses: Java frames
//! as the agent took them, and Python frames named.

use std::{
    hash::{Hash, Hasher},
    sync::Arc,
};

use profiler_common::jvm::JavaFrame;

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
/// Java frames are hashed when its stack is counted.
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

/// How a Java frame was running, shown as async-profiler does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// JIT-compiled code: `_[j]`.
    Compiled,
    /// Inlined by the JIT into the compiled code of a caller: `_[i]`.
    Inlined,
    /// The interpreter: `_[0]`.
    Interpreted,
}

impl FrameKind {
    /// What its name ends in.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Compiled => "_[j]",
            Self::Inlined => "_[i]",
            Self::Interpreted => "_[0]",
        }
    }
}

/// A Python frame of a sample, named.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NamedFrame {
    /// Its name: the function's qualified name, with lines `(file.py:LINE)`,
    /// and the Python frame suffix `_[py]`.
    pub name: Arc<str>,
    /// The first frame its call of the interpreter ran.
    pub entry: bool,
}
