//! A sample as the sampler's ring gives it: a CPU tick, a wait off the
//! CPU or a counted event, with its thread, its stacks and what it stands
//! for.

use std::time::Duration;

use profiler_common::{python::PYTHON_FRAME_ENTRY, unwind::StopReason};

use super::Comm;

/// A CPU sample, or an off-CPU record (a wait, with the stacks it waited
/// in), with its stacks, innermost frame first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Process id.
    pub tgid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub time_ns: u64,
    /// The thread's name.
    pub comm: Comm,
    /// Kernel return addresses, innermost first.
    pub kernel: Vec<u64>,
    /// User return addresses, innermost first.
    pub user: Vec<u64>,
    /// CPython frames, innermost first, as the sampler read them.
    pub python: Vec<PythonFrame>,
    /// The thread was sent the JVM agent's signal: a Java stack follows.
    pub signalled: bool,
    /// The thread was exiting: its process may be recorded as ended.
    pub exiting: bool,
    /// The thread is one of the kernel's own.
    pub kernel_thread: bool,
    /// The user pc is in the code cache of a JVM whose agent answers.
    pub in_code_cache: bool,
    /// A key of the process's cgroups in every hierarchy, shared by the
    /// processes in the same ones, if the kernel said.
    pub cgroup_key: Option<u64>,
    /// In a process's first record, its executable's device (major,
    /// minor) and inode, as `/proc/PID/maps` gives them, if the kernel
    /// said.
    pub exe_file: Option<((u32, u32), u64)>,
    /// In a process's first record, how long it had run, if the kernel
    /// said.
    pub age: Option<Duration>,
    /// Why the user stack ends where it does.
    pub stop: StopReason,
    /// What the sample stands for.
    pub measure: Measure,
}

/// A CPython frame as the sampler read it: its code object, and where in
/// it (see [`profiler_common::python::PythonLayout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PythonFrame {
    /// The code object's address.
    pub code: u64,
    /// The instruction: `f_lasti`, or the instruction pointer's offset
    /// from the code object.
    pub instruction: u32,
    /// The first frame its call of the interpreter ran.
    pub entry: bool,
}

impl PythonFrame {
    /// The frame from the sampler's two words: the code object, and the
    /// instruction with [`PYTHON_FRAME_ENTRY`].
    pub fn from_words(code: u64, word: u64) -> Self {
        Self {
            code,
            instruction: word as u32,
            entry: word & PYTHON_FRAME_ENTRY != 0,
        }
    }
}

/// What a sample stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// A tick of CPU time.
    Cpu,
    /// A wait off the CPU of so many nanoseconds (the sample's `time_ns`
    /// is when the record was sent, once the wait had ended).
    OffCpu(u64),
    /// Time off the CPU that only wall-clock time counts (a runnable
    /// thread's, or a short wait's recorded by chance), of so many
    /// nanoseconds.
    WallOnly(u64),
    /// So many events of the recording's counter at `index`.
    Counted {
        /// The counter's index among the recording's counters.
        index: u8,
        /// The events the sample stands for.
        events: u64,
    },
}

#[cfg(test)]
impl Sample {
    /// A sample of thread `tid` of process `tgid` (named "java", signalled,
    /// its user stack ending at the outermost frame), for tests.
    pub fn for_test(tgid: u32, tid: u32, time_ns: u64, user: Vec<u64>) -> Self {
        Self {
            tgid,
            tid,
            cpu: 0,
            time_ns,
            comm: "java".into(),
            kernel: Vec::new(),
            user,
            python: Vec::new(),
            signalled: true,
            exiting: false,
            kernel_thread: false,
            in_code_cache: false,
            cgroup_key: None,
            exe_file: None,
            age: None,
            stop: StopReason::End,
            measure: Measure::Cpu,
        }
    }
}
