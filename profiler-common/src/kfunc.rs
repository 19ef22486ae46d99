//! Calls from the BPF programs to kernel functions (kfuncs). aya, which
//! loads the programs, does not resolve `__ksym` externs: the BPF side
//! emits each call with a marker where the function's BTF id goes, and
//! userspace puts the running kernel's id there before loading, or does
//! not load a program whose kfunc the kernel lacks.

/// The marker of a call to `bpf_task_work_schedule_resume_impl` (Linux
/// 6.18): runs a BPF callback in a task's own context when it next returns
/// to user mode.
pub const KFUNC_TASK_WORK_SCHEDULE_RESUME: u32 = 0x7ff0_0001;
