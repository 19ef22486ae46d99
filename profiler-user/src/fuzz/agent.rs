//! Target `agent`: the memory a JVM shares with stoke, in any state the
//! JVM can leave it in. A real sealed memfd named as the agent's holds a
//! header with chosen positions and counts, sample slots with any
//! sequences, frame counts and frames, and an event log of encoded events
//! with bytes changed and any committed length; stoke finds and maps it
//! as it would in a JVM, drains its events into the Java symbols and its
//! samples into the merger, names every frame and asks for methods.
//! Names must stay single folded-stack frames (no `;`, no newline).

use std::{
    mem::offset_of,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    ptr::NonNull,
};

use bolero::TypeGenerator;
use profiler_common::jvm::{
    self, encode, written_sequence, Consumer, Event, Header, InlineEdge, JavaFrame, MethodInfo,
    SampleSlot, EVENTS_OFFSET, EVENTS_SIZE, MAGIC, MAX_JAVA_FRAMES, REQUEST_SLOTS, SAMPLES_OFFSET,
    SAMPLE_SLOTS, TOTAL_SIZE, VERSION,
};

use super::{
    harness::{self, Run},
    merge::check_outcome,
};
use crate::{
    jvm::{agent_memory::AgentMemory, merge::Merger, symbols::JavaSymbols},
    model::{FrameKind, Sample},
};

#[derive(Debug, TypeGenerator)]
enum EventInput {
    Method {
        id: u8,
        class: Vec<u8>,
        name: Vec<u8>,
        signature: Vec<u8>,
        source: Vec<u8>,
        lines: Vec<(u32, u32)>,
    },
    CodeLoad {
        id: u8,
        start: u16,
        size: u16,
    },
    CodeUnload {
        id: u8,
        start: u16,
    },
    DynamicCode {
        start: u16,
        size: u16,
        name: Vec<u8>,
    },
    CodeInline {
        start: u16,
        edges: Vec<(u8, i32, u8)>,
    },
    /// Raw bytes where a record should be.
    Raw(Vec<u8>),
}

#[derive(Debug, TypeGenerator)]
enum Committed {
    /// Every record written.
    All,
    /// A cut anywhere in the log (modulo its length).
    Cut(u32),
    Raw(u64),
}

#[derive(Debug, TypeGenerator)]
struct SlotInput {
    /// Complete in ring order (else `raw_sequence`).
    complete: bool,
    raw_sequence: u64,
    tid: u8,
    frame_count: i32,
    time: u16,
    pc: u16,
    flags: u32,
    frames: Vec<(u8, i32)>,
}

#[derive(Debug, TypeGenerator)]
struct AgentInput {
    state: u32,
    /// Where the producers are when stoke comes.
    samples_start: u64,
    /// How far they claimed once stoke reads (any value: it may lie).
    samples_claimed: u64,
    requests_written: u64,
    requests_read: u64,
    events: Vec<EventInput>,
    /// `(offset, byte)` changes in the encoded log.
    log_edits: Vec<(u16, u8)>,
    committed: Committed,
    /// A second drain, after the log's committed length moves on.
    committed_later: Option<Committed>,
    slots: Vec<SlotInput>,
    /// Signalled samples `(tid, time)` to merge with the Java stacks.
    natives: Vec<(u8, u16)>,
}

/// Method ids and addresses come from small ranges, so that events and
/// frames meet.
fn method_id(id: u8) -> u64 {
    0x7f00_0000_0000 + u64::from(id % 32) * 8
}

fn address(low: u16) -> u64 {
    0x7e00_0000_0000 + u64::from(low)
}

fn encode_log(events: &[EventInput]) -> Vec<u8> {
    let mut log = vec![0u8; 1 << 16];
    let mut used = 0;
    for event in events {
        let lines: Vec<u8>;
        let edges: Vec<u8>;
        let decoded = match event {
            EventInput::Method {
                id,
                class,
                name,
                signature,
                source,
                lines: table,
            } => {
                lines = table
                    .iter()
                    .flat_map(|(bci, line)| [bci.to_le_bytes(), line.to_le_bytes()].concat())
                    .collect();
                Event::Method(MethodInfo {
                    method_id: method_id(*id),
                    class,
                    name,
                    signature,
                    source,
                    lines: &lines,
                })
            }
            EventInput::CodeLoad { id, start, size } => Event::CodeLoad {
                method_id: method_id(*id),
                start: address(*start),
                size: u64::from(*size),
            },
            EventInput::CodeUnload { id, start } => Event::CodeUnload {
                method_id: method_id(*id),
                start: address(*start),
            },
            EventInput::DynamicCode { start, size, name } => Event::DynamicCode {
                start: address(*start),
                size: u64::from(*size),
                name,
            },
            EventInput::CodeInline { start, edges: list } => {
                edges = list
                    .iter()
                    .flat_map(|&(caller, caller_bci, callee)| {
                        InlineEdge {
                            caller: method_id(caller),
                            caller_bci,
                            callee: method_id(callee),
                        }
                        .to_bytes()
                    })
                    .collect();
                Event::CodeInline {
                    start: address(*start),
                    edges: &edges,
                }
            }
            EventInput::Raw(bytes) => {
                let end = (used + bytes.len()).min(log.len());
                log[used..end].copy_from_slice(&bytes[..end - used]);
                used = end;
                continue;
            }
        };
        match encode(&decoded, &mut log[used..]) {
            Some(length) => used += length,
            None => break,
        }
    }
    log.truncate(used);
    log
}

fn committed_length(committed: &Committed, log_len: usize) -> u64 {
    match committed {
        Committed::All => log_len as u64,
        Committed::Cut(at) => u64::from(*at) % (log_len as u64 + 1),
        Committed::Raw(raw) => *raw,
    }
}

/// The memfd the fuzzed agent states live in, mapped here to write them.
struct SharedMemory {
    base: NonNull<u8>,
    _file: OwnedFd,
    /// Bytes of the log the previous input wrote, cleared before the next.
    log_written: usize,
}

impl SharedMemory {
    fn new() -> Self {
        let name = std::ffi::CString::new(jvm::MEMFD_NAME).unwrap();
        // SAFETY: plain syscalls on a descriptor created here, checked.
        unsafe {
            let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
            assert!(fd >= 0, "memfd_create");
            let file = OwnedFd::from_raw_fd(fd);
            assert_eq!(libc::ftruncate(fd, TOTAL_SIZE as i64), 0);
            assert_eq!(
                libc::fcntl(
                    fd,
                    libc::F_ADD_SEALS,
                    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW
                ),
                0
            );
            let base = libc::mmap(
                std::ptr::null_mut(),
                TOTAL_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            Self {
                base: NonNull::new(base.cast()).unwrap(),
                _file: file,
                log_written: 0,
            }
        }
    }

    fn write(&mut self, at: usize, bytes: &[u8]) {
        assert!(at + bytes.len() <= TOTAL_SIZE);
        // SAFETY: inside the mapping; nothing else writes it meanwhile.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(at), bytes.len())
        };
    }

    fn header(&mut self, field: usize, value: u64) {
        self.write(field, &value.to_le_bytes());
    }

    /// Lays out `input`'s state: header, slots, log.
    fn lay_out(&mut self, input: &AgentInput, log: &[u8]) {
        // What the previous input left, so that each input is its own state.
        let header_and_slots = EVENTS_OFFSET;
        self.write(0, &vec![0; header_and_slots]);
        self.write(EVENTS_OFFSET, &vec![0; self.log_written]);
        self.log_written = log.len();

        self.header(offset_of!(Header, magic), MAGIC);
        self.write(offset_of!(Header, version), &VERSION.to_le_bytes());
        self.write(offset_of!(Header, state), &input.state.to_le_bytes());
        self.header(offset_of!(Header, samples_written), input.samples_start);
        let consumer = offset_of!(Header, consumers);
        self.header(
            consumer + offset_of!(Consumer, requests_written),
            input.requests_written,
        );
        self.header(
            consumer + offset_of!(Consumer, requests_read),
            input.requests_read,
        );
        self.header(
            offset_of!(Header, events_committed),
            committed_length(&input.committed, log.len()),
        );
        for (index, slot) in input.slots.iter().take(SAMPLE_SLOTS).enumerate() {
            let position = input.samples_start.wrapping_add(index as u64);
            let at = SAMPLES_OFFSET
                + (position % SAMPLE_SLOTS as u64) as usize * size_of::<SampleSlot>();
            let sequence = if slot.complete {
                written_sequence(position)
            } else {
                slot.raw_sequence
            };
            self.header(at + offset_of!(SampleSlot, sequence), sequence);
            self.write(
                at + offset_of!(SampleSlot, tid),
                &u32::from(slot.tid).to_le_bytes(),
            );
            self.write(
                at + offset_of!(SampleSlot, frame_count),
                &slot.frame_count.to_le_bytes(),
            );
            self.header(
                at + offset_of!(SampleSlot, time_ns),
                1_000 + u64::from(slot.time),
            );
            self.header(at + offset_of!(SampleSlot, pc), address(slot.pc));
            self.write(
                at + offset_of!(SampleSlot, flags),
                &slot.flags.to_le_bytes(),
            );
            for (frame, &(id, bci)) in slot.frames.iter().take(MAX_JAVA_FRAMES).enumerate() {
                let frame_at = at + offset_of!(SampleSlot, frames) + frame * 16;
                self.write(frame_at, &bci.to_le_bytes());
                self.header(frame_at + 8, method_id(id));
            }
        }
        self.write(EVENTS_OFFSET, log);
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping what new() mapped.
        unsafe { libc::munmap(self.base.as_ptr().cast(), TOTAL_SIZE) };
    }
}

/// A name fit for a folded stack: one frame, one line.
fn check_name(name: &str) {
    assert!(
        !name.contains(';') && !name.contains('\n'),
        "a frame name that splits a folded stack: {name:?}"
    );
}

#[test]
fn agent() {
    let mut memory = SharedMemory::new();
    let run = Run::start("agent");
    bolero::check!()
        .with_type::<AgentInput>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|input| {
            let mut log = encode_log(&input.events);
            for &(at, byte) in &input.log_edits {
                if let Some(slot) = log.get_mut(usize::from(at)) {
                    *slot = byte;
                }
            }
            memory.lay_out(input, &log);
            run.input(|| {
                let mut agent = AgentMemory::find(std::process::id())
                    .expect("mapping the agent memory")
                    .expect("the agent memory is found");
                let _ = agent.state();
                let mut symbols = JavaSymbols::default();
                agent.drain_events(|event| symbols.apply(event));
                if let Some(later) = &input.committed_later {
                    memory.header(
                        offset_of!(Header, events_committed),
                        committed_length(later, log.len()),
                    );
                    agent.drain_events(|event| symbols.apply(event));
                }
                assert!(log.len() <= EVENTS_SIZE);

                memory.header(
                    offset_of!(Header, samples_written),
                    input.samples_start.wrapping_add(input.samples_claimed),
                );
                let mut javas = Vec::new();
                agent.drain_samples(|sample| javas.push(sample));
                let mut merger = Merger::default();
                for (index, &(tid, time)) in input.natives.iter().enumerate() {
                    let mut sample =
                        Sample::for_test(1, u32::from(tid), 1_000 + u64::from(time), Vec::new());
                    sample.cpu = index as u32;
                    merger.add_native(sample);
                }
                for java in javas {
                    assert!(java.frames.len() <= MAX_JAVA_FRAMES);
                    let stack = symbols.with_kinds(java.pc, &java.frames);
                    assert_eq!(stack.len(), java.frames.len());
                    for (frame, with_kind) in java.frames.iter().zip(&stack) {
                        check_name(&symbols.frame_name(frame, with_kind.kind, true));
                        check_name(&symbols.frame_name(frame, FrameKind::Inlined, false));
                    }
                    if let Some(name) = symbols.code_name(java.pc) {
                        check_name(&name);
                    }
                    let addresses = [java.pc, java.pc.wrapping_sub(1)];
                    let compiled: Vec<u64> = symbols.compiled_methods_at(addresses).collect();
                    let ids = symbols.newly_wanted(
                        java.frames
                            .iter()
                            .map(|frame: &JavaFrame| frame.method_id)
                            .chain(compiled),
                    );
                    let taken = agent.request_methods(&ids);
                    assert!(taken <= ids.len() && taken <= REQUEST_SLOTS);
                    symbols.unrequest(&ids[taken..]);
                    let _ = symbols.all_described();
                    // Taken in at its own time: the natives' process (1)
                    // keeps every stack, to be paired or not.
                    let now = java.time_ns;
                    let _ = merger.add_java(1, Some(java.tid), java, now);
                }
                let mut seen = vec![0u8; input.natives.len()];
                merger.settle(u64::MAX, true, |outcome| {
                    seen[check_outcome(&outcome) as usize] += 1;
                });
                assert!(seen.iter().all(|&count| count == 1));
            });
        });
}
