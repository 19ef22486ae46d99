//! Loads the BPF sampler, attaches it to a cpu-clock perf event on every
//! online CPU, and hands out its ring buffer and counters.

use std::{
    io,
    ops::Range,
    os::fd::{AsRawFd, BorrowedFd, OwnedFd},
    time::Duration,
};

use anyhow::{anyhow, bail, Context, Result};
use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, ProgramArray, RingBuf},
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        BtfTracePoint, KProbe, PerfEvent, Program, ProgramError, ProgramFd, TracePoint,
    },
    Btf, Ebpf, EbpfError, EbpfLoader,
};
use profiler_common::{
    bpf_names as names, unwind::unwind_page_capacity, Counter, SignalledJvm, COUNTER_COUNT,
    MAX_COUNTERS,
};
use tracing::debug;

use super::{
    counter_events::{self, CounterEvents, Rate, Unavailable, PROBE_PROGRAM, TRACEPOINT_PROGRAM},
    kfuncs, monotonic_ns,
    target_events::TargetEvents,
    thread_timers::{self, ThreadTimers, Trap},
    waiting::{self, WaitsInProgress},
};
use crate::{event, heap, model::OffCpuUserStacks, procfs::thread_ids};

/// What to sample.
#[derive(Clone, Debug)]
pub struct SamplerConfig {
    /// Samples per second on each CPU.
    pub frequency_hz: u64,
    /// Only these processes; `None` samples every process.
    pub pids: Option<Vec<u32>>,
    /// Keep samples of the idle task.
    pub include_idle: bool,
    /// Turn on the kernel's BPF run-time statistics while sampling.
    pub bpf_stats: bool,
    /// Capacity of the unwind-table rows map; 0 walks frame pointers only.
    pub unwind_rows: u32,
    /// Sample CPUs (`-e cpu`).
    pub cpu: bool,
    /// CPU samples of JVMs take their Java stacks (with `-e cpu`; not when
    /// CPU samples only find the JVMs for their Java events).
    pub cpu_java_stacks: bool,
    /// Record off-CPU time (`-e offcpu`).
    pub offcpu: Option<OffCpuConfig>,
    /// Counted events to sample (perf counters, probes), in order.
    pub counters: Vec<event::Event>,
    /// How often the counters are sampled.
    pub counter_rate: Rate,
    /// Load the programs of kernels without bpf_loop, whatever the kernel.
    pub legacy: bool,
}

/// How off-CPU time is recorded.
#[derive(Clone, Copy, Debug)]
pub struct OffCpuConfig {
    /// Shorter waits are not counted.
    pub min_ns: u64,
    /// Most off-CPU records each CPU sends per second; longer waits past it
    /// are counted as over budget.
    pub records_per_cpu_second: u32,
    /// Only the waits of JVMs whose agent takes signals (for their parks).
    pub jvms_only: bool,
    /// What time off the CPU counts.
    pub counting: OffCpuCounting,
}

/// What time off the CPU the off-CPU records count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffCpuCounting {
    /// Waits, blocked or asleep, of `min_ns` or more.
    Waits,
    /// Waits and runnable time, those shorter than `min_ns` sampled in
    /// proportion to their length (wall-clock time).
    Wall,
    /// Time on the run queue only: from a wake-up or a preemption to the
    /// switch-in, sampled as for [`OffCpuCounting::Wall`].
    RunQueue,
}

/// The running BPF sampler. Sampling stops when it is dropped.
pub struct Sampler {
    /// Owns the programs and their perf-event links: dropping it detaches.
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    cpus: Vec<u32>,
    /// The rate of the CPU samples still to start, if asked for.
    cpu_clock_hz: Option<u64>,
    /// How off-CPU user stacks are taken, when off-CPU time is recorded.
    offcpu_user_stacks: Option<OffCpuUserStacks>,
    /// Keeps the kernel's BPF statistics on while held.
    _stats: Option<OwnedFd>,
    /// JVM threads sampled by events of their own, every `period_ns`.
    timers: ThreadTimers,
    period_ns: u64,
    /// With `-p` of targets with few threads: the targets, sampled by
    /// events on their threads, not the CPUs'.
    targets: Option<TargetEvents>,
    /// CPU samples started.
    sampling_cpu: bool,
    /// The kernel supports timed threads ([`thread_timers::kernel_supported`]).
    sigtrap_kernel: bool,
    /// The kernel lacks bpf_loop: CPU samples come from the legacy program.
    legacy: bool,
    /// Why user stacks are walked by frame pointers only, if they are: the
    /// legacy kernel refused the program that walks unwind tables.
    no_tables: Option<String>,
    /// The counted events to start sampling, and how often.
    counters: Vec<event::Event>,
    counter_rate: Rate,
    /// The counters sampling.
    _counter_events: Option<CounterEvents>,
}

/// Processes whose unwind tables can be loaded at once.
const UNWIND_PROCESSES: u32 = 16384;

/// Executable mappings of those processes, all together (40 bytes each,
/// mapped into stoke): a process maps a dozen files, a JVM a hundred.
const UNWIND_MAPPINGS: u32 = 1 << 16;

/// Most threads the `-p` targets have together for events on their
/// threads to sample them. Each such event times its own thread's CPU
/// time, which a thread that runs in bursts shorter than the period
/// seldom fills: a process of thousands of such threads (a thread per
/// connection) gets a fraction of its samples. Past this count the CPUs'
/// events sample the targets, in proportion to their CPU time however it
/// is spread, and cost fewer descriptors than an event a thread.
const MAX_THREAD_EVENTS: usize = 256;

/// Whether processes `pids` have at most [`MAX_THREAD_EVENTS`] threads
/// together.
fn few_threads(pids: &[u32]) -> bool {
    let mut threads = 0;
    for &pid in pids {
        threads += thread_ids(pid, MAX_THREAD_EVENTS + 1).len();
        if threads > MAX_THREAD_EVENTS {
            debug!("the targets have more than {MAX_THREAD_EVENTS} threads: the CPUs' events sample them");
            return false;
        }
    }
    true
}

/// Totals of the sampler's per-CPU counters.
pub type CounterTotals = [u64; COUNTER_COUNT as usize];

impl Sampler {
    /// Loads the sampler, lifecycle and off-CPU programs attached; CPU
    /// samples start with [`Sampler::start_sampling`].
    pub fn load(config: &SamplerConfig) -> Result<Self> {
        let stats = config
            .bpf_stats
            .then(|| aya::sys::enable_stats(aya::sys::Stats::RunTime))
            .transpose()
            .context("turning on BPF statistics (--bpf-stats)")?;
        let cpus =
            aya::util::online_cpus().map_err(|(path, error)| anyhow!("reading {path}: {error}"))?;
        let ring_bytes = ring_size(cpus.len(), config.frequency_hz);
        // Wake the reader early enough that a quarter of the ring is always
        // free for the samples taken while it drains.
        let wakeup_bytes = u64::from(ring_bytes / 4 * 3);
        let filter_tgids = u8::from(config.pids.is_some());
        // With `-p`, events on the targets' threads are the only ones,
        // unless the targets have too many threads for them.
        let thread_events = u8::from(config.pids.as_deref().is_some_and(few_threads));
        let include_idle = u8::from(config.include_idle);
        let cpu_java_stacks = u8::from(config.cpu_java_stacks);
        let target_count = config.pids.as_ref().map_or(1, |pids| pids.len().max(1));
        let offcpu_min_ns = config.offcpu.map_or(0, |offcpu| offcpu.min_ns);
        let offcpu_budget = config
            .offcpu
            .map_or(0, |offcpu| offcpu.records_per_cpu_second);
        let offcpu_jvms_only = u8::from(config.offcpu.is_some_and(|offcpu| offcpu.jvms_only));
        let counting = config.offcpu.map(|offcpu| offcpu.counting);
        let offcpu_wall =
            u8::from(counting.is_some_and(|counting| counting != OffCpuCounting::Waits));
        let offcpu_runqueue = u8::from(counting == Some(OffCpuCounting::RunQueue));
        // The kernel's BTF (megabytes to parse) serves the kfunc
        // ids, the loader and the tracepoints, parsed once: the copy the
        // loader always parses for itself is dropped first, so that only one
        // is alive at a time, and ours reuses its pages.
        let reusing = heap::Reusing::start();
        let mut loader = EbpfLoader::new();
        loader.btf(None);
        let btf = kernel_btf()?;
        drop(reusing);
        let offcpu = config.offcpu.is_some();
        let legacy = config.legacy || !has_bpf_loop();
        if legacy && offcpu {
            bail!(
"off-CPU, wall-clock and run-queue time (and Java locks) need Linux 5.17 or newer (bpf_loop and task storage); this kernel is {}",
                crate::procfs::kernel_release().unwrap_or_default()
            );
        }
        check_counters(&config.counters, &cpus)?;
        let quiet_counters = counter_events::quiet_counters(&config.counters);
        let linked = kfuncs::link(profiler_ebpf::sampler_object(offcpu), &btf);

        // The off-CPU task storage is used only by the BPF side: aya has no
        // type for it, which is no matter.
        let mut ebpf = loader
            .btf(Some(&btf))
            .allow_unsupported_maps()
            .override_global(names::global::filter_tgids, &filter_tgids, true)
            .override_global(names::global::thread_events, &thread_events, true)
            .override_global(names::global::include_idle, &include_idle, true)
            .override_global(names::global::cpu_java_stacks, &cpu_java_stacks, true)
            .override_global(names::global::wakeup_bytes, &wakeup_bytes, true)
            .override_global(names::global::offcpu_min_ns, &offcpu_min_ns, offcpu)
            .override_global(names::global::offcpu_budget, &offcpu_budget, offcpu)
            .override_global(names::global::offcpu_jvms_only, &offcpu_jvms_only, offcpu)
            .override_global(names::global::offcpu_wall, &offcpu_wall, offcpu)
            .override_global(names::global::offcpu_runqueue, &offcpu_runqueue, offcpu)
            .override_global(names::global::legacy_quiet_counters, &quiet_counters, true)
            .map_max_entries(names::map::samples, ring_bytes)
            .map_max_entries(names::map::target_tgids, u32::try_from(target_count)?)
            .map_max_entries(names::map::unwind_rows, config.unwind_rows.max(1))
            .map_max_entries(
                names::map::unwind_pages,
                unwind_page_capacity(config.unwind_rows).max(1),
            )
            .map_max_entries(names::map::unwind_processes, UNWIND_PROCESSES)
            .map_max_entries(
                names::map::unwind_mappings,
                if config.unwind_rows == 0 {
                    1
                } else {
                    UNWIND_MAPPINGS
                },
            )
            .load(linked.object())
            .map_err(explain_load_error)?;

        if let Some(pids) = &config.pids {
            let mut targets: BpfHashMap<_, u32, u8> = BpfHashMap::try_from(
                ebpf.map_mut(names::map::target_tgids)
                    .context("no target_tgids map")?,
            )?;
            for pid in pids {
                targets
                    .insert(pid, 1, 0)
                    .context("filling the pid filter")?;
            }
        }

        // Lifecycle tracepoints go first, so no exec between the first sample
        // and their attachment goes unnoticed. BTF tracepoints need no
        // tracefs, which a fresh host does not mount.
        attach_tracepoint(
            &mut ebpf,
            &btf,
            names::program::process_exec,
            "sched_process_exec",
        )?;
        attach_tracepoint(
            &mut ebpf,
            &btf,
            names::program::process_exit,
            "sched_process_exit",
        )?;
        let mut offcpu_user_stacks = None;
        if offcpu {
            attach_tracepoint(
                &mut ebpf,
                &btf,
                names::program::offcpu_thread_exit,
                "sched_process_exit",
            )?;
            // Task work where the kernel has it: a syscall-exit hook would
            // slow every syscall of the host. The variable is a way back
            // should a kernel's task work misbehave.
            let task_work = linked.task_work
                && std::env::var_os(OFFCPU_AT_SYSCALL_EXIT).is_none()
                && load_tracepoint(
                    &mut ebpf,
                    &btf,
                    names::program::offcpu_switch_task_work,
                    "sched_switch",
                )
                .inspect_err(|error| debug!("off-CPU user stacks at syscall exits: {error:#}"))
                .is_ok();
            if task_work {
                attach_tracepoint(
                    &mut ebpf,
                    &btf,
                    names::program::offcpu_switch_task_work,
                    "sched_switch",
                )?;
                offcpu_user_stacks = Some(OffCpuUserStacks::TaskWork);
            } else {
                // Syscall exits first: no wait's record is left without its
                // user stack.
                attach_tracepoint(
                    &mut ebpf,
                    &btf,
                    names::program::offcpu_syscall_exit,
                    "sys_exit",
                )?;
                attach_tracepoint(
                    &mut ebpf,
                    &btf,
                    names::program::offcpu_switch,
                    "sched_switch",
                )?;
                offcpu_user_stacks = Some(OffCpuUserStacks::SyscallExits);
            }
        }
        if offcpu_runqueue != 0 {
            attach_tracepoint(
                &mut ebpf,
                &btf,
                names::program::offcpu_wakeup,
                "sched_wakeup",
            )?;
        }
        // The waits still going on at the end: not on the run queue.
        if config.offcpu.is_some_and(|offcpu| !offcpu.jvms_only) && offcpu_runqueue == 0 {
            waiting::load(&mut ebpf, &btf)?;
        }

        cpu_program(&mut ebpf, legacy)?
            .load()
            .map_err(explain_program_error)?;
        let no_tables = legacy
            .then(|| load_legacy_unwinder(&mut ebpf, &config.counters).err())
            .flatten()
            .map(|error| format!("{error:#}"));
        if legacy {
            load_legacy_counted(&mut ebpf, &config.counters)?;
        }
        let probes = config.counters.iter().filter_map(|event| match event {
            event::Event::Probe(probe) => Some(&probe.target),
            _ => None,
        });
        // A legacy kernel's probes have programs of their own (above).
        let (tracepoints, regs): (Vec<_>, Vec<_>) = probes
            .filter(|_| !legacy)
            .partition(|target| matches!(target, event::ProbeTarget::Tracepoint { .. }));
        if !regs.is_empty() {
            let program: &mut KProbe = ebpf
                .program_mut(PROBE_PROGRAM)
                .context("no probe program")?
                .try_into()?;
            program.load().map_err(explain_program_error)?;
        }
        if !tracepoints.is_empty() {
            let program: &mut TracePoint = ebpf
                .program_mut(TRACEPOINT_PROGRAM)
                .context("no tracepoint program")?
                .try_into()?;
            program.load().map_err(explain_program_error)?;
        }

        let ring = RingBuf::try_from(
            ebpf.take_map(names::map::samples)
                .context("no samples map")?,
        )?;
        let period_ns = event::period_ns(config.frequency_hz);
        let sigtrap_kernel = thread_timers::kernel_supported();
        Ok(Self {
            ebpf,
            ring,
            cpus,
            cpu_clock_hz: config.cpu.then_some(config.frequency_hz),
            offcpu_user_stacks,
            _stats: stats,
            timers: ThreadTimers::default(),
            period_ns,
            targets: config
                .pids
                .clone()
                .filter(|_| thread_events != 0)
                .map(|pids| TargetEvents::new(pids, period_ns, sigtrap_kernel)),
            sampling_cpu: false,
            sigtrap_kernel,
            legacy,
            no_tables,
            counters: config.counters.clone(),
            counter_rate: config.counter_rate,
            _counter_events: None,
        })
    }

    /// Starts the off-CPU clock (waits count from now), and sampling every
    /// online CPU, or with `-p` every thread of the targets, if CPU samples
    /// were asked for; `trap_cookie` gives the `sig_data` of a target's
    /// events.
    pub fn start_sampling(&mut self, trap_cookie: impl FnMut(u32) -> u64) -> Result<()> {
        if let Some(map) = self.ebpf.map_mut(names::map::offcpu_start) {
            Array::<_, u64>::try_from(map)?
                .set(0, monotonic_ns(), 0)
                .context("starting the off-CPU clock")?;
        }
        if !self.counters.is_empty() {
            self._counter_events = Some(counter_events::open(
                &self.ebpf,
                &self.counters,
                &self.cpus,
                self.counter_rate,
                self.legacy,
            )?);
        }
        let Some(frequency_hz) = self.cpu_clock_hz.take() else {
            return Ok(());
        };
        self.sampling_cpu = true;
        if let Some(targets) = &mut self.targets {
            return targets.start(&self.ebpf, trap_cookie);
        }
        let sampler = cpu_program(&mut self.ebpf, self.legacy)?;
        for &cpu in &self.cpus {
            sampler
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(frequency_hz),
                    false,
                )
                .map_err(explain_program_error)?;
        }
        Ok(())
    }

    /// Samples JVM thread `tid` with an event of its own whose SIGTRAP
    /// reaches `trap` (`thread_timers`), unless it is or was tried; a
    /// target's thread, by its target's event if it carries `trap`'s
    /// cookie.
    pub fn time_thread(&mut self, (pid, tid): (u32, u32), trap: Trap) -> Result<()> {
        if !self.sampling_cpu || !self.sigtrap_kernel {
            return Ok(());
        }
        let period_ns = match &self.targets {
            Some(targets) if targets.cookie(pid) != Some(trap.cookie) => return Ok(()),
            Some(_) => None,
            None => Some(self.period_ns),
        };
        self.timers
            .time(&mut self.ebpf, (pid, tid), period_ns, trap)
    }

    /// The `sig_data` stoke's events on process `pid`'s threads carry or
    /// will: its target events', or a fresh one.
    pub fn trap_cookie(&self, pid: u32) -> u64 {
        self.targets
            .as_ref()
            .and_then(|targets| targets.cookie(pid))
            .unwrap_or_else(thread_timers::fresh_cookie)
    }

    /// Process `pid` exec'd: a target's events are put back.
    pub fn process_exec(&mut self, pid: u32) {
        self.timers.forget(pid);
        if let Some(targets) = &mut self.targets {
            targets.exec(&self.ebpf, pid);
        }
    }

    /// Process `pid` exited: a target's events go.
    pub fn process_exit(&mut self, pid: u32) {
        self.timers.forget(pid);
        if let Some(targets) = &mut self.targets {
            targets.exit(pid);
        }
    }

    /// The processes with threads timed by events of their own.
    pub fn timed_processes(&self) -> Vec<u32> {
        self.timers.processes()
    }

    /// Closes the events of process `pid`'s timed threads.
    pub fn untime_process(&mut self, pid: u32) -> Result<()> {
        self.timers.release(&mut self.ebpf, pid)
    }

    /// Closes the events of timed threads that ended or exec'd.
    pub fn prune_timed_threads(&mut self) -> Result<()> {
        self.timers.prune(&self.ebpf)
    }

    /// Whether thread `tid` of process `pid` is timed by its own event,
    /// or was tried.
    pub fn thread_timed(&self, thread: (u32, u32)) -> bool {
        self.timers.known(thread)
    }

    /// How many threads are timed by events of their own.
    pub fn timed_threads(&self) -> usize {
        self.timers.count()
    }

    /// Whether the BPF side walks processes' unwind tables (else user
    /// stacks are walked by frame pointers only).
    pub fn unwinds_tables(&self) -> bool {
        self.no_tables.is_none()
    }

    /// What this kernel keeps the recording from, said in the summary:
    /// every limit, joined.
    pub fn kernel_limits(&self) -> Option<String> {
        let release = crate::procfs::kernel_release().unwrap_or_default();
        let refused = self.no_tables.as_ref().map(|error| {
            format!("user stacks by frame pointers only: this kernel ({release}) refused the unwind-table walker ({error})")
        });
        let legacy = self.legacy.then(|| {
            format!(
                "Python frames of a process's newest 8 threads, 16 deep: this kernel ({release}) lacks bpf_loop (Linux 5.17)"
            )
        });
        let limits: Vec<String> = refused.into_iter().chain(legacy).collect();
        (!limits.is_empty()).then(|| limits.join("; "))
    }

    /// The CPUs being sampled.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// How off-CPU user stacks are taken, when off-CPU time is recorded.
    pub fn offcpu_user_stacks(&self) -> Option<OffCpuUserStacks> {
        self.offcpu_user_stacks
    }

    /// Waits until the sampler wakes the reader, one of `also` turns
    /// readable, or `timeout` passes.
    pub fn wait<'fd>(&self, timeout: Duration, also: impl Iterator<Item = BorrowedFd<'fd>>) {
        let mut poll_fds: Vec<libc::pollfd> = std::iter::once(self.ring.as_raw_fd())
            .chain(also.map(|fd| fd.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // Rounded up: a wait for a moment due within the millisecond must
        // not end before it.
        let millis =
            libc::c_int::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
        // SAFETY: valid pollfds for the duration of the call. EINTR (a
        // signal asking us to stop) only ends the wait early, as wanted.
        unsafe {
            libc::poll(
                poll_fds.as_mut_ptr(),
                poll_fds.len() as libc::nfds_t,
                millis,
            )
        };
    }

    /// With off-CPU time recorded, starts sending the waits still going on
    /// now into the ring ([`waiting`]); `None` otherwise.
    pub fn waits_in_progress(&mut self) -> Result<Option<WaitsInProgress>> {
        if self
            .ebpf
            .program(names::program::offcpu_waiting)
            .is_none_or(|program| program.fd().is_err())
        {
            return Ok(None);
        }
        WaitsInProgress::start(&mut self.ebpf).map(Some)
    }

    /// Hands every record waiting in the ring buffer to `take`, in order.
    pub fn drain(&mut self, mut take: impl FnMut(&[u8])) {
        while let Some(item) = self.ring.next() {
            take(&item);
        }
    }

    /// The loaded object, for the stages that take their programs and
    /// maps from it (the unwind tables' maps, the kernel-name program).
    pub fn object_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Hands over the map of the CPython processes whose frames the
    /// sampler walks.
    pub fn take_python_map(&mut self) -> Result<aya::maps::Map> {
        self.ebpf
            .take_map(names::map::python_processes)
            .context("no python_processes map")
    }

    /// Lets the sampler signal process `pid` (a JVM whose agent waits for
    /// `signal`) at every sample of one of its threads, unless the process
    /// exec'd or exited since `since_ns` (CLOCK_MONOTONIC), when its attach
    /// began: then it is another program, or another process, by now. Its
    /// samples in `code_cache` take the pc alone as their native stack.
    pub fn allow_signals(
        &mut self,
        pid: u32,
        signal: u32,
        code_cache: Range<u64>,
        since_ns: u64,
    ) -> Result<(), SignalsRefused> {
        let jvm = SignalledJvm {
            signal,
            padding: 0,
            code_cache_start: code_cache.start,
            code_cache_end: code_cache.end.max(code_cache.start),
        };
        // SAFETY: SignalledJvm is repr(C) plain data without padding.
        let value: [u8; size_of::<SignalledJvm>()] = unsafe { std::mem::transmute(jvm) };
        self.signal_map()
            .and_then(|mut map| Ok(map.insert(pid, value, 0)?))
            .map_err(|error| SignalsRefused::Map(format!("{error:#}")))?;
        // The BPF side takes the process out of the map at every later exec
        // or exit: only those before the insert need looking up.
        let ended: Option<u64> = self
            .ebpf
            .map(names::map::ended_tgids)
            .and_then(|map| BpfHashMap::<_, u32, u64>::try_from(map).ok())
            .and_then(|map| map.get(&pid, 0).ok());
        if ended.is_some_and(|when| when >= since_ns) {
            // Ignoring a failure: the exec or exit that ended it removed it.
            let _ = self.forbid_signals(pid);
            return Err(SignalsRefused::Ended);
        }
        Ok(())
    }

    /// Stops signalling process `pid`.
    pub fn forbid_signals(&mut self, pid: u32) -> Result<()> {
        match self.signal_map()?.remove(&pid) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(error) => Err(error).with_context(|| format!("stopping signals to JVM {pid}")),
        }
    }

    fn signal_map(
        &mut self,
    ) -> Result<BpfHashMap<&mut MapData, u32, [u8; size_of::<SignalledJvm>()]>> {
        let map = self
            .ebpf
            .map_mut(names::map::signal_tgids)
            .context("no signal_tgids map")?;
        Ok(BpfHashMap::try_from(map)?)
    }

    /// Mean run time of the sampling program per sample, if the kernel
    /// measured it: it runs at every tick of every CPU, and for a timed
    /// thread at its own event's tick too (its CPU's run then returns at
    /// once), so its time over the CPUs' runs; with `-p`, over its runs
    /// on the targets' threads.
    pub fn time_per_sample(&self) -> Option<Duration> {
        let program = loaded_cpu_program(&self.ebpf).ok()?;
        let info = program.info().ok()?;
        let own_timer_runs = if self.targets.is_some() {
            0
        } else {
            self.counters()
                .map_or(0, |counters| counters[Counter::OwnTimerRuns as usize])
        };
        let runs = u32::try_from(info.run_count().saturating_sub(own_timer_runs))
            .ok()
            .filter(|&runs| runs > 0)?;
        Some(info.run_time() / runs)
    }

    /// Sums the sampler's counters over all CPUs.
    pub fn counters(&self) -> Result<CounterTotals> {
        let counters: PerCpuArray<_, u64> = PerCpuArray::try_from(
            self.ebpf
                .map(names::map::counters)
                .context("no counters map")?,
        )?;
        let mut totals = [0; COUNTER_COUNT as usize];
        for (index, total) in (0..COUNTER_COUNT).zip(&mut totals) {
            *total = counters.get(&index, 0)?.iter().sum();
        }
        Ok(totals)
    }
}

/// Why a JVM's samples cannot signal it: its stacks stay native, and the
/// recording goes on.
#[derive(Debug, thiserror::Error)]
pub enum SignalsRefused {
    /// The process exec'd or exited while its agent was being loaded.
    #[error("the process exec'd or exited while its agent was loaded")]
    Ended,
    /// The map of signalled JVMs is full, or refused the update.
    #[error("the map of signalled JVMs refused it ({0}); at most 4096 JVMs are signalled at once")]
    Map(String),
}

/// Refuses, before anything starts, counted events this host cannot
/// sample.
fn check_counters(counters: &[event::Event], cpus: &[u32]) -> Result<()> {
    if counters.len() > MAX_COUNTERS as usize {
        bail!("at most {MAX_COUNTERS} perf counters and probes can be sampled at once");
    }
    let cpu = cpus.first().copied().unwrap_or(0);
    for &counted in counters {
        counter_events::probe(counted, cpu).map_err(|why| match (counted, &why) {
            (event::Event::Probe(probe), Unavailable::NotCounted { .. }) => anyhow!(
                "cannot place probe {}: {}",
                probe.name(),
                counter_events::probe_missing(probe)
            ),
            _ => anyhow!(
                "event {} is not available on this host: {why}; `stoke list` shows the events it has",
                counted.name()
            ),
        })?;
    }
    Ok(())
}

/// Ring buffer bytes for a host: half a second of samples with full stacks
/// (2 KiB) on every CPU, a power of two between 1 MiB and 256 MiB.
fn ring_size(cpus: usize, frequency_hz: u64) -> u32 {
    let wanted = (cpus as u64)
        .saturating_mul(frequency_hz)
        .saturating_mul(1024);
    wanted.clamp(1 << 20, 1 << 28).next_power_of_two() as u32
}

fn kernel_btf() -> Result<Btf> {
    Btf::from_sys_fs().map_err(|error| {
        anyhow!("reading the kernel's BTF failed ({error}): stoke needs a kernel with CONFIG_DEBUG_INFO_BTF=y")
    })
}

/// When set, off-CPU user stacks are taken at syscall exits even where the
/// kernel has task work for BPF.
pub const OFFCPU_AT_SYSCALL_EXIT: &str = "STOKE_OFFCPU_AT_SYSCALL_EXIT";

/// Loads BTF tracepoint program `program` for `event`, if not loaded yet.
fn load_tracepoint(ebpf: &mut Ebpf, btf: &Btf, program: &str, event: &str) -> Result<()> {
    let tracepoint: &mut BtfTracePoint = ebpf
        .program_mut(program)
        .with_context(|| format!("no {program} program in the BPF object"))?
        .try_into()?;
    if tracepoint.fd().is_ok() {
        return Ok(());
    }
    tracepoint
        .load(event, btf)
        .map_err(explain_program_error)
        .with_context(|| format!("loading the {event} tracepoint program"))
}

/// Loads and attaches BTF tracepoint program `program` to `event`.
fn attach_tracepoint(ebpf: &mut Ebpf, btf: &Btf, program: &str, event: &str) -> Result<()> {
    load_tracepoint(ebpf, btf, program, event)?;
    let tracepoint: &mut BtfTracePoint = ebpf
        .program_mut(program)
        .with_context(|| format!("no {program} program in the BPF object"))?
        .try_into()?;
    tracepoint
        .attach()
        .map_err(explain_program_error)
        .with_context(|| format!("attaching to the {event} tracepoint"))?;
    Ok(())
}

pub(super) fn is_permission_denied(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

fn explain_load_error(error: EbpfError) -> anyhow::Error {
    let denied = match &error {
        EbpfError::MapError(aya::maps::MapError::CreateError { io_error, .. }) => is_permission_denied(io_error),
        EbpfError::BtfError(_) => {
            return anyhow!(
                "reading the kernel's BTF failed ({error}): stoke needs a kernel with CONFIG_DEBUG_INFO_BTF=y"
            )
        }
        _ => false,
    };
    if denied {
        anyhow!("the kernel refused to create BPF maps ({error}): run stoke as root, or with CAP_BPF and CAP_PERFMON, outside a restricted container")
    } else {
        anyhow!("loading the BPF sampler failed: {error}")
    }
}

fn explain_program_error(error: ProgramError) -> anyhow::Error {
    match &error {
        // Tracepoints attach through perf_event_open too (aya names that
        // call perf_event_open_trace_point).
        ProgramError::SyscallError(syscall) if syscall.call.starts_with("perf_event_open") => {
            let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .map(|text| text.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into());
            anyhow!(
                "perf_event_open was refused ({}): run as root or with CAP_PERFMON, lower kernel.perf_event_paranoid (now {paranoid}), and in a container allow perf_event_open in its seccomp profile",
                syscall.io_error
            )
        }
        // EACCES here is the verifier's refusal, a bug of ours, not a privilege.
        ProgramError::LoadError { io_error, .. } if io_error.raw_os_error() == Some(libc::EPERM) => anyhow!(
            "the kernel refused to load the BPF sampler ({io_error}): run stoke as root, or with CAP_BPF and CAP_PERFMON"
        ),
        _ => anyhow!("starting the BPF sampler failed: {error}"),
    }
}

/// The programs that take the CPU samples: with bpf_loop, and without.
const CPU_PROGRAMS: [&str; 2] = [
    names::program::sample_cpu,
    names::program::sample_cpu_legacy,
];

/// Whether the kernel has bpf_loop (5.17), which the unwinder steps with.
fn has_bpf_loop() -> bool {
    aya::sys::is_helper_supported(
        aya::programs::ProgramType::PerfEvent,
        aya::sys::BpfHelper::BPF_FUNC_loop,
    )
    .unwrap_or(false)
}

/// What the legacy programs tail-call, for each kind of program (the
/// order of `counter_events::program_kind`: perf events, kprobes and
/// uprobes, tracepoints): the program array, the unwind-table walker's two
/// programs at their index in it, and the program a counted event's own
/// program tail-calls to take its sample, after them.
const LEGACY_KINDS: [(&str, [&str; 2], &str); 3] = [
    (
        names::map::legacy_unwinder,
        [
            names::program::sample_cpu_legacy_unwind,
            names::program::sample_cpu_legacy_finish,
        ],
        names::program::sample_counter_legacy,
    ),
    (
        names::map::legacy_probe_unwinder,
        [
            names::program::sample_probe_legacy_unwind,
            names::program::sample_probe_legacy_finish,
        ],
        names::program::sample_probe_legacy,
    ),
    (
        names::map::legacy_tracepoint_unwinder,
        [
            names::program::sample_tracepoint_legacy_unwind,
            names::program::sample_tracepoint_legacy_finish,
        ],
        names::program::sample_tracepoint_legacy,
    ),
];

/// The index of each kind's counted sampler in its program array (the BPF
/// side's LEGACY_COUNTED, after the walker's two programs).
const LEGACY_COUNTED: u32 = 2;

/// The kinds of program (see [`LEGACY_KINDS`]) that take `counted`'s
/// samples.
fn counted_kinds(counted: &[event::Event]) -> [bool; 3] {
    let mut kinds = [false; 3];
    for &event in counted {
        if let Some(kind) = counter_events::program_kind(event) {
            kinds[kind] = true;
        }
    }
    kinds
}

/// Loads the legacy unwind-table walker into the program array the legacy
/// sampler tail-calls, and into those of the kinds of probe among
/// `counted` (kernels without bpf_loop).
fn load_legacy_unwinder(ebpf: &mut Ebpf, counted: &[event::Event]) -> Result<()> {
    let mut wanted = counted_kinds(counted);
    wanted[0] = true;
    for (&(map, programs, _), _) in LEGACY_KINDS.iter().zip(wanted).filter(|(_, w)| *w) {
        for (index, name) in (0..).zip(programs) {
            set_legacy_program(ebpf, map, index, name)?;
        }
    }
    Ok(())
}

/// Loads the legacy programs of `counted`, the recording's counted events
/// (kernels without bpf_loop): each event's own, and the sampler of its
/// kind, which that one tail-calls.
fn load_legacy_counted(ebpf: &mut Ebpf, counted: &[event::Event]) -> Result<()> {
    for (&(map, _, sampler), _) in LEGACY_KINDS
        .iter()
        .zip(counted_kinds(counted))
        .filter(|(_, w)| *w)
    {
        set_legacy_program(ebpf, map, LEGACY_COUNTED, sampler)?;
    }
    for (index, &event) in counted.iter().enumerate() {
        let name = counter_events::legacy_program(event, index)
            .with_context(|| format!("no legacy program for event {}", event.name()))?;
        load_program(ebpf, name)?;
    }
    Ok(())
}

/// Loads program `name` into program array `map` at `index`.
fn set_legacy_program(ebpf: &mut Ebpf, map: &str, index: u32, name: &str) -> Result<()> {
    let fd = load_program(ebpf, name)?;
    let map = ebpf.map_mut(map).with_context(|| format!("no {map} map"))?;
    ProgramArray::try_from(map)?
        .set(index, &fd, 0)
        .with_context(|| format!("linking {name}"))
}

/// Loads program `name`, of any kind the sampler has; its descriptor.
fn load_program(ebpf: &mut Ebpf, name: &str) -> Result<ProgramFd> {
    let fd = match ebpf.program_mut(name) {
        Some(Program::PerfEvent(program)) => {
            program.load().map_err(explain_program_error)?;
            program.fd()?.try_clone()
        }
        Some(Program::KProbe(program)) => {
            program.load().map_err(explain_program_error)?;
            program.fd()?.try_clone()
        }
        Some(Program::TracePoint(program)) => {
            program.load().map_err(explain_program_error)?;
            program.fd()?.try_clone()
        }
        _ => bail!("no {name} program in the BPF object"),
    };
    Ok(fd?)
}

/// The program that takes the CPU samples (`legacy`: the one for kernels
/// without bpf_loop).
fn cpu_program(ebpf: &mut Ebpf, legacy: bool) -> Result<&mut PerfEvent> {
    let name = CPU_PROGRAMS[usize::from(legacy)];
    Ok(ebpf
        .program_mut(name)
        .with_context(|| format!("no {name} program in the BPF object"))?
        .try_into()?)
}

/// The CPU sampling program that is loaded.
pub(super) fn loaded_cpu_program(ebpf: &Ebpf) -> Result<&PerfEvent> {
    for name in CPU_PROGRAMS {
        if let Some(program) = ebpf.program(name) {
            let program: &PerfEvent = program.try_into()?;
            if program.fd().is_ok() {
                return Ok(program);
            }
        }
    }
    bail!("the CPU sampler is not loaded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_a_power_of_two_within_bounds() {
        assert_eq!(ring_size(2, 99), 1 << 20);
        assert_eq!(ring_size(256, 999), 1 << 28);
        let mid = ring_size(64, 999);
        assert!(mid.is_power_of_two() && mid >= 64 * 999 * 1024);
    }
}
