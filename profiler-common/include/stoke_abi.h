/* The binary interface between Stoke's BPF sampler and its userspace.
 * Twin of profiler-common/src/lib.rs; profiler-common/tests/layout.rs checks
 * that both agree. The includer provides __u16, __u32 and __u64. */
#ifndef STOKE_ABI_H
#define STOKE_ABI_H

#define STOKE_MAX_FRAMES 127
#define STOKE_COMM_LEN 16

enum stoke_record_kind {
	STOKE_RECORD_SAMPLE = 1,
	STOKE_RECORD_EXEC = 2,
	STOKE_RECORD_EXIT = 3,
};

#define STOKE_SAMPLE_IN_KERNEL (1u << 0)
#define STOKE_SAMPLE_SIGNALLED (1u << 1)

struct stoke_record_header {
	__u32 kind;
	__u32 cpu;
	__u32 tgid;
	__u32 tid;
	__u64 time_ns;
	char comm[STOKE_COMM_LEN];
	__u16 kernel_frames;
	__u16 user_frames;
	__u32 flags;
};

enum stoke_counter {
	STOKE_COUNTER_SENT = 0,
	STOKE_COUNTER_LOST_RING_FULL = 1,
	STOKE_COUNTER_KERNEL_STACK_FAILED = 2,
	STOKE_COUNTER_USER_STACK_FAILED = 3,
	STOKE_COUNTER_IDLE_SKIPPED = 4,
	STOKE_COUNTER_LOST_LIFECYCLE = 5,
	STOKE_COUNTER_SIGNAL_FAILED = 6,
	STOKE_COUNTER_COUNT = 7,
};

/* Compiled unwind tables (profiler-user/src/unwind): one row says, from
 * its pc on, how to find the caller's frame. */
enum stoke_row_kind {
	STOKE_ROW_NO_CFI = 0,
	STOKE_ROW_CFA_RSP = 1,
	STOKE_ROW_CFA_RBP = 2,
	STOKE_ROW_CFA_RBP_DEREF = 3,
	STOKE_ROW_PLT = 4,
	STOKE_ROW_END = 5,
	STOKE_ROW_UNSUPPORTED = 6,
	STOKE_ROW_SIGNAL = 7,
};

/* At a signal trampoline RSP points at the kernel's struct ucontext; its
 * uc_mcontext (struct sigcontext) holds the interrupted registers. */
#define STOKE_SIGCONTEXT_OFFSET 40
#define STOKE_SIGCONTEXT_RBP 80
#define STOKE_SIGCONTEXT_RSP 120
#define STOKE_SIGCONTEXT_RIP 128

enum stoke_rbp_rule {
	STOKE_RBP_UNCHANGED = 0,
	STOKE_RBP_AT_CFA = 1,
	STOKE_RBP_AT_RBP = 2,
	STOKE_RBP_UNSUPPORTED = 3,
};

struct stoke_unwind_row {
	__u32 pc;          /* offset from the mapping's row base */
	__s32 cfa_offset;
	__s16 rbp_offset;
	__u8 kind;         /* enum stoke_row_kind */
	__u8 rbp;          /* enum stoke_rbp_rule */
};

#define STOKE_MAX_MAPPINGS 256

/* One executable mapping of a process, with its file's rows. */
struct stoke_mapping {
	__u64 start;
	__u64 end;
	__u64 row_base;    /* a row's pc is (address - row_base) */
	__u32 rows_start;  /* index of the file's first row in unwind_rows */
	__u32 rows_count;  /* 0: no table, walk frame pointers */
};

/* A process's executable mappings, sorted by start. */
struct stoke_process_mappings {
	__u32 count;
	__u32 _pad;
	struct stoke_mapping mappings[STOKE_MAX_MAPPINGS];
};

/* Why the user stack ends: bits STOKE_STOP_SHIFT.. of the header's flags. */
enum stoke_stop {
	STOKE_STOP_FRAME_POINTERS = 0, /* no table for the process: bpf_get_stack */
	STOKE_STOP_END = 1,            /* reached the outermost frame */
	STOKE_STOP_NO_CFI = 2,
	STOKE_STOP_UNSUPPORTED = 3,
	STOKE_STOP_READ_FAILED = 4,
	STOKE_STOP_DEPTH = 5,
	STOKE_STOP_UNKNOWN_CODE = 6,   /* outside any file: JIT code, or lost */
	STOKE_STOP_BAD_FRAME = 7,      /* the frame-pointer fallback went wrong */
};

#define STOKE_STOP_SHIFT 8
#define STOKE_STOP_MASK 0xf

#endif
