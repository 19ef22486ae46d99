//! Stage 1, sampling: the BPF sampler on every CPU ([`sampler`]), the
//! perf counter events it samples ([`counter_events`]), its
//! calls of kernel functions linked at load ([`kfuncs`]), the parsing of
//! the records it sends through its ring buffer ([`ring_record`]), and the
//! off-CPU waits still going on at the end ([`waiting`]).

pub mod counter_events;
pub mod kfuncs;
pub mod ring_record;
pub mod sampler;
pub mod target_events;
pub mod thread_event;
pub mod thread_timers;
pub mod tracepoint_id;
pub mod waiting;

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of the BPF side's
/// times (`bpf_ktime_get_ns`) and of the agents'.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}
