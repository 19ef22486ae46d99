/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Waits still going on when a recording ends, or an interval of `stoke
 * continuous` is cut. sched_switch sees a wait only when it ends: a thread
 * blocked past the end of the recording (a deadlock, a hung read, an idle
 * worker), and above all one blocked since before it began, would not be
 * counted at all, or, in `stoke continuous`, not before the interval it
 * ends in. So at each end, userspace runs this task iterator: every
 * profiled thread asleep now (off the run queue, interruptible or not)
 * sends one off-CPU record, weighed from when it blocked (or from the
 * recording's start, or the last cut) until now, with its kernel stack
 * and, for its user side, only the address it entered the kernel at: its
 * user stack cannot be unwound from outside the thread, and it is not to
 * be woken or signalled. The time sent is then taken off the wait (it is
 * counted from now on), so that the record of its end, or the next cut's,
 * counts only the rest. Included after offcpu.bpf.h.
 *
 * Each record sent also writes its weight to the iterator's output, so
 * that a read() of N bytes returns after N/8 records and userspace drains
 * the ring between reads: a host with many sleeping threads cannot fill it.
 */

#define OFFCPU_TASK_INTERRUPTIBLE 0x1
#define OFFCPU_TASK_UNINTERRUPTIBLE 0x2

SEC("iter/task")
int offcpu_waiting(struct stoke_iter_task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct offcpu_task *state;
	struct sample_record *record;
	struct stoke_regs *user;
	/* In offcpu_clock's time, as the waits' starts: this CPU's run queue
	 * clock, updated at its last schedule or tick (a few ms at most on a
	 * busy CPU: the error of a cut, never counted twice). */
	__u64 now = offcpu_clock(bpf_get_current_task_btf());
	__u64 start = offcpu_sampling_start(), since, off, user_ip;
	__u32 slot = SLOT_OFFCPU, frames;
	long user_bytes = 0;

	if (!start || !task || !offcpu_profiled(task))
		return 0;
	since = start + (now - bpf_ktime_get_ns());
	if (!(BPF_CORE_READ(task, __state) &
	      (OFFCPU_TASK_INTERRUPTIBLE | OFFCPU_TASK_UNINTERRUPTIBLE)) ||
	    BPF_CORE_READ(task, on_rq))
		return 0;
	/* A thread that blocked during the recording has the time it did (or
	 * that of the last cut); one without storage blocked before it. */
	state = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);
	if (state) {
		if (!state->off_since)
			return 0;
		if (state->off_since > since)
			since = state->off_since;
	} else {
		state = bpf_task_storage_get(&offcpu_tasks, task, 0,
					     BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!state)
			return 0;
		state->off_since = since;
	}
	if (now <= since)
		return 0;
	if (state->pending_ns + now - since < offcpu_min_ns)
		return 0;
	/* Counted up to now: the rest of the wait from now on. */
	off = offcpu_take_pending(state) + now - since;
	state->off_since = now;
	record = bpf_map_lookup_elem(&scratch, &slot);
	if (!record)
		return 0;
	frames = offcpu_kernel_stack(task, record->frames);
	if (frames > OFFCPU_KERNEL_FRAMES - 1)
		frames = OFFCPU_KERNEL_FRAMES - 1;
	record->header.flags = STOKE_SAMPLE_IN_KERNEL;
	if (!(task->flags & PF_KTHREAD)) {
		user = (struct stoke_regs *)bpf_task_pt_regs(task);
		user_ip = BPF_PROBE_READ(user, ip);
		if (user_ip) {
			record->frames[frames] = user_ip;
			user_bytes = sizeof(__u64);
		}
	}
	offcpu_output(record, task, off, frames, user_bytes, 0);
	bpf_seq_write(seq, &off, sizeof(off));
	return 0;
}
