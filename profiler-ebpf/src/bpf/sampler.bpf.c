// SPDX-License-Identifier: GPL-2.0
/*
 * Stoke's CPU sampler: a perf_event program on the software cpu-clock event of
 * every online CPU, plus exec/exit tracepoints that tell userspace when a
 * process's address space stops being the one it has snapshotted. The
 * off-CPU programs (offcpu.bpf.h, included at the end when STOKE_OFFCPU is
 * defined) share its maps and its unwinder: all are one object. The
 * tracepoints are BTF ones (tp_btf): they attach through the kernel's BTF,
 * with no tracefs or debugfs mounted (a fresh host has neither).
 *
 * How samples reach userspace: one BPF ring buffer shared by all CPUs, one
 * variable-length record per sample (header + kernel frames + user frames).
 * The later JVM merge needs every sample's tid and timestamp, which in-kernel
 * aggregation (stack-id maps and counts) would throw away, and stack-id maps
 * also lose stacks to hash collisions. A record costs header + 8 bytes per
 * frame, ~0.3-0.6 KB for typical stacks: 256 CPUs at 99 Hz make ~15 MB/s,
 * which one consumer drains easily. Records are committed without waking the
 * consumer (it polls a few times a second and is woken only when the ring is
 * filling up, or when a process it has not seen yet needs its memory maps
 * read while it lives), so wakeups do not grow with the sample rate.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "stoke_abi.h"
#include "abi_layouts.bpf.h"

#define PF_EXITING 0x00000004
/* x86_64's kernel stacks (without KASAN): the user registers are saved at
 * their top. */
#define THREAD_SIZE (16 * 1024)
#define PF_KTHREAD 0x00200000
#define FRAME_BYTES (STOKE_MAX_FRAMES * sizeof(__u64))

/* Settings, fixed by userspace at load time. */
const volatile __u8 filter_tgids = 0;     /* sample only tgids in target_tgids */
/* Sampled by events on the targets' threads only (-p): every run is a
 * thread's own event, inherited ones too (whose link cookie is the
 * parent's business). */
const volatile __u8 thread_events = 0;
const volatile __u8 include_idle = 0;     /* keep samples of the idle task */
/* CPU samples of JVMs take their Java stacks (off when CPU samples only
 * find the JVMs, for Java events: no signal is then worth its cost). */
const volatile __u8 cpu_java_stacks = 1;
const volatile __u64 wakeup_bytes = 0;     /* wake the consumer past this fill */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by userspace for the CPU count */
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STOKE_COUNTER_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* With filter_tgids: the processes to sample (-p). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* resized by userspace */
	__type(key, __u32);
	__type(value, __u8);
} target_tgids SEC(".maps");

/* JVMs whose Stoke agent has a signal handler waiting: tgid -> its signal
 * and code cache. The only processes Stoke ever signals. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct stoke_signalled_jvm);
} signal_tgids SEC(".maps");

/* Threads of JVMs sampled by perf events of their own (OWN_TIMER_COOKIE),
 * whose `sigtrap` asks the agent for the Java stack as task work, with no
 * inter-processor interrupt: the CPUs' events leave them alone. The value
 * is the address of the agent's SIGTRAP handler. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} timed_threads SEC(".maps");

/* When each process last exec'd or exited (bpf_ktime_get_ns): userspace
 * allows signals to a JVM it attached to only if the process has not
 * exec'd or exited since the attach began, so no signal reaches a program
 * exec'd over a JVM or a reused pid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} ended_tgids SEC(".maps");

/* Processes whose samples userspace has been told of: the first sample of a
 * tgid not in here wakes the consumer, and only these get exec/exit records.
 * An exiting thread's samples announce nothing: its process may have been
 * told ended already. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} announced_tgids SEC(".maps");

struct sample_record {
	struct stoke_record_header header;
	/* Native frames, then Python frames (two words each). */
	__u64 frames[2 * STOKE_MAX_FRAMES + 2 * STOKE_PYTHON_MAX_FRAMES];
};

/* Per-CPU slots of the scratch record and the unwinder's state: CPU
 * samples take the first; the off-CPU programs the second, as a CPU sample
 * may interrupt one of them on the same CPU. */
enum scratch_slot {
	SLOT_CPU = 0,
	SLOT_OFFCPU = 1,
	SLOTS = 2,
};

/* A record is too large for the 512-byte BPF stack: it is built here. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, __u32);
	__type(value, struct sample_record);
} scratch SEC(".maps");

#include "unwind.bpf.h"

static __always_inline void count(__u32 counter)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &counter);

	if (value)
		*value += 1;
}

#include "python.bpf.h"

static __always_inline __u64 ring_flags(bool force)
{
	if (force || bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* Most cgroup hierarchies a css_set links: one per v1 hierarchy mounted
 * (a dozen controllers and systemd's named one) and the unified one. */
#define MAX_CGROUP_LINKS 32

/* A 64-bit mix (splitmix64's finalizer): every input bit moves every
 * output bit, so that a sum of mixed links is unlikely to collide. */
static __always_inline __u64 mix64(__u64 value)
{
	value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
	value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
	return value ^ (value >> 31);
}

/* A walk of a css_set's cgroup links (see task_cgroup_key). */
struct cgroup_walk {
	struct list_head *head;
	struct list_head *node;
	__u64 key;
	bool done;
};

/* One link of a css_set's list per bpf_loop iteration: verified once,
 * however many hierarchies there are. */
static long cgroup_walk_step(__u32 index, void *context)
{
	struct cgroup_walk *walk = context;
	struct cgrp_cset_link *link;
	struct cgroup *cgroup;
	__u64 id, hierarchy;

	if (!walk->node)
		return 1;
	if (walk->node == walk->head) {
		walk->done = true;
		return 1;
	}
	link = (void *)walk->node - bpf_core_field_offset(struct cgrp_cset_link, cgrp_link);
	cgroup = BPF_CORE_READ(link, cgrp);
	id = BPF_CORE_READ(cgroup, kn, id);
	/* Ids are unique within a hierarchy: its root (its address, as long
	 * as it is mounted) tells hierarchies apart. */
	hierarchy = (__u64)BPF_CORE_READ(cgroup, root);
	walk->key += mix64(id ^ mix64(hierarchy));
	/* A list_head's next is its first word, in every kernel (aya leaves
	 * a relocation of it in a callback unresolved). */
	if (bpf_probe_read_kernel(&walk->node, sizeof(walk->node), walk->node))
		walk->node = NULL;
	return 0;
}

/* Where the task runs in every cgroup hierarchy, as one number: the sum
 * of its cgroups' (hierarchy, kernfs id) pairs, mixed. Processes in the
 * same cgroups share it, on cgroup v2 and on hosts with v1 hierarchies
 * alike (the unified id alone says nothing there), so userspace reads a
 * process's cgroup once per membership rather than once per process. The
 * ids are not reused, unlike the css_set's address. 0 if the links could
 * not all be read. Read through probes: the pointers on the way are
 * RCU-protected. */
static __always_inline __u64 task_cgroup_key(struct task_struct *task, bool legacy)
{
	struct css_set *cset = BPF_CORE_READ(task, cgroups);
	struct cgroup_walk walk = {};

	if (!cset)
		return 0;
	walk.head = &cset->cgrp_links;
	walk.node = BPF_CORE_READ(cset, cgrp_links.next);
	if (legacy) {
		/* Kernels before bpf_loop (5.17): a bounded loop. */
		for (__u32 index = 0; index < MAX_CGROUP_LINKS; index++)
			if (cgroup_walk_step(index, &walk))
				break;
	} else {
		bpf_loop(MAX_CGROUP_LINKS, cgroup_walk_step, &walk, 0);
	}
	return walk.done ? walk.key : 0;
}

/* The flags every record of a task with `task_flags` (its PF_ flags)
 * carries. */
static __always_inline __u32 record_flags(__u32 task_flags)
{
	__u32 flags = 0;

	if (task_flags & PF_EXITING)
		flags |= STOKE_SAMPLE_EXITING;
	if (task_flags & PF_KTHREAD)
		flags |= STOKE_SAMPLE_KERNEL_THREAD;
	return flags;
}

static __always_inline bool announce(__u32 tgid, __u32 task_flags)
{
	__u8 yes = 1;

	if ((task_flags & PF_EXITING) || bpf_map_lookup_elem(&announced_tgids, &tgid))
		return false;
	bpf_map_update_elem(&announced_tgids, &tgid, &yes, BPF_ANY);
	return true;
}

/* announce() for a record's header: the first record of a process also
 * carries its executable's device and inode, so that userspace names the
 * executable from the mappings it reads anyway, without /proc/PID/exe, and
 * its cgroups' key and its age. Only that record: userspace reads them
 * once per process, and the reads behind them would cost every sample. */
static __always_inline bool announce_in(struct stoke_record_header *header, __u32 tgid,
					struct task_struct *task, __u32 task_flags, bool legacy)
{
	struct file *exe;

	header->exe_device = 0;
	header->exe_inode = 0;
	header->cgroup_key = 0;
	header->age_ns = 0;
	if (!announce(tgid, task_flags))
		return false;
	header->cgroup_key = task_cgroup_key(task, legacy);
	header->age_ns = bpf_ktime_get_ns() - BPF_CORE_READ(task, group_leader, start_time);
	exe = BPF_CORE_READ(task, mm, exe_file);
	if (exe) {
		header->exe_device = BPF_CORE_READ(exe, f_inode, i_sb, s_dev);
		header->exe_inode = BPF_CORE_READ(exe, f_inode, i_ino);
	}
	return true;
}

/*
 * A stack's byte count (at most FRAME_BYTES, whole frames), in a form the
 * verifier keeps the bound of when it is used as an offset into a record's
 * frames; -1 if it cannot.
 */
static __always_inline long frame_bytes_bounded(long bytes)
{
	if (bytes > FRAME_BYTES)
		bytes = FRAME_BYTES;
	bytes &= 0x3ff8;
	if (bytes > FRAME_BYTES)
		return -1;
	return bytes;
}

/*
 * The user stack of the current thread of process `tgid`, from its user
 * registers `pc`, `sp`, `bp`, into `record` after its `kernel_bytes` of
 * kernel frames: by the process's unwind tables where it has them (with
 * `tables`: not on legacy kernels) in scratch slot `slot`, the stop reason
 * in the record's flags; else the kernel's frame-pointer walk, through
 * `ctx` (a perf event's) or, when NULL, `task`'s. Its bytes, as
 * frame_bytes_bounded says.
 */
static __always_inline long user_stack(void *ctx, struct task_struct *task,
				       struct sample_record *record, __u32 tgid, __u64 pc,
				       __u64 sp, __u64 bp, long kernel_bytes, __u32 slot,
				       bool tables)
{
	struct stoke_process_mappings *process =
		tables ? bpf_map_lookup_elem(&unwind_processes, &tgid) : NULL;
	__u32 stop = STOKE_STOP_FRAME_POINTERS;
	void *frames = (void *)record->frames + kernel_bytes;
	long user_bytes;

	if (process) {
		user_bytes = unwind_user(pc, sp, bp, process, kernel_bytes, &stop, slot);
		record->header.flags |= (stop & STOKE_STOP_MASK) << STOKE_STOP_SHIFT;
	} else {
		user_bytes = ctx ? bpf_get_stack(ctx, frames, FRAME_BYTES, BPF_F_USER_STACK)
				 : bpf_get_task_stack(task, frames, FRAME_BYTES, BPF_F_USER_STACK);
		if (user_bytes < 0) {
			count(STOKE_COUNTER_USER_STACK_FAILED);
			user_bytes = 0;
		}
	}
	return frame_bytes_bounded(user_bytes);
}


/* A sample in a JVM's code cache: its one user frame ends at code no file
 * holds, as the unwinder would have said. */
#define SAMPLE_IN_CODE_CACHE_FLAGS \
	(STOKE_SAMPLE_IN_CODE_CACHE | (STOKE_STOP_UNKNOWN_CODE << STOKE_STOP_SHIFT))

/* Whether the SIGTRAP of the current thread's own event would reach the
 * agent's handler now: the process's handler is still the one the agent
 * installed (no library replaced it, nor reset it to the default action,
 * which ends the process), and no debugger traces the thread (it would
 * stop at every SIGTRAP). Checked at every sample, so that a change is
 * seen before the next signal, not at userspace's next look. */
static __always_inline bool trap_reaches_agent(struct task_struct *task, __u32 tid)
{
	__u64 *agent_handler = bpf_map_lookup_elem(&timed_threads, &tid);
	struct sighand_struct *sighand;

	if (!agent_handler || *agent_handler <= 1 || task->ptrace)
		return false;
	/* Direct loads (the verifier makes them fault-safe), not probe-read
	 * helper calls: a third of a microsecond less at every sample. */
	sighand = task->sighand;
	if (!sighand)
		return false;
	return (__u64)sighand->action[STOKE_SIGTRAP - 1].sa.sa_handler == *agent_handler;
}

/* Whether a JVM's sample ran in its code cache, where no file is mapped:
 * the unwinder would search the process's mappings only to stop at the
 * pc, and its Java frames come from the agent. */
static __always_inline bool in_code_cache(struct stoke_signalled_jvm *jvm, __u64 pc)
{
	return pc - jvm->code_cache_start < jvm->code_cache_end - jvm->code_cache_start;
}

/* The user registers `task` (the current one, in the kernel) entered the
 * kernel with, where bpf_task_pt_regs is missing (before 5.15): at the top
 * of its kernel stack. */
static __always_inline void legacy_user_regs(struct task_struct *task, __u64 *pc, __u64 *sp,
					     __u64 *bp)
{
	struct stoke_regs *user =
		(struct stoke_regs *)(BPF_CORE_READ(task, stack) + THREAD_SIZE) - 1;

	*pc = BPF_PROBE_READ(user, ip);
	*sp = BPF_PROBE_READ(user, sp);
	*bp = BPF_PROBE_READ(user, bp);
}

/* Kernels without bpf_loop: the programs the legacy sampler tail-calls to
 * walk a stack with its process's unwind tables (LEGACY_UNWIND, which
 * tail-calls itself for more frames) and then to send the sample
 * (LEGACY_FINISH); and the program a counted event's own program
 * tail-calls to take its sample (LEGACY_COUNTED). */
enum legacy_program {
	LEGACY_UNWIND = 0,
	LEGACY_FINISH = 1,
	LEGACY_COUNTED = 2,
	LEGACY_PROGRAMS = 3,
};

/* A program array holds programs of one kind: one for perf events', one
 * for kprobes' and uprobes', one for tracepoints'. */
#define LEGACY_UNWINDER_MAP(name)                        \
	struct {                                         \
		__uint(type, BPF_MAP_TYPE_PROG_ARRAY);   \
		__uint(max_entries, LEGACY_PROGRAMS);    \
		__type(key, __u32);                      \
		__type(value, __u32);                    \
	} name SEC(".maps");

LEGACY_UNWINDER_MAP(legacy_unwinder)
LEGACY_UNWINDER_MAP(legacy_probe_unwinder)
LEGACY_UNWINDER_MAP(legacy_tracepoint_unwinder)

/* The end of a CPU sample of thread `tid` of process `tgid` whose frames
 * are in `record`: the JVM's signal (or, with `trap`, the thread's own
 * event's SIGTRAP) asked for, the frame counts set and the record sent. */
static __always_inline int send_sample(struct sample_record *record, struct task_struct *task,
				       __u32 task_flags, __u32 tgid, __u32 tid, long kernel_bytes,
				       long user_bytes, __u32 python, __u32 jvm_signal, bool trap,
				       bool legacy)
{
	__u64 size = sizeof(record->header) + kernel_bytes + user_bytes + python * 2 * sizeof(__u64);
	bool announcing;

	/* Checked in the register that is used: before 5.11 the verifier
	 * gives a check's bounds to no copy of the value. */
	asm volatile("" : "+r"(size));
	if (size > sizeof(*record))
		return 0;

	/* The agent's handler takes the Java stack when the thread next
	 * returns to user mode; the record's tid and time let userspace pair
	 * the two. */
	if (trap) {
		record->header.flags |= STOKE_SAMPLE_SIGNALLED;
	} else if (jvm_signal) {
		if (bpf_send_signal_thread(jvm_signal) == 0)
			record->header.flags |= STOKE_SAMPLE_SIGNALLED;
		else
			count(STOKE_COUNTER_SIGNAL_FAILED);
	}

	record->header.kernel_frames = kernel_bytes / sizeof(__u64);
	record->header.user_frames = user_bytes / sizeof(__u64);
	record->header.python_frames = python;
	announcing = announce_in(&record->header, tgid, task, task_flags, legacy);
	if (bpf_ringbuf_output(&samples, record, size, ring_flags(announcing)) == 0)
		count(STOKE_COUNTER_SENT);
	else
		count(STOKE_COUNTER_LOST_RING_FULL);
	return trap;
}

/* Kernels without bpf_loop: a process with unwind tables has its stack
 * walked by the legacy unwinder of `programs` (the program array of the
 * context's kind), which finishes the sample; returns only if the process
 * has none (or the tail call failed). */
static __always_inline void legacy_unwind_start(void *ctx, void *programs, __u32 tgid, __u64 pc,
						__u64 sp, __u64 bp, long kernel_bytes,
						__u32 jvm_signal)
{
	__u32 slot = SLOT_CPU;
	struct stoke_unwind_state *state = bpf_map_lookup_elem(&unwind_states, &slot);

	if (!state || !bpf_map_lookup_elem(&unwind_processes, &tgid))
		return;
	unwind_begin(state, pc, sp, bp, kernel_bytes);
	state->jvm_signal = jvm_signal;
	state->runs = 0;
	bpf_tail_call(ctx, programs, LEGACY_UNWIND);
}

/* What fired take_sample, besides perf events. */
#define PROBE_NONE 0
#define PROBE_REGS 1
#define PROBE_TRACEPOINT 2

/* A CPU sample of the current thread. From a CPU's event (`own_timer`
 * false) a JVM's thread is signalled for its Java stack; from the thread's
 * own event, the return value asks perf for its SIGTRAP instead (1), if
 * it would reach the agent (else the thread is signalled as from a CPU's
 * event). `legacy`: for kernels without bpf_loop (before 5.17), which
 * lack the BTF task pointer, bpf_task_pt_regs and attach cookies too: the
 * task is read through probes, a process's unwind tables are walked by
 * the legacy unwinder of the context's kind (sample_cpu_legacy_unwind for
 * perf events), and no thread has an event of its own (before 6.10 none
 * does).
 * `cookie` at or past COUNTER_COOKIE_BASE: a sample of a CPU's counter
 * event (page faults, cache misses...), weighed by the event's period, or
 * with `probe` a hit of a probe, weighed 1: a kprobe's or uprobe's
 * (PROBE_REGS), whose context holds only the registers at the probe, or a
 * tracepoint's (PROBE_TRACEPOINT), whose context is the event's record and
 * which always fires in the kernel. */
static __always_inline int take_sample(struct stoke_perf_event_data *ctx, bool own_timer,
				       bool legacy, __u64 cookie, int probe)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, tid = (__u32)pid_tgid;
	__u32 cpu_slot = SLOT_CPU;
	struct sample_record *record;
	struct task_struct *task;
	struct stoke_regs *user;
	struct stoke_signalled_jvm *jvm;
	__u64 pc = 0, sp = 0, bp = 0;
	__u32 slot, jvm_signal = 0;
	bool in_kernel, counter, in_cache = false;
	__u32 task_flags;
	long kernel_bytes = 0, user_bytes = 0;
	__u32 python = 0;

	if (own_timer)
		count(STOKE_COUNTER_OWN_TIMER_RUNS);
	if (tgid == 0 && !include_idle) {
		count(STOKE_COUNTER_IDLE_SKIPPED);
		return 0;
	}
	counter = cookie >= STOKE_COUNTER_COOKIE_BASE;
	if (counter) {
		/* Counters are the CPUs' events: they count every process. */
		if (filter_tgids && !bpf_map_lookup_elem(&target_tgids, &tgid))
			return 0;
	} else {
		if (!legacy && !own_timer && bpf_map_lookup_elem(&timed_threads, &tid))
			return 0;
		/* The targets' events are on their threads alone (threads
		 * inherit them, children do not): only the CPUs' events need
		 * the filter. Before inherit_thread (5.13) children inherit
		 * them too. */
		if (filter_tgids && (legacy || !thread_events) &&
		    !bpf_map_lookup_elem(&target_tgids, &tgid))
			return 0;
	}

	record = bpf_map_lookup_elem(&scratch, &cpu_slot);
	if (!record)
		return 0;

	/* The context only allows full-width loads of registers. */
	in_kernel = probe == PROBE_TRACEPOINT || (*(volatile __u64 *)&ctx->regs.cs & 3) == 0;
	record->header.cpu = bpf_get_smp_processor_id();
	record->header.tgid = tgid;
	record->header.tid = (__u32)pid_tgid;
	record->header.time_ns = bpf_ktime_get_ns();
	record->header.flags = in_kernel ? STOKE_SAMPLE_IN_KERNEL : 0;
	if (counter) {
		record->header.kind = STOKE_RECORD_COUNTED;
		record->header.weight = probe ? 1 : ctx->sample_period;
		record->header.flags |=
			(__u32)((cookie - STOKE_COUNTER_COOKIE_BASE) & (STOKE_MAX_COUNTERS - 1))
			<< STOKE_SAMPLE_COUNTER_SHIFT;
	} else {
		record->header.kind = STOKE_RECORD_SAMPLE;
		record->header.weight = 0;
	}
	bpf_get_current_comm(record->header.comm, sizeof(record->header.comm));

	/* A user-mode sample has no kernel stack: asking would only fail. */
	if (in_kernel) {
		kernel_bytes = bpf_get_stack(ctx, record->frames, FRAME_BYTES, 0);
		if (kernel_bytes < 0) {
			count(STOKE_COUNTER_KERNEL_STACK_FAILED);
			kernel_bytes = 0;
		}
	}
	kernel_bytes = frame_bytes_bounded(kernel_bytes);
	if (kernel_bytes < 0)
		return 0;

	if (legacy) {
		task = (struct task_struct *)bpf_get_current_task();
		task_flags = BPF_CORE_READ(task, flags);
	} else {
		task = bpf_get_current_task_btf();
		task_flags = task->flags;
	}
	record->header.flags |= record_flags(task_flags);
	/* Kernel threads have no user stack, nor Java frames. */
	if (!(task_flags & PF_KTHREAD)) {
		if (in_kernel && legacy) {
			legacy_user_regs(task, &pc, &sp, &bp);
		} else if (in_kernel) {
			/* The user registers saved when the thread entered the
			 * kernel (direct loads, which the verifier makes safe:
			 * no helper calls). */
			user = (struct stoke_regs *)bpf_task_pt_regs(task);
			pc = user->ip;
			sp = user->sp;
			bp = user->bp;
		} else {
			pc = *(volatile __u64 *)&ctx->regs.ip;
			sp = *(volatile __u64 *)&ctx->regs.sp;
			bp = *(volatile __u64 *)&ctx->regs.bp;
		}
		/* What the JVM's entry says, as plain numbers: a map value
		 * pointer, or NULL, kept across the unwinder would have the
		 * verifier walk the unwinder once for each (1.8x its load
		 * time). A JVM's signal is never 0. */
		jvm = cpu_java_stacks && !(counter && (cookie & STOKE_COUNTER_COOKIE_QUIET))
			      ? bpf_map_lookup_elem(&signal_tgids, &tgid)
			      : NULL;
		if (jvm) {
			jvm_signal = jvm->signal;
			in_cache = in_code_cache(jvm, pc);
		}
	}
	if (task_flags & PF_KTHREAD) {
		/* No user stack to take. */
	} else if (in_cache) {
		slot = kernel_bytes / sizeof(__u64);
		if (slot < 2 * STOKE_MAX_FRAMES) {
			record->frames[slot] = pc;
			user_bytes = sizeof(__u64);
		}
		record->header.flags |= SAMPLE_IN_CODE_CACHE_FLAGS;
	} else {
		if (legacy)
			legacy_unwind_start(ctx,
					    probe == PROBE_REGS	      ? (void *)&legacy_probe_unwinder :
					    probe == PROBE_TRACEPOINT ? (void *)&legacy_tracepoint_unwinder :
									(void *)&legacy_unwinder,
					    tgid, pc, sp, bp, kernel_bytes, jvm_signal);
		user_bytes = user_stack(ctx, task, record, tgid, pc, sp, bp, kernel_bytes, SLOT_CPU,
					!legacy);
		if (user_bytes < 0)
			return 0;
		python = python_frames(task, tgid, tid, kernel_bytes + user_bytes, SLOT_CPU, legacy);
		if (python > STOKE_PYTHON_MAX_FRAMES)
			return 0;
	}
	return send_sample(record, task, task_flags, tgid, tid, kernel_bytes, user_bytes, python,
			   jvm_signal,
			   !legacy && own_timer && jvm_signal && trap_reaches_agent(task, tid),
			   legacy);
}

/* One program for every kind of event: a thread's own timer and a CPU's
 * counter are linked with a cookie, and the program is verified once. */
SEC("perf_event")
int sample_cpu(struct stoke_perf_event_data *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);

	return take_sample(ctx,
			   cookie < STOKE_COUNTER_COOKIE_BASE &&
				   (thread_events || cookie == STOKE_OWN_TIMER_COOKIE),
			   false, cookie, PROBE_NONE);
}

/* sample_cpu for kernels without bpf_loop (take_sample's `legacy`). */
SEC("perf_event")
int sample_cpu_legacy(struct stoke_perf_event_data *ctx)
{
	return take_sample(ctx, thread_events, true, 0, PROBE_NONE);
}

/* Runs of the legacy unwinder a sample may take: a kernel allows 32 tail
 * calls, one of which is the first run's, one the finish's and one a
 * counted event's, to its sampler. */
#define LEGACY_RUNS 29
_Static_assert(LEGACY_RUNS * LEGACY_FRAMES_PER_RUN >= STOKE_MAX_FRAMES,
	       "the legacy unwinder reaches the full depth");

/* Kernels without bpf_loop: a few more frames of the walk the legacy
 * sampler began (unwind_legacy_run), then the next run, or, when the walk
 * ended or took its LEGACY_RUNS (its stop reason then stays "depth"), the
 * finish; both in `programs`, the program array of the context's kind. */
static __always_inline int legacy_unwind(void *ctx, void *programs)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, slot = SLOT_CPU;
	struct sample_record *record = bpf_map_lookup_elem(&scratch, &slot);
	struct stoke_unwind_state *state = bpf_map_lookup_elem(&unwind_states, &slot);

	if (!record || !state)
		return 0;
	if (unwind_legacy_run(state, record, tgid) && ++state->runs < LEGACY_RUNS)
		bpf_tail_call(ctx, programs, LEGACY_UNWIND);
	bpf_tail_call(ctx, programs, LEGACY_FINISH);
	return 0;
}

/* Kernels without bpf_loop: the end of a sample whose user stack the
 * legacy unwinder walked. */
static __always_inline int legacy_finish(void)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, tid = (__u32)pid_tgid, slot = SLOT_CPU, python;
	struct sample_record *record = bpf_map_lookup_elem(&scratch, &slot);
	struct stoke_unwind_state *state = bpf_map_lookup_elem(&unwind_states, &slot);
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 kernel_frames, user_frames;
	long kernel_bytes, user_bytes;

	if (!record || !state)
		return 0;
	record->header.flags |= (state->stop & STOKE_STOP_MASK) << STOKE_STOP_SHIFT;
	kernel_frames = state->first;
	user_frames = state->count;
	if (kernel_frames > STOKE_MAX_FRAMES || user_frames > STOKE_MAX_FRAMES)
		return 0;
	kernel_bytes = kernel_frames * sizeof(__u64);
	user_bytes = user_frames * sizeof(__u64);
	python = python_frames(task, tgid, tid, kernel_bytes + user_bytes, SLOT_CPU, true);
	if (python > STOKE_PYTHON_MAX_FRAMES)
		return 0;
	return send_sample(record, task, BPF_CORE_READ(task, flags), tgid, tid, kernel_bytes,
			   user_bytes, python, state->jvm_signal, false, true);
}

/* The legacy unwinder's two programs for one kind of context, named
 * PREFIX_legacy_unwind and PREFIX_legacy_finish, in program array
 * PROGRAMS. */
#define LEGACY_UNWINDER(kind, context, prefix, programs)      \
	SEC(kind)                                             \
	int prefix##_legacy_unwind(context *ctx)              \
	{                                                     \
		return legacy_unwind(ctx, &programs);         \
	}                                                     \
	SEC(kind)                                             \
	int prefix##_legacy_finish(context *ctx)              \
	{                                                     \
		return legacy_finish();                       \
	}

LEGACY_UNWINDER("perf_event", struct stoke_perf_event_data, sample_cpu, legacy_unwinder)
LEGACY_UNWINDER("kprobe", struct stoke_regs, sample_probe, legacy_probe_unwinder)
LEGACY_UNWINDER("tracepoint", void, sample_tracepoint, legacy_tracepoint_unwinder)

/* A hit of a kprobe or uprobe (`-e kprobe:FUNC`, `-e uprobe:PATH:SYMBOL`),
 * linked with its counter's cookie: its context is the registers at the
 * probe, as a perf event's context begins. */
SEC("kprobe")
int sample_probe(struct stoke_regs *ctx)
{
	return take_sample((struct stoke_perf_event_data *)ctx, false, false,
			   bpf_get_attach_cookie(ctx), PROBE_REGS);
}

/* A hit of a kernel tracepoint (`-e SYSTEM:NAME`), linked with its
 * counter's cookie. */
SEC("tracepoint")
int sample_tracepoint(void *ctx)
{
	return take_sample(ctx, false, false, bpf_get_attach_cookie(ctx), PROBE_TRACEPOINT);
}

/* Kernels without bpf_loop: a counted event's program per index, as its
 * events carry no attach cookie before 5.15, for each kind of event. Each
 * puts its cookie in legacy_cookies and tail-calls the one program of its
 * kind that takes the sample (a few instructions each, the sampler once
 * per kind). A counter whose events come as a thread leaves the CPU, or a
 * kernel probe, is quiet (no JVM signal) by its bit in
 * legacy_quiet_counters. */
const volatile __u32 legacy_quiet_counters = 0;

/* The cookie of the counted event whose program runs on this CPU (no
 * other program of these kinds runs on a CPU while one does). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} legacy_cookies SEC(".maps");

static __always_inline void legacy_count(void *ctx, void *programs, __u32 index)
{
	__u32 zero = 0;
	__u64 *cookie = bpf_map_lookup_elem(&legacy_cookies, &zero);

	if (!cookie)
		return;
	*cookie = STOKE_COUNTER_COOKIE_BASE + index +
		  ((legacy_quiet_counters >> index) & 1) * STOKE_COUNTER_COOKIE_QUIET;
	bpf_tail_call(ctx, programs, LEGACY_COUNTED);
}

static __always_inline __u64 legacy_counted_cookie(void)
{
	__u32 zero = 0;
	__u64 *cookie = bpf_map_lookup_elem(&legacy_cookies, &zero);

	return cookie ? *cookie : 0;
}

SEC("perf_event")
int sample_counter_legacy(struct stoke_perf_event_data *ctx)
{
	return take_sample(ctx, false, true, legacy_counted_cookie(), PROBE_NONE);
}

SEC("kprobe")
int sample_probe_legacy(struct stoke_regs *ctx)
{
	return take_sample((struct stoke_perf_event_data *)ctx, false, true,
			   legacy_counted_cookie(), PROBE_REGS);
}

/* Known not NULL, the user stack is the context's alone: the task's (a
 * number without the BTF task pointer) is not asked. */
SEC("tracepoint")
int sample_tracepoint_legacy(void *ctx)
{
	if (!ctx)
		return 0;
	return take_sample(ctx, false, true, legacy_counted_cookie(), PROBE_TRACEPOINT);
}

#define SAMPLE_COUNTED_LEGACY(index)                                               \
	SEC("perf_event")                                                          \
	int sample_counter_legacy_##index(struct stoke_perf_event_data *ctx)       \
	{                                                                          \
		legacy_count(ctx, &legacy_unwinder, index);                        \
		return 0;                                                          \
	}                                                                          \
	SEC("kprobe")                                                              \
	int sample_probe_legacy_##index(struct stoke_regs *ctx)                    \
	{                                                                          \
		legacy_count(ctx, &legacy_probe_unwinder, index);                  \
		return 0;                                                          \
	}                                                                          \
	SEC("tracepoint")                                                          \
	int sample_tracepoint_legacy_##index(void *ctx)                            \
	{                                                                          \
		legacy_count(ctx, &legacy_tracepoint_unwinder, index);             \
		return 0;                                                          \
	}

_Static_assert(STOKE_MAX_COUNTERS == 8, "legacy programs for every counted event");
SAMPLE_COUNTED_LEGACY(0)
SAMPLE_COUNTED_LEGACY(1)
SAMPLE_COUNTED_LEGACY(2)
SAMPLE_COUNTED_LEGACY(3)
SAMPLE_COUNTED_LEGACY(4)
SAMPLE_COUNTED_LEGACY(5)
SAMPLE_COUNTED_LEGACY(6)
SAMPLE_COUNTED_LEGACY(7)

/* A process's address space is gone: it gets no more signals (whatever
 * userspace does meanwhile) nor table unwinding, and if userspace was told
 * of it, it is told of this too, so that its later samples are matched
 * against a fresh snapshot of its maps. A -p target is always told of:
 * its exec removed the events on its threads, which userspace puts back
 * even if no sample of it came before (a launcher idle until its exec). */
static __always_inline void end_address_space(__u32 kind)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u64 now = bpf_ktime_get_ns();
	struct stoke_record_header header = {};
	bool target;

	bpf_map_delete_elem(&signal_tgids, &tgid);
	/* Its tables too, even if userspace never hears of the end (the
	 * ring was full): the map would fill with the dead. */
	bpf_map_delete_elem(&unwind_processes, &tgid);
	bpf_map_delete_elem(&python_processes, &tgid);
	bpf_map_update_elem(&ended_tgids, &tgid, &now, BPF_ANY);
	target = filter_tgids && bpf_map_lookup_elem(&target_tgids, &tgid);
	if (bpf_map_delete_elem(&announced_tgids, &tgid) != 0 && !target)
		return;
	header.kind = kind;
	header.cpu = bpf_get_smp_processor_id();
	header.tgid = tgid;
	header.tid = (__u32)pid_tgid;
	header.time_ns = now;
	bpf_get_current_comm(header.comm, sizeof(header.comm));
	/* A target's threads go unsampled until userspace reads its exec. */
	if (bpf_ringbuf_output(&samples, &header, sizeof(header),
			       ring_flags(target && kind == STOKE_RECORD_EXEC)) != 0)
		count(STOKE_COUNTER_LOST_LIFECYCLE);
}

/* Runs in the exec'ing task, after the new program replaced the old. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(process_exec, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), old_tid = old_pid;

	/* exec removed the thread's own event (remove_on_exec): the CPUs'
	 * events sample it again, under its old id or the leader's. */
	bpf_map_delete_elem(&timed_threads, &tid);
	bpf_map_delete_elem(&timed_threads, &old_tid);
	end_address_space(STOKE_RECORD_EXEC);
	return 0;
}

/* Runs in the exiting task. Newer kernels pass a second argument
 * (group_dead); only the task is read, which every kernel passes. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *task)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;

	/* A thread id reused later is the CPUs' to sample until timed again
	 * (userspace closes the ended thread's event). */
	bpf_map_delete_elem(&timed_threads, &tid);
	/* Only the thread group leader's exit ends the process. */
	if ((__u32)pid_tgid == pid_tgid >> 32)
		end_address_space(STOKE_RECORD_EXIT);
	return 0;
}

/* Built twice (build.rs): with the off-CPU programs, and without them for
 * recordings of other events, whose loading then relocates, verifies and
 * creates none of what only off-CPU time needs. */
#ifdef STOKE_OFFCPU
#include "kfuncs.bpf.h"
#include "offcpu.bpf.h"
#include "offcpu_waiting.bpf.h"
#endif
#include "kernel_names.bpf.h"

char LICENSE[] SEC("license") = "GPL";
