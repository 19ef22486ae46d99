/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types whose layout the kernel's ABI fixes, declared here so that reading
 * them needs no CO-RE relocation: for each type a relocation names, the
 * loader (aya) scans every type of the kernel's BTF by name, ~1.7 ms of
 * stoke's start-up apiece. Kernel-internal types keep their relocations.
 */
#ifndef STOKE_ABI_LAYOUTS_BPF_H
#define STOKE_ABI_LAYOUTS_BPF_H

/* x86-64's registers as a thread entering the kernel saved them, in
 * ptrace's layout (arch/x86/include/uapi/asm/ptrace.h), which is also a
 * perf_event program's context (bpf_user_pt_regs_t). */
struct stoke_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

/* A perf_event program's context (uapi/linux/bpf_perf_event.h). */
struct stoke_perf_event_data {
	struct stoke_regs regs;
	__u64 sample_period;
	__u64 addr;
};

/* A task iterator's context and its meta, pointers each 8-byte aligned
 * (__bpf_md_ptr), unchanged since iterators came (Linux 5.8). */
struct stoke_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct stoke_iter_task {
	struct stoke_iter_meta *meta;
	struct task_struct *task;
};

#endif
