// SPDX-License-Identifier: GPL-2.0
/*
 * Stoke's user-stack unwinder, shared by the CPU sampler and the off-CPU
 * programs: the stack of a process whose unwind tables userspace loaded
 * (compiled from .eh_frame: a CFA rule and where RBP was saved, per range
 * of pcs), one frame per bpf_loop step. Code no table covers is walked
 * with frame pointers, signal frames through the sigcontext the kernel
 * pushed. Kernels without bpf_loop (before 5.17) run the same steps
 * unrolled, a few frames a program, the program tail-calling itself for
 * more (sampler.bpf.c's sample_cpu_legacy_unwind).
 *
 * Included by sampler.bpf.c after the scratch record it writes into.
 */

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
 * unwind_mappings. A process not in here is unwound with frame pointers.
 * Preallocated: before 6.1 perf_event programs may use no other hash. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stoke_process_mappings);
} unwind_processes SEC(".maps");

/* Words of the user stack read at once (see read_user): 1 KiB. At 16
 * recursions without frame pointers the BPF time per sample fell from
 * 4.2-4.6 to 2.7-3.1 µs, on xz from 4.9-5.5 to 4.0-4.1 µs; windows of 256
 * and 512 bytes gained less, of 2 KiB no more. */
#define STACK_WINDOW_WORDS 128
#define PAGE_BYTES 4096

/* A copy of a stretch of the user stack: `words` words from `base`. */
struct stack_window {
	__u64 base;
	__u64 words;
	__u64 word[STACK_WINDOW_WORDS];
};

/* The unwinder's registers between two bpf_loop steps (or two programs
 * of a legacy kernel's tail-call chain). */
struct stoke_unwind_state {
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u32 count; /* user frames written */
	__u32 first; /* where the user frames start in the record */
	__u32 stop;  /* enum stoke_stop */
	__u32 exact; /* pc is an interrupted instruction, not a return address */
	__u32 last_mapping; /* the previous frame's mapping's index */
	/* Carried across a legacy kernel's tail calls: the JVM signal the
	 * finished sample sends, and the runs of the unwinder program so far. */
	__u32 jvm_signal;
	__u32 runs;
	struct stack_window window;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, __u32);
	__type(value, struct stoke_unwind_state);
} unwind_states SEC(".maps");

/* A binary search for the mapping holding a pc, one step per bpf_loop
 * iteration, like the row search below. */
struct mapping_search {
	__u32 first; /* the process's mappings: first and count */
	__u32 count;
	__u64 pc;
	__u32 low;
	__u32 high;
	__s32 found;
};

/* Mapping `index` (0 up to `count`) of the process whose mappings begin
 * at `first`. */
static __always_inline struct stoke_mapping *mapping_in(__u32 first, __u32 count, __u32 index)
{
	__u32 key;

	if (index >= count || index >= STOKE_MAX_MAPPINGS)
		return NULL;
	key = first + index;
	return bpf_map_lookup_elem(&unwind_mappings, &key);
}

/* A process's mapping `index` (0 up to its count). */
static __always_inline struct stoke_mapping *
mapping_at(struct stoke_process_mappings *process, __u32 index)
{
	return mapping_in(process->first, process->count, index);
}

/* One step of the search; true when it ended. */
static __always_inline bool mapping_search_once(struct mapping_search *search)
{
	struct stoke_mapping *mapping;
	__u32 middle;

	if (search->low >= search->high)
		return 1;
	middle = (search->low + search->high) / 2;
	mapping = mapping_in(search->first, search->count, middle);
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

static long mapping_search_step(__u32 index, void *context)
{
	return mapping_search_once(context);
}

/* A value the compiler cannot see is 0 or 1: arithmetic on it stays
 * arithmetic, not a branch. */
static __always_inline __u64 opaque(__u64 value)
{
	asm volatile("" : "+r"(value));
	return value;
}

/* 1 if a < b, else 0, without a branch: for values under 2^63. */
static __always_inline __u64 below(__u64 a, __u64 b)
{
	return opaque((a - b) >> 63);
}

/* The lesser of `value` and `limit`, without a branch. */
static __always_inline __u32 at_most(__u32 value, __u32 limit)
{
	return value - (value - limit) * below(limit, value);
}

/*
 * Kernels without bpf_loop: a search step without branches but a missing
 * row's. Their verifier walks every path through unrolled steps, and keeps
 * apart states it could merge (it tracks no precision across them): one
 * path a step keeps a whole search within its limits. Steps past the end
 * change nothing (and read within the process's mappings: its count is
 * not 0).
 */
static __always_inline bool mapping_search_legacy_step(struct mapping_search *search)
{
	__u32 middle = (search->low + search->high) / 2, key;
	struct stoke_mapping *mapping;
	__u64 open, left, right, inside;

	middle = at_most(middle, search->count - 1);
	key = search->first + (middle & (STOKE_MAX_MAPPINGS - 1));
	mapping = bpf_map_lookup_elem(&unwind_mappings, &key);
	if (!mapping)
		return false;
	open = below(search->low, search->high);
	left = below(search->pc, mapping->start) & open;
	right = (1 - below(search->pc, mapping->end)) & open;
	search->high -= (search->high - middle) * left;
	search->low += (middle + 1 - search->low) * right;
	/* Neither: the pc is in this mapping, and no more steps. */
	inside = open & ~left & ~right & 1;
	search->found += (middle - search->found) * inside;
	search->low += (search->high - search->low) * inside;
	return true;
}

/* The mapping holding a pc: most often the previous frame's (a stack
 * mostly calls within one file), else a binary search (unrolled where
 * `legacy`: without bpf_loop). */
static __always_inline struct stoke_mapping *
find_mapping(struct stoke_process_mappings *process, __u64 pc, __u32 *last, bool legacy)
{
	struct mapping_search search = {
		.first = process->first,
		.count = process->count,
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
	if (legacy) {
		if (search.count == 0)
			return NULL;
		for (int step = 0; step < STOKE_MAPPING_SEARCH_STEPS; step++)
			if (!mapping_search_legacy_step(&search))
				return NULL;
	} else {
		bpf_loop(STOKE_MAPPING_SEARCH_STEPS, mapping_search_step, &search, 0);
	}
	if (search.found < 0)
		return NULL;
	*last = search.found;
	return mapping_at(process, search.found);
}

/* A binary search for the last row at or before a pc, one step at a time:
 * a short loop's body, or bpf_loop's callback for a long search (verified
 * once, not once per path). */
#define ROW_SEARCH_STEPS 25

struct row_search {
	__u32 low;
	__u32 high;
	__u32 rows_start;
	__u32 rows_count; /* the file's */
	__u32 relative;
	bool failed;
};

/* One step of the search; true when it ended. */
static __always_inline bool row_search_once(struct row_search *search)
{
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

static long row_search_step(__u32 index, void *context)
{
	return row_search_once(context);
}

/* Kernels without bpf_loop: a step as mapping_search_legacy_step's (the
 * file's rows are not 0). */
static __always_inline bool row_search_legacy_step(struct row_search *search)
{
	__u32 middle = search->low + (search->high - search->low) / 2, key;
	struct stoke_unwind_row *row;
	__u64 open, after;

	key = search->rows_start + at_most(middle, search->rows_count - 1);
	row = bpf_map_lookup_elem(&unwind_rows, &key);
	if (!row)
		return false;
	open = below(search->low, search->high);
	/* The row begins at or before the pc: the answer is past it. */
	after = (1 - below(search->relative, row->pc)) & open;
	search->low += (middle + 1 - search->low) * after;
	search->high -= (search->high - middle) * ((1 - after) & open);
	return true;
}

/* The rows to search are those beginning in the pc's page of the table
 * (a handful), found through the file's page index; a file without one
 * has all its rows searched. Userspace keeps a file under 2^24 rows, so
 * 25 steps always suffice (unrolled where `legacy`). */
static __always_inline struct stoke_unwind_row *
find_row(struct stoke_mapping *mapping, __u64 pc, bool legacy)
{
	__u64 relative = pc - mapping->row_base, page_number;
	struct row_search search = {
		.low = 0,
		.high = mapping->rows_count,
		.rows_start = mapping->rows_start,
		.rows_count = mapping->rows_count,
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
	if (legacy && search.high - search.low < 128) {
		/* A page's rows, as below. */
		for (int step = 0; step < 7; step++)
			if (!row_search_legacy_step(&search))
				return NULL;
	} else if (legacy) {
		for (int step = 0; step < ROW_SEARCH_STEPS; step++)
			if (!row_search_legacy_step(&search))
				return NULL;
	} else if (search.high - search.low < 128) {
		/* A page's rows, most often (a few; libc has about 4 a page): a short
		 * loop the compiler unrolls is cheaper per step than bpf_loop's
		 * calls. */
		for (int step = 0; step < 7; step++)
			if (row_search_once(&search))
				break;
	} else {
		bpf_loop(ROW_SEARCH_STEPS, row_search_step, &search, 0);
	}
	if (search.failed || search.low == 0)
		return NULL;
	key = search.rows_start + search.low - 1;
	return bpf_map_lookup_elem(&unwind_rows, &key);
}

/* Fills the window from `address` on (8-aligned): a whole window, or, where
 * the stack's mapping ends within it, up to the end of the address's page. */
static __always_inline bool stack_window_load(struct stack_window *window, __u64 address)
{
	__u64 to_page_end = PAGE_BYTES - (address & (PAGE_BYTES - 1));

	window->base = address;
	window->words = 0;
	if (bpf_probe_read_user(window->word, sizeof(window->word), (void *)address) == 0) {
		window->words = STACK_WINDOW_WORDS;
		return true;
	}
	if (to_page_end >= sizeof(window->word))
		return false;
	/* Masked for the verifier: a multiple of 8 under the window's size. */
	to_page_end &= sizeof(window->word) - 8;
	if (to_page_end == 0 ||
	    bpf_probe_read_user(window->word, to_page_end, (void *)address) != 0)
		return false;
	window->words = to_page_end / 8;
	return true;
}

/*
 * A word of the stack being unwound. A probe read costs about the same for
 * a word as for a few hundred bytes (the fault-handling setup, not the
 * copy, is its price), and a frame's words are near the next frame's: the
 * stack is read a window at a time, refilled from the word asked for when
 * that word is outside it (walking up the stack, a window serves several
 * frames). An unaligned address, never a frame's, is read alone.
 */
static __always_inline bool read_user(struct stoke_unwind_state *state, __u64 *value,
				      __u64 address)
{
	struct stack_window *window = &state->window;
	__u64 index = (address - window->base) / 8;

	if (address & 7)
		return bpf_probe_read_user(value, sizeof(*value), (void *)address) == 0;
	if (address < window->base || index >= window->words) {
		if (!stack_window_load(window, address))
			return false;
		index = 0;
	}
	*value = window->word[index & (STACK_WINDOW_WORDS - 1)];
	return true;
}

/* Where no table covers the code: the classic frame-pointer step. */
static __always_inline bool frame_pointer_step(struct stoke_unwind_state *state)
{
	__u64 saved_bp, return_address;

	if (state->bp == 0 || !read_user(state, &saved_bp, state->bp) ||
	    !read_user(state, &return_address, state->bp + 8))
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

/* The bytes around a return address into CPython's perf trampoline (3.12
 * and newer, `-X perf`), little-endian from two bytes before it: `call
 * *%rcx`, then `add $8,%rsp; ret`. The trampoline, `sub $8,%rsp` before
 * the call, lies in anonymous memory and sets no frame pointer. */
#define PYTHON_TRAMPOLINE_CODE 0x00c308c48348d1ffULL
#define PYTHON_TRAMPOLINE_MASK 0x00ffffffffffffffULL

/* Returns from CPython's perf trampoline at return address `pc`: its
 * frame is 16 bytes, the return address on top. */
static __always_inline bool python_trampoline_step(struct stoke_unwind_state *state, __u64 pc)
{
	__u64 code = 0, return_address;

	if (bpf_probe_read_user(&code, sizeof(code), (void *)(pc - 2)) ||
	    (code & PYTHON_TRAMPOLINE_MASK) != PYTHON_TRAMPOLINE_CODE ||
	    !read_user(state, &return_address, state->sp + 8))
		return false;
	state->sp += 16;
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

	if (!read_user(state, &bp, context + STOKE_SIGCONTEXT_RBP) ||
	    !read_user(state, &sp, context + STOKE_SIGCONTEXT_RSP) ||
	    !read_user(state, &pc, context + STOKE_SIGCONTEXT_RIP))
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

/* One frame: record the pc, then find the caller's registers; nonzero
 * when the walk ended (`legacy`: the searches unrolled). */
static __always_inline long unwind_frame(struct unwind_walk *walk, bool legacy)
{
	struct stoke_unwind_state *state = walk->state;
	struct sample_record *record = walk->record;
	struct stoke_mapping *mapping;
	struct stoke_unwind_row *row;
	__u64 pc, cfa, return_address, bp;
	__s64 cfa_offset, rbp_offset;
	__u32 slot, rule, kind;
	bool returned;

	if (state->count >= STOKE_MAX_FRAMES)
		return stop_with(state, STOKE_STOP_DEPTH);
	slot = state->first + state->count;
	if (slot >= 2 * STOKE_MAX_FRAMES)
		return stop_with(state, STOKE_STOP_DEPTH);
	record->frames[slot] = state->pc;
	state->count++;

	/* A return address points after its call, maybe past the caller's
	 * end: look up the call itself. */
	returned = !state->exact;
	pc = returned ? state->pc - 1 : state->pc;
	state->exact = 0;
	/* The previous frame's mapping is in the map value, which the
	 * verifier does not track: it finds the same stack at the end of every
	 * path through a frame, and walks the next frame once. */
	mapping = find_mapping(walk->process, pc, &state->last_mapping, legacy);
	if (!mapping) {
		/* Code outside any file: CPython's perf trampoline, or a JIT's,
		 * whose runtime may keep frame pointers (V8 does; a JVM's code
		 * cache never gets here). */
		if (returned && python_trampoline_step(state, state->pc))
			return 0;
		if (!frame_pointer_step(state))
			return stop_with(state, STOKE_STOP_UNKNOWN_CODE);
		return 0;
	}
	row = mapping->rows_count ? find_row(mapping, pc, legacy) : NULL;
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
		if (!read_user(state, &cfa, state->bp + cfa_offset))
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
	/* The caller's RBP first, where it was saved: below the return
	 * address, and a window runs up the stack from the word that filled
	 * it. */
	bp = state->bp;
	rbp_offset = row_rbp_offset(rule);
	switch (row_rbp(rule)) {
	case STOKE_RBP_UNCHANGED:
		break;
	case STOKE_RBP_AT_CFA:
		if (!read_user(state, &bp, cfa + rbp_offset))
			return stop_with(state, STOKE_STOP_READ_FAILED);
		break;
	case STOKE_RBP_AT_RBP:
		if (!read_user(state, &bp, state->bp + rbp_offset))
			return stop_with(state, STOKE_STOP_READ_FAILED);
		break;
	default:
		bp = 0;
	}
	if (!read_user(state, &return_address, cfa - 8))
		return stop_with(state, STOKE_STOP_READ_FAILED);
	state->bp = bp;
	if (return_address == 0)
		return stop_with(state, STOKE_STOP_END);
	state->sp = cfa;
	state->pc = return_address;
	return 0;
}

static long unwind_step(__u32 index, void *context)
{
	return unwind_frame(context, false);
}

/* Starts a walk in `state` from registers pc, sp and bp, its frames to go
 * after the record's `kernel_bytes` of kernel frames. */
static __always_inline void unwind_begin(struct stoke_unwind_state *state, __u64 pc, __u64 sp,
					 __u64 bp, long kernel_bytes)
{
	state->pc = pc;
	state->sp = sp;
	state->bp = bp;
	state->count = 0;
	state->first = kernel_bytes / sizeof(__u64);
	state->stop = STOKE_STOP_DEPTH;
	state->exact = 1;
	state->window.words = 0;
	/* No mapping's index (the first search sets it). */
	state->last_mapping = STOKE_MAX_MAPPINGS;
}

/* Frames one run of a legacy kernel's unwinder program walks: its
 * verifier walks every unrolled copy, each a single path but for its
 * exits. */
#define LEGACY_FRAMES_PER_RUN 5

/* Kernels without bpf_loop: LEGACY_FRAMES_PER_RUN more frames of the walk
 * unwind_begin started in `state`, of process `tgid`'s stack into
 * `record`; whether the walk goes on. */
static __always_inline bool unwind_legacy_run(struct stoke_unwind_state *state,
					      struct sample_record *record, __u32 tgid)
{
	struct unwind_walk walk = {
		.state = state,
		.record = record,
		.process = bpf_map_lookup_elem(&unwind_processes, &tgid),
	};

	if (!walk.process)
		return false;
	for (int frame = 0; frame < LEGACY_FRAMES_PER_RUN; frame++)
		if (unwind_frame(&walk, true))
			return false;
	return true;
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
	};
	struct stoke_unwind_state *state = walk.state;

	if (!state || !walk.record)
		return 0;
	unwind_begin(state, pc, sp, bp, kernel_bytes);
	bpf_loop(STOKE_MAX_FRAMES, unwind_step, &walk, 0);
	*stop = state->stop;
	return state->count * sizeof(__u64);
}
