//! What every fuzz target shares: its budget, the limits one input must
//! stay within, and the line that reports what a run tried.
//!
//! `STOKE_FUZZ_SECONDS` sets the budget per target (`cargo xtask fuzz`
//! sets it, and runs each target in a process of its own); without it a
//! target runs for [`DEFAULT_SECONDS`], a smoke test inside `cargo test`.

use std::{
    fs::File,
    io::{Seek, SeekFrom, Write},
    os::fd::{FromRawFd, OwnedFd},
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    time::{Duration, Instant},
};

use super::alloc;

/// The budget of a target under plain `cargo test`.
pub const DEFAULT_SECONDS: f64 = 1.0;
/// An input that takes longer is a finding: stoke reads what processes
/// write while recording, and must never stall on it. Measured in the
/// thread's CPU time, which the machine's other work does not inflate.
pub const MAX_INPUT_TIME: Duration = Duration::from_secs(1);
/// The most heap one input may make a parser hold: above the largest
/// section stoke decompresses on purpose (`MAX_SECTION_BYTES`, 256 MiB).
pub const MAX_INPUT_HEAP: usize = 512 << 20;
/// The address space of a `cargo xtask fuzz` process: an allocation past
/// it aborts the run, which then counts as a crash.
const ADDRESS_SPACE_LIMIT: u64 = 4 << 30;
/// How long bolero may spend shrinking a failing input.
pub const SHRINK_TIME: Duration = Duration::from_secs(30);

/// The budget per target.
pub fn budget() -> Duration {
    let seconds = std::env::var("STOKE_FUZZ_SECONDS")
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
        .unwrap_or(DEFAULT_SECONDS);
    Duration::from_secs_f64(seconds)
}

/// One target's run: counts inputs, checks each against the limits, and
/// reports on a line of its own when dropped (also when an input failed).
/// Atomics, not cells: bolero wants inputs' closures unwind-safe.
pub struct Run {
    target: &'static str,
    started: Instant,
    inputs: AtomicU64,
    slowest_us: AtomicU64,
    most_heap: AtomicU64,
}

impl Run {
    /// Starts the run of `target`; in a `cargo xtask fuzz` process, caps
    /// the address space first.
    pub fn start(target: &'static str) -> Self {
        if std::env::var_os("STOKE_FUZZ_SECONDS").is_some() {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE_LIMIT,
                rlim_max: ADDRESS_SPACE_LIMIT,
            };
            // SAFETY: setrlimit with a valid struct.
            let set = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
            assert_eq!(set, 0, "setting RLIMIT_AS");
        }
        Self {
            target,
            started: Instant::now(),
            inputs: AtomicU64::new(0),
            slowest_us: AtomicU64::new(0),
            most_heap: AtomicU64::new(0),
        }
    }

    /// Runs `check` on one input, failing the input if it took longer than
    /// [`MAX_INPUT_TIME`] or held more than [`MAX_INPUT_HEAP`].
    pub fn input(&self, check: impl FnOnce()) {
        self.inputs.fetch_add(1, Relaxed);
        let started = thread_cpu_time();
        let ((), heap) = alloc::measure(check);
        let took = thread_cpu_time().saturating_sub(started);
        self.slowest_us
            .fetch_max(took.as_micros().try_into().unwrap_or(u64::MAX), Relaxed);
        self.most_heap.fetch_max(heap as u64, Relaxed);
        assert!(
            took <= MAX_INPUT_TIME,
            "{}: one input took {took:?}, more than {MAX_INPUT_TIME:?}",
            self.target
        );
        assert!(
            heap <= MAX_INPUT_HEAP,
            "{}: one input held {heap} bytes of heap, more than {MAX_INPUT_HEAP}",
            self.target
        );
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // One tab-separated line that `cargo xtask fuzz` reads.
        println!(
            "stoke-fuzz\t{}\t{}\t{}\t{:.1}\t{}\t{}",
            self.target,
            if std::thread::panicking() {
                "failed"
            } else {
                "ok"
            },
            self.inputs.load(Relaxed),
            self.started.elapsed().as_secs_f64(),
            self.slowest_us.load(Relaxed),
            self.most_heap.load(Relaxed),
        );
    }
}

/// A memfd holding `bytes`, positioned at its start: a file as stoke
/// opens them, without touching the disk.
pub fn memfd(bytes: &[u8]) -> File {
    // SAFETY: memfd_create with a NUL-terminated name; checked below.
    let fd = unsafe { libc::memfd_create(c"stoke-fuzz".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a new descriptor that nothing else owns.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(bytes).expect("writing a memfd");
    file.seek(SeekFrom::Start(0)).expect("rewinding a memfd");
    file
}

/// The CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; the clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
