//! The agent's side of the shared memory (`profiler_common::jvm`): creates
//! and seals the memfd, produces samples and events, consumes requests.

use std::{
    ffi::CStr,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    ptr::{addr_of_mut, NonNull},
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::Duration,
};

use profiler_common::{
    java_events::JavaEventSlot,
    jvm::{
        self, writing_sequence, written_sequence, Activity, AgentState, Consumer, Event, Header,
        RingSlot, SampleSlot, CONSUMER_LOCKS, EVENTS_OFFSET, EVENTS_SIZE, MAGIC, MAX_CONSUMERS,
        REQUESTS_OFFSET, REQUEST_SLOTS, SAMPLES_OFFSET, SIGNAL, TOTAL_SIZE, VERSION,
    },
};

/// The mapped memfd.
pub struct SharedMemory {
    base: NonNull<u8>,
    /// Kept open: stoke finds the memory through `/proc/PID/fd`. Its own
    /// open file description, which no stoke shares (stoke reopens the
    /// memfd), tells by `flock` whether any stoke holds the memory, and by
    /// OFD locks which consumer slots are held.
    memfd: OwnedFd,
    /// The event log's state; the lock orders appends.
    events: Mutex<EventLog>,
}

/// The agent's side of the event log.
struct EventLog {
    /// Bytes in use.
    used: usize,
    /// False while idle: the log is freed, and nothing is appended.
    open: bool,
}

// SAFETY: the memory is shared by design; every field written concurrently
// is an atomic, and the rest follows the ring and log protocols.
unsafe impl Send for SharedMemory {}
// SAFETY: see above.
unsafe impl Sync for SharedMemory {}

/// A slot of a broadcast ring claimed by a producer, to fill then commit.
pub struct Claim<S> {
    /// The slot; only its claimer writes it until committed.
    pub slot: *mut S,
    position: u64,
}

impl SharedMemory {
    /// Creates, sizes, seals and maps the memfd, with an empty layout.
    pub fn create() -> io::Result<Self> {
        let name = c"stoke-agent";
        debug_assert_eq!(name.to_bytes(), jvm::MEMFD_NAME.as_bytes());
        let memfd = create_memfd(name)?;
        // SAFETY: plain syscalls on a descriptor we own.
        unsafe {
            if libc::ftruncate(memfd.as_raw_fd(), TOTAL_SIZE as libc::off_t) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Sealed, stoke can map the memory without fearing that the
            // process shrinks it under its feet.
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: a fresh shared mapping of the whole memfd.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                TOTAL_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let shared = Self {
            base: NonNull::new(base.cast()).ok_or_else(io::Error::last_os_error)?,
            memfd,
            events: Mutex::new(EventLog {
                used: 0,
                open: true,
            }),
        };
        shared.initialize();
        Ok(shared)
    }

    fn initialize(&self) {
        self.reset_rings();
        let header = self.header_ptr();
        // SAFETY: the header lies at the start of the mapping, zeroed.
        unsafe {
            addr_of_mut!((*header).total_size).write(TOTAL_SIZE as u64);
            addr_of_mut!((*header).signal).write(SIGNAL as u32);
            addr_of_mut!((*header).pid).write(std::process::id());
            addr_of_mut!((*header).version).write(VERSION);
            // The magic goes last: a reader that sees it sees the rest.
            std::sync::atomic::fence(Ordering::Release);
            addr_of_mut!((*header).magic).write_volatile(MAGIC);
        }
    }

    /// Empties the sample ring and the Java event ring. Only while no stoke
    /// reads them (at creation, and when waking from idle, before stoke may
    /// signal): their memory is zeroed then (fresh, or given back while
    /// idle), which holds no position; only the positions start over.
    fn reset_rings(&self) {
        let header = self.header();
        SampleSlot::written(header).store(0, Ordering::Release);
        JavaEventSlot::written(header).store(0, Ordering::Release);
    }

    /// The byte at `offset` of the mapping (below [`TOTAL_SIZE`]).
    pub(crate) fn at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset < TOTAL_SIZE);
        // SAFETY: in bounds of the mapping, as the callers' offsets are.
        unsafe { self.base.as_ptr().add(offset) }
    }

    fn header_ptr(&self) -> *mut Header {
        self.base.as_ptr().cast()
    }

    /// The header.
    pub fn header(&self) -> &Header {
        // SAFETY: initialized in create; shared fields are atomics.
        unsafe { &*self.header_ptr() }
    }

    /// Publishes the agent's state to stoke.
    pub fn set_state(&self, state: AgentState) {
        self.header().state.store(state as u32, Ordering::Release);
    }

    fn slot<S: RingSlot>(&self, position: u64) -> *mut S {
        self.at(S::offset_of(position)).cast()
    }

    /// Claims the next position of the ring of `S`; `None`, counted, if
    /// another producer is writing its slot (a slow one a lap behind, or
    /// ahead of this one). Async-signal-safe: atomics only.
    pub fn claim<S: RingSlot>(&self) -> Option<Claim<S>> {
        let header = self.header();
        let position = S::written(header).fetch_add(1, Ordering::Relaxed);
        let slot = self.slot::<S>(position);
        // SAFETY: the slot is in bounds; its sequence is atomic.
        let sequence = unsafe { (*slot).sequence() };
        let seen = sequence.load(Ordering::Relaxed);
        let busy = seen % 2 == 1 || seen >= writing_sequence(position);
        if busy
            || sequence
                .compare_exchange(
                    seen,
                    writing_sequence(position),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            S::dropped(header).fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // The sequence says "writing" before any byte of the slot changes.
        std::sync::atomic::fence(Ordering::Release);
        Some(Claim { slot, position })
    }

    /// Hands a filled slot to every stoke. Async-signal-safe.
    pub fn commit<S: RingSlot>(&self, claim: Claim<S>) {
        // SAFETY: the claimed slot is in bounds.
        unsafe {
            (*claim.slot)
                .sequence()
                .store(written_sequence(claim.position), Ordering::Release)
        };
    }

    /// Whether consumer slot `index` is claimed: a stoke holds its OFD
    /// lock.
    pub fn consumer_held(&self, index: usize) -> bool {
        // SAFETY: a zeroed flock is valid; fields set below.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = (CONSUMER_LOCKS + index as u64) as libc::off_t;
        lock.l_len = 1;
        // SAFETY: F_OFD_GETLK on our own descriptor, into a valid flock.
        let got = unsafe { libc::fcntl(self.memfd.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
        got == 0 && lock.l_type != libc::F_UNLCK as libc::c_short
    }

    /// The consumer slots claimed by a live stoke now.
    pub fn live_consumers(&self) -> impl Iterator<Item = &Consumer> {
        let header = self.header();
        (0..MAX_CONSUMERS)
            .filter(|&index| self.consumer_held(index))
            .map(move |index| &header.consumers[index])
    }

    /// Passes every method id any stoke asked about since the last call to
    /// `answer`: each stoke writes its own part of the request ring.
    pub fn take_requests(&self, mut answer: impl FnMut(u64)) {
        let header = self.header();
        for (index, consumer) in header.consumers.iter().enumerate() {
            let written = consumer.requests_written.load(Ordering::Acquire);
            let mut read = consumer.requests_read.load(Ordering::Relaxed);
            // Never trust the distance: at most one ring's worth is pending.
            read = read.max(written.saturating_sub(REQUEST_SLOTS as u64));
            while read < written {
                let at = index * REQUEST_SLOTS + (read % REQUEST_SLOTS as u64) as usize;
                // SAFETY: the request ring lies inside the mapping.
                let request = unsafe {
                    let slot = self
                        .base
                        .as_ptr()
                        .add(REQUESTS_OFFSET)
                        .cast::<AtomicU64>()
                        .add(at);
                    (*slot).load(Ordering::Relaxed)
                };
                answer(request);
                read += 1;
            }
            consumer.requests_read.store(read, Ordering::Release);
        }
    }

    /// Appends an event to the log; false if the log is full, or closed
    /// while the agent is idle.
    pub fn append_event(&self, event: &Event) -> bool {
        let mut log = self.lock_events();
        if !log.open {
            return false;
        }
        // SAFETY: the log lies inside the mapping; bytes past `used` are
        // ours alone until committed, and the lock serializes writers.
        let free = unsafe {
            std::slice::from_raw_parts_mut(
                self.base.as_ptr().add(EVENTS_OFFSET + log.used),
                EVENTS_SIZE - log.used,
            )
        };
        match jvm::encode(event, free) {
            Some(len) => {
                log.used += len;
                self.header()
                    .events_committed
                    .store(log.used as u64, Ordering::Release);
                true
            }
            None => {
                self.header().events_dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    fn lock_events(&self) -> std::sync::MutexGuard<'_, EventLog> {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a stoke holds the memory (a shared lock); if none does,
    /// the lock is taken for the caller until [`Self::unlock`], so that no
    /// stoke comes meanwhile.
    pub fn held_by_stoke(&self) -> bool {
        // SAFETY: flock on our own descriptor.
        unsafe { libc::flock(self.memfd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
    }

    /// Drops the lock [`Self::held_by_stoke`] took.
    pub fn unlock(&self) {
        // SAFETY: flock on our own descriptor.
        unsafe { libc::flock(self.memfd.as_raw_fd(), libc::LOCK_UN) };
    }

    /// Goes idle (the caller holds the lock, so no stoke reads the memory,
    /// and none has signalled for the idle time): empties the event log
    /// and gives the memory of the log and of the rings back to the system.
    pub fn go_idle(&self) {
        let mut log = self.lock_events();
        log.open = false;
        log.used = 0;
        let header = self.header();
        header.events_committed.store(0, Ordering::Release);
        // SAFETY: fallocate on our memfd; punching a hole keeps its size
        // (which the seals fix) and frees the pages, in every mapping;
        // what is read there afterwards is zeros. The header's page stays.
        unsafe {
            libc::fallocate(
                self.memfd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                SAMPLES_OFFSET as libc::off_t,
                (TOTAL_SIZE - SAMPLES_OFFSET) as libc::off_t,
            );
        }
        header
            .activity
            .store(Activity::Idle as u32, Ordering::Release);
    }

    /// How often stoke has rung the doorbell, wrapping.
    pub fn doorbell(&self) -> u32 {
        self.header().doorbell.load(Ordering::Acquire)
    }

    /// Waits until stoke rings the doorbell past `rung` (at once if it
    /// already has) or `timeout` passes.
    pub fn wait_for_doorbell(&self, rung: u32, timeout: Duration) {
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
        };
        // SAFETY: FUTEX_WAIT on a word of a shared mapping with a relative
        // timeout, woken by stoke's FUTEX_WAKE on the same word of the same
        // memfd. A signal or a changed word only ends the wait early.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.header().doorbell.as_ptr(),
                libc::FUTEX_WAIT,
                rung,
                &timeout,
            );
        }
    }

    /// Waits, taking no CPU, until a stoke wakes the idle agent; then opens
    /// the event log again. The caller replays the code map into it and
    /// then says [`Self::active`].
    pub fn wait_for_stoke(&self) {
        let activity = &self.header().activity;
        while activity.load(Ordering::Acquire) == Activity::Idle as u32 {
            // SAFETY: FUTEX_WAIT on a word of a shared mapping, woken by
            // stoke's FUTEX_WAKE on the same word of the same memfd.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    activity.as_ptr(),
                    libc::FUTEX_WAIT,
                    Activity::Idle as u32,
                    std::ptr::null::<libc::timespec>(),
                );
            }
        }
        self.reset_rings();
        self.lock_events().open = true;
    }

    /// Tells the stoke that woke the agent that the log holds the code map.
    pub fn active(&self) {
        self.header()
            .activity
            .store(Activity::Active as u32, Ordering::Release);
    }
}

fn create_memfd(name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use profiler_common::{java_events::JAVA_EVENT_SLOTS, jvm::SAMPLE_SLOTS};

    use super::*;

    /// What a stoke reads at `position`: whether its sample is there.
    fn written(shared: &SharedMemory, position: u64) -> bool {
        // SAFETY: the slot is in bounds; the sequence is atomic.
        let sequence = unsafe { &(*shared.slot::<SampleSlot>(position)).sequence };
        sequence.load(Ordering::Acquire) == written_sequence(position)
    }

    #[test]
    fn a_new_memory_has_its_header_and_an_empty_ring() {
        let shared = SharedMemory::create().unwrap();
        let header = shared.header();
        assert_eq!(header.magic, MAGIC);
        assert_eq!(header.version, VERSION);
        assert_eq!(header.total_size, TOTAL_SIZE as u64);
        assert_eq!(header.pid, std::process::id());
        assert!(!written(&shared, 0), "nothing committed yet");
    }

    #[test]
    fn producers_lap_the_ring_and_a_slot_mid_write_drops_and_counts() {
        let shared = SharedMemory::create().unwrap();
        // A claimed slot is invisible to stoke until committed.
        let first = shared.claim::<SampleSlot>().unwrap();
        assert!(!written(&shared, 0));
        shared.commit(first);
        assert!(written(&shared, 0));
        // No stoke holds producers back: the next lap overwrites.
        for _ in 1..=SAMPLE_SLOTS {
            let claim = shared.claim::<SampleSlot>().expect("never full");
            shared.commit(claim);
        }
        assert!(!written(&shared, 0), "overwritten by the next lap");
        assert!(written(&shared, SAMPLE_SLOTS as u64));
        // A producer a lap behind, still writing, keeps its slot: the one
        // that comes to it meanwhile drops its sample and counts it.
        let slow = shared.claim::<SampleSlot>().unwrap();
        for _ in 1..SAMPLE_SLOTS {
            let claim = shared.claim::<SampleSlot>().unwrap();
            shared.commit(claim);
        }
        assert!(shared.claim::<SampleSlot>().is_none());
        assert_eq!(shared.header().samples_dropped.load(Ordering::Relaxed), 1);
        shared.commit(slow);
        let claim = shared
            .claim::<SampleSlot>()
            .expect("the slot after is free");
        assert_eq!(claim.position, 2 * SAMPLE_SLOTS as u64 + 2);
    }

    #[test]
    fn an_event_slot_mid_write_drops_the_next_lap_and_counts() {
        let shared = SharedMemory::create().unwrap();
        let slow = shared.claim::<JavaEventSlot>().expect("an empty ring");
        for _ in 1..JAVA_EVENT_SLOTS {
            let claim = shared.claim::<JavaEventSlot>().expect("room left");
            shared.commit(claim);
        }
        assert!(shared.claim::<JavaEventSlot>().is_none());
        let header = shared.header();
        assert_eq!(header.java_events_dropped.load(Ordering::Relaxed), 1);
        assert_eq!(header.samples_dropped.load(Ordering::Relaxed), 0);
        shared.commit(slow);
        // SAFETY: slot 0 is in bounds; its sequence is atomic.
        let sequence = unsafe { &(*shared.slot::<JavaEventSlot>(0)).sequence };
        assert_eq!(sequence.load(Ordering::Acquire), written_sequence(0));
        let claim = shared
            .claim::<JavaEventSlot>()
            .expect("the next slot is free");
        assert_eq!(claim.position, JAVA_EVENT_SLOTS as u64 + 1);
    }

    #[test]
    fn consumer_slots_are_live_while_their_lock_is_held() {
        let shared = SharedMemory::create().unwrap();
        assert_eq!(shared.live_consumers().count(), 0);
        // A stoke's own description of the memfd, as stoke reopens it.
        let own = std::fs::File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", shared.memfd.as_raw_fd()))
            .unwrap();
        // SAFETY: a zeroed flock is valid; fields set below.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = (CONSUMER_LOCKS + 3) as libc::off_t;
        lock.l_len = 1;
        // SAFETY: F_OFD_SETLK on a descriptor we own.
        assert_eq!(
            unsafe { libc::fcntl(own.as_raw_fd(), libc::F_OFD_SETLK, &lock) },
            0
        );
        assert!(shared.consumer_held(3) && !shared.consumer_held(2));
        assert_eq!(shared.live_consumers().count(), 1);
        drop(own);
        assert_eq!(shared.live_consumers().count(), 0, "released on close");
    }

    #[test]
    fn requests_beyond_one_ring_are_never_read_twice() {
        let shared = SharedMemory::create().unwrap();
        let header = shared.header();
        // A stoke claims far more requests than its part of the ring
        // holds: only the last ring's worth is read.
        let consumer = &header.consumers[5];
        consumer
            .requests_written
            .store(10 * REQUEST_SLOTS as u64, Ordering::Release);
        let mut answered = 0;
        shared.take_requests(|_| answered += 1);
        assert_eq!(answered, REQUEST_SLOTS);
        shared.take_requests(|_| answered += 1);
        assert_eq!(answered, REQUEST_SLOTS, "nothing new was written");
        assert_eq!(
            consumer.requests_read.load(Ordering::Relaxed),
            10 * REQUEST_SLOTS as u64
        );
    }

    #[test]
    fn an_idle_agent_appends_nothing_until_woken() {
        let shared = SharedMemory::create().unwrap();
        let event = Event::CodeUnload {
            method_id: 1,
            start: 0x1000,
        };
        assert!(shared.append_event(&event));
        let committed = shared.header().events_committed.load(Ordering::Acquire);
        assert!(committed > 0);
        let claim = shared.claim::<SampleSlot>().unwrap();
        shared.commit(claim);
        shared.go_idle();
        assert_eq!(shared.header().events_committed.load(Ordering::Acquire), 0);
        assert!(!shared.append_event(&event), "the log is closed while idle");
        // Woken (as stoke does: activity set, then the futex woken), the
        // ring starts empty again and the log takes events.
        shared
            .header()
            .activity
            .store(Activity::Waking as u32, Ordering::Release);
        shared.wait_for_stoke();
        assert!(!written(&shared, 0), "the ring was emptied");
        assert_eq!(shared.header().samples_written.load(Ordering::Acquire), 0);
        assert!(shared.append_event(&event));
    }
}
