//! Stoke's side of the memory it shares with the agent in a JVM
//! (`profiler_common::jvm`): finds and maps the agent's memfd, takes Java
//! samples and events, asks for method names.
//!
//! The JVM is not trusted: the memfd must be sealed against shrinking (else
//! the process could truncate it and crash stoke with SIGBUS), and every
//! count, length and position read from it is bounded before use.

use std::{
    fs::File,
    os::{fd::AsRawFd, unix::fs::FileExt},
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
};

use anyhow::{bail, Context, Result};
use profiler_common::jvm::{
    self, AgentState, Event, Header, JavaFrame, SampleSlot, EVENTS_OFFSET, EVENTS_SIZE, MAGIC,
    MAX_JAVA_FRAMES, REQUESTS_OFFSET, REQUEST_SLOTS, SAMPLES_OFFSET, SAMPLE_SLOTS, TOTAL_SIZE,
    VERSION,
};

/// A Java stack the agent took in its signal handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JavaSample {
    /// The thread.
    pub tid: u32,
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub time_ns: u64,
    /// The interrupted instruction.
    pub pc: u64,
    /// AsyncGetCallTrace's frame count, or its negative failure code.
    pub result: i32,
    /// The frames start at the caller of the method at `pc`
    /// ([`jvm::TOP_FRAME_POPPED`]).
    pub top_popped: bool,
    /// Innermost first.
    pub frames: Vec<JavaFrame>,
}

/// The agent's memory in one JVM, mapped into stoke.
pub struct AgentMemory {
    base: NonNull<u8>,
    /// Bytes of the event log already read.
    events_read: usize,
    /// The memfd, held with an exclusive `flock`: one stoke at a time takes
    /// a JVM's Java stacks (the kernel drops the lock when stoke dies).
    _file: File,
}

// SAFETY: the mapping is plain shared memory, owned by this value.
unsafe impl Send for AgentMemory {}

impl Drop for AgentMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping what open() mapped.
        unsafe { libc::munmap(self.base.as_ptr().cast(), TOTAL_SIZE) };
    }
}

impl AgentMemory {
    /// The agent's memory in process `pid`, if an agent is loaded there.
    pub fn find(pid: u32) -> Result<Option<Self>> {
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return Ok(None);
        };
        let wanted = format!("/memfd:{} (deleted)", jvm::MEMFD_NAME);
        for entry in entries.flatten() {
            let is_agent = std::fs::read_link(entry.path())
                .is_ok_and(|target| target.as_os_str() == wanted.as_str());
            if is_agent {
                let file = File::options()
                    .read(true)
                    .write(true)
                    .open(entry.path())
                    .with_context(|| format!("opening the agent memory of JVM {pid}"))?;
                return Self::map(file).map(Some);
            }
        }
        Ok(None)
    }

    fn map(file: File) -> Result<Self> {
        let fd = file.as_raw_fd();
        // The header first, so that an agent of another stoke version is
        // told apart from a memfd of the wrong size.
        let mut head = [0u8; 12];
        file.read_exact_at(&mut head, 0)
            .context("reading the agent memory's header")?;
        let magic = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let version = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
        if magic != MAGIC {
            bail!("the agent memory has no Stoke header");
        }
        if version != VERSION {
            bail!("the loaded agent speaks layout version {version}, this stoke {VERSION}: restart the JVM to load this stoke's agent");
        }
        // SAFETY: fcntl and fstat on a descriptor we own.
        let (seals, size) = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            let stated = libc::fstat(fd, &mut stat);
            (
                libc::fcntl(fd, libc::F_GET_SEALS),
                (stated == 0).then_some(stat.st_size),
            )
        };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            bail!("the agent memory is not sealed against shrinking");
        }
        if size.is_none_or(|size| size < TOTAL_SIZE as i64) {
            bail!("the agent memory is smaller than this version's layout");
        }
        // SAFETY: mapping TOTAL_SIZE bytes of a file at least that large
        // that cannot shrink.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                TOTAL_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mapping the agent memory");
        }
        let memory = Self {
            base: NonNull::new(base.cast()).context("mmap returned null")?,
            events_read: 0,
            _file: file,
        };
        // SAFETY: flock on the descriptor the memory keeps open.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            bail!("another stoke is recording this JVM and takes its Java stacks: let it finish first");
        }
        Ok(memory)
    }

    fn header(&self) -> &Header {
        // SAFETY: the header lies at the start of the mapping; the fields
        // anyone writes concurrently are atomics.
        unsafe { &*self.base.as_ptr().cast::<Header>() }
    }

    /// What the agent says it is doing; `Failed` for a value it cannot mean.
    pub fn state(&self) -> AgentState {
        AgentState::from_raw(self.header().state.load(Ordering::Acquire))
            .unwrap_or(AgentState::Failed)
    }

    /// Hands every complete Java sample to `take`, oldest first; at most one
    /// ring's worth per call.
    pub fn drain_samples(&mut self, mut take: impl FnMut(JavaSample)) {
        let header = self.header();
        let mut position = header.samples_read.load(Ordering::Relaxed);
        for _ in 0..SAMPLE_SLOTS {
            let slot = self.slot(position);
            if slot.sequence.load(Ordering::Acquire) != position.wrapping_add(1) {
                break;
            }
            take(read_sample(slot));
            slot.sequence.store(
                position.wrapping_add(SAMPLE_SLOTS as u64),
                Ordering::Release,
            );
            position = position.wrapping_add(1);
        }
        header.samples_read.store(position, Ordering::Release);
    }

    fn slot(&self, position: u64) -> &SampleSlot {
        let index = (position % SAMPLE_SLOTS as u64) as usize;
        // SAFETY: the ring lies inside the mapping, index is bounded.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(SAMPLES_OFFSET)
                .cast::<SampleSlot>()
                .add(index)
        }
    }

    /// Asks the agent to describe methods; returns how many it took (the
    /// request ring may be full: ask again later).
    pub fn request_methods(&mut self, method_ids: &[u64]) -> usize {
        let header = self.header();
        let written = header.requests_written.load(Ordering::Relaxed);
        let read = header.requests_read.load(Ordering::Acquire);
        let free = (REQUEST_SLOTS as u64).saturating_sub(written.wrapping_sub(read));
        let taken = method_ids.len().min(free as usize);
        for (offset, &method_id) in method_ids[..taken].iter().enumerate() {
            let index = (written.wrapping_add(offset as u64) % REQUEST_SLOTS as u64) as usize;
            // SAFETY: the request ring lies inside the mapping.
            unsafe {
                let slot = self
                    .base
                    .as_ptr()
                    .add(REQUESTS_OFFSET)
                    .cast::<AtomicU64>()
                    .add(index);
                (*slot).store(method_id, Ordering::Relaxed);
            }
        }
        header
            .requests_written
            .store(written.wrapping_add(taken as u64), Ordering::Release);
        taken
    }

    /// Hands every event appended since the last call to `take`.
    pub fn drain_events(&mut self, mut take: impl FnMut(Event)) {
        let committed = self.header().events_committed.load(Ordering::Acquire) as usize;
        let end = committed.min(EVENTS_SIZE);
        if end <= self.events_read {
            return;
        }
        // SAFETY: [events_read, end) lies in the log, complete by the
        // agent's release store of events_committed.
        let log = unsafe {
            std::slice::from_raw_parts(
                self.base.as_ptr().add(EVENTS_OFFSET + self.events_read),
                end - self.events_read,
            )
        };
        let mut consumed = 0;
        for (record_end, event) in jvm::events(log) {
            take(event);
            consumed = record_end;
        }
        self.events_read += consumed;
    }
}

fn read_sample(slot: &SampleSlot) -> JavaSample {
    // SAFETY: plain fields of a slot the producer has committed; a hostile
    // producer may still change them, so every value is checked after.
    let (tid, time_ns, pc, result, flags) = unsafe {
        (
            std::ptr::addr_of!(slot.tid).read_volatile(),
            std::ptr::addr_of!(slot.time_ns).read_volatile(),
            std::ptr::addr_of!(slot.pc).read_volatile(),
            std::ptr::addr_of!(slot.frame_count).read_volatile(),
            std::ptr::addr_of!(slot.flags).read_volatile(),
        )
    };
    let count = usize::try_from(result).unwrap_or(0).min(MAX_JAVA_FRAMES);
    let frames = (0..count)
        // SAFETY: index below MAX_JAVA_FRAMES.
        .map(|index| unsafe { std::ptr::addr_of!(slot.frames[index]).read_volatile() })
        .collect();
    JavaSample {
        tid,
        time_ns,
        pc,
        result,
        top_popped: flags & jvm::TOP_FRAME_POPPED != 0,
        frames,
    }
}
