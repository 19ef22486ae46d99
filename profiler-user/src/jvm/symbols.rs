//! Names of Java frames: the methods the agent described and the code the
//! JIT placed, per JVM.

use std::{collections::BTreeMap, sync::Arc};

use foldhash::{HashMap, HashSet};
use profiler_common::jvm::{inline_edges, Event, InlineEdge, JavaFrame, MethodInfo};

use crate::model::{FrameKind, JavaStackFrame};

/// Most blobs of code in one JVM's code map. The log a JVM's agent fills
/// holds at most about 1.5 million (32 bytes each); a JVM keeps some tens
/// of thousands alive.
const MAX_CODE_BLOBS: usize = 1 << 19;

/// Most compiled versions of one method alive at once: HotSpot keeps a few
/// of an ordinary method (tiers, OSR versions, not-entrant ones not flushed
/// yet; over 16 seen on JavaBusy), but one per signature of a
/// signature-polymorphic intrinsic (`MethodHandle.linkToStatic` and kin:
/// over 64 32-byte adapters in a JVM doing little else); a forged log as
/// many as it likes.
const MAX_BLOBS_PER_METHOD: usize = 4096;

/// Most inlined calls kept per compiled blob, and in all.
const MAX_EDGES_PER_BLOB: usize = 4096;
const MAX_EDGES: usize = 1 << 20;

/// Most methods described, and most asked about, per JVM.
const MAX_METHODS: usize = 1 << 19;

#[derive(Debug)]
struct JavaMethod {
    /// `package.Class.method`.
    name: Arc<str>,
    source: Arc<str>,
    /// `(start bci, line)`, sorted.
    lines: Vec<(u32, u32)>,
}

#[derive(Clone, Debug)]
enum CodeBlob {
    Compiled { end: u64, method_id: u64 },
    Generated { end: u64, name: Arc<str> },
}

/// What one JVM's agent told about its methods and code.
#[derive(Debug, Default)]
pub struct JavaSymbols {
    methods: HashMap<u64, JavaMethod>,
    code: BTreeMap<u64, CodeBlob>,
    /// Methods with compiled code now: where each of their blobs starts.
    compiled: HashMap<u64, HashSet<u64>>,
    /// The calls inlined into each compiled blob, by its start (distinct).
    inlined: HashMap<u64, Vec<InlineEdge>>,
    /// For each method and call, how many compiled blobs of the method
    /// inlined the call: a frame's kind is one lookup, however many
    /// versions of its caller are compiled.
    inlined_by_method: HashMap<(u64, InlineEdge), u32>,
    /// Inlined calls in `inlined`, all blobs together.
    edges: usize,
    requested: HashSet<u64>,
    /// Changes whenever compiled code or its inlining does, which changes
    /// the kinds of frames.
    code_version: u64,
    /// Events beyond the bounds above, left out.
    dropped: u64,
}

impl JavaSymbols {
    /// Takes in one event from the agent's log. What lies beyond the bounds
    /// of one JVM's symbols is left out and counted ([`Self::dropped`]).
    pub fn apply(&mut self, event: Event) {
        if !matches!(event, Event::Method(_)) {
            self.code_version += 1;
        }
        match event {
            Event::Method(info) => {
                if self.methods.len() < MAX_METHODS || self.methods.contains_key(&info.method_id) {
                    self.methods.insert(info.method_id, describe(&info));
                } else {
                    self.dropped += 1;
                }
            }
            Event::CodeLoad {
                method_id,
                start,
                size,
            } => {
                let versions = self.compiled.get(&method_id).map_or(0, HashSet::len);
                if versions >= MAX_BLOBS_PER_METHOD || !self.has_room(start) {
                    self.dropped += 1;
                    return;
                }
                let end = start.saturating_add(size);
                if let Some(CodeBlob::Compiled { method_id: old, .. }) = self
                    .code
                    .insert(start, CodeBlob::Compiled { end, method_id })
                {
                    self.uncompiled(old, start);
                }
                self.compiled.entry(method_id).or_default().insert(start);
            }
            Event::CodeInline { start, edges } => {
                if let Some(&CodeBlob::Compiled { method_id, .. }) = self.code.get(&start) {
                    let edges: HashSet<InlineEdge> =
                        inline_edges(edges).take(MAX_EDGES_PER_BLOB).collect();
                    let replaced = self.inlined.get(&start).map_or(0, Vec::len);
                    if self.edges - replaced + edges.len() > MAX_EDGES {
                        self.dropped += 1;
                        return;
                    }
                    self.forget_inlined(method_id, start);
                    for edge in &edges {
                        *self
                            .inlined_by_method
                            .entry((method_id, *edge))
                            .or_default() += 1;
                    }
                    self.edges += edges.len();
                    self.inlined.insert(start, edges.into_iter().collect());
                }
            }
            Event::CodeUnload { start, .. } => {
                if let Some(CodeBlob::Compiled { method_id, .. }) = self.code.remove(&start) {
                    self.uncompiled(method_id, start);
                }
            }
            Event::DynamicCode { start, size, name } => {
                if !self.has_room(start) {
                    self.dropped += 1;
                    return;
                }
                let name = String::from_utf8_lossy(name).replace([';', '\n'], " ");
                if let Some(CodeBlob::Compiled { method_id, .. }) = self.code.insert(
                    start,
                    CodeBlob::Generated {
                        end: start.saturating_add(size),
                        name: name.into(),
                    },
                ) {
                    self.uncompiled(method_id, start);
                }
            }
        }
    }

    /// Whether a blob at `start` fits in the code map.
    fn has_room(&self, start: u64) -> bool {
        self.code.len() < MAX_CODE_BLOBS || self.code.contains_key(&start)
    }

    /// Events of the agent's log left out, beyond the bounds of one JVM's
    /// symbols.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn uncompiled(&mut self, method_id: u64, start: u64) {
        self.forget_inlined(method_id, start);
        if let Some(starts) = self.compiled.get_mut(&method_id) {
            starts.remove(&start);
            if starts.is_empty() {
                self.compiled.remove(&method_id);
            }
        }
    }

    /// Forgets the calls inlined into the blob of `method_id` at `start`.
    fn forget_inlined(&mut self, method_id: u64, start: u64) {
        let Some(edges) = self.inlined.remove(&start) else {
            return;
        };
        self.edges -= edges.len();
        for edge in edges {
            let key = (method_id, edge);
            if let Some(count) = self.inlined_by_method.get_mut(&key) {
                *count -= 1;
                if *count == 0 {
                    self.inlined_by_method.remove(&key);
                }
            }
        }
    }

    /// Of `method_ids`, those never asked about before (and now counted as
    /// asked).
    pub fn newly_wanted(&mut self, method_ids: impl IntoIterator<Item = u64>) -> Vec<u64> {
        method_ids
            .into_iter()
            .filter(|&id| {
                id != 0 && self.requested.len() < MAX_METHODS && self.requested.insert(id)
            })
            .collect()
    }

    /// Whether `method_id` was asked about already.
    pub fn was_requested(&self, method_id: u64) -> bool {
        self.requested.contains(&method_id)
    }

    /// Whether every method asked about has been described.
    pub fn all_described(&self) -> bool {
        self.requested
            .iter()
            .all(|id| self.methods.contains_key(id))
    }

    /// Forgets that `method_ids` were asked about, so they are asked again
    /// (the request ring was full).
    pub fn unrequest(&mut self, method_ids: &[u64]) {
        for id in method_ids {
            self.requested.remove(id);
        }
    }

    /// The frames of a Java stack taken at `pc`, with how each ran
    /// (AsyncGetCallTrace itself does not say). From the outermost frame
    /// in: a frame is inlined when the compiled code its caller runs in
    /// inlined the call (the caller's method and bytecode index and the
    /// callee match an edge the JIT reported for that code); otherwise
    /// compiled when its method has compiled code, interpreted when not.
    /// The innermost frame, unless inlined, runs where `pc` is. Built in
    /// one vector: this runs at every Java sample.
    pub fn with_kinds(&self, pc: u64, frames: &[JavaFrame]) -> Vec<JavaStackFrame> {
        let mut stack: Vec<JavaStackFrame> = frames
            .iter()
            .map(|frame| JavaStackFrame {
                method_id: frame.method_id,
                bci: frame.bci,
                kind: FrameKind::Interpreted,
            })
            .collect();
        // The method whose compiled code the frame being looked at runs in.
        let mut running_in = None;
        for index in (0..stack.len()).rev() {
            let frame = stack[index];
            let inlined = match (running_in, stack.get(index + 1)) {
                (Some(compiled), Some(caller)) => self.inlines(
                    compiled,
                    &InlineEdge {
                        caller: caller.method_id,
                        caller_bci: caller.bci,
                        callee: frame.method_id,
                    },
                ),
                _ => false,
            };
            stack[index].kind = if inlined {
                FrameKind::Inlined
            } else if self.compiled.contains_key(&frame.method_id) {
                running_in = Some(frame.method_id);
                FrameKind::Compiled
            } else {
                running_in = None;
                FrameKind::Interpreted
            };
        }
        // Java events come with no pc (0), which no code is at.
        let at_pc = match (pc != 0).then(|| self.code_at(pc)).flatten() {
            Some(CodeBlob::Generated { name, .. }) if name.contains("nterpreter") => {
                Some(FrameKind::Interpreted)
            }
            Some(CodeBlob::Compiled { .. }) => Some(FrameKind::Compiled),
            _ => None,
        };
        if let (Some(innermost), Some(kind)) = (stack.first_mut(), at_pc) {
            if innermost.kind != FrameKind::Inlined || kind == FrameKind::Interpreted {
                innermost.kind = kind;
            }
        }
        stack
    }

    /// A number that changes whenever the kinds of frames may have.
    pub fn code_version(&self) -> u64 {
        self.code_version
    }

    /// Whether compiled code of `method` inlined the call `edge`.
    fn inlines(&self, method: u64, edge: &InlineEdge) -> bool {
        self.inlined_by_method.contains_key(&(method, *edge))
    }

    /// A method's name, `package.Class.method`, once the agent told it.
    pub fn method_name(&self, method_id: u64) -> Option<&str> {
        self.methods.get(&method_id).map(|method| &*method.name)
    }

    /// The name of a Java frame; `lines` adds `(File.java:LINE)`.
    pub fn frame_name(&self, frame: &JavaFrame, kind: FrameKind, lines: bool) -> Arc<str> {
        let Some(method) = self.methods.get(&frame.method_id) else {
            return format!(
                "[unknown Java method {:#x}]{}",
                frame.method_id,
                kind.suffix()
            )
            .into();
        };
        let location = match (lines, line_of(&method.lines, frame.bci)) {
            (false, _) => String::new(),
            (true, Some(line)) => format!(" ({}:{line})", method.source),
            (true, None) => format!(" ({})", method.source),
        };
        format!("{}{location}{}", method.name, kind.suffix()).into()
    }

    /// The name of JIT code at `address` seen in a native stack, if the
    /// agent reported code there.
    pub fn code_name(&self, address: u64) -> Option<Arc<str>> {
        match self.code_at(address)? {
            CodeBlob::Compiled { method_id, .. } => {
                let frame = JavaFrame::new(*method_id, -1);
                Some(self.frame_name(&frame, FrameKind::Compiled, false))
            }
            CodeBlob::Generated { name, .. } => Some(format!("[{name}]").into()),
        }
    }

    /// Method ids of compiled code at the addresses, for requesting names.
    pub fn compiled_methods_at<'a>(
        &'a self,
        addresses: impl IntoIterator<Item = u64> + 'a,
    ) -> impl Iterator<Item = u64> + 'a {
        addresses
            .into_iter()
            .filter_map(|address| match self.code_at(address)? {
                CodeBlob::Compiled { method_id, .. } => Some(*method_id),
                CodeBlob::Generated { .. } => None,
            })
    }

    /// Whether any of `addresses` lies in code the JVM generated: compiled
    /// methods, the interpreter, stubs.
    pub fn in_java_code(&self, addresses: &[u64]) -> bool {
        addresses
            .iter()
            .any(|&address| self.code_at(address).is_some())
    }

    fn code_at(&self, address: u64) -> Option<&CodeBlob> {
        let (_, blob) = self.code.range(..=address).next_back()?;
        let end = match blob {
            CodeBlob::Compiled { end, .. } | CodeBlob::Generated { end, .. } => *end,
        };
        (address < end).then_some(blob)
    }
}

fn describe(info: &MethodInfo) -> JavaMethod {
    // The agent could not name it (a method id it never handed out).
    if info.name.is_empty() {
        return JavaMethod {
            name: format!("[unknown Java method {:#x}]", info.method_id).into(),
            source: "".into(),
            lines: Vec::new(),
        };
    }
    let class = String::from_utf8_lossy(info.class);
    let class = class
        .strip_prefix('L')
        .and_then(|class| class.strip_suffix(';'))
        .unwrap_or(&class)
        .replace('/', ".");
    let name = format!("{class}.{}", String::from_utf8_lossy(info.name));
    let mut lines: Vec<(u32, u32)> = info
        .lines
        .chunks_exact(8)
        .map(|entry| {
            let word = |at: usize| u32::from_le_bytes(entry[at..at + 4].try_into().unwrap());
            (word(0), word(4))
        })
        .collect();
    lines.sort_unstable();
    JavaMethod {
        name: name.replace([';', '\n'], " ").into(),
        source: String::from_utf8_lossy(info.source)
            .replace([';', '\n'], " ")
            .into(),
        lines,
    }
}

fn line_of(lines: &[(u32, u32)], bci: i32) -> Option<u32> {
    let bci = u32::try_from(bci).ok()?;
    let index = lines
        .partition_point(|&(start, _)| start <= bci)
        .checked_sub(1)?;
    Some(lines[index].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl JavaSymbols {
        /// How each frame of a stack taken at `pc` ran.
        fn kinds(&self, pc: u64, frames: &[JavaFrame]) -> Vec<FrameKind> {
            self.with_kinds(pc, frames)
                .iter()
                .map(|frame| frame.kind)
                .collect()
        }
    }

    fn symbols() -> JavaSymbols {
        let lines = [0u32, 3, 10, 4].map(u32::to_le_bytes).concat();
        let mut symbols = JavaSymbols::default();
        symbols.apply(Event::Method(MethodInfo {
            method_id: 7,
            class: b"Lcom/example/Busy;",
            name: b"seventy",
            signature: b"(J)J",
            source: b"Busy.java",
            lines: &lines,
        }));
        symbols.apply(Event::CodeLoad {
            method_id: 7,
            start: 0x1000,
            size: 0x100,
        });
        symbols.apply(Event::DynamicCode {
            start: 0x5000,
            size: 0x1000,
            name: b"Interpreter",
        });
        symbols
    }

    #[test]
    fn frames_are_named_with_kind_and_line() {
        let symbols = symbols();
        let frame = JavaFrame::new(7, 12);
        assert_eq!(
            &*symbols.frame_name(&frame, FrameKind::Compiled, false),
            "com.example.Busy.seventy_[j]"
        );
        assert_eq!(
            &*symbols.frame_name(&frame, FrameKind::Interpreted, true),
            "com.example.Busy.seventy (Busy.java:4)_[0]"
        );
        assert_eq!(
            &*symbols.frame_name(&JavaFrame::new(9, 0), FrameKind::Compiled, false),
            "[unknown Java method 0x9]_[j]"
        );
    }

    #[test]
    fn kinds_follow_the_pc_then_compiled_state() {
        let mut symbols = symbols();
        let frames = [JavaFrame::new(9, 1), JavaFrame::new(7, 1)];
        assert_eq!(
            symbols.kinds(0x5010, &frames),
            [FrameKind::Interpreted, FrameKind::Compiled]
        );
        assert_eq!(
            symbols.kinds(0x1010, &frames),
            [FrameKind::Compiled, FrameKind::Compiled]
        );
        symbols.apply(Event::CodeUnload {
            method_id: 7,
            start: 0x1000,
        });
        assert_eq!(
            symbols.kinds(0x9999, &frames),
            [FrameKind::Interpreted, FrameKind::Interpreted]
        );
    }

    #[test]
    fn frames_the_jit_inlined_are_told_from_frames_of_their_own() {
        let mut symbols = symbols();
        // seventy (7) inlined helper (8) at bci 4, and helper inlined leaf
        // (9) at bci 2; its call to other (10) at bci 6 was not inlined.
        let edges = [(7, 4, 8), (8, 2, 9)]
            .map(|(caller, caller_bci, callee)| {
                InlineEdge {
                    caller,
                    caller_bci,
                    callee,
                }
                .to_bytes()
            })
            .concat();
        symbols.apply(Event::CodeInline {
            start: 0x1000,
            edges: &edges,
        });
        symbols.apply(Event::CodeLoad {
            method_id: 10,
            start: 0x2000,
            size: 0x100,
        });
        // Innermost first: leaf <- helper <- seventy <- main (interpreted).
        let stack = [
            JavaFrame::new(9, 0),
            JavaFrame::new(8, 2),
            JavaFrame::new(7, 4),
            JavaFrame::new(1, 0),
        ];
        use FrameKind::*;
        assert_eq!(
            symbols.kinds(0x1010, &stack),
            [Inlined, Inlined, Compiled, Interpreted]
        );
        // The same methods called from other bytecodes were not inlined.
        let elsewhere = [JavaFrame::new(8, 0), JavaFrame::new(7, 5)];
        assert_eq!(symbols.kinds(0x5010, &elsewhere), [Interpreted, Compiled]);
        // helper calls other, compiled on its own.
        let called = [
            JavaFrame::new(10, 0),
            JavaFrame::new(8, 6),
            JavaFrame::new(7, 4),
        ];
        assert_eq!(
            symbols.kinds(0x2010, &called),
            [Compiled, Inlined, Compiled]
        );
        // Once seventy's code is freed, nothing is inlined into it.
        symbols.apply(Event::CodeUnload {
            method_id: 7,
            start: 0x1000,
        });
        assert_eq!(
            symbols.kinds(0x5010, &stack),
            [Interpreted, Interpreted, Interpreted, Interpreted]
        );
        assert!(symbols.inlined.is_empty());
        assert!(symbols.inlined_by_method.is_empty());
    }

    #[test]
    fn a_call_stays_inlined_while_any_compiled_version_inlines_it() {
        let mut symbols = symbols();
        let edge = InlineEdge {
            caller: 7,
            caller_bci: 4,
            callee: 8,
        }
        .to_bytes();
        symbols.apply(Event::CodeLoad {
            method_id: 7,
            start: 0x3000,
            size: 0x100,
        });
        for start in [0x1000, 0x3000] {
            symbols.apply(Event::CodeInline {
                start,
                edges: &edge,
            });
        }
        // Told twice about the same blob: counted once.
        symbols.apply(Event::CodeInline {
            start: 0x3000,
            edges: &edge,
        });
        let stack = [JavaFrame::new(8, 0), JavaFrame::new(7, 4)];
        use FrameKind::*;
        symbols.apply(Event::CodeUnload {
            method_id: 7,
            start: 0x1000,
        });
        assert_eq!(symbols.kinds(0x3010, &stack), [Inlined, Compiled]);
        // The blob at 0x3000 now holds other code: nothing inlines the call.
        symbols.apply(Event::CodeLoad {
            method_id: 9,
            start: 0x3000,
            size: 0x100,
        });
        assert_eq!(symbols.kinds(0x5010, &stack), [Interpreted, Interpreted]);
        assert!(symbols.inlined_by_method.is_empty());
        assert_eq!(symbols.edges, 0);
    }

    #[test]
    fn jit_code_in_native_stacks_is_named() {
        let symbols = symbols();
        assert_eq!(
            symbols.code_name(0x1080).as_deref(),
            Some("com.example.Busy.seventy_[j]")
        );
        assert_eq!(symbols.code_name(0x5fff).as_deref(), Some("[Interpreter]"));
        assert_eq!(symbols.code_name(0x1100), None);
        assert!(symbols.in_java_code(&[0x10, 0x5800]));
        assert!(!symbols.in_java_code(&[0x10, 0x1100]));
        assert_eq!(
            symbols
                .compiled_methods_at([0x1000, 0x5000, 0])
                .collect::<Vec<_>>(),
            [7]
        );
    }

    #[test]
    fn each_method_is_requested_once_unless_given_back() {
        let mut symbols = JavaSymbols::default();
        assert_eq!(symbols.newly_wanted([1, 2, 2, 0]), [1, 2]);
        assert_eq!(symbols.newly_wanted([1, 3]), [3]);
        symbols.unrequest(&[3]);
        assert_eq!(symbols.newly_wanted([3]), [3]);
    }

    #[test]
    fn a_forged_log_cannot_grow_the_symbols_past_their_bounds() {
        let mut symbols = JavaSymbols::default();
        // Many versions of one method: a bounded number kept.
        let versions = MAX_BLOBS_PER_METHOD as u64 + 1000;
        for start in 0..versions {
            symbols.apply(Event::CodeLoad {
                method_id: 1,
                start: start * 16,
                size: 16,
            });
        }
        assert_eq!(symbols.compiled[&1].len(), MAX_BLOBS_PER_METHOD);
        assert_eq!(symbols.dropped(), 1000);
        // Many methods: the code map stops at its bound.
        for start in 0..MAX_CODE_BLOBS as u64 + 10 {
            symbols.apply(Event::CodeLoad {
                method_id: start + 2,
                start: (start + versions) * 16,
                size: 16,
            });
        }
        assert_eq!(symbols.code.len(), MAX_CODE_BLOBS);
        // Inlined calls: bounded per blob.
        let edges: Vec<u8> = (0..MAX_EDGES_PER_BLOB as u64 + 100)
            .flat_map(|callee| {
                InlineEdge {
                    caller: 1,
                    caller_bci: 0,
                    callee,
                }
                .to_bytes()
            })
            .collect();
        symbols.apply(Event::CodeInline {
            start: 0,
            edges: &edges,
        });
        assert_eq!(symbols.edges, MAX_EDGES_PER_BLOB);
        symbols.apply(Event::CodeUnload {
            method_id: 1,
            start: 0,
        });
        assert_eq!(symbols.edges, 0);
        assert!(symbols.inlined_by_method.is_empty());
        // Requests: bounded.
        let wanted = symbols.newly_wanted(1..=MAX_METHODS as u64 + 5);
        assert_eq!(wanted.len(), MAX_METHODS);
    }
}
