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

#endif
