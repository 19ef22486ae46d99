//! Java allocation and lock events as counted stacks: what the agents'
//! JVMTI callbacks recorded ([`super::java_event_ring`]) becomes one
//! weighted stack each, the allocated object's or the lock's class on top
//! of the Java frames, in the event's unit (bytes allocated, nanoseconds
//! waited).

use std::sync::Arc;

use foldhash::HashMap;
use profiler_common::{
    java_events::{java_class_name, JavaEventKind, MAX_CLASS_NAME},
    jvm::JavaFrame,
};

use super::{agent_memory::AgentMemory, symbols::JavaSymbols, thread_ids::ThreadIds};
use crate::{
    event::Event,
    model::{ImageId, JavaStackFrame},
};

/// The Java events a recording asks the agents for, and how.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JavaEventSettings {
    /// `WANT_*` bits of `profiler_common::java_events`; 0 for none.
    pub wanted: u32,
    /// Mean bytes between sampled allocations.
    pub alloc_interval: u64,
    /// Shortest recorded wait for a contended lock, in nanoseconds.
    pub lock_threshold_ns: u64,
}

impl JavaEventSettings {
    /// The event a Java event of `kind` is counted in.
    pub fn event_of(kind: JavaEventKind) -> Event {
        match kind {
            JavaEventKind::Alloc => Event::Alloc,
            JavaEventKind::Monitor => Event::Lock,
        }
    }
}

/// One Java event, ready to count.
#[derive(Clone, Debug)]
pub struct JavaEventSample {
    /// Allocation or lock.
    pub kind: JavaEventKind,
    /// The JVM's process image.
    pub image: ImageId,
    /// The JVM's pid.
    pub pid: u32,
    /// The thread, as the host sees it.
    pub tid: u32,
    /// The class allocated or locked, as Java names it (`byte[]`).
    pub class: Arc<str>,
    /// Java frames, innermost first.
    pub java: Vec<JavaStackFrame>,
    /// Bytes allocated (estimated, see [`allocated_bytes`]) or
    /// nanoseconds waited.
    pub weight: u64,
}

/// The bytes of allocation a sampled object of `size` bytes stands for,
/// with HotSpot sampling on average every `interval` bytes.
///
/// HotSpot's sampler (`ThreadHeapSampler`) draws the bytes to the next
/// sample from an exponential distribution of mean `interval`, so an
/// object of `size` bytes is sampled with probability
/// `p = 1 - exp(-size / interval)`; weighting each sample by `size / p`
/// (the Horvitz-Thompson estimator) makes the total an unbiased estimate
/// of all bytes allocated, by stack and class. async-profiler weighs a
/// sample `max(size, interval)`, which agrees for objects much smaller or
/// much larger than the interval but undercounts those near it (by 37%
/// at `size == interval`).
pub fn allocated_bytes(size: u64, interval: u64) -> u64 {
    if size == 0 || interval == 0 {
        return size;
    }
    let ratio = size as f64 / interval as f64;
    // -expm1(-x) is 1 - exp(-x) without losing digits for small x.
    let probability = -(-ratio).exp_m1();
    (size as f64 / probability).round() as u64
}

/// Takes the events JVM `pid`'s agent recorded since the last call, with
/// the method ids their frames need named, and not asked about yet, added
/// to `wanted`.
pub fn take(
    memory: &mut AgentMemory,
    symbols: &JavaSymbols,
    threads: &mut ThreadIds,
    (classes, stacks): (&mut ClassNames, &mut EventStacks),
    (pid, image): (u32, ImageId),
    settings: &JavaEventSettings,
    wanted: &mut Vec<u64>,
) -> Vec<JavaEventSample> {
    let mut events = Vec::new();
    // The JVM samples at the smallest interval any stoke reading asked
    // for: the weights follow the interval it samples at.
    let interval = match memory.alloc_interval_on() {
        0 => settings.alloc_interval,
        on => on,
    };
    memory.drain_java_events(|event| {
        let Some(tid) = threads.host_tid(pid, event.tid) else {
            return;
        };
        let weight = match event.kind {
            JavaEventKind::Alloc => allocated_bytes(event.value, interval),
            JavaEventKind::Monitor => event.value,
        };
        events.push(JavaEventSample {
            kind: event.kind,
            image,
            pid,
            tid,
            class: classes.name_of(&event.class),
            java: stacks.frames(symbols, &event.frames, wanted),
            weight,
        });
    });
    events
}

/// Most frames [`EventStacks`] keeps for one JVM, all stacks together
/// (32 bytes each, twice over: a hostile JVM could send endless distinct
/// stacks of the most frames).
const MAX_KEPT_FRAMES: usize = 1 << 16;

/// The stacks one JVM's events came with, each with its frames' kinds
/// worked out once while the JVM's compiled code stays as it was: an
/// allocation recording takes thousands of events a second from far fewer
/// call sites, and the kinds cost a few lookups per frame.
#[derive(Debug, Default)]
pub struct EventStacks {
    code_version: u64,
    stacks: HashMap<Box<[JavaFrame]>, Box<[JavaStackFrame]>>,
    /// Frames in `stacks`.
    frames: usize,
}

impl EventStacks {
    /// The frames of a stack the agent sent, with their kinds; the method
    /// ids not asked about yet are added to `wanted`. A stack is kept only
    /// once all its methods were asked about (a request the agent had no
    /// room for is asked again with the stack's next event).
    fn frames(
        &mut self,
        symbols: &JavaSymbols,
        raw: &[JavaFrame],
        wanted: &mut Vec<u64>,
    ) -> Vec<JavaStackFrame> {
        if self.code_version != symbols.code_version() {
            self.forget();
            self.code_version = symbols.code_version();
        }
        if let Some(frames) = self.stacks.get(raw) {
            return frames.to_vec();
        }
        let frames = symbols.with_kinds(0, raw);
        let asked = wanted.len();
        wanted.extend(
            frames
                .iter()
                .map(|frame| frame.method_id)
                .filter(|&id| !symbols.was_requested(id)),
        );
        if wanted.len() == asked {
            if self.frames + raw.len() > MAX_KEPT_FRAMES {
                self.forget();
            }
            self.frames += raw.len();
            self.stacks.insert(raw.into(), frames.clone().into());
        }
        frames
    }

    fn forget(&mut self) {
        self.stacks.clear();
        self.frames = 0;
    }
}

/// Most class names [`ClassNames`] keeps for one JVM (a hostile one could
/// send endless made-up ones).
const MAX_CLASSES: usize = 1 << 14;

/// The Java names of the classes one JVM's events named, made once each:
/// most events name a few classes over and over.
#[derive(Debug, Default)]
pub struct ClassNames(HashMap<Box<[u8]>, Arc<str>>);

impl ClassNames {
    /// The Java name of a class signature the agent sent ([`class_name`]).
    pub fn name_of(&mut self, signature: &[u8]) -> Arc<str> {
        if let Some(name) = self.0.get(signature) {
            return Arc::clone(name);
        }
        let name = class_name(signature);
        if self.0.len() < MAX_CLASSES {
            self.0.insert(signature.into(), Arc::clone(&name));
        }
        name
    }
}

/// The Java name of a class signature the agent sent (bounded, lossily
/// decoded: the JVM is not trusted); `?` for an empty one.
pub fn class_name(signature: &[u8]) -> Arc<str> {
    let signature = &signature[..signature.len().min(MAX_CLASS_NAME)];
    let mut out = [0; MAX_CLASS_NAME * 2];
    let used = java_class_name(signature, &mut out);
    if used == 0 {
        return "?".into();
    }
    String::from_utf8_lossy(&out[..used]).into()
}

#[cfg(test)]
mod tests {
    use profiler_common::jvm::Event as AgentEvent;

    use super::*;
    use crate::model::FrameKind;

    #[test]
    fn an_event_stack_is_kept_once_its_methods_were_asked_about() {
        let mut symbols = JavaSymbols::default();
        let mut stacks = EventStacks::default();
        let raw = [JavaFrame::new(7, 1), JavaFrame::new(8, 2)];
        let mut wanted = Vec::new();
        let first = stacks.frames(&symbols, &raw, &mut wanted);
        assert_eq!(wanted, [7, 8]);
        assert!(stacks.stacks.is_empty());
        symbols.newly_wanted(wanted.drain(..));
        assert_eq!(stacks.frames(&symbols, &raw, &mut wanted), first);
        assert!(wanted.is_empty());
        assert_eq!(stacks.stacks.len(), 1);
        // New compiled code changes the kinds: worked out again.
        symbols.apply(AgentEvent::CodeLoad {
            method_id: 7,
            start: 0x1000,
            size: 0x100,
        });
        let again = stacks.frames(&symbols, &raw, &mut wanted);
        assert_eq!(first[0].kind, FrameKind::Interpreted);
        assert_eq!(again[0].kind, FrameKind::Compiled);
        assert_eq!(stacks.frames(&symbols, &raw, &mut wanted), again);
    }

    #[test]
    fn sampled_sizes_scale_to_the_bytes_they_stand_for() {
        let interval = 512 << 10;
        // Small objects stand for about one interval each.
        let small = allocated_bytes(16, interval);
        assert!((interval..interval + 16).contains(&small), "{small}");
        // Huge objects are always sampled: they stand for themselves.
        assert_eq!(allocated_bytes(100 << 20, interval), 100 << 20);
        // At the interval: size / (1 - 1/e).
        let at = allocated_bytes(interval, interval) as f64;
        assert!((at / interval as f64 - 1.582).abs() < 0.001, "{at}");
        assert_eq!(allocated_bytes(0, interval), 0);
        assert_eq!(allocated_bytes(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn class_names_are_javas() {
        assert_eq!(&*class_name(b"[B"), "byte[]");
        assert_eq!(&*class_name(b"Ljava/lang/String;"), "java.lang.String");
        assert_eq!(&*class_name(b""), "?");
        assert_eq!(class_name(&[0xff; 1000]).chars().count(), MAX_CLASS_NAME);
    }

    #[test]
    fn class_names_are_made_once_and_bounded() {
        let mut names = ClassNames::default();
        let first = names.name_of(b"[B");
        assert!(Arc::ptr_eq(&first, &names.name_of(b"[B")));
        for n in 0..MAX_CLASSES + 10 {
            names.name_of(format!("LC{n};").as_bytes());
        }
        assert_eq!(names.0.len(), MAX_CLASSES);
        assert_eq!(&*names.name_of(b"LC99999;"), "C99999");
    }
}
