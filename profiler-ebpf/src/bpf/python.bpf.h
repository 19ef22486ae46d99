/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython's frames of the sampled thread: its thread state is found among
 * the interpreter's by its TLS base (a thread state's `thread_id` is the
 * thread's pthread_t, which on x86_64 is that base), then its frame chain
 * is walked from the current frame outwards. Each frame goes into the
 * record as its code object's address and its instruction; userspace
 * reads the names from the code object (they stay put while it lives)
 * and puts the frames where the interpreter's C frames run them.
 *
 * Included by sampler.bpf.c after its maps: uses `scratch` and `count`.
 */
#ifndef STOKE_PYTHON_BPF_H
#define STOKE_PYTHON_BPF_H

/* The CPython processes userspace found: tgid -> where their interpreter
 * keeps its threads, and how its frames are laid out. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct stoke_python_process);
} python_processes SEC(".maps");

/* A sampled thread's thread state, once found (checked at every sample by
 * its thread id), or when a search last found none: a thread that runs no
 * Python (yet) is searched for again at most once a second, not at every
 * sample. */
struct python_thread {
	__u64 state;
	__u64 searched_ns;
};

/* Between searches for a thread found to have no thread state. */
#define PYTHON_SEARCH_AGAIN_NS 1000000000ULL

/* By thread id. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct python_thread);
} python_threads SEC(".maps");

/* A walk of a thread's frames, per CPU and scratch slot. Kept in a map
 * value, as the unwinder's state is: the verifier knows nothing of what it
 * loads from there, so the frames written are no new state for it to walk
 * the steps again with. */
struct python_state {
	struct stoke_python_process process;
	__u64 frame;     /* the next frame to read */
	__u32 first;     /* the record's word of the first Python frame */
	__u32 count;     /* frames written */
	__u8 bytes[STOKE_PYTHON_FRAME_READ]; /* the frame, as read */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, __u32);
	__type(value, struct python_state);
} python_states SEC(".maps");

/* Kernels without bpf_loop walk unrolled loops, which their verifier
 * takes at these bounds only. */
#define PYTHON_LEGACY_THREADS 8
#define PYTHON_LEGACY_FRAMES 16

/* Room for the Python frames after the native ones, in words. */
#define PYTHON_WORDS (2 * STOKE_PYTHON_MAX_FRAMES)

static __always_inline __u64 python_read_u64(__u64 address)
{
	__u64 value = 0;

	if (bpf_probe_read_user(&value, sizeof(value), (void *)address))
		return 0;
	return value;
}

/* The search of a process's thread states for the sampled thread's. */
struct python_thread_search {
	__u64 state;
	__u64 fsbase;
	__u16 next;
	__u16 thread_id;
	bool found;
};

static long python_thread_step(__u32 index, void *context)
{
	struct python_thread_search *search = context;

	if (!search->state)
		return 1;
	if (python_read_u64(search->state + search->thread_id) == search->fsbase) {
		search->found = true;
		return 1;
	}
	search->state = python_read_u64(search->state + search->next);
	return 0;
}

/* The thread state of the current thread `tid`, whose TLS base is
 * `fsbase`; 0 if it has none (a thread that never ran Python code), or is
 * past the first STOKE_PYTHON_MAX_THREADS of its interpreter. */
static __always_inline __u64 python_thread_state(struct stoke_python_process *process,
						 __u32 tid, __u64 fsbase, bool legacy)
{
	struct python_thread_search search = {
		.fsbase = fsbase,
		.next = process->thread_next,
		.thread_id = process->thread_id,
	};
	struct python_thread *cached = bpf_map_lookup_elem(&python_threads, &tid);
	struct python_thread found = { .searched_ns = bpf_ktime_get_ns() };
	__u64 interpreter;

	if (cached && cached->state &&
	    python_read_u64(cached->state + search.thread_id) == fsbase)
		return cached->state;
	if (cached && !cached->state &&
	    found.searched_ns - cached->searched_ns < PYTHON_SEARCH_AGAIN_NS)
		return 0;
	interpreter = python_read_u64(process->interpreters_head);
	if (interpreter) {
		search.state = python_read_u64(interpreter + process->interpreter_threads);
		if (legacy) {
			for (__u32 index = 0; index < PYTHON_LEGACY_THREADS; index++)
				if (python_thread_step(index, &search))
					break;
		} else {
			bpf_loop(STOKE_PYTHON_MAX_THREADS, python_thread_step, &search, 0);
		}
	}
	if (search.found)
		found.state = search.state;
	bpf_map_update_elem(&python_threads, &tid, &found, BPF_ANY);
	return found.state;
}

struct python_walk {
	struct python_state *state;
	struct sample_record *record;
};

/* A frame's field of type `type` at `offset`, from the frame's bytes as
 * read: the mask keeps every access inside them. */
#define PYTHON_FIELD(state, offset, type)                                                      \
	(*(type *)((state)->bytes + ((offset) & (STOKE_PYTHON_FRAME_READ - sizeof(type)))))

/* A Python frame in a record. */
struct python_frame_words {
	__u64 code;
	__u64 instruction;
};

/* Sets the entry bit of the last frame written, if any. */
static __always_inline void python_mark_entry(struct sample_record *record,
					       struct python_state *state)
{
	__u32 word = state->first + 2 * state->count - 1;

	if (state->count && word < 2 * STOKE_MAX_FRAMES + PYTHON_WORDS)
		record->frames[word] |= STOKE_PYTHON_FRAME_ENTRY;
}

static long python_frame_step(__u32 index, void *context)
{
	struct python_walk *walk = context;
	struct python_state *state = walk->state;
	struct sample_record *record = walk->record;
	/* 1 to STOKE_PYTHON_FRAME_READ bytes, as the verifier sees it. */
	__u32 size = ((state->process.frame_read - 1) & (STOKE_PYTHON_FRAME_READ - 1)) + 1;
	__u32 word;
	struct python_frame_words *pair;
	__u64 code, instruction;
	__u8 mark = 0;

	if (!state->frame) {
		/* The outermost frame is its call's first. */
		python_mark_entry(record, state);
		return 1;
	}
	if (state->count >= STOKE_PYTHON_MAX_FRAMES)
		return 1;
	if (bpf_probe_read_user(state->bytes, size, (void *)state->frame))
		return 1;
	code = PYTHON_FIELD(state, state->process.frame_code, __u64);
	if (state->process.frame_entry != STOKE_PYTHON_NO_OFFSET)
		mark = PYTHON_FIELD(state, state->process.frame_entry, __u8);
	state->frame = PYTHON_FIELD(state, state->process.frame_previous, __u64);
	if (state->process.layout == STOKE_PYTHON_LAYOUT_SHIM_FRAMES &&
	    mark == STOKE_PYTHON_OWNED_BY_CSTACK) {
		/* A shim: the frame before it was its call's first. */
		python_mark_entry(record, state);
		return 0;
	}
	if (state->process.layout == STOKE_PYTHON_LAYOUT_FRAME_OBJECTS) {
		instruction = PYTHON_FIELD(state, state->process.frame_instruction, __u32) |
			      STOKE_PYTHON_FRAME_ENTRY;
	} else {
		instruction = (__u32)(PYTHON_FIELD(state, state->process.frame_instruction, __u64) -
				      code);
		if (state->process.layout == STOKE_PYTHON_LAYOUT_ENTRY_FLAG && mark)
			instruction |= STOKE_PYTHON_FRAME_ENTRY;
	}
	word = state->first + 2 * state->count;
	if (word >= 2 * STOKE_MAX_FRAMES + PYTHON_WORDS - 1)
		return 1;
	pair = (struct python_frame_words *)&record->frames[word];
	pair->code = code;
	pair->instruction = instruction;
	state->count++;
	return 0;
}

/*
 * The Python frames of the current thread `tid` of process `tgid` (`task`),
 * into the record of scratch slot `slot` after its `native_bytes` of
 * native frames: their count, 0 if the process runs no CPython that
 * userspace found or the thread has no Python frames. Kernels without
 * bpf_loop (`legacy`) search fewer threads and walk fewer frames.
 */
static __always_inline __u32 python_frames(struct task_struct *task, __u32 tgid, __u32 tid,
					   long native_bytes, __u32 slot, bool legacy)
{
	struct stoke_python_process *process = bpf_map_lookup_elem(&python_processes, &tgid);
	struct python_walk walk = {
		.state = bpf_map_lookup_elem(&python_states, &slot),
		.record = bpf_map_lookup_elem(&scratch, &slot),
	};
	struct python_state *state = walk.state;
	__u64 thread;

	if (!process || !state || !walk.record)
		return 0;
	state->process = *process;
	state->first = native_bytes / sizeof(__u64);
	state->count = 0;
	thread = python_thread_state(&state->process, tid, BPF_CORE_READ(task, thread.fsbase),
				     legacy);
	if (!thread)
		return 0;
	state->frame = python_read_u64(thread + state->process.thread_frame);
	if (state->frame && state->process.cframe_frame != STOKE_PYTHON_NO_OFFSET)
		state->frame = python_read_u64(state->frame + state->process.cframe_frame);
	if (legacy) {
		for (__u32 index = 0; index <= PYTHON_LEGACY_FRAMES; index++)
			if (python_frame_step(index, &walk))
				break;
	} else {
		bpf_loop(STOKE_PYTHON_MAX_FRAMES + 1, python_frame_step, &walk, 0);
	}
	return state->count;
}

#endif
