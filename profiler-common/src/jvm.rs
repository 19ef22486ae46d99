//! The shared memory between Stoke's JVMTI agent and `stoke`.
//!
//! The agent creates a memfd named [`MEMFD_NAME`] of [`TOTAL_SIZE`] bytes,
//! seals its size, and lays it out as:
//!
//! | offset | what |
//! | --- | --- |
//! | 0 | [`Header`] |
//! | [`SAMPLES_OFFSET`] | [`SAMPLE_SLOTS`] × [`SampleSlot`]: Java stacks taken by the signal handler |
//! | [`REQUESTS_OFFSET`] | [`MAX_CONSUMERS`] × [`REQUEST_SLOTS`] × `u64`: method ids each stoke wants named |
//! | [`EVENTS_OFFSET`] | [`EVENTS_SIZE`] bytes of [`Event`] records, appended by the agent |
//! | [`JAVA_EVENTS_OFFSET`] | [`JAVA_EVENT_SLOTS`] × [`JavaEventSlot`]: allocations and contended locks ([`crate::java_events`]) |
//!
//! Several stokes may read one agent at once (at most [`MAX_CONSUMERS`]),
//! each at its own pace: the sample ring is a broadcast ring. Producers
//! (signal handlers on any thread) claim position `p` with one `fetch_add`
//! and write its slot under the slot's sequence, a seqlock
//! ([`writing_sequence`], [`written_sequence`]); a producer that finds the
//! slot mid-write by another drops its sample and counts it. Each stoke
//! keeps its own read position, copies a complete slot and checks the
//! sequence again after the copy: a slot overwritten meanwhile, or a
//! position the producers lapped, is lost to that stoke alone, and a stoke
//! never writes the ring, so one killed at any point disturbs no other.
//!
//! Each stoke owns one [`Consumer`] slot of the header while it reads: it
//! holds an open-file-description write lock (`F_OFD_SETLK`) on byte
//! [`CONSUMER_LOCKS`]` + i` of the memfd, which the kernel drops when the
//! stoke dies, and the agent heeds a slot's wishes only while its lock is
//! held (`F_OFD_GETLK`). Every stoke also holds a shared `flock` on the
//! memfd: the agent's exclusive try tells whether any stoke reads.
//!
//! Stoke reads what a profiled, untrusted process wrote: every count and
//! length here is checked against the mapping before use.

use core::sync::atomic::{AtomicU32, AtomicU64};

use crate::java_events::{JavaEventSlot, JAVA_EVENT_SLOTS};

/// The first eight bytes of the header: "STOKEJVM".
pub const MAGIC: u64 = u64::from_le_bytes(*b"STOKEJVM");
/// Bumped on any change to this layout.
pub const VERSION: u32 = 8;
/// The name the agent gives its memfd; `/proc/PID/fd` shows it as
/// `/memfd:stoke-agent (deleted)`.
pub const MEMFD_NAME: &str = "stoke-agent";
/// The signal that asks a JVM thread for its Java stack. SIGURG is ignored
/// by default, so a signal that arrives when no handler waits harms nothing,
/// and HotSpot does not use it.
pub const SIGNAL: i32 = 23;
/// Most Java frames one sample keeps.
pub const MAX_JAVA_FRAMES: usize = 256;
/// Slots of the sample ring.
pub const SAMPLE_SLOTS: usize = 1024;
/// Most stokes that read one agent at once.
pub const MAX_CONSUMERS: usize = 8;
/// The first byte of the memfd whose OFD lock claims [`Consumer`] slot 0;
/// slot `i` is claimed by a lock on byte `CONSUMER_LOCKS + i`.
pub const CONSUMER_LOCKS: u64 = 0;
/// Slots of each stoke's method-request ring.
pub const REQUEST_SLOTS: usize = 512;
/// Bit 63 of a method request: not "describe this method" but "have the
/// JIT recompile its class" (jmethodIDs are user-space pointers, so the bit
/// is free).
pub const RECOMPILE_REQUEST: u64 = 1 << 63;
/// Bytes of the event log. It only grows (about 60 bytes per compiled
/// method, 240 with its inlining, measured on javac's JIT): room for a few
/// hundred thousand compilations. A memfd takes memory only for the pages
/// written, so the unused rest costs nothing.
pub const EVENTS_SIZE: usize = 48 << 20;

/// Offset of the sample ring.
pub const SAMPLES_OFFSET: usize = 4096;
/// Offset of the method-request ring.
pub const REQUESTS_OFFSET: usize = SAMPLES_OFFSET + SAMPLE_SLOTS * size_of::<SampleSlot>();
/// Offset of the event log.
pub const EVENTS_OFFSET: usize = REQUESTS_OFFSET + MAX_CONSUMERS * REQUEST_SLOTS * size_of::<u64>();
/// Offset of the Java event ring.
pub const JAVA_EVENTS_OFFSET: usize = EVENTS_OFFSET + EVENTS_SIZE;
/// Size of the whole shared memory.
pub const TOTAL_SIZE: usize = JAVA_EVENTS_OFFSET + JAVA_EVENT_SLOTS * size_of::<JavaEventSlot>();

// The layout's promises, checked when compiling.
const _: () = {
    assert!(size_of::<Header>() <= SAMPLES_OFFSET);
    assert!(size_of::<JavaFrame>() == 16);
    assert!(REQUESTS_OFFSET.is_multiple_of(8) && EVENTS_OFFSET.is_multiple_of(8));
    assert!(JAVA_EVENTS_OFFSET.is_multiple_of(8) && size_of::<JavaEventSlot>().is_multiple_of(8));
    assert!(TOTAL_SIZE < 64 << 20);
};

/// What the agent is doing, in [`Header::state`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentState {
    /// Setting up; no handler yet: send no signal.
    Starting = 0,
    /// The signal handler is installed: signals are welcome.
    Ready = 1,
    /// Someone replaced the handler: send no more signals.
    HandlerLost = 2,
    /// The agent could not start (see its stderr line in the JVM's output).
    Failed = 3,
}

impl AgentState {
    /// The state a raw header value names.
    pub fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            0 => Some(Self::Starting),
            1 => Some(Self::Ready),
            2 => Some(Self::HandlerLost),
            3 => Some(Self::Failed),
            _ => None,
        }
    }
}

/// Why the agent did not start: `Agent_OnAttach`'s return value (0 when
/// it started), which the JVM hands back to stoke in its attach reply.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentStartError {
    /// libjvm.so exports no `AsyncGetCallTrace`.
    NoAsyncGetCallTrace = 1,
    /// The JVM gave no JVMTI environment: it is still starting (JVMTI
    /// environments exist only once the VM is live), so a later attach
    /// can succeed; the agent stays ready for it.
    NoJvmti = 2,
    /// The JVM refused the JVMTI capabilities the agent needs.
    Capabilities = 3,
    /// The agent could not create the memory it shares with stoke.
    SharedMemory = 4,
    /// The JVM refused the JVMTI events the agent needs.
    Events = 5,
    /// The agent hit a bug while starting.
    Panicked = 6,
}

impl AgentStartError {
    /// The error a raw return value names.
    pub fn from_raw(raw: i32) -> Option<Self> {
        [
            Self::NoAsyncGetCallTrace,
            Self::NoJvmti,
            Self::Capabilities,
            Self::SharedMemory,
            Self::Events,
            Self::Panicked,
        ]
        .into_iter()
        .find(|error| *error as i32 == raw)
    }

    /// What happened, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::NoAsyncGetCallTrace => "this JVM has no AsyncGetCallTrace",
            Self::NoJvmti => "the JVM is still starting and has no JVMTI yet",
            Self::Capabilities => "the JVM refused the JVMTI capabilities it needs",
            Self::SharedMemory => "it could not create the memory it shares with stoke",
            Self::Events => "the JVM refused the JVMTI events it needs",
            Self::Panicked => "it failed (a bug in stoke's agent)",
        }
    }
}

/// The start of the shared memory.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// An [`AgentState`], raw.
    pub state: AtomicU32,
    /// [`TOTAL_SIZE`] as the agent knew it.
    pub total_size: u64,
    /// The signal the handler waits for.
    pub signal: u32,
    /// The JVM's pid in its own pid namespace.
    pub pid: u32,
    /// Producers' claim position in the sample ring.
    pub samples_written: AtomicU64,
    /// Zero (each stoke keeps its read position to itself).
    pub reserved_samples_read: u64,
    /// Samples dropped because their slot was mid-write by another
    /// producer.
    pub samples_dropped: AtomicU64,
    /// Zero (see [`Consumer::requests_written`]).
    pub reserved_requests: [u64; 2],
    /// Bytes of the event log that hold complete records.
    pub events_committed: AtomicU64,
    /// Events dropped because the log was full.
    pub events_dropped: AtomicU64,
    /// An [`Activity`], raw: whether the agent's worker runs or waits,
    /// idle, for the next stoke. Also the futex word stoke wakes it with.
    pub activity: AtomicU32,
    /// Zero (see [`Consumer::java_events_wanted`]).
    pub reserved_wanted: u32,
    /// The Java events the agent has enabled in the JVM now
    /// ([`crate::java_events::WANT_ALLOC`],
    /// [`crate::java_events::WANT_LOCK`]): those of every stoke reading.
    pub java_events_on: AtomicU32,
    /// The mean bytes between sampled allocations the JVM samples at now:
    /// the smallest interval any stoke reading wants.
    pub alloc_interval_on: AtomicU64,
    /// Zero (see [`Consumer::lock_threshold_ns`]).
    pub reserved_threshold: u64,
    /// Producers' claim position in the Java event ring.
    pub java_events_written: AtomicU64,
    /// Zero (each stoke keeps its read position to itself).
    pub reserved_events_read: u64,
    /// Java events dropped because their slot was mid-write by another
    /// producer.
    pub java_events_dropped: AtomicU64,
    /// Sampled allocations the JVM reported to the agent, ever: it stands
    /// still while allocation sampling is off.
    pub alloc_samples: AtomicU64,
    /// The `sig_data` of stoke's per-thread perf events: a SIGTRAP that
    /// carries it (`TRAP_PERF`) asks for a Java stack, as [`SIGNAL`] does;
    /// 0 while no stoke set one.
    pub trap_cookie: AtomicU64,
    /// The address of the agent's SIGTRAP handler once installed (the JVM
    /// had none), 0 before and once replaced: only while the process's
    /// handler is this one may stoke time the JVM's threads with such
    /// events (its BPF program checks at every sample).
    pub trap_handler: AtomicU64,
    /// Java events whose stack the agent walked from HotSpot's structures
    /// (the rest asked JVMTI's GetStackTrace), ever.
    pub java_events_walked: AtomicU64,
    /// Where the JVM's code heaps are (`code_cache_start` up to
    /// `code_cache_end`), set before the agent says it is ready; 0 if the
    /// agent could not tell, or predates them. Stoke's sampler leaves a
    /// pc in there to the agent's Java frames, with no search for a
    /// mapping (it holds no file).
    pub code_cache_start: AtomicU64,
    /// See `code_cache_start`.
    pub code_cache_end: AtomicU64,
    /// Rung by stoke (incremented, then its futex woken) once it has
    /// written requests or changed the Java events it wants. The agent's
    /// worker waits on this word between its periodic checks: it answers
    /// at once, and otherwise wakes a few times a second, not at a fixed
    /// short period that would take the JVM's CPUs from its threads.
    pub doorbell: AtomicU32,
    /// Zero.
    pub reserved_doorbell: u32,
    /// What each stoke reading wants, by the slot it claimed.
    pub consumers: [Consumer; MAX_CONSUMERS],
}

/// One stoke's wishes, in [`Header::consumers`]: heeded by the agent only
/// while the stoke holds the slot's OFD lock, so a stoke that dies leaves
/// no event on.
#[repr(C)]
pub struct Consumer {
    /// The Java events this stoke wants ([`crate::java_events::WANT_ALLOC`],
    /// [`crate::java_events::WANT_LOCK`]), set while its recording runs and
    /// cleared at its end.
    pub java_events_wanted: AtomicU32,
    /// Zero.
    pub reserved: u32,
    /// The mean bytes between sampled allocations this stoke wants.
    pub alloc_interval: AtomicU64,
    /// The shortest wait for a contended lock this stoke records, in
    /// nanoseconds.
    pub lock_threshold_ns: AtomicU64,
    /// Method requests written by this stoke into its part of the request
    /// ring.
    pub requests_written: AtomicU64,
    /// This stoke's method requests answered by the agent.
    pub requests_read: AtomicU64,
}

/// A ring slot's sequence while the producer of position `position` writes
/// it (odd).
pub const fn writing_sequence(position: u64) -> u64 {
    position.wrapping_mul(2).wrapping_add(1)
}

/// A ring slot's sequence once position `position` is written in it
/// (even, above zero: a zeroed slot holds no position).
pub const fn written_sequence(position: u64) -> u64 {
    position.wrapping_mul(2).wrapping_add(2)
}

/// A slot of one of the broadcast rings in the shared memory (the sample
/// ring, the Java event ring): where its ring lies, how many slots it has,
/// the slot's seqlock, and the header's counters of the ring. The agent's
/// producers and each stoke's reader are written once, over this.
pub trait RingSlot: Sized {
    /// Where the ring starts in the memory.
    const OFFSET: usize;
    /// Slots in the ring.
    const SLOTS: usize;

    /// The seqlock: [`writing_sequence`] of the position being written,
    /// then its [`written_sequence`]; zero before any.
    fn sequence(&self) -> &AtomicU64;

    /// The producers' claim position in the ring.
    fn written(header: &Header) -> &AtomicU64;

    /// Entries dropped because their slot was mid-write by another
    /// producer.
    fn dropped(header: &Header) -> &AtomicU64;

    /// The offset in the memory of the slot that holds `position`.
    fn offset_of(position: u64) -> usize {
        Self::OFFSET + (position % Self::SLOTS as u64) as usize * size_of::<Self>()
    }
}

impl RingSlot for SampleSlot {
    const OFFSET: usize = SAMPLES_OFFSET;
    const SLOTS: usize = SAMPLE_SLOTS;

    fn sequence(&self) -> &AtomicU64 {
        &self.sequence
    }

    fn written(header: &Header) -> &AtomicU64 {
        &header.samples_written
    }

    fn dropped(header: &Header) -> &AtomicU64 {
        &header.samples_dropped
    }
}

impl RingSlot for JavaEventSlot {
    const OFFSET: usize = JAVA_EVENTS_OFFSET;
    const SLOTS: usize = JAVA_EVENT_SLOTS;

    fn sequence(&self) -> &AtomicU64 {
        &self.sequence
    }

    fn written(header: &Header) -> &AtomicU64 {
        &header.java_events_written
    }

    fn dropped(header: &Header) -> &AtomicU64 {
        &header.java_events_dropped
    }
}

/// Whether the agent works for a stoke, in [`Header::activity`]. An agent
/// that no stoke has read for a while (`idle=SECONDS`, 60 by default)
/// frees its event log and parks its worker; the next stoke wakes it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// The worker runs; the event log holds the code map.
    Active = 0,
    /// The worker waits on this word; the event log is empty and freed.
    Idle = 1,
    /// A stoke asked an idle agent to work again: the agent replays its
    /// code map into the log, then says [`Activity::Active`].
    Waking = 2,
}

/// One Java frame, laid out as JVMTI's `ASGCT_CallFrame` so that
/// AsyncGetCallTrace writes straight into the ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct JavaFrame {
    /// Bytecode index; AsyncGetCallTrace's `lineno`. Negative for native
    /// methods ([`BCI_NATIVE`]).
    pub bci: i32,
    _padding: u32,
    /// The method's `jmethodID`.
    pub method_id: u64,
}

/// [`JavaFrame::bci`] of a frame in a native (JNI) method.
pub const BCI_NATIVE: i32 = -3;

impl JavaFrame {
    /// A frame of `method_id` at `bci`.
    pub fn new(method_id: u64, bci: i32) -> Self {
        Self {
            bci,
            _padding: 0,
            method_id,
        }
    }
}

/// One slot of the sample ring.
#[repr(C)]
pub struct SampleSlot {
    /// The seqlock ([`RingSlot::sequence`]).
    pub sequence: AtomicU64,
    /// The sampled thread (the kernel's tid).
    pub tid: u32,
    /// AsyncGetCallTrace's result: frames written, or a negative reason
    /// ([`agct_failure`]).
    pub frame_count: i32,
    /// `CLOCK_MONOTONIC` nanoseconds when the handler ran.
    pub time_ns: u64,
    /// The interrupted instruction.
    pub pc: u64,
    /// [`TOP_FRAME_POPPED`] or 0.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
    /// Innermost frame first.
    pub frames: [JavaFrame; MAX_JAVA_FRAMES],
}

/// [`SampleSlot::flags`]: AsyncGetCallTrace could not walk from the
/// interrupted instruction (a frame being set up, HotSpot's
/// `ticks_unknown_Java`), and walked from its caller: the frames start at
/// the caller, and the method whose compiled code holds
/// [`SampleSlot::pc`] is the missing innermost frame. The handler pops the
/// frame only where the interrupted code has not pushed anything yet (the
/// return address on top of the stack points into JIT code), as
/// async-profiler does.
pub const TOP_FRAME_POPPED: u32 = 1;

/// [`SampleSlot::frame_count`] of a thread the JVM does not know (a GC,
/// compiler or native thread): AsyncGetCallTrace was not called.
pub const NOT_A_JAVA_THREAD: i32 = -100;

/// AsyncGetCallTrace's result for a thread with no Java frame.
pub const AGCT_NO_JAVA_FRAME: i32 = 0;
/// AsyncGetCallTrace's result for a thread outside Java code whose frames
/// it cannot find (HotSpot's `ticks_unknown_not_Java`).
pub const AGCT_UNKNOWN_NOT_JAVA: i32 = -3;

/// Why AsyncGetCallTrace returned no frames, by its (negative) result.
pub fn agct_failure(code: i32) -> &'static str {
    match code {
        NOT_A_JAVA_THREAD => "not a Java thread",
        AGCT_NO_JAVA_FRAME => "no Java frame",
        -1 => "no class load hook",
        -2 => "GC active",
        AGCT_UNKNOWN_NOT_JAVA => "unknown, not Java",
        -4 => "not walkable, not Java",
        -5 => "unknown Java state",
        -6 => "not walkable Java",
        -7 => "unknown thread state",
        -8 => "thread exiting",
        -9 => "deoptimizing",
        -10 => "at safepoint",
        _ => "other",
    }
}

/// Kinds of records in the event log.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A method's names and line table.
    Method = 1,
    /// A method was compiled to `[start, start + size)`.
    CodeLoad = 2,
    /// A compiled method at `start` was freed.
    CodeUnload = 3,
    /// The JVM generated code that is no method (interpreter, stubs).
    DynamicCode = 4,
    /// Which calls the JIT inlined into a compiled method.
    CodeInline = 5,
}

/// Every record starts with its length (a multiple of 8, header included)
/// and its [`EventKind`].
const EVENT_HEADER: usize = 8;

/// A decoded event-log record, borrowing the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A method's names and line table.
    Method(MethodInfo<'a>),
    /// Compiled code of a method.
    CodeLoad {
        /// The method.
        method_id: u64,
        /// First byte of its code.
        start: u64,
        /// Bytes of code.
        size: u64,
    },
    /// Compiled code freed.
    CodeUnload {
        /// The method.
        method_id: u64,
        /// First byte of the freed code.
        start: u64,
    },
    /// Generated code that is no method.
    DynamicCode {
        /// First byte.
        start: u64,
        /// Bytes.
        size: u64,
        /// What HotSpot calls it, e.g. `Interpreter`.
        name: &'a [u8],
    },
    /// The calls inlined into the compiled code at `start` (sent right
    /// after its [`Event::CodeLoad`]).
    CodeInline {
        /// First byte of the compiled code.
        start: u64,
        /// [`InlineEdge`]s, [`INLINE_EDGE_SIZE`] bytes each; read them with
        /// [`inline_edges`].
        edges: &'a [u8],
    },
}

/// One call the JIT inlined: `caller`, at bytecode `caller_bci`, calls
/// `callee`, whose code became part of the caller's. Every frame of a
/// compiled method's inlining tree is one edge, so a Java stack's frames
/// can be told apart: a frame whose caller reached it through an edge of
/// the compiled code it runs in is inlined, not a frame of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InlineEdge {
    /// The calling method's `jmethodID`.
    pub caller: u64,
    /// The bytecode index of the call in the caller.
    pub caller_bci: i32,
    /// The inlined method's `jmethodID`.
    pub callee: u64,
}

/// Bytes of one encoded [`InlineEdge`]: caller, callee (u64), caller_bci
/// (i32) and 4 bytes of padding.
pub const INLINE_EDGE_SIZE: usize = 24;

impl InlineEdge {
    /// The edge's encoding in [`Event::CodeInline`].
    pub fn to_bytes(&self) -> [u8; INLINE_EDGE_SIZE] {
        let mut bytes = [0; INLINE_EDGE_SIZE];
        bytes[..8].copy_from_slice(&self.caller.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.callee.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.caller_bci.to_le_bytes());
        bytes
    }
}

/// The edges of an [`Event::CodeInline`]; a trailing partial edge is
/// ignored.
pub fn inline_edges(edges: &[u8]) -> impl Iterator<Item = InlineEdge> + '_ {
    edges
        .chunks_exact(INLINE_EDGE_SIZE)
        .map(|bytes| InlineEdge {
            caller: read_u64(bytes, 0),
            callee: read_u64(bytes, 8),
            caller_bci: read_u32(bytes, 16) as i32,
        })
}

/// A method's names, as JVMTI gives them (modified UTF-8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MethodInfo<'a> {
    /// The `jmethodID`.
    pub method_id: u64,
    /// Class signature, e.g. `Ljava/lang/String;`.
    pub class: &'a [u8],
    /// Method name.
    pub name: &'a [u8],
    /// Method signature, e.g. `(I)V`.
    pub signature: &'a [u8],
    /// Source file name, empty if unknown.
    pub source: &'a [u8],
    /// `(start bci, line)` pairs, 8 bytes each, little-endian u32s.
    pub lines: &'a [u8],
}

impl MethodInfo<'_> {
    /// The source line of `bci`, if the line table knows it.
    pub fn line_of(&self, bci: i32) -> Option<u32> {
        let bci = u32::try_from(bci).ok()?;
        self.lines
            .chunks_exact(8)
            .map(|entry| (read_u32(entry, 0), read_u32(entry, 4)))
            .filter(|&(start, _)| start <= bci)
            .max_by_key(|&(start, _)| start)
            .map(|(_, line)| line)
    }
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// A bounds-checked reader over untrusted bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(len)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| read_u32(b, 0))
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| read_u64(b, 0))
    }
}

/// Decodes the records of an event log, stopping at the first incomplete or
/// malformed one. Yields `(offset after the record, event)`.
pub fn events(log: &[u8]) -> impl Iterator<Item = (usize, Event<'_>)> + '_ {
    let mut at = 0usize;
    core::iter::from_fn(move || {
        let header = log.get(at..at.checked_add(EVENT_HEADER)?)?;
        let len = read_u32(header, 0) as usize;
        let kind = read_u32(header, 4);
        if len < EVENT_HEADER || !len.is_multiple_of(8) {
            return None;
        }
        let body = log.get(at + EVENT_HEADER..at.checked_add(len)?)?;
        at += len;
        decode(kind, body).map(|event| (at, event))
    })
}

fn decode(kind: u32, body: &[u8]) -> Option<Event<'_>> {
    let mut cursor = Cursor { bytes: body, at: 0 };
    Some(match kind {
        1 => {
            let method_id = cursor.u64()?;
            let lengths = [cursor.u16()?, cursor.u16()?, cursor.u16()?, cursor.u16()?];
            let line_count = cursor.u32()? as usize;
            let [class, name, signature, source] = lengths.map(|len| cursor.take(len as usize));
            Event::Method(MethodInfo {
                method_id,
                class: class?,
                name: name?,
                signature: signature?,
                source: source?,
                lines: cursor.take(line_count.checked_mul(8)?)?,
            })
        }
        2 => Event::CodeLoad {
            method_id: cursor.u64()?,
            start: cursor.u64()?,
            size: cursor.u64()?,
        },
        3 => Event::CodeUnload {
            method_id: cursor.u64()?,
            start: cursor.u64()?,
        },
        4 => {
            let start = cursor.u64()?;
            let size = cursor.u64()?;
            let len = cursor.u16()?;
            Event::DynamicCode {
                start,
                size,
                name: cursor.take(len as usize)?,
            }
        }
        5 => {
            let start = cursor.u64()?;
            let count = cursor.u32()? as usize;
            Event::CodeInline {
                start,
                edges: cursor.take(count.checked_mul(INLINE_EDGE_SIZE)?)?,
            }
        }
        _ => return None,
    })
}

/// Encodes `event` at the start of `out`; returns the bytes used, or `None`
/// if it does not fit (or a name is longer than 65535 bytes).
pub fn encode(event: &Event, out: &mut [u8]) -> Option<usize> {
    let mut body = Writer {
        out,
        at: EVENT_HEADER,
    };
    let kind = match event {
        Event::Method(info) => {
            body.u64(info.method_id)?;
            for text in [info.class, info.name, info.signature, info.source] {
                body.u16(u16::try_from(text.len()).ok()?)?;
            }
            body.u32(u32::try_from(info.lines.len() / 8).ok()?)?;
            for text in [info.class, info.name, info.signature, info.source] {
                body.bytes(text)?;
            }
            body.bytes(&info.lines[..info.lines.len() / 8 * 8])?;
            EventKind::Method
        }
        Event::CodeLoad {
            method_id,
            start,
            size,
        } => {
            body.u64(*method_id)?;
            body.u64(*start)?;
            body.u64(*size)?;
            EventKind::CodeLoad
        }
        Event::CodeUnload { method_id, start } => {
            body.u64(*method_id)?;
            body.u64(*start)?;
            EventKind::CodeUnload
        }
        Event::DynamicCode { start, size, name } => {
            body.u64(*start)?;
            body.u64(*size)?;
            body.u16(u16::try_from(name.len()).ok()?)?;
            body.bytes(name)?;
            EventKind::DynamicCode
        }
        Event::CodeInline { start, edges } => {
            let count = edges.len() / INLINE_EDGE_SIZE;
            body.u64(*start)?;
            body.u32(u32::try_from(count).ok()?)?;
            body.bytes(&edges[..count * INLINE_EDGE_SIZE])?;
            EventKind::CodeInline
        }
    };
    let len = body.at.next_multiple_of(8);
    let out = body.out.get_mut(..len)?;
    out[body.at..].fill(0);
    out[..4].copy_from_slice(&u32::try_from(len).ok()?.to_le_bytes());
    out[4..8].copy_from_slice(&(kind as u32).to_le_bytes());
    Some(len)
}

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.at.checked_add(bytes.len())?;
        self.out.get_mut(self.at..end)?.copy_from_slice(bytes);
        self.at = end;
        Some(())
    }

    fn u16(&mut self, value: u16) -> Option<()> {
        self.bytes(&value.to_le_bytes())
    }

    fn u32(&mut self, value: u32) -> Option<()> {
        self.bytes(&value.to_le_bytes())
    }

    fn u64(&mut self, value: u64) -> Option<()> {
        self.bytes(&value.to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip() {
        let lines = [1u32, 10, 5, 12].map(u32::to_le_bytes).concat();
        let inlined = [
            InlineEdge {
                caller: 7,
                caller_bci: 3,
                callee: 8,
            },
            InlineEdge {
                caller: 8,
                caller_bci: -1,
                callee: 9,
            },
        ];
        let edges = inlined.map(|edge| edge.to_bytes()).concat();
        let written = [
            Event::Method(MethodInfo {
                method_id: 7,
                class: b"LFoo;",
                name: b"bar",
                signature: b"()V",
                source: b"Foo.java",
                lines: &lines,
            }),
            Event::CodeLoad {
                method_id: 7,
                start: 0x1000,
                size: 64,
            },
            Event::CodeUnload {
                method_id: 7,
                start: 0x1000,
            },
            Event::DynamicCode {
                start: 0x2000,
                size: 8,
                name: b"Interpreter",
            },
            Event::CodeInline {
                start: 0x1000,
                edges: &edges,
            },
        ];
        let mut log = [0u8; 512];
        let mut used = 0;
        for event in &written {
            used += encode(event, &mut log[used..]).unwrap();
        }
        let mut read = events(&log[..used]);
        for event in &written {
            assert_eq!(read.next().map(|(_, event)| event).as_ref(), Some(event));
        }
        assert_eq!(read.next(), None);
        assert!(inline_edges(&edges).eq(inlined));
        assert!(inline_edges(&edges[..INLINE_EDGE_SIZE + 5]).eq([inlined[0]]));
    }

    #[test]
    fn malformed_logs_end_decoding_without_panicking() {
        let mut log = [0u8; 64];
        let used = encode(
            &Event::DynamicCode {
                start: 1,
                size: 2,
                name: b"stub",
            },
            &mut log,
        )
        .unwrap();
        for cut in 0..used {
            assert_eq!(events(&log[..cut]).count(), 0, "cut at {cut}");
        }
        log[0] = 0xff; // a length past the end
        assert_eq!(events(&log[..used]).count(), 0);
        log[0] = 12; // not a multiple of 8
        assert_eq!(events(&log[..used]).count(), 0);
        assert!(encode(
            &Event::CodeUnload {
                method_id: 1,
                start: 2
            },
            &mut [0u8; 16]
        )
        .is_none());
    }

    #[test]
    fn line_of_picks_the_last_entry_at_or_before_the_bci() {
        let lines = [0u32, 10, 5, 12, 9, 14].map(u32::to_le_bytes).concat();
        let info = MethodInfo {
            method_id: 1,
            class: b"",
            name: b"",
            signature: b"",
            source: b"",
            lines: &lines,
        };
        assert_eq!(info.line_of(0), Some(10));
        assert_eq!(info.line_of(6), Some(12));
        assert_eq!(info.line_of(100), Some(14));
        assert_eq!(info.line_of(-3), None);
    }
}
