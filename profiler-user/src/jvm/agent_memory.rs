//! Stoke's side of the memory it shares with the agent in a JVM
//! (`profiler_common::jvm`): finds and maps the agent's memfd, takes Java
//! samples and events, asks for method names.
//!
//! The JVM is not trusted: the memfd is taken with `pidfd_getfd`, not
//! opened by a path the process controls; it must be a memfd sealed against
//! shrinking (else the process could truncate it and crash stoke with
//! SIGBUS), checked on the descriptor mapped; and every count, length and
//! position read from it is bounded before use.
//!
//! Several stokes read one agent at once, each from a consumer slot of its
//! own ([`super::memory_lock`]) and at its own position in the broadcast
//! rings ([`super::broadcast`]): a stoke never writes the rings, so one
//! killed at any point disturbs no other, and the kernel drops its locks.

use std::{
    fs::File,
    ops::Range,
    os::{
        fd::{AsFd, AsRawFd, OwnedFd},
        unix::fs::{FileExt, MetadataExt},
    },
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use crate::{process::pidfd, sample::thread_timers::Trap};
use anyhow::{bail, Context, Result};
use profiler_common::{
    java_events::JavaEventSlot,
    jvm::{
        self, Activity, AgentState, Consumer, Event, Header, JavaFrame, RingSlot, SampleSlot,
        EVENTS_OFFSET, EVENTS_SIZE, MAGIC, MAX_JAVA_FRAMES, REQUESTS_OFFSET, REQUEST_SLOTS,
        TOTAL_SIZE, VERSION,
    },
};

use super::{
    broadcast::RingReader,
    memory_lock::{claim_consumer_slot, lock_shared, LockRefused},
};

/// A test hook, for tests/tests/java_lifecycle.rs: with this environment
/// variable set to N, stoke kills itself with SIGKILL right after it took
/// its Nth Java sample from an agent's ring, in the middle of a drain.
pub const KILL_AFTER_DRAINED: &str = "STOKE_TEST_KILL_AFTER_DRAINED";

/// How long an idle agent may take to wake and replay its code map (8-32
/// ms in tests): the attach thread waits no longer for a process that only
/// says it is an idle agent.
const WAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an agent's memory may show no header yet: the agent writes it
/// right after making the memory, which another stoke may find first.
const HEADER_WAIT: Duration = Duration::from_secs(1);

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
    /// Samples taken from the ring so far.
    drained: u64,
    /// The test hook [`KILL_AFTER_DRAINED`].
    kill_after_drained: Option<u64>,
    /// This stoke's position in the sample ring.
    samples: RingReader<SampleSlot>,
    /// This stoke's position in the Java event ring.
    pub(super) java_events: RingReader<JavaEventSlot>,
    /// The consumer slot this stoke claimed.
    consumer: usize,
    /// The Java events this stoke asked for (`WANT_*` bits), and its lock
    /// threshold: the agent records what every stoke reading asks for.
    pub(super) java_events_wanted: (u32, u64),
    /// The memfd, held with a shared `flock` and an OFD lock on the
    /// consumer slot's byte (the kernel drops both when stoke dies).
    file: File,
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
    ///
    /// The memfd is taken from the process with `pidfd_getfd`, never opened
    /// by a path the process controls (its `/proc/PID/fd` links could be
    /// swapped for a FIFO or a device between a look and an open), and
    /// checked on the very descriptor that is mapped: a sealed, unlinked
    /// file of tmpfs or hugetlbfs (a memfd) named like the agent's.
    pub fn find(pid: u32) -> Result<Option<Self>> {
        // The pidfd first: the descriptor table read below is this
        // process's, even if the pid is reused meanwhile (its fds are gone
        // then, and pidfd_getfd fails).
        let Ok(pidfd) = pidfd::open(pid) else {
            return Ok(None);
        };
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return Ok(None);
        };
        for entry in entries.flatten() {
            let is_agent = std::fs::read_link(entry.path())
                .is_ok_and(|target| target.as_os_str() == agent_link().as_str());
            let Some(number) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if is_agent {
                let taken = pidfd::get_fd(pidfd.as_fd(), number)
                    .with_context(|| format!("taking the agent memory of JVM {pid}"))?;
                let file = own_description(&taken)
                    .with_context(|| format!("checking the agent memory of JVM {pid}"))?;
                return Self::map(file, pid).map(Some);
            }
        }
        Ok(None)
    }

    fn map(file: File, pid: u32) -> Result<Self> {
        let fd = file.as_raw_fd();
        // The header first, so that an agent of another stoke version is
        // told apart from a memfd of the wrong size.
        let mut head = [0u8; 12];
        // An agent another stoke has just loaded may not have written its
        // header yet: a zeroed one is read again for a moment.
        let deadline = Instant::now() + HEADER_WAIT;
        loop {
            file.read_exact_at(&mut head, 0)
                .context("reading the agent memory's header")?;
            if head != [0; 12] || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let magic = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let version = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
        if magic != MAGIC {
            bail!("the agent memory has no Stoke header");
        }
        if version != VERSION {
            bail!("the loaded agent speaks layout version {version}, this stoke {VERSION}: restart the JVM to load this stoke's agent");
        }
        // SAFETY: mapping TOTAL_SIZE bytes of a file checked (by
        // own_description) to be at least that large and sealed against
        // shrinking.
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
        let mut memory = Self {
            base: NonNull::new(base.cast()).context("mmap returned null")?,
            events_read: 0,
            drained: 0,
            kill_after_drained: kill_after_drained(),
            samples: RingReader::new(0),
            java_events: RingReader::new(0),
            consumer: 0,
            java_events_wanted: (0, u64::MAX),
            file,
        };
        lock_shared(&memory.file, pid)?;
        memory.consumer = claim_consumer_slot(&memory.file).ok_or(LockRefused::Full)?;
        // What the slot's last owner wanted is no more.
        memory.want_java_events(0, 0, 0);
        memory.wake()?;
        // What the producers wrote before this stoke came answers none of
        // its samples.
        let header = memory.header();
        let (samples, events) = (
            SampleSlot::written(header).load(Ordering::Acquire),
            JavaEventSlot::written(header).load(Ordering::Acquire),
        );
        memory.samples = RingReader::new(samples);
        memory.java_events = RingReader::new(events);
        Ok(memory)
    }

    /// This stoke's consumer slot in the header.
    pub(super) fn consumer(&self) -> &Consumer {
        &self.header().consumers[self.consumer]
    }

    /// Wakes an agent that went idle, and waits until it has replayed its
    /// code map into the event log.
    fn wake(&mut self) -> Result<()> {
        let activity = &self.header().activity;
        if activity
            .compare_exchange(
                Activity::Idle as u32,
                Activity::Waking as u32,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            // SAFETY: FUTEX_WAKE on a word of a shared mapping; the agent
            // waits on the same word of the same memfd.
            unsafe {
                libc::syscall(libc::SYS_futex, activity.as_ptr(), libc::FUTEX_WAKE, 1);
            }
        }
        let deadline = Instant::now() + WAKE_TIMEOUT;
        while activity.load(Ordering::Acquire) != Activity::Active as u32 {
            if Instant::now() > deadline {
                bail!("the agent, idle, did not wake within {WAKE_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    /// The start of the mapping, `TOTAL_SIZE` bytes that live as long as
    /// `self`.
    pub(super) fn base(&self) -> NonNull<u8> {
        self.base
    }

    pub(super) fn header(&self) -> &Header {
        // SAFETY: the header lies at the start of the mapping; the fields
        // anyone writes concurrently are atomics.
        unsafe { &*self.base.as_ptr().cast::<Header>() }
    }

    /// How stoke's per-thread events reach this JVM's agent, if it takes
    /// their SIGTRAP: the `sig_data` they carry (the first stoke to ask
    /// sets it, to what `preferred` gives, asked only then) and the agent's
    /// handler, as the agent says (the kernel is asked too).
    pub fn trap(&self, preferred: impl FnOnce() -> u64) -> Option<Trap> {
        let header = self.header();
        let handler = header.trap_handler.load(Ordering::Acquire);
        if handler == 0 {
            return None;
        }
        let mut cookie = header.trap_cookie.load(Ordering::Acquire);
        if cookie == 0 {
            let wanted = preferred();
            cookie = match header.trap_cookie.compare_exchange(
                0,
                wanted,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => wanted,
                Err(set) => set,
            };
        }
        (cookie != 0).then_some(Trap { cookie, handler })
    }

    /// Where the JVM's code heaps are, as its agent says (a range of its
    /// own address space, trusted only for its own samples); empty if the
    /// agent did not say.
    pub fn code_cache(&self) -> Range<u64> {
        let header = self.header();
        let start = header.code_cache_start.load(Ordering::Acquire);
        let end = header.code_cache_end.load(Ordering::Acquire);
        if start < end {
            start..end
        } else {
            0..0
        }
    }

    /// What the agent says it is doing; `Failed` for a value it cannot mean.
    pub fn state(&self) -> AgentState {
        AgentState::from_raw(self.header().state.load(Ordering::Acquire))
            .unwrap_or(AgentState::Failed)
    }

    /// Hands every complete Java sample to `take`, oldest first; at most one
    /// ring's worth per call. The samples answer every stoke's signals, not
    /// only this one's.
    pub fn drain_samples(&mut self, mut take: impl FnMut(JavaSample)) {
        let (drained, kill_after) = (&mut self.drained, self.kill_after_drained);
        // SAFETY: the mapping lives as long as `self`.
        unsafe {
            self.samples.drain(self.base, read_sample, |sample| {
                *drained += 1;
                if kill_after == Some(*drained) {
                    // SAFETY: kill(2) of this very process (the test hook).
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
                take(sample)
            })
        }
    }

    /// Java samples this stoke lost: overwritten in the ring before it read
    /// them, or never written.
    pub fn samples_lost(&self) -> u64 {
        self.samples.lost()
    }

    /// Asks the agent to describe methods; returns how many it took (this
    /// stoke's part of the request ring may be full: ask again later).
    pub fn request_methods(&mut self, method_ids: &[u64]) -> usize {
        let consumer = self.consumer();
        let written = consumer.requests_written.load(Ordering::Relaxed);
        let read = consumer.requests_read.load(Ordering::Acquire);
        let free = (REQUEST_SLOTS as u64).saturating_sub(written.wrapping_sub(read));
        let taken = method_ids.len().min(free as usize);
        for (offset, &method_id) in method_ids[..taken].iter().enumerate() {
            let index = self.consumer * REQUEST_SLOTS
                + (written.wrapping_add(offset as u64) % REQUEST_SLOTS as u64) as usize;
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
        consumer
            .requests_written
            .store(written.wrapping_add(taken as u64), Ordering::Release);
        if taken > 0 {
            self.ring_doorbell();
        }
        taken
    }

    /// Tells the agent's worker that requests or wanted Java events wait.
    pub(super) fn ring_doorbell(&self) {
        let doorbell = &self.header().doorbell;
        doorbell.fetch_add(1, Ordering::Release);
        // SAFETY: FUTEX_WAKE on a word of a shared mapping; the agent's
        // worker waits on the same word of the same memfd. Whatever the
        // process wrote there, a wake only ends waits on that word.
        unsafe {
            libc::syscall(libc::SYS_futex, doorbell.as_ptr(), libc::FUTEX_WAKE, 1);
        }
    }

    /// A number that moves whenever the agent takes requests or appends
    /// events.
    pub fn progress(&self) -> u64 {
        self.consumer()
            .requests_read
            .load(Ordering::Relaxed)
            .wrapping_add(self.header().events_committed.load(Ordering::Relaxed))
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

/// What `/proc/PID/fd` shows for the agent's memfd.
fn agent_link() -> String {
    format!("/memfd:{} (deleted)", jvm::MEMFD_NAME)
}

fn kill_after_drained() -> Option<u64> {
    std::env::var(KILL_AFTER_DRAINED).ok()?.parse().ok()
}

/// Checks that `taken` is an agent memfd, then opens it anew: the copy
/// shares the agent's open file description, and the locks must be this
/// stoke's own.
fn own_description(taken: &OwnedFd) -> Result<File> {
    let fd = taken.as_raw_fd();
    // SAFETY: fstatfs, fstat and fcntl on a descriptor we own, into
    // zeroed out-structures.
    let (statfs, stat, seals) = unsafe {
        let mut statfs: libc::statfs = std::mem::zeroed();
        let mut stat: libc::stat = std::mem::zeroed();
        if libc::fstatfs(fd, &mut statfs) != 0 || libc::fstat(fd, &mut stat) != 0 {
            return Err(std::io::Error::last_os_error()).context("fstat");
        }
        (statfs, stat, libc::fcntl(fd, libc::F_GET_SEALS))
    };
    // The filesystems memfds live on.
    if ![libc::TMPFS_MAGIC, libc::HUGETLBFS_MAGIC].contains(&statfs.f_type) {
        bail!("the agent memory is not on tmpfs: no memfd");
    }
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG || stat.st_nlink != 0 {
        bail!("the agent memory is no memfd (not an unlinked regular file)");
    }
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        bail!("the agent memory is not sealed against shrinking");
    }
    if stat.st_size < TOTAL_SIZE as i64 {
        bail!("the agent memory is smaller than this version's layout");
    }
    let own = format!("/proc/self/fd/{fd}");
    if std::fs::read_link(&own).ok().as_deref() != Some(std::path::Path::new(&agent_link())) {
        bail!("the agent memory's memfd is not named {}", jvm::MEMFD_NAME);
    }
    // This process's own descriptor: nobody else can swap it.
    let file = File::options()
        .read(true)
        .write(true)
        .open(&own)
        .context("reopening the agent memory")?;
    let reopened = file.metadata().context("fstat")?;
    if reopened.ino() != stat.st_ino || reopened.dev() != stat.st_dev {
        bail!("the agent memory changed while reopened");
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use std::os::fd::FromRawFd;

    use super::*;

    /// A memfd named `name`, of `size` bytes, with `seals`.
    fn memfd(name: &std::ffi::CStr, size: usize, seals: i32) -> OwnedFd {
        // SAFETY: plain syscalls; the descriptor is checked and owned.
        unsafe {
            let fd = libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING);
            assert!(fd >= 0, "memfd_create");
            let fd = OwnedFd::from_raw_fd(fd);
            assert_eq!(libc::ftruncate(fd.as_raw_fd(), size as libc::off_t), 0);
            if seals != 0 {
                assert_eq!(libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals), 0);
            }
            fd
        }
    }

    #[test]
    fn only_a_sealed_memfd_named_like_the_agents_passes() {
        let sealed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        let good = memfd(c"stoke-agent", TOTAL_SIZE, sealed);
        let file = own_description(&good).expect("the agent's memfd passes");
        // A description of its own: its lock is not the agent's.
        // SAFETY: flock on descriptors we own.
        unsafe {
            assert_eq!(
                libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB),
                0
            );
            assert_ne!(
                libc::flock(good.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB),
                0
            );
        }

        let unsealed = memfd(c"stoke-agent", TOTAL_SIZE, 0);
        let error = own_description(&unsealed).unwrap_err();
        assert!(format!("{error:#}").contains("not sealed"), "{error:#}");
        let small = memfd(c"stoke-agent", 4096, sealed);
        let error = own_description(&small).unwrap_err();
        assert!(format!("{error:#}").contains("smaller"), "{error:#}");
        let renamed = memfd(c"stoke-agent2", TOTAL_SIZE, sealed);
        let error = own_description(&renamed).unwrap_err();
        assert!(format!("{error:#}").contains("not named"), "{error:#}");
        // A file of procfs, a directory: no memfd.
        for path in ["/proc/self/status", "/"] {
            let fd = OwnedFd::from(File::open(path).expect(path));
            assert!(own_description(&fd).is_err(), "{path} passed");
        }
    }
}
