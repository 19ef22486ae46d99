//! How glibc's malloc holds stoke's memory: returned to the system as soon
//! as stoke no longer uses it, except while the kernel's BTF is parsed.

/// Set before any thread starts:
/// - one arena for all of stoke's threads: an arena of the unwind
///   thread's own keeps what its bursts of compiling tables freed resident
///   between them; the threads seldom allocate at the same moment;
/// - large blocks (the kernel's BTF parsed, a file's unwind rows) always
///   mapped and unmapped whole: by default glibc raises its threshold to
///   the size of the last large block freed, and the next ones then stay
///   on the heap after they are freed, raising the start-up peak.
pub fn bound() {
    // SAFETY: mallopt has no preconditions.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

const MMAP_THRESHOLD: i32 = 256 << 10;
/// glibc's default, fixed since [`bound`] fixes the mmap threshold.
const TRIM_THRESHOLD: i32 = 128 << 10;

/// While alive, freed memory stays on the heap for the next allocations,
/// large blocks included; dropped, the heap is given back. For the
/// kernel's BTF, which aya's loader parses once more than stoke can use:
/// the second parse reuses the pages of the first instead of faulting in
/// new ones, which saves start-up CPU for a little more peak RSS (the
/// heap's fragments).
pub struct Reusing;

impl Reusing {
    pub fn start() -> Self {
        // SAFETY: mallopt has no preconditions.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        }
        Self
    }
}

impl Drop for Reusing {
    fn drop(&mut self) {
        // SAFETY: mallopt and malloc_trim have no preconditions.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            libc::malloc_trim(0);
        }
    }
}
