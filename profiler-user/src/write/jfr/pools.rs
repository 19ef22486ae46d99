//! The constant pools: the threads and stack traces events refer to by
//! key, and the methods, classes, symbols and frame types those are made
//! of, each entry once, all written in the chunk's checkpoint event.
//!
//! Stoke names frames rather than keeping Java's method structures, so a
//! frame becomes a method again by its name: a Java frame
//! (`pkg.Class.method (File.java:LINE)_[j]`) is `method` of class
//! `pkg.Class` at line LINE, its suffix its frame type (JIT compiled,
//! inlined, interpreted); a native or kernel frame is a method of that
//! name in a class with an empty name, of frame type Native or Kernel, as
//! async-profiler writes them.

use std::{collections::HashMap, hash::Hash};

use super::{encode::Buffer, metadata::TypeId};
use crate::write::{
    html::kind::{code_kind, FrameKind},
    pprof::source_line,
};

/// The frame types by key, numbered as the JDK and async-profiler number
/// them.
const FRAME_TYPES: [&str; 6] = [
    "Interpreted",
    "JIT compiled",
    "Inlined",
    "Native",
    "C++",
    "Kernel",
];

/// The key of the only thread state: samples are of running threads.
const RUNNABLE: u64 = 1;

/// The descriptor every method gets: Stoke does not know signatures.
const DESCRIPTOR: &str = "()V";

/// Values of one pool, each with its key (from 1), in the order added.
struct Pool<T> {
    keys: HashMap<T, u64>,
    values: Vec<T>,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Self {
            keys: HashMap::new(),
            values: Vec::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Pool<T> {
    fn key(&mut self, value: T) -> u64 {
        if let Some(&key) = self.keys.get(&value) {
            return key;
        }
        self.values.push(value.clone());
        let key = self.values.len() as u64;
        self.keys.insert(value, key);
        key
    }

    /// The values with their keys.
    fn entries(&self) -> impl Iterator<Item = (u64, &T)> {
        (1..).zip(&self.values)
    }
}

/// A frame of a stack trace: its method's key, its line (-1 if unknown)
/// and its frame type's key.
type Frame = (u64, i32, u64);

/// A method: the keys of its class, its name and its descriptor.
type MethodKey = (u64, u64, u64);

/// Every pool of one recording.
#[derive(Default)]
pub(super) struct Pools {
    symbols: Pool<String>,
    /// Classes by the key of their name.
    classes: Pool<u64>,
    methods: Pool<MethodKey>,
    stack_traces: Pool<Vec<Frame>>,
    /// Threads by name and OS thread id.
    threads: Pool<(String, u64)>,
    /// Whether the thread state pool is used.
    states: bool,
}

impl Pools {
    /// The key of the thread named `name`, with OS id `id`.
    pub(super) fn thread(&mut self, name: String, id: u64) -> u64 {
        self.threads.key((name, id))
    }

    /// The key of the stack trace of `frames`, named as in a profile, leaf
    /// first.
    pub(super) fn stack_trace<'a>(&mut self, frames: impl Iterator<Item = &'a str>) -> u64 {
        let frames = frames.map(|frame| self.frame(frame)).collect();
        self.stack_traces.key(frames)
    }

    /// The key of the class named `name`.
    pub(super) fn class(&mut self, name: &str) -> u64 {
        let name = self.symbols.key(name.to_owned());
        self.classes.key(name)
    }

    /// The key of the state of sampled threads.
    pub(super) fn runnable(&mut self) -> u64 {
        self.states = true;
        RUNNABLE
    }

    fn frame(&mut self, frame: &str) -> Frame {
        let kind = code_kind(frame);
        let (name, frame_type) = match kind {
            FrameKind::Interpreted => (&frame[..frame.len() - 4], 0),
            FrameKind::Compiled => (&frame[..frame.len() - 4], 1),
            FrameKind::Inlined => (&frame[..frame.len() - 4], 2),
            FrameKind::Kernel => (&frame[..frame.len() - 4], 5),
            // Interpreted code, as the JFR readers know it.
            FrameKind::Python => (&frame[..frame.len() - 5], 0),
            _ => (frame, 3),
        };
        let (name, line) = match source_line(name) {
            Some((name, _, line)) => (name, i32::try_from(line).unwrap_or(-1)),
            None => (name.into(), -1),
        };
        let (class, method) = match frame_type {
            0..=2 => name.rsplit_once('.').unwrap_or(("", &name)),
            _ => ("", &*name),
        };
        let class = self.class(class);
        let method = self.symbols.key(method.to_owned());
        let descriptor = self.symbols.key(DESCRIPTOR.to_owned());
        let method = self.methods.key((class, method, descriptor));
        (method, line, frame_type)
    }

    /// The body (type and fields) of the checkpoint event that holds every
    /// pool with entries.
    pub(super) fn checkpoint(&self) -> Vec<u8> {
        let mut pools: Vec<(TypeId, usize, Buffer)> = Vec::new();
        let mut add = |type_id, count, entries| {
            if count > 0 {
                pools.push((type_id, count, entries));
            }
        };
        let mut frame_types = Buffer::default();
        for (key, description) in FRAME_TYPES.iter().enumerate() {
            frame_types.varint(key as u64).string(description);
        }
        add(TypeId::FrameType, FRAME_TYPES.len(), frame_types);
        let mut states = Buffer::default();
        states.varint(RUNNABLE).string("STATE_RUNNABLE");
        add(TypeId::ThreadState, usize::from(self.states), states);
        let mut threads = Buffer::default();
        for (key, (name, id)) in self.threads.entries() {
            threads.varint(key).string(name).varint(*id);
            threads.string(name).varint(0);
        }
        add(TypeId::Thread, self.threads.values.len(), threads);
        let mut symbols = Buffer::default();
        for (key, symbol) in self.symbols.entries() {
            symbols.varint(key).string(symbol);
        }
        add(TypeId::Symbol, self.symbols.values.len(), symbols);
        let mut classes = Buffer::default();
        for (key, &name) in self.classes.entries() {
            classes.varint(key).varint(name).int(0);
        }
        add(TypeId::Class, self.classes.values.len(), classes);
        let mut methods = Buffer::default();
        for (key, &(class, name, descriptor)) in self.methods.entries() {
            methods
                .varint(key)
                .varint(class)
                .varint(name)
                .varint(descriptor);
            methods.int(0).boolean(false);
        }
        add(TypeId::Method, self.methods.values.len(), methods);
        let mut stack_traces = Buffer::default();
        for (key, frames) in self.stack_traces.entries() {
            stack_traces
                .varint(key)
                .boolean(false)
                .varint(frames.len() as u64);
            for &(method, line, frame_type) in frames {
                stack_traces
                    .varint(method)
                    .int(line)
                    .int(0)
                    .varint(frame_type);
            }
        }
        add(
            TypeId::StackTrace,
            self.stack_traces.values.len(),
            stack_traces,
        );

        let mut body = Buffer::default();
        // Type, start time, duration, no previous checkpoint, an ordinary
        // (not a flush) checkpoint.
        body.varint(1).varint(0).varint(0).varint(0).boolean(false);
        body.varint(pools.len() as u64);
        for (type_id, count, entries) in pools {
            body.varint(type_id.id()).varint(count as u64);
            body.bytes.extend_from_slice(&entries.bytes);
        }
        body.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_become_methods_of_their_class() {
        let mut pools = Pools::default();
        let java = pools.frame("com.example.Busy.seventy (Busy.java:4)_[0]");
        let again = pools.frame("com.example.Busy.seventy_[j]");
        let native = pools.frame("hot_seventy (split.c:12)");
        let kernel = pools.frame("do_syscall_64_[k]");
        let unknown = pools.frame("[unknown Java method 0x9]_[i]");
        let python = pools.frame("Handler.get (app.py:12)_[py]");
        assert_eq!((java.1, java.2), (4, 0));
        assert_eq!((python.1, python.2), (12, 0));
        assert_eq!((again.0, again.1, again.2), (java.0, -1, 1));
        assert_eq!((native.1, native.2), (12, 3));
        assert_eq!((kernel.1, kernel.2), (-1, 5));
        assert_eq!(unknown.2, 2);
        let symbol = |key: u64| pools.symbols.values[key as usize - 1].as_str();
        let method = |frame: Frame| pools.methods.values[frame.0 as usize - 1];
        let class_name = |frame: Frame| symbol(pools.classes.values[method(frame).0 as usize - 1]);
        assert_eq!(class_name(java), "com.example.Busy");
        assert_eq!(symbol(method(java).1), "seventy");
        assert_eq!(class_name(native), "");
        assert_eq!(symbol(method(native).1), "hot_seventy");
        assert_eq!(symbol(method(kernel).1), "do_syscall_64");
        assert_eq!(symbol(method(unknown).1), "[unknown Java method 0x9]");
        assert_eq!(class_name(python), "Handler");
        assert_eq!(symbol(method(python).1), "get");
        assert_eq!(
            pools.methods.values.len(),
            5,
            "one method for both Java frames"
        );
    }

    #[test]
    fn stack_traces_and_threads_are_kept_once() {
        let mut pools = Pools::default();
        let a = pools.stack_trace(["f", "main"].into_iter());
        let b = pools.stack_trace(["g", "main"].into_iter());
        assert_eq!(pools.stack_trace(["f", "main"].into_iter()), a);
        assert_ne!(a, b);
        assert_eq!(pools.thread("app [1]".into(), 1), 1);
        assert_eq!(pools.thread("app [2]".into(), 2), 2);
        assert_eq!(pools.thread("app [1]".into(), 1), 1);
    }
}
