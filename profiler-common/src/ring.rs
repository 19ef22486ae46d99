//! What the BPF sampler writes into its `samples` ring buffer, and the
//! counters it keeps beside it.

use num_enum::TryFromPrimitive;

/// Most frames of one stack (kernel or user) that a sample carries; the
/// kernel's default `perf_event_max_stack`.
pub const MAX_FRAMES: usize = 127;

/// Length of a task's `comm`, as in the kernel's `TASK_COMM_LEN`.
pub const COMM_LEN: usize = 16;

/// What a record in the `samples` ring buffer reports.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, TryFromPrimitive)]
pub enum RecordKind {
    /// A cpu-clock sample: a [`RecordHeader`] followed by its stacks.
    Sample = 1,
    /// A process called `execve`: its address space from now on is a new one.
    /// A bare [`RecordHeader`] without frames.
    Exec = 2,
    /// A process ended (its thread group leader exited). A bare
    /// [`RecordHeader`]; a later sample with the same tgid is a new process.
    Exit = 3,
    /// A thread's time off the CPU: a [`RecordHeader`] whose `weight` is
    /// the time in nanoseconds, followed by the stacks it waited in.
    OffCpu = 4,
    /// A sample of a perf counter event (page faults, cache misses...): a
    /// [`RecordHeader`] whose `weight` is the events it stands for (the
    /// event's period) and whose flags name the counter
    /// ([`SAMPLE_COUNTER_SHIFT`]), followed by its stacks.
    Counted = 5,
}

/// The `bpf_cookie` of the link between the sampler and a JVM thread's own
/// cpu-clock event (whose `sigtrap` asks for the Java stack); the CPUs'
/// events have none (0).
pub const OWN_TIMER_COOKIE: u64 = 1;

/// The `bpf_cookie` of the link between the sampler and a CPU's counter
/// event: this plus the counter's index in the recording's counters.
pub const COUNTER_COOKIE_BASE: u64 = 16;

/// Added to a counter event's cookie when its events come as threads
/// leave the CPU (context switches, migrations): its samples signal no JVM
/// thread, as a signal would wake the thread it counts, which would switch
/// again.
pub const COUNTER_COOKIE_QUIET: u64 = 1 << 8;

/// Most counter events one recording samples.
pub const MAX_COUNTERS: u32 = 8;

/// [`RecordHeader::flags`] of a [`RecordKind::Counted`] record: the
/// counter's index, from this bit on (below [`MAX_COUNTERS`]).
pub const SAMPLE_COUNTER_SHIFT: u32 = 16;

/// SIGTRAP's number on x86_64: a JVM thread's own timer sends it, and the
/// sampler checks that the agent's handler of it is still installed.
pub const SIGTRAP: u32 = 5;

/// [`RecordHeader::flags`] bit: the CPU was running kernel code when sampled.
pub const SAMPLE_IN_KERNEL: u32 = 1 << 0;
/// [`RecordHeader::flags`] bit: the sampled thread was sent the JVM agent's
/// signal, so a Java stack for this sample should follow from the agent.
pub const SAMPLE_SIGNALLED: u32 = 1 << 1;
/// [`RecordHeader::flags`] bit: the thread was exiting. Its process's
/// exit may have been recorded before this sample: it is no new process.
pub const SAMPLE_EXITING: u32 = 1 << 2;
/// [`RecordHeader::flags`] bit: the thread is a kernel thread, which has no
/// user space (userspace need not read /proc to tell).
pub const SAMPLE_KERNEL_THREAD: u32 = 1 << 3;

/// [`RecordHeader::flags`] bit: the user pc is in the code cache of a JVM
/// whose agent answers ([`SignalledJvm`]): its frames are the agent's
/// Java stack, and the pc is no sign of code mapped since its maps were
/// read.
pub const SAMPLE_IN_CODE_CACHE: u32 = 1 << 4;

/// [`RecordHeader::flags`] bit of an off-CPU record that only wall-clock
/// time counts: the thread was runnable (preempted), not waiting, or its
/// wait was shorter than the off-CPU minimum, recorded by chance in
/// proportion to its length and weighed as that minimum.
pub const SAMPLE_WALL_ONLY: u32 = 1 << 5;

/// A JVM whose agent waits for signals: the `signal_tgids` map's value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignalledJvm {
    /// The signal the agent's handler waits for.
    pub signal: u32,
    /// Explicit padding, 0.
    pub padding: u32,
    /// Where its code heaps start: a sample whose pc is in them gets that
    /// pc alone as its native stack (the unwinder would stop there, at
    /// code no file holds), without searching the process's mappings.
    pub code_cache_start: u64,
    /// Where they end; `code_cache_start` if the agent did not say.
    pub code_cache_end: u64,
}

/// The fixed start of every ring-buffer record.
///
/// A sample or off-CPU record is followed by `kernel_frames` then
/// `user_frames` return addresses (`u64`), innermost frame first, then
/// `python_frames` Python frames.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RecordHeader {
    /// A [`RecordKind`], raw.
    pub kind: u32,
    /// The CPU the sample was taken on.
    pub cpu: u32,
    /// Process id (the kernel's tgid).
    pub tgid: u32,
    /// Thread id (the kernel's pid).
    pub tid: u32,
    /// `CLOCK_MONOTONIC` time of the sample, in nanoseconds.
    pub time_ns: u64,
    /// The thread's name, NUL-padded.
    pub comm: [u8; COMM_LEN],
    /// How many kernel frames follow the header.
    pub kernel_frames: u16,
    /// How many user frames follow the kernel frames.
    pub user_frames: u16,
    /// `SAMPLE_*` bits.
    pub flags: u32,
    /// Its stack's weight: for an off-CPU record the nanoseconds the
    /// thread was off the CPU, for a counted record the events the sample
    /// stands for; 0 in other records.
    pub weight: u64,
    /// In the first record of a process (as `exe_device`), a key of its
    /// cgroups in every hierarchy (a hash of their hierarchies and kernfs
    /// ids, shared by the processes in the same cgroups, v1 or v2), so that
    /// userspace reads a process's cgroup once per membership rather than
    /// once per process; 0 in other records, or if the kernel did not say.
    pub cgroup_key: u64,
    /// In the first record of a process (since it began or exec'd), its
    /// executable's device (the kernel's `dev_t`: major << 20 | minor)
    /// and inode, by which userspace finds its path among the mappings it
    /// reads anyway; 0 in other records, or if the kernel did not say.
    pub exe_device: u64,
    /// See `exe_device`.
    pub exe_inode: u64,
    /// In the first record of a process (as `exe_device`), how long it
    /// had run (since its main thread was forked), in nanoseconds, so that
    /// userspace tells young processes (which may yet load a JVM) from old
    /// ones without reading /proc; 0 in other records.
    pub age_ns: u64,
    /// How many Python frames follow the user frames, two words each: the
    /// code object's address, and the instruction with
    /// [`crate::python::PYTHON_FRAME_ENTRY`] (see
    /// [`crate::python::PythonLayout`]).
    pub python_frames: u16,
    /// Explicit padding, 0.
    pub padding: [u16; 3],
}

/// Size of [`RecordHeader`] in bytes.
pub const RECORD_HEADER_SIZE: usize = core::mem::size_of::<RecordHeader>();

/// Indexes of the per-CPU `counters` array the BPF sampler keeps.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, TryFromPrimitive)]
pub enum Counter {
    /// Samples sent to userspace.
    Sent = 0,
    /// Samples dropped because the ring buffer was full.
    LostRingFull = 1,
    /// Samples taken in kernel mode whose kernel stack could not be read.
    KernelStackFailed = 2,
    /// Samples whose user stack could not be read (kernel threads excluded).
    UserStackFailed = 3,
    /// Samples of the idle task, left out as asked.
    IdleSkipped = 4,
    /// Exec and exit records dropped because the ring buffer was full.
    LostLifecycle = 5,
    /// Signals to a JVM thread that the kernel refused to send.
    SignalFailed = 6,
    /// Off-CPU records sent to userspace.
    OffCpuSent = 7,
    /// Off-CPU waits long enough to count but over the per-CPU budget of
    /// records per second, left out.
    OffCpuOverBudget = 8,
    /// Off-CPU records dropped because the ring buffer was full.
    OffCpuLostRingFull = 9,
    /// Runs of the sampler for a JVM thread's own event: the thread's CPU
    /// ran it too at that tick (and returned at once).
    OwnTimerRuns = 10,
}

/// Number of [`Counter`]s, the size of the `counters` array.
pub const COUNTER_COUNT: u32 = 11;
