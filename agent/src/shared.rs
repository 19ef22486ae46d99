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
};

use profiler_common::jvm::{
    self, AgentState, Event, Header, SampleSlot, EVENTS_OFFSET, EVENTS_SIZE, MAGIC,
    REQUESTS_OFFSET, REQUEST_SLOTS, SAMPLES_OFFSET, SAMPLE_SLOTS, SIGNAL, TOTAL_SIZE, VERSION,
};

/// The mapped memfd.
pub struct SharedMemory {
    base: NonNull<u8>,
    /// Kept open: stoke finds the memory through `/proc/PID/fd`.
    _memfd: OwnedFd,
    /// Bytes of the event log in use; the lock orders appends.
    events_used: Mutex<usize>,
}

// SAFETY: the memory is shared by design; every field written concurrently
// is an atomic, and the rest follows the ring and log protocols.
unsafe impl Send for SharedMemory {}
// SAFETY: see above.
unsafe impl Sync for SharedMemory {}

/// A sample slot claimed by a signal handler, to fill then commit.
pub struct Claim {
    /// The slot; only its claimer writes it until committed.
    pub slot: *mut SampleSlot,
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
            _memfd: memfd,
            events_used: Mutex::new(0),
        };
        shared.initialize();
        Ok(shared)
    }

    fn initialize(&self) {
        for index in 0..SAMPLE_SLOTS {
            // SAFETY: in bounds; nobody else uses the memory yet.
            unsafe {
                (*self.slot(index as u64))
                    .sequence
                    .store(index as u64, Ordering::Relaxed)
            };
        }
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

    fn slot(&self, position: u64) -> *mut SampleSlot {
        let index = (position % SAMPLE_SLOTS as u64) as usize;
        // SAFETY: the sample ring lies inside the mapping.
        unsafe {
            self.base
                .as_ptr()
                .add(SAMPLES_OFFSET)
                .cast::<SampleSlot>()
                .add(index)
        }
    }

    /// Claims the next free sample slot. Async-signal-safe: atomics only.
    pub fn claim_sample(&self) -> Option<Claim> {
        let header = self.header();
        let mut position = header.samples_written.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(position);
            // SAFETY: slot is in bounds; sequence is atomic.
            let sequence = unsafe { (*slot).sequence.load(Ordering::Acquire) };
            match sequence.wrapping_sub(position) as i64 {
                0 => match header.samples_written.compare_exchange_weak(
                    position,
                    position + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(Claim { slot, position }),
                    Err(current) => position = current,
                },
                behind if behind < 0 => {
                    header.samples_dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                _ => position = header.samples_written.load(Ordering::Relaxed),
            }
        }
    }

    /// Hands a filled slot to stoke. Async-signal-safe.
    pub fn commit(&self, claim: Claim) {
        // SAFETY: the claimed slot is in bounds.
        unsafe {
            (*claim.slot)
                .sequence
                .store(claim.position + 1, Ordering::Release)
        };
    }

    /// Passes every method id stoke asked about since the last call to
    /// `answer`.
    pub fn take_requests(&self, mut answer: impl FnMut(u64)) {
        let header = self.header();
        let written = header.requests_written.load(Ordering::Acquire);
        let mut read = header.requests_read.load(Ordering::Relaxed);
        // Never trust the distance: at most one ring's worth is pending.
        read = read.max(written.saturating_sub(REQUEST_SLOTS as u64));
        while read < written {
            let index = (read % REQUEST_SLOTS as u64) as usize;
            // SAFETY: the request ring lies inside the mapping.
            let request = unsafe {
                let slot = self
                    .base
                    .as_ptr()
                    .add(REQUESTS_OFFSET)
                    .cast::<AtomicU64>()
                    .add(index);
                (*slot).load(Ordering::Relaxed)
            };
            answer(request);
            read += 1;
        }
        header.requests_read.store(read, Ordering::Release);
    }

    /// Appends an event to the log; false if the log is full.
    pub fn append_event(&self, event: &Event) -> bool {
        let mut used = self
            .events_used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: the log lies inside the mapping; bytes past `used` are
        // ours alone until committed, and the lock serializes writers.
        let free = unsafe {
            std::slice::from_raw_parts_mut(
                self.base.as_ptr().add(EVENTS_OFFSET + *used),
                EVENTS_SIZE - *used,
            )
        };
        match jvm::encode(event, free) {
            Some(len) => {
                *used += len;
                self.header()
                    .events_committed
                    .store(*used as u64, Ordering::Release);
                true
            }
            None => {
                self.header().events_dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
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
