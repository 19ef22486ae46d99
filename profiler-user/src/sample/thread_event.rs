//! A cpu-clock perf event on one thread, sampled by the CPUs' sampler
//! (the program verified once serves every kind of event): what JVM
//! threads' own timers ([`super::thread_timers`]) and the `-p` targets'
//! events ([`super::target_events`]) are made of.
//!
//! An event with `sigtrap` must never overflow without the program, which
//! alone refuses the signal to a thread with no handler for it (the
//! default action ends the process). A BPF link lets go of the program
//! before the kernel removes the event, so a linked event is disabled
//! before it is closed; one attached to the event itself keeps it until
//! the event is gone, even when stoke is killed. Linked events time the
//! threads of JVMs whose agent takes their SIGTRAP, so one that a killed
//! stoke's links let through is taken as stoke's, not fatal.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use anyhow::Result;
use aya::Ebpf;
use aya_obj::generated::{
    bpf_attach_type, bpf_attr, bpf_cmd, perf_event_attr, perf_sw_ids::PERF_COUNT_SW_CPU_CLOCK,
    perf_type_id::PERF_TYPE_SOFTWARE, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_PERIOD,
    PERF_EVENT_IOC_SET_BPF, PERF_FLAG_FD_CLOEXEC,
};
use profiler_common::OWN_TIMER_COOKIE;

/// A period no thread reaches (146 years of CPU time): events start with
/// it until the sampler is linked to them (see [`open`]).
const NEVER_NS: u64 = 1 << 62;

/// How a thread's event is made.
#[derive(Clone, Copy, Debug)]
pub struct ThreadEvent {
    /// Thread CPU time between two samples.
    pub period_ns: u64,
    /// With `sigtrap`, the `sig_data` by which the agent's handler knows
    /// stoke's SIGTRAP; the program's return decides whether it is sent.
    pub trap_cookie: Option<u64>,
    /// The threads the thread starts get events of their own (its
    /// children processes do not).
    pub inherit: bool,
    /// How the sampler is attached to the event.
    pub attach: Attach,
}

/// How the sampler is attached to an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// By a link with [`OWN_TIMER_COOKIE`], by which the program tells the
    /// event from a CPU's (both may sample the thread).
    Link,
    /// To the event itself, for as long as it lives: where the program
    /// takes every event as the thread's own.
    Event,
}

/// An open event, sampling; closed when dropped.
pub struct OpenEvent {
    event: OwnedFd,
    link: Option<OwnedFd>,
}

impl Drop for OpenEvent {
    fn drop(&mut self) {
        if self.link.is_some() {
            // The link lets go of the program before the kernel removes
            // the event: stopped first, it cannot overflow in between.
            // SAFETY: an ioctl without argument on the event we own.
            unsafe { libc::ioctl(self.event.as_raw_fd(), PERF_EVENT_IOC_DISABLE as _, 0) };
        }
    }
}

/// Why an event could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The kernel refused: the thread is gone, or a privilege is missing.
    #[error("perf_event_open: {0}")]
    Refused(std::io::Error),
    /// The sampler could not be attached to the event.
    #[error(transparent)]
    Link(#[from] anyhow::Error),
}

/// The event on thread `tid`, sampling.
///
/// An event starts with a period it never reaches and gets its own once
/// the sampler is attached: a thread the event's thread starts meanwhile
/// inherits an event without the program (the kernel copies the parent's
/// at the thread's start), which with `sigtrap` would send SIGTRAP on its
/// own, with nothing to refuse it. The period is the parent's alone, so
/// such a thread goes unsampled instead; one started later gets both.
pub fn open(ebpf: &Ebpf, tid: u32, event: ThreadEvent) -> Result<OpenEvent, OpenError> {
    // SAFETY: a zeroed perf_event_attr is valid; fields set below.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = PERF_TYPE_SOFTWARE as u32;
    attr.config = PERF_COUNT_SW_CPU_CLOCK as u64;
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.__bindgen_anon_1.sample_period = NEVER_NS;
    if let Some(cookie) = event.trap_cookie {
        attr.set_sigtrap(1);
        // The kernel asks it of `sigtrap`: no signal outlives the program.
        attr.set_remove_on_exec(1);
        attr.sig_data = cookie;
    }
    if event.inherit {
        attr.set_inherit(1);
        attr.set_inherit_thread(1);
    }
    let mut fd = perf_event_open(&attr, tid as libc::pid_t, -1);
    if fd < 0
        && event.inherit
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
    {
        // Before inherit_thread (5.13) the target's child processes
        // inherit the event too, and the sampler leaves out their samples.
        attr.set_inherit_thread(0);
        fd = perf_event_open(&attr, tid as libc::pid_t, -1);
    }
    if fd < 0 {
        return Err(OpenError::Refused(std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let opened = OpenEvent {
        link: match event.attach {
            Attach::Link => Some(link(ebpf, &fd, OWN_TIMER_COOKIE)?),
            Attach::Event => {
                attach(ebpf, &fd)?;
                None
            }
        },
        event: fd,
    };
    let mut period = event.period_ns;
    // SAFETY: an ioctl on the event we own, the period read from our stack.
    if unsafe {
        libc::ioctl(
            opened.event.as_raw_fd(),
            PERF_EVENT_IOC_PERIOD as _,
            &mut period,
        )
    } != 0
    {
        return Err(OpenError::Link(anyhow::anyhow!(
            "setting the event's period: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(opened)
}

/// perf_event_open of `attr` on thread `pid` (any CPU) or CPU `cpu` (any
/// thread, `pid` -1): its descriptor, or -1 and errno.
pub(super) fn perf_event_open(attr: &perf_event_attr, pid: libc::pid_t, cpu: i32) -> libc::c_long {
    // SAFETY: perf_event_open with a valid attr, no group.
    unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr,
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    }
}

/// The descriptor of the CPUs' sampler.
fn sampler_fd(ebpf: &Ebpf) -> Result<i32> {
    Ok(super::sampler::loaded_cpu_program(ebpf)?
        .fd()?
        .as_fd()
        .as_raw_fd())
}

/// Attaches the CPUs' sampler to `event` itself, until it is closed.
fn attach(ebpf: &Ebpf, event: &OwnedFd) -> Result<()> {
    attach_program(sampler_fd(ebpf)?, event)
}

/// Attaches program `program_fd` to `event` itself, until it is closed
/// (no link, no cookie: any kernel).
pub(super) fn attach_program(program_fd: i32, event: &OwnedFd) -> Result<()> {
    // SAFETY: an ioctl on the event we own, with a program descriptor.
    if unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_SET_BPF as _, program_fd) } != 0 {
        anyhow::bail!("attaching the sampler: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Links the CPUs' sampler to `event` with `cookie`, by which the program
/// tells the event's kind.
pub(super) fn link(ebpf: &Ebpf, event: &OwnedFd, cookie: u64) -> Result<OwnedFd> {
    link_program(sampler_fd(ebpf)?, event, cookie)
}

/// Links program `program_fd` to `event` with `cookie`.
pub(super) fn link_program(program_fd: i32, event: &OwnedFd, cookie: u64) -> Result<OwnedFd> {
    // SAFETY: a zeroed bpf_attr is valid; the link_create fields set below.
    let mut link: bpf_attr = unsafe { std::mem::zeroed() };
    link.link_create.__bindgen_anon_1.prog_fd = program_fd as u32;
    link.link_create.__bindgen_anon_2.target_fd = event.as_raw_fd() as u32;
    link.link_create.attach_type = bpf_attach_type::BPF_PERF_EVENT as u32;
    link.link_create.__bindgen_anon_3.perf_event.bpf_cookie = cookie;
    // SAFETY: BPF_LINK_CREATE with a valid attr of the size given.
    let link = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_LINK_CREATE as libc::c_int,
            &link,
            std::mem::size_of::<bpf_attr>() as u32,
        )
    };
    if link < 0 {
        anyhow::bail!("linking the sampler: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(link as i32) })
}
