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

/* JVMs whose Stoke agent has a signal handler waiting: tgid -> signal. The
 * only processes Stoke ever signals. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
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
	__u64 frames[2 * STOKE_MAX_FRAMES];
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

/* Compiled unwind tables, all files' rows end to end (sized by userspace,
 * which writes them through a memory mapping). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stoke_unwind_row);
} unwind_rows SEC(".maps");

/* Each file's page index into its rows (struct stoke_unwind_page), all
 * files' end to end, written by userspace like the rows. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stoke_unwind_page);
} unwind_pages SEC(".maps");

/* Every loaded process's executable mappings (struct stoke_mapping), each
 * process's sorted and together, in ranges userspace writes in place. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stoke_mapping);
} unwind_mappings SEC(".maps");

/* Processes whose tables are loaded: tgid -> where its mappings are in
 * unwind_mappings. A process not in here is unwound with frame pointers. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct stoke_process_mappings);
} unwind_processes SEC(".maps");

/* The unwinder's registers between two bpf_loop steps. */
struct stoke_unwind_state {
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u32 count; /* user frames written */
	__u32 first; /* where the user frames start in the record */
	__u32 stop;  /* enum stoke_stop */
	__u32 exact; /* pc is an interrupted instruction, not a return address */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, __u32);
	__type(value, struct stoke_unwind_state);
} unwind_states SEC(".maps");

static __always_inline void count(__u32 counter)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &counter);

	if (value)
		*value += 1;
}

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
static __always_inline __u64 task_cgroup_key(struct task_struct *task)
{
	struct css_set *cset = BPF_CORE_READ(task, cgroups);
	struct cgroup_walk walk = {};

	if (!cset)
		return 0;
	walk.head = &cset->cgrp_links;
	walk.node = BPF_CORE_READ(cset, cgrp_links.next);
	bpf_loop(MAX_CGROUP_LINKS, cgroup_walk_step, &walk, 0);
	return walk.done ? walk.key : 0;
}

/* The flags every record of `task` carries. */
static __always_inline __u32 task_flags(struct task_struct *task)
{
	__u32 flags = 0;

	if (task->flags & PF_EXITING)
		flags |= STOKE_SAMPLE_EXITING;
	if (task->flags & PF_KTHREAD)
		flags |= STOKE_SAMPLE_KERNEL_THREAD;
	return flags;
}

static __always_inline bool announce(__u32 tgid, struct task_struct *task)
{
	__u8 yes = 1;

	if ((task->flags & PF_EXITING) || bpf_map_lookup_elem(&announced_tgids, &tgid))
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
					struct task_struct *task)
{
	struct file *exe;

	header->exe_device = 0;
	header->exe_inode = 0;
	header->cgroup_key = 0;
	header->age_ns = 0;
	if (!announce(tgid, task))
		return false;
	header->cgroup_key = task_cgroup_key(task);
	header->age_ns = bpf_ktime_get_ns() - BPF_CORE_READ(task, group_leader, start_time);
	exe = BPF_CORE_READ(task, mm, exe_file);
	if (exe) {
		header->exe_device = BPF_CORE_READ(exe, f_inode, i_sb, s_dev);
		header->exe_inode = BPF_CORE_READ(exe, f_inode, i_ino);
	}
	return true;
}

/* A binary search for the mapping holding a pc, one step per bpf_loop
 * iteration, like the row search below. */
struct mapping_search {
	struct stoke_process_mappings *process;
	__u64 pc;
	__u32 low;
	__u32 high;
	__s32 found;
};

/* A process's mapping `index` (0 up to its count). */
static __always_inline struct stoke_mapping *
mapping_at(struct stoke_process_mappings *process, __u32 index)
{
	__u32 key;

	if (index >= process->count || index >= STOKE_MAX_MAPPINGS)
		return NULL;
	key = process->first + index;
	return bpf_map_lookup_elem(&unwind_mappings, &key);
}

static long mapping_search_step(__u32 index, void *context)
{
	struct mapping_search *search = context;
	struct stoke_mapping *mapping;
	__u32 middle;

	if (search->low >= search->high)
		return 1;
	middle = (search->low + search->high) / 2;
	mapping = mapping_at(search->process, middle);
	if (!mapping)
		return 1;
	if (search->pc < mapping->start) {
		search->high = middle;
	} else if (search->pc >= mapping->end) {
		search->low = middle + 1;
	} else {
		search->found = middle;
		return 1;
	}
	return 0;
}

/* The mapping holding a pc: most often the previous frame's (a stack
 * mostly calls within one file), else a binary search. */
static __always_inline struct stoke_mapping *
find_mapping(struct stoke_process_mappings *process, __u64 pc, __u32 *last)
{
	struct mapping_search search = {
		.process = process,
		.pc = pc,
		.low = 0,
		.high = process->count,
		.found = -1,
	};
	struct stoke_mapping *mapping = mapping_at(process, *last);

	if (mapping && pc >= mapping->start && pc < mapping->end)
		return mapping;
	if (search.high > STOKE_MAX_MAPPINGS)
		search.high = STOKE_MAX_MAPPINGS;
	bpf_loop(9, mapping_search_step, &search, 0);
	if (search.found < 0)
		return NULL;
	*last = search.found;
	return mapping_at(process, search.found);
}

/* A binary search for the last row at or before a pc, one step at a time:
 * a short loop's body, or bpf_loop's callback for a long search (verified
 * once, not once per path). */
struct row_search {
	__u32 low;
	__u32 high;
	__u32 rows_start;
	__u32 relative;
	bool failed;
};

static long row_search_step(__u32 index, void *context)
{
	struct row_search *search = context;
	__u32 middle, key;
	struct stoke_unwind_row *row;

	if (search->low >= search->high)
		return 1;
	middle = search->low + (search->high - search->low) / 2;
	key = search->rows_start + middle;
	row = bpf_map_lookup_elem(&unwind_rows, &key);
	if (!row) {
		search->failed = true;
		return 1;
	}
	if (row->pc <= search->relative)
		search->low = middle + 1;
	else
		search->high = middle;
	return 0;
}

/* The rows to search are those beginning in the pc's page of the table
 * (a handful), found through the file's page index; a file without one
 * has all its rows searched. Userspace keeps a file under 2^24 rows, so
 * 25 steps always suffice. */
static __always_inline struct stoke_unwind_row *
find_row(struct stoke_mapping *mapping, __u64 pc)
{
	__u64 relative = pc - mapping->row_base, page_number;
	struct row_search search = {
		.low = 0,
		.high = mapping->rows_count,
		.rows_start = mapping->rows_start,
		.relative = (__u32)relative,
	};
	struct stoke_unwind_page *page;
	__u32 key;

	if (pc < mapping->row_base || relative > 0xffffffffULL)
		return NULL;
	page_number = relative >> (mapping->page_shift & 31);
	if (page_number >= mapping->pages_count) {
		/* Past the last row's page: the last row, if there is an index. */
		if (mapping->pages_count)
			search.low = search.high;
	} else {
		key = mapping->pages_start + (__u32)page_number;
		page = bpf_map_lookup_elem(&unwind_pages, &key);
		if (!page)
			return NULL;
		search.low = page->first;
		search.high = page->end;
	}
	if (search.high - search.low < 128) {
		/* A page's rows, most often (a few; libc has about 4 a page): a short
		 * loop the compiler unrolls is cheaper per step than bpf_loop's
		 * calls. */
		for (int step = 0; step < 7; step++)
			if (row_search_step(step, &search))
				break;
	} else {
		bpf_loop(25, row_search_step, &search, 0);
	}
	if (search.failed || search.low == 0)
		return NULL;
	key = search.rows_start + search.low - 1;
	return bpf_map_lookup_elem(&unwind_rows, &key);
}

static __always_inline bool read_user(__u64 *value, __u64 address)
{
	return bpf_probe_read_user(value, sizeof(*value), (void *)address) == 0;
}

/* Where no table covers the code: the classic frame-pointer step. */
static __always_inline bool frame_pointer_step(struct stoke_unwind_state *state)
{
	__u64 saved_bp, return_address;

	if (state->bp == 0 || !read_user(&saved_bp, state->bp) ||
	    !read_user(&return_address, state->bp + 8))
		return false;
	/* Frames only ever lie further up the stack: anything else is
	 * garbage in RBP, not a frame. */
	if (saved_bp != 0 && saved_bp <= state->bp)
		return false;
	state->sp = state->bp + 16;
	state->bp = saved_bp;
	state->pc = return_address;
	return return_address != 0;
}

static __always_inline long stop_with(struct stoke_unwind_state *state, __u32 reason)
{
	state->stop = reason;
	return 1;
}

/* Out of a signal handler: the interrupted registers are in the signal
 * frame, and the next pc is the interrupted instruction itself. */
static __always_inline long signal_frame_step(struct stoke_unwind_state *state)
{
	__u64 context = state->sp + STOKE_SIGCONTEXT_OFFSET, bp, sp, pc;

	if (!read_user(&bp, context + STOKE_SIGCONTEXT_RBP) ||
	    !read_user(&sp, context + STOKE_SIGCONTEXT_RSP) ||
	    !read_user(&pc, context + STOKE_SIGCONTEXT_RIP))
		return stop_with(state, STOKE_STOP_READ_FAILED);
	state->bp = bp;
	state->sp = sp;
	state->pc = pc;
	state->exact = 1;
	return pc ? 0 : stop_with(state, STOKE_STOP_END);
}

/* What every step of one stack's walk uses, looked up once. */
struct unwind_walk {
	struct stoke_unwind_state *state;
	struct sample_record *record;
	struct stoke_process_mappings *process;
	__u32 last_mapping; /* index of the previous frame's mapping */
};

/* A packed row's fields (struct stoke_unwind_row's rule). */
static __always_inline __u32 row_kind(__u32 rule)
{
	return rule & ((1 << STOKE_ROW_RBP_SHIFT) - 1);
}

static __always_inline __u32 row_rbp(__u32 rule)
{
	return (rule >> STOKE_ROW_RBP_SHIFT) & 3;
}

static __always_inline __s64 row_rbp_offset(__u32 rule)
{
	return (__s64)(__s8)(rule >> STOKE_ROW_RBP_OFFSET_SHIFT) * 8;
}

static __always_inline __s64 row_cfa_offset(__u32 rule)
{
	return (__s32)rule >> STOKE_ROW_CFA_OFFSET_SHIFT;
}

/* One frame: record the pc, then find the caller's registers. */
static long unwind_step(__u32 index, void *context)
{
	struct unwind_walk *walk = context;
	struct stoke_unwind_state *state = walk->state;
	struct sample_record *record = walk->record;
	struct stoke_mapping *mapping;
	struct stoke_unwind_row *row;
	__u64 pc, cfa, return_address, bp;
	__s64 cfa_offset, rbp_offset;
	__u32 slot, rule, kind, rbp;

	if (state->count >= STOKE_MAX_FRAMES)
		return stop_with(state, STOKE_STOP_DEPTH);
	slot = state->first + state->count;
	if (slot >= 2 * STOKE_MAX_FRAMES)
		return stop_with(state, STOKE_STOP_DEPTH);
	record->frames[slot] = state->pc;
	state->count++;

	/* A return address points after its call, maybe past the caller's
	 * end: look up the call itself. */
	pc = state->exact ? state->pc : state->pc - 1;
	state->exact = 0;
	mapping = find_mapping(walk->process, pc, &walk->last_mapping);
	if (!mapping)
		return stop_with(state, STOKE_STOP_UNKNOWN_CODE);
	row = mapping->rows_count ? find_row(mapping, pc) : NULL;
	rule = row ? row->rule : STOKE_ROW_NO_CFI;
	kind = row_kind(rule);
	if (kind == STOKE_ROW_NO_CFI) {
		if (!frame_pointer_step(state))
			return stop_with(state, mapping->rows_count ? STOKE_STOP_NO_CFI :
								      STOKE_STOP_BAD_FRAME);
		return 0;
	}

	if (kind == STOKE_ROW_SIGNAL)
		return signal_frame_step(state);

	cfa_offset = row_cfa_offset(rule);
	switch (kind) {
	case STOKE_ROW_CFA_RSP:
		cfa = state->sp + cfa_offset;
		break;
	case STOKE_ROW_CFA_RBP:
		cfa = state->bp + cfa_offset;
		break;
	case STOKE_ROW_CFA_RBP_DEREF:
		if (!read_user(&cfa, state->bp + cfa_offset))
			return stop_with(state, STOKE_STOP_READ_FAILED);
		break;
	case STOKE_ROW_PLT:
		/* 16-byte PLT entries push once, at offset 11. */
		cfa = state->sp + cfa_offset + ((state->pc & 15) >= 11 ? 8 : 0);
		break;
	case STOKE_ROW_END:
		return stop_with(state, STOKE_STOP_END);
	default:
		return stop_with(state, STOKE_STOP_UNSUPPORTED);
	}
	/* The caller's RBP pushed right below the return address (any
	 * function that saves RBP first, as with frame pointers): both in
	 * one read. */
	rbp = row_rbp(rule);
	rbp_offset = row_rbp_offset(rule);
	bool paired = rbp == STOKE_RBP_AT_CFA && rbp_offset == -16;

	if (paired) {
		__u64 saved[2];

		if (bpf_probe_read_user(saved, sizeof(saved), (void *)(cfa - 16)))
			return stop_with(state, STOKE_STOP_READ_FAILED);
		state->bp = saved[0];
		return_address = saved[1];
	} else if (!read_user(&return_address, cfa - 8)) {
		return stop_with(state, STOKE_STOP_READ_FAILED);
	}
	switch (rbp) {
	case STOKE_RBP_UNCHANGED:
		break;
	case STOKE_RBP_AT_CFA:
		if (paired)
			break;
		if (!read_user(&bp, cfa + rbp_offset))
			return stop_with(state, STOKE_STOP_READ_FAILED);
		state->bp = bp;
		break;
	case STOKE_RBP_AT_RBP:
		if (!read_user(&bp, state->bp + rbp_offset))
			return stop_with(state, STOKE_STOP_READ_FAILED);
		state->bp = bp;
		break;
	default:
		state->bp = 0;
	}
	if (return_address == 0)
		return stop_with(state, STOKE_STOP_END);
	state->sp = cfa;
	state->pc = return_address;
	return 0;
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

/* Unwinds the user stack, from registers pc, sp and bp, with the
 * process's tables into the record of scratch slot `slot`, after the
 * kernel frames; returns the bytes written, and the stop reason. */
static __always_inline long unwind_user(__u64 pc, __u64 sp, __u64 bp,
					struct stoke_process_mappings *process,
					long kernel_bytes, __u32 *stop, __u32 slot)
{
	struct unwind_walk walk = {
		.state = bpf_map_lookup_elem(&unwind_states, &slot),
		.record = bpf_map_lookup_elem(&scratch, &slot),
		.process = process,
		/* No mapping's index (it is past the count), and a
		 * value the verifier cannot know: the indices steps store later
		 * are then no new state for it to walk the steps again with. */
		.last_mapping = process->count,
	};
	struct stoke_unwind_state *state = walk.state;

	if (!state || !walk.record)
		return 0;
	state->pc = pc;
	state->sp = sp;
	state->bp = bp;
	state->count = 0;
	state->first = kernel_bytes / sizeof(__u64);
	state->stop = STOKE_STOP_DEPTH;
	state->exact = 1;
	bpf_loop(STOKE_MAX_FRAMES, unwind_step, &walk, 0);
	*stop = state->stop;
	return state->count * sizeof(__u64);
}

#define STOKE_SIGTRAP 5

/* Whether the SIGTRAP of the current thread's own event would reach the
 * agent's handler now: the process's handler is still the one the agent
 * installed (no library replaced it, nor reset it to the default action,
 * which ends the process), and no debugger traces the thread (it would
 * stop at every SIGTRAP). Checked at every sample, so that a change is
 * seen before the next signal, not at userspace's next look. */
static __always_inline bool trap_reaches_agent(struct task_struct *task, __u32 tid)
{
	__u64 *agent_handler = bpf_map_lookup_elem(&timed_threads, &tid);
	__u64 handler;

	if (!agent_handler || *agent_handler <= 1 || task->ptrace)
		return false;
	handler = (__u64)BPF_CORE_READ(task, sighand, action[STOKE_SIGTRAP - 1].sa.sa_handler);
	return handler == *agent_handler;
}

/* A CPU sample of the current thread. From a CPU's event (`own_timer`
 * false) a JVM's thread is signalled for its Java stack; from the thread's
 * own event, the return value asks perf for its SIGTRAP instead (1), if
 * it would reach the agent (else the thread is signalled as from a CPU's
 * event). */
static __always_inline int take_sample(struct stoke_perf_event_data *ctx, bool own_timer)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, tid = (__u32)pid_tgid;
	__u32 cpu_slot = SLOT_CPU;
	struct sample_record *record;
	struct stoke_process_mappings *process;
	struct task_struct *task;
	struct stoke_regs *user;
	__u32 *signal, stop = STOKE_STOP_FRAME_POINTERS;
	bool in_kernel, announcing, trap;
	long kernel_bytes = 0, user_bytes = 0;

	if (own_timer)
		count(STOKE_COUNTER_OWN_TIMER_RUNS);
	if (tgid == 0 && !include_idle) {
		count(STOKE_COUNTER_IDLE_SKIPPED);
		return 0;
	}
	if (!own_timer && bpf_map_lookup_elem(&timed_threads, &tid))
		return 0;
	/* The targets' events are on their threads alone (threads inherit
	 * them, children do not): only the CPUs' events need the filter. */
	if (filter_tgids && !thread_events && !bpf_map_lookup_elem(&target_tgids, &tgid))
		return 0;

	record = bpf_map_lookup_elem(&scratch, &cpu_slot);
	if (!record)
		return 0;

	/* The context only allows full-width loads of registers. */
	in_kernel = (*(volatile __u64 *)&ctx->regs.cs & 3) == 0;
	record->header.kind = STOKE_RECORD_SAMPLE;
	record->header.cpu = bpf_get_smp_processor_id();
	record->header.tgid = tgid;
	record->header.tid = (__u32)pid_tgid;
	record->header.time_ns = bpf_ktime_get_ns();
	record->header.flags = in_kernel ? STOKE_SAMPLE_IN_KERNEL : 0;
	record->header.off_cpu_ns = 0;
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

	task = bpf_get_current_task_btf();
	record->header.flags |= task_flags(task);
	if (task->flags & PF_KTHREAD) {
		/* Kernel threads have no user stack. */
	} else if ((process = bpf_map_lookup_elem(&unwind_processes, &tgid))) {
		if (in_kernel) {
			/* The user registers saved when the thread entered the kernel. */
			user = (struct stoke_regs *)bpf_task_pt_regs(task);
			user_bytes = unwind_user(BPF_PROBE_READ(user, ip), BPF_PROBE_READ(user, sp),
						 BPF_PROBE_READ(user, bp), process, kernel_bytes,
						 &stop, SLOT_CPU);
		} else {
			user_bytes = unwind_user(*(volatile __u64 *)&ctx->regs.ip,
						 *(volatile __u64 *)&ctx->regs.sp,
						 *(volatile __u64 *)&ctx->regs.bp, process,
						 kernel_bytes, &stop, SLOT_CPU);
		}
		record->header.flags |= (stop & STOKE_STOP_MASK) << STOKE_STOP_SHIFT;
	} else {
		user_bytes = bpf_get_stack(ctx, (void *)record->frames + kernel_bytes,
					   FRAME_BYTES, BPF_F_USER_STACK);
		if (user_bytes < 0) {
			count(STOKE_COUNTER_USER_STACK_FAILED);
			user_bytes = 0;
		}
	}
	user_bytes = frame_bytes_bounded(user_bytes);
	if (user_bytes < 0)
		return 0;

	/* The agent's handler takes the Java stack when the thread next
	 * returns to user mode; the record's tid and time let userspace pair
	 * the two. */
	signal = cpu_java_stacks ? bpf_map_lookup_elem(&signal_tgids, &tgid) : NULL;
	trap = own_timer && signal && trap_reaches_agent(task, tid);
	if (trap) {
		record->header.flags |= STOKE_SAMPLE_SIGNALLED;
	} else if (signal && !(task->flags & PF_KTHREAD)) {
		if (bpf_send_signal_thread(*signal) == 0)
			record->header.flags |= STOKE_SAMPLE_SIGNALLED;
		else
			count(STOKE_COUNTER_SIGNAL_FAILED);
	}

	record->header.kernel_frames = kernel_bytes / sizeof(__u64);
	record->header.user_frames = user_bytes / sizeof(__u64);
	announcing = announce_in(&record->header, tgid, task);
	if (bpf_ringbuf_output(&samples, record,
			       sizeof(record->header) + kernel_bytes + user_bytes,
			       ring_flags(announcing)) == 0)
		count(STOKE_COUNTER_SENT);
	else
		count(STOKE_COUNTER_LOST_RING_FULL);
	return trap;
}

/* One program for both kinds of event: a thread's own is linked with a
 * cookie, and the program is verified once. */
SEC("perf_event")
int sample_cpu(struct stoke_perf_event_data *ctx)
{
	return take_sample(ctx, thread_events ||
				       bpf_get_attach_cookie(ctx) == STOKE_OWN_TIMER_COOKIE);
}

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
