//! Java allocation and lock events, in the memory the agent shares with
//! `stoke` ([`crate::jvm`]): each stoke says which events it wants in its
//! consumer slot ([`crate::jvm::Consumer::java_events_wanted`]), and the agent's
//! JVMTI callbacks, on the allocating or contending Java thread, append one
//! [`JavaEventSlot`] each to a ring of [`JAVA_EVENT_SLOTS`] at
//! [`crate::jvm::JAVA_EVENTS_OFFSET`].
//!
//! The ring is the sample ring's broadcast protocol (a seqlock per slot,
//! producers claim with one `fetch_add`, each stoke reads at its own
//! position): a Java thread never waits for stoke; an event whose slot is
//! mid-write by another producer is dropped and counted in
//! [`crate::jvm::Header::java_events_dropped`]. A zeroed ring (a fresh
//! memfd, or one whose pages the idle agent gave back) is an empty one,
//! so that a JVM that never records these events never touches the ring's
//! 4.5 MB. Every stoke sees every event and keeps those it asked for.

use core::sync::atomic::AtomicU64;

use crate::jvm::JavaFrame;

/// [`crate::jvm::Consumer::java_events_wanted`] bit: sampled allocations
/// (JVMTI SampledObjectAlloc).
pub const WANT_ALLOC: u32 = 1;
/// [`crate::jvm::Consumer::java_events_wanted`] bit: contended Java monitors
/// (JVMTI MonitorContendedEnter/Entered).
pub const WANT_LOCK: u32 = 2;

/// Slots of the Java event ring: a second of events of a thread allocating
/// 1 GB/s at the default interval; stoke reads it every 50 ms at most
/// while events are wanted.
pub const JAVA_EVENT_SLOTS: usize = 2048;
/// Most Java frames one event keeps (the outermost are cut).
pub const MAX_EVENT_FRAMES: usize = 128;
/// Most bytes of a class signature one event keeps.
pub const MAX_CLASS_NAME: usize = 128;

/// What a [`JavaEventSlot`] records, in [`JavaEventSlot::kind`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JavaEventKind {
    /// A sampled allocation; the value is the object's size in bytes.
    Alloc = 1,
    /// A contended monitor entered; the value is the nanoseconds waited.
    Monitor = 2,
}

impl JavaEventKind {
    /// The kind a raw slot value names.
    pub fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            1 => Some(Self::Alloc),
            2 => Some(Self::Monitor),
            _ => None,
        }
    }
}

/// One slot of the Java event ring.
#[repr(C)]
pub struct JavaEventSlot {
    /// The seqlock ([`crate::jvm::RingSlot::sequence`]).
    pub sequence: AtomicU64,
    /// A [`JavaEventKind`], raw.
    pub kind: u32,
    /// The thread (the kernel's tid, in the JVM's pid namespace).
    pub tid: u32,
    /// Bytes allocated (the sampled object's size) or nanoseconds waited.
    pub value: u64,
    /// `CLOCK_MONOTONIC` nanoseconds when the event was recorded.
    pub time_ns: u64,
    /// Frames written, at most [`MAX_EVENT_FRAMES`].
    pub frame_count: u32,
    /// Bytes of [`Self::class`] used, at most [`MAX_CLASS_NAME`].
    pub class_len: u32,
    /// The allocated object's or the lock's class signature, as JVMTI
    /// gives it (`[B`, `Ljava/lang/String;`), cut at [`MAX_CLASS_NAME`].
    pub class: [u8; MAX_CLASS_NAME],
    /// Innermost first; the bci of a native method is
    /// [`crate::jvm::BCI_NATIVE`].
    pub frames: [JavaFrame; MAX_EVENT_FRAMES],
}

/// The Java name of a class signature: `byte[]` for `[B`,
/// `java.lang.String` for `Ljava/lang/String;`, `java.lang.Object[][]`
/// for `[[Ljava/lang/Object;`. Bytes it cannot read are kept as they are
/// (lossily decoded by the caller); empty for an empty signature.
pub fn java_class_name(signature: &[u8], out: &mut [u8; MAX_CLASS_NAME * 2]) -> usize {
    let dimensions = signature.iter().take_while(|&&byte| byte == b'[').count();
    let element = &signature[dimensions..];
    let base: &[u8] = match element {
        b"Z" => b"boolean",
        b"B" => b"byte",
        b"C" => b"char",
        b"S" => b"short",
        b"I" => b"int",
        b"J" => b"long",
        b"F" => b"float",
        b"D" => b"double",
        b"V" => b"void",
        [b'L', name @ .., b';'] => name,
        other => other,
    };
    let mut used = 0;
    let mut push = |byte: u8| {
        if let Some(slot) = out.get_mut(used) {
            *slot = byte;
            used += 1;
        }
    };
    for &byte in base {
        push(if byte == b'/' { b'.' } else { byte });
    }
    for _ in 0..dimensions {
        push(b'[');
        push(b']');
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(signature: &[u8]) -> &'static str {
        let mut out = [0; MAX_CLASS_NAME * 2];
        let used = java_class_name(signature, &mut out);
        std::string::String::from_utf8(out[..used].to_vec())
            .unwrap()
            .leak()
    }

    extern crate std;

    #[test]
    fn signatures_become_java_names() {
        assert_eq!(name(b"[B"), "byte[]");
        assert_eq!(name(b"Ljava/lang/String;"), "java.lang.String");
        assert_eq!(name(b"[[Ljava/lang/Object;"), "java.lang.Object[][]");
        assert_eq!(name(b"I"), "int");
        assert_eq!(name(b""), "");
        // Cut or forged signatures stay bounded and readable.
        assert_eq!(name(b"Ljava/lang/Str"), "Ljava.lang.Str");
        assert_eq!(name(&[b'['; 200]).len(), MAX_CLASS_NAME * 2);
    }
}
