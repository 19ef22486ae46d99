/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Calls of kernel functions (kfuncs). aya does not resolve `__ksym`
 * externs, so each call is written out as its instruction (BPF_CALL with
 * src_reg BPF_PSEUDO_KFUNC_CALL), with a marker from stoke_abi.h in place
 * of the function's BTF id: stoke puts the running kernel's id there before
 * loading (profiler-user/src/sample/kfuncs.rs), and loads no program whose
 * kfunc the kernel lacks. The arguments go in R1-R5, as for any call, which
 * clobbers them.
 */

#ifndef EBUSY
#define EBUSY 16
#endif

/* bpf_task_work_schedule_resume_impl (Linux 6.18): runs `callback` in
 * `task`'s own context when it next returns to user mode; `work` is a
 * struct bpf_task_work in a value of `map`. 0, or -EBUSY if that work is
 * already scheduled. */
static __always_inline long task_work_schedule_resume(struct task_struct *task,
						      struct bpf_task_work *work, void *map,
						      void *callback)
{
	register long r1 asm("r1") = (long)task;
	register long r2 asm("r2") = (long)work;
	register long r3 asm("r3") = (long)map;
	register long r4 asm("r4") = (long)callback;
	/* aux__prog: the verifier fills it in. */
	register long r5 asm("r5") = 0;
	register long r0 asm("r0");

	asm volatile(".byte 0x85, 0x20, 0x00, 0x00\n\t.long %[id]"
		     : "=r"(r0), "+r"(r1), "+r"(r2), "+r"(r3), "+r"(r4), "+r"(r5)
		     : [id] "i"(STOKE_KFUNC_TASK_WORK_SCHEDULE_RESUME)
		     : "memory");
	return r0;
}
