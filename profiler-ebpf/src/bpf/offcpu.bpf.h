/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Off-CPU time: how long threads wait blocked or asleep, and in what stack.
 * Included at the end of sampler.bpf.c, whose maps, counters and user-stack
 * unwinder it uses.
 *
 * How. On sched_switch (a BTF tracepoint, no tracefs), a profiled thread
 * leaving the CPU while not runnable gets the time in its task storage
 * (BPF_MAP_TYPE_TASK_STORAGE: one slot per live thread that ever blocked,
 * freed by the kernel with the thread, so nothing to evict and no bound to
 * guess). A preempted thread is runnable, not waiting: it is not counted
 * (but as wall-clock time, below).
 * When the thread is switched back in, the same tracepoint knows how long
 * it was off; only then, and only if that is at least offcpu_min_ns and the
 * CPU's budget of records this second is not spent, is any stack taken: a
 * context-switch storm of short waits costs two task-storage lookups per
 * switch and no unwinding, and its syscalls one read of the count of
 * records waiting for a user stack (below), none.
 *
 * Where the stacks come from. The kernel stack is the switched-in thread's
 * own, still where it blocked: bpf_get_task_stack reads it at switch-in,
 * before the thread runs (the kernel leaves the scheduler's own __sched
 * functions out of it; __schedule is put back here). The user stack needs
 * the thread's address space, which at sched_switch is still the previous
 * thread's; finish_task_switch, which runs in the new thread's context,
 * could only be hooked by a kprobe (kernels may be built without them) or
 * fentry (which kernels may refuse, as our test host's does). So the
 * kernel stack and the time wait in the task storage, and the user stack
 * is unwound in the thread's own context, with the same unwinder as CPU
 * samples, when its user registers are still those it entered the kernel
 * with, the stack it waited in:
 * - where the kernel has task work for BPF (Linux 6.18), by a callback
 *   the switch schedules for the thread's return to user mode
 *   (offcpu_switch_task_work): only waits that are recorded cost anything
 *   after the switch, whatever the kernel entry they waited in;
 * - elsewhere at the thread's next syscall exit (the sys_exit BTF
 *   tracepoint, offcpu_switch). That tracepoint sends every syscall of the
 *   host through the kernel's slow exit path, ~0.1 µs more each. A thread
 *   that blocked outside a syscall (a page fault) reaches no syscall exit
 *   with those registers: when it next blocks from elsewhere, its waiting
 *   record goes out with the kernel stack and the one user address it
 *   entered the kernel at.
 * Several waits within one kernel entry (a read woken before its data
 * came) add up into one record.
 *
 * Wall-clock time (-e wall). CPU samples count threads' running time; these
 * records count the rest: with offcpu_wall, a preempted thread's time on
 * the run queue too (its record flagged STOKE_SAMPLE_WALL_ONLY: it did not
 * wait), and a wait shorter than offcpu_min_ns (then the sampling period)
 * counts as offcpu_min_ns with probability its length / offcpu_min_ns,
 * else not at all, as a sampler every offcpu_min_ns would see it: its
 * expected count is its length, and a thread's short waits cost at most a
 * record each offcpu_min_ns of their time.
 *
 * Run-queue time (-e runqueue). With offcpu_runqueue (and what wall-clock
 * time sets besides), a wait counts only from the thread's wake-up
 * (sched_wakeup, offcpu_wakeup) to its switch-in, and a preempted thread's
 * from its preemption: the time it was runnable but not running, queued
 * behind other threads or throttled by its cgroup's CPU quota.
 *
 * Java frames. A thread of a JVM whose agent waits for signals is sent
 * one as its user stack is taken, as a CPU sample does: the agent's handler runs
 * as the thread returns to user mode, its Java stack still the one it
 * waited in, and userspace pairs the two as it pairs CPU samples. The
 * syscall has ended by then, with its own result: no wait is cut short,
 * and no blocked thread is ever signalled (no EINTR).
 */

/* Kernel frames kept per waiting thread: blocking kernel stacks are 10-30
 * frames deep, and this bounds the task storage to ~0.6 KiB a thread. */
#define OFFCPU_KERNEL_FRAMES 64

const volatile __u64 offcpu_min_ns = 0;  /* shorter waits are not counted */
/* Only the threads of JVMs whose agent takes signals: for Java lock
 * profiling without off-CPU time, which needs their parks alone. */
const volatile __u8 offcpu_jvms_only = 0;
const volatile __u32 offcpu_budget = 0;  /* records per CPU per second */
/* Wall-clock time: runnable time and sampled short waits too (above). */
const volatile __u8 offcpu_wall = 0;
/* Run-queue time: waits count from their wake-up (above). */
const volatile __u8 offcpu_runqueue = 0;

/* A thread's off-CPU state. */
struct offcpu_task {
	__u64 off_since;   /* when it blocked (offcpu_clock); 0 while it runs */
	__u64 woken_at;    /* when it was woken since (offcpu_runqueue) */
	__u64 pending_ns;  /* time off the CPU waiting for its user stack */
	__u64 user_ip;     /* the user registers it waited with */
	__u64 user_sp;
	__u32 kernel_frames;
	__u16 off_runnable;   /* it left the CPU runnable (offcpu_wall) */
	__u16 pending_flags;  /* STOKE_SAMPLE_WALL_ONLY for the pending wait */
	__u64 kernel[OFFCPU_KERNEL_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_task);
} offcpu_tasks SEC(".maps");

/* Waits whose record waits for its thread's syscall exit, all threads
 * together: while there is none (a storm of waits too short to record, a
 * quiet host), the syscall-exit hook, which every syscall on the host
 * runs, returns after one read of it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} offcpu_pending SEC(".maps");

static __always_inline void offcpu_pending_add(__s64 delta)
{
	__u32 zero = 0;
	__s64 *pending = bpf_map_lookup_elem(&offcpu_pending, &zero);

	if (pending)
		__sync_fetch_and_add(pending, delta);
}

/* When sampling started (bpf_ktime_get_ns's clock, userspace's
 * CLOCK_MONOTONIC), written by userspace as it starts; 0 before. Waits
 * begun earlier count from then: loading the sampler and attaching to JVMs
 * before it are not part of the recording. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} offcpu_start SEC(".maps");

static __always_inline __u64 offcpu_sampling_start(void)
{
	__u32 zero = 0;
	__u64 *start = bpf_map_lookup_elem(&offcpu_start, &zero);

	return start ? *start : 0;
}

/* Records sent in the current second, per CPU. */
struct offcpu_window {
	__u64 start;
	__u64 used;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_window);
} offcpu_windows SEC(".maps");

/* Takes one of this CPU's records for this second, if one is left. */
static __always_inline bool offcpu_token(__u64 now)
{
	__u32 zero = 0;
	struct offcpu_window *window = bpf_map_lookup_elem(&offcpu_windows, &zero);

	if (!window)
		return false;
	if (now - window->start >= 1000000000ULL) {
		window->start = now;
		window->used = 0;
	}
	if (window->used >= offcpu_budget) {
		count(STOKE_COUNTER_OFF_CPU_OVER_BUDGET);
		return false;
	}
	window->used++;
	return true;
}

/*
 * The clock of wait lengths, `task` being on this CPU: the scheduler's own
 * (the run queue's, sched_clock's nanoseconds), which __schedule updates
 * before sched_switch fires; a load where bpf_ktime_get_ns reads the
 * clocksource (the sched_switch program took 186 ns a run with it, 118
 * with this, in a context-switch storm on our VMs). sched_clock agrees
 * across CPUs where the TSC is stable, and within a tick elsewhere: a wait
 * that seems to end before it began is 0 long. Kernels without group
 * scheduling have no path from a task to its run queue: the monotonic
 * clock there. The records' own times stay monotonic.
 */
static __always_inline __u64 offcpu_clock(struct task_struct *task)
{
	if (bpf_core_field_exists(task->se.cfs_rq))
		return task->se.cfs_rq->rq->clock;
	return bpf_ktime_get_ns();
}

/* Threads of the profiled processes; never the idle task. */
static __always_inline bool offcpu_profiled(struct task_struct *task)
{
	__u32 tgid = task->tgid;

	if (tgid == 0)
		return false;
	if (offcpu_jvms_only && !bpf_map_lookup_elem(&signal_tgids, &tgid))
		return false;
	return !filter_tgids || bpf_map_lookup_elem(&target_tgids, &tgid);
}

/* Sends `off_ns` of waiting by `task` with its `kernel_frames`,
 * `user_bytes` of user frames and `python` Python frames already in
 * `record`. Its time is when it is
 * sent, after any CPU sample of the thread since it ran again, so that its
 * thread's signalled records reach userspace in the order of their times. */
static __always_inline void offcpu_output(struct sample_record *record, struct task_struct *task,
					  __u64 off_ns, __u32 kernel_frames, long user_bytes,
					  __u32 python)
{
	__u32 tgid = task->tgid;
	bool announcing;

	record->header.kind = STOKE_RECORD_OFF_CPU;
	record->header.cpu = bpf_get_smp_processor_id();
	record->header.tgid = tgid;
	record->header.tid = task->pid;
	record->header.time_ns = bpf_ktime_get_ns();
	record->header.weight = off_ns;
	record->header.flags |= record_flags(task->flags);
	record->header.kernel_frames = kernel_frames;
	record->header.user_frames = user_bytes / sizeof(__u64);
	if (python > STOKE_PYTHON_MAX_FRAMES)
		python = 0;
	record->header.python_frames = python;
	bpf_probe_read_kernel_str(record->header.comm, sizeof(record->header.comm), task->comm);
	announcing = announce_in(&record->header, tgid, task, task->flags, false);
	if (bpf_ringbuf_output(&samples, record,
			       sizeof(record->header) +
				       (kernel_frames & (OFFCPU_KERNEL_FRAMES * 2 - 1)) * sizeof(__u64) +
				       user_bytes + python * 2 * sizeof(__u64),
			       ring_flags(announcing)) == 0)
		count(STOKE_COUNTER_OFF_CPU_SENT);
	else
		count(STOKE_COUNTER_OFF_CPU_LOST_RING_FULL);
}

/* Takes the wait pending in `state` out of it (and of the count of pending
 * ones): its nanoseconds, 0 if none. */
static __always_inline __u64 offcpu_take_pending(struct offcpu_task *state)
{
	__u64 off_ns = state->pending_ns;

	if (off_ns)
		offcpu_pending_add(-1);
	state->pending_ns = 0;
	return off_ns;
}

/* offcpu_output for the wait pending in `state`, which it ends. */
static __always_inline void offcpu_send(struct sample_record *record, struct offcpu_task *state,
					struct task_struct *task, long user_bytes, __u32 python)
{
	__u64 off_ns = offcpu_take_pending(state);

	record->header.flags |= state->pending_flags;
	offcpu_output(record, task, off_ns, state->kernel_frames, user_bytes, python);
}

/* The kernel stack of `task`, off the CPU, into `frames` (at most
 * OFFCPU_KERNEL_FRAMES): how many frames. The kernel leaves the
 * scheduler's own functions (__sched: schedule, do_nanosleep...) out of a
 * sleeping task's stack; the innermost, __schedule, is put back from where
 * it saved its return address. */
static __always_inline __u32 offcpu_kernel_stack(struct task_struct *task, __u64 *frames)
{
	struct inactive_task_frame *frame =
		(struct inactive_task_frame *)BPF_CORE_READ(task, thread.sp);
	__u32 first;
	long bytes;

	if (bpf_probe_read_kernel(&frames[0], sizeof(__u64), &frame->ret_addr) != 0)
		frames[0] = 0;
	first = frames[0] ? 1 : 0;
	bytes = bpf_get_task_stack(task, &frames[first], (OFFCPU_KERNEL_FRAMES - 1) * sizeof(__u64),
				   0);
	if (bytes < 0) {
		count(STOKE_COUNTER_KERNEL_STACK_FAILED);
		bytes = 0;
	}
	return first + bytes / sizeof(__u64);
}

/* The scratch record with the waiting kernel stack copied in; NULL if
 * there is none. */
static __always_inline struct sample_record *offcpu_record(struct offcpu_task *state)
{
	__u32 slot = SLOT_OFFCPU;
	struct sample_record *record = bpf_map_lookup_elem(&scratch, &slot);

	if (!record)
		return NULL;
	if (state->kernel_frames > OFFCPU_KERNEL_FRAMES)
		state->kernel_frames = OFFCPU_KERNEL_FRAMES;
	__builtin_memcpy(record->frames, state->kernel, sizeof(state->kernel));
	record->header.flags = STOKE_SAMPLE_IN_KERNEL;
	return record;
}

/* A waiting record that will get no user stack: out with the address the
 * thread entered the kernel at as its only user frame (none for a kernel
 * thread). */
static __always_inline void offcpu_send_without_unwinding(struct offcpu_task *state,
							  struct task_struct *task)
{
	struct sample_record *record = offcpu_record(state);
	long user_bytes = 0;
	__u32 slot = state->kernel_frames;

	if (!record)
		return;
	if (!(task->flags & PF_KTHREAD) && state->user_ip && slot < OFFCPU_KERNEL_FRAMES) {
		record->frames[slot] = state->user_ip;
		user_bytes = sizeof(__u64);
	}
	offcpu_send(record, state, task, user_bytes, 0);
}

/* Sends the wait pending in `state` with the user stack of `task`, the
 * current task, from its user registers `ip`, `sp` and `bp` (those it
 * entered the kernel with). */
static __always_inline void offcpu_send_unwound(struct task_struct *task,
						struct offcpu_task *state, __u64 ip, __u64 sp,
						__u64 bp)
{
	struct sample_record *record = offcpu_record(state);
	struct stoke_signalled_jvm *jvm;
	long kernel_bytes, user_bytes;
	__u32 tgid = task->tgid, python;

	if (!record)
		return;
	kernel_bytes = (state->kernel_frames & (OFFCPU_KERNEL_FRAMES * 2 - 1)) * sizeof(__u64);
	if (kernel_bytes > OFFCPU_KERNEL_FRAMES * sizeof(__u64))
		return;
	user_bytes = user_stack(NULL, task, record, tgid, ip, sp, bp, kernel_bytes, SLOT_OFFCPU,
				true);
	if (user_bytes < 0)
		return;
	python = python_frames(task, tgid, task->pid, kernel_bytes + user_bytes, SLOT_OFFCPU,
			       false);
	jvm = bpf_map_lookup_elem(&signal_tgids, &tgid);
	if (jvm) {
		if (bpf_send_signal_thread(jvm->signal) == 0)
			record->header.flags |= STOKE_SAMPLE_SIGNALLED;
		else
			count(STOKE_COUNTER_SIGNAL_FAILED);
	}
	offcpu_send(record, state, task, user_bytes, python);
}

/* Threads whose user stack a task work will take, by thread id: the
 * kernel's work item lives in a map value. An entry is kept for the
 * thread's next waits and removed when it exits. */
struct offcpu_work {
	struct bpf_task_work work;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct offcpu_work);
} offcpu_works SEC(".maps");

/* The task work: runs in the thread that waited, as it returns to user
 * mode, its user registers those it entered the kernel with. */
static int offcpu_resumed(struct bpf_map *map, void *key, void *value)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct offcpu_task *state = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);
	struct stoke_regs *user;

	if (!state || !state->pending_ns)
		return 0;
	user = (struct stoke_regs *)bpf_task_pt_regs(task);
	offcpu_send_unwound(task, state, BPF_PROBE_READ(user, ip), BPF_PROBE_READ(user, sp),
			    BPF_PROBE_READ(user, bp));
	return 0;
}

/* Has the user stack of `task`'s pending wait taken as it returns to user
 * mode; false if no task work could be had for it. */
static __always_inline bool offcpu_unwind_on_resume(struct task_struct *task)
{
	struct offcpu_work fresh = {}, *work;
	__u32 tid = task->pid;
	long scheduled;

	work = bpf_map_lookup_elem(&offcpu_works, &tid);
	if (!work) {
		bpf_map_update_elem(&offcpu_works, &tid, &fresh, BPF_NOEXIST);
		work = bpf_map_lookup_elem(&offcpu_works, &tid);
		if (!work)
			return false;
	}
	scheduled = task_work_schedule_resume(task, &work->work, &offcpu_works, offcpu_resumed);
	/* Busy: scheduled by an earlier wait in the same kernel entry, whose
	 * record this wait joins. */
	return scheduled == 0 || scheduled == -EBUSY;
}

/* `task` is about to run again on this CPU at `now`. */
static __always_inline void offcpu_switched_in(struct task_struct *task, __u64 now,
					       bool task_work)
{
	struct offcpu_task *state = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);
	struct stoke_regs *user;
	__u64 off, user_ip, user_sp;
	__u16 flags;

	if (!state || !state->off_since)
		return;
	off = now > state->off_since ? now - state->off_since : 0;
	if (offcpu_runqueue && !state->off_runnable)
		off = state->woken_at > state->off_since && now > state->woken_at ?
			      now - state->woken_at :
			      0;
	state->off_since = 0;
	state->woken_at = 0;
	flags = state->off_runnable ? STOKE_SAMPLE_WALL_ONLY : 0;
	if (offcpu_wall && off < offcpu_min_ns) {
		if ((__u64)bpf_get_prandom_u32() % offcpu_min_ns < off) {
			off = offcpu_min_ns;
			flags = STOKE_SAMPLE_WALL_ONLY;
		} else {
			off = 0;
		}
	}
	if (!state->pending_ns && off < offcpu_min_ns)
		return;
	user = (struct stoke_regs *)bpf_task_pt_regs(task);
	user_ip = BPF_PROBE_READ(user, ip);
	user_sp = BPF_PROBE_READ(user, sp);
	if (state->pending_ns) {
		/* Still in the kernel entry it waited in: the same wait. */
		if (state->user_ip == user_ip && state->user_sp == user_sp) {
			state->pending_ns += off;
			return;
		}
		offcpu_send_without_unwinding(state, task);
	}
	if (off < offcpu_min_ns || !offcpu_token(now))
		return;
	state->kernel_frames = offcpu_kernel_stack(task, state->kernel);
	state->pending_ns = off;
	state->pending_flags = flags;
	if (off)
		offcpu_pending_add(1);
	state->user_ip = user_ip;
	state->user_sp = user_sp;
	/* A kernel thread has no user stack to wait for. */
	if ((task->flags & PF_KTHREAD) || (task_work && !offcpu_unwind_on_resume(task)))
		offcpu_send_without_unwinding(state, task);
}

/* A switch: `prev` leaves the CPU, `next` runs again. */
static __always_inline void offcpu_switched(bool preempt, struct task_struct *prev,
					    struct task_struct *next, unsigned int prev_state,
					    bool task_work)
{
	__u64 now = offcpu_clock(prev);
	struct offcpu_task *state;

	/* prev_state 0 is TASK_RUNNING: preempted, or woken before it slept. */
	bool runnable = preempt || prev_state == 0;

	if ((offcpu_wall || !runnable) && offcpu_sampling_start() && offcpu_profiled(prev)) {
		state = bpf_task_storage_get(&offcpu_tasks, prev, 0,
					     BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (state) {
			state->off_since = now;
			state->off_runnable = runnable;
		}
	}
	offcpu_switched_in(next, now, task_work);
}

/* A waiting thread is woken: its time on the run queue begins
 * (offcpu_runqueue). */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(offcpu_wakeup, struct task_struct *task)
{
	struct offcpu_task *state = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);

	if (state && state->off_since)
		state->woken_at = offcpu_clock(task);
	return 0;
}

/* User stacks taken at syscall exits (offcpu_syscall_exit). */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	offcpu_switched(preempt, prev, next, prev_state, false);
	return 0;
}

/* User stacks taken by task work (offcpu_resumed). */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch_task_work, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	offcpu_switched(preempt, prev, next, prev_state, true);
	return 0;
}

/* In the thread's own context, its user registers those of the syscall
 * it waited in: the user stack of a waiting record. */
SEC("tp_btf/sys_exit")
int BPF_PROG(offcpu_syscall_exit, struct stoke_regs *regs, long ret)
{
	struct task_struct *task;
	struct offcpu_task *state;
	__u32 zero = 0;
	__s64 *pending = bpf_map_lookup_elem(&offcpu_pending, &zero);

	if (!pending || *pending <= 0)
		return 0;
	task = bpf_get_current_task_btf();
	state = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);
	if (!state || !state->pending_ns)
		return 0;
	offcpu_send_unwound(task, state, BPF_PROBE_READ(regs, ip), BPF_PROBE_READ(regs, sp),
			    BPF_PROBE_READ(regs, bp));
	return 0;
}

/* A thread ending with a record still waiting for its syscall exit (it
 * blocked outside a syscall, then exited): out it goes, as when it blocks
 * again, so that no wait is lost and the count of pending ones stays
 * true. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(offcpu_thread_exit, struct task_struct *exiting)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct offcpu_task *state = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);

	__u32 tid = task->pid;

	if (state && state->pending_ns)
		offcpu_send_without_unwinding(state, task);
	bpf_map_delete_elem(&offcpu_works, &tid);
	return 0;
}
