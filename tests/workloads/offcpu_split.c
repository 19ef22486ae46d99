/* An off-CPU workload: rounds of 10 ms on a clock grid. In each, the main
 * thread sleeps in sleep_seventy() until 7 ms into the round
 * (clock_nanosleep), then waits in wait_thirty() on a pipe that a second
 * thread writes at the round's end, 3 ms later: off the CPU, the main
 * thread's time splits 70:30 between the two functions. Absolute deadlines
 * keep the split whatever the wake-up latencies of a busy host, up to the
 * one of the pipe's reader.
 *
 * The system calls are made here (inline `syscall` on x86_64), not through
 * libc wrappers built without frame pointers, so that the user stacks under
 * the kernel frames unwind by frame pointers from the first wait on. Every
 * call that returns EINTR is counted: a profiler must never interrupt a
 * blocked call. After every round it prints "round" (the tests count them
 * to measure its pace) with eintr= and seventy_share=, the percentage of
 * the two functions' time so far that it measured in sleep_seventy().
 *
 * With `threads` as its second argument, two more threads run beside the
 * pipe's writer (`answer`): `spinner` runs in spin() all the time, and
 * `blocked` waits in block() on a pipe nobody writes: every thread of the
 * process has the same wall-clock time, spent differently. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "common.h"

#define ROUND_NS 10000000L

static int pipe_fds[2], never_fds[2];
static volatile long eintr;
static struct timespec start;

__attribute__((noinline)) static long call4(long number, long a, long b, long c, long d)
{
	volatile long frame = 0;
	register long r10 __asm__("r10") = d;
	long ret;

	(void)frame;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"(number), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	if (ret == -EINTR)
		eintr++;
	return ret;
}

/* Sleeps until `offset_ns` past the start of round `round`. */
static void sleep_until(unsigned long round, long offset_ns)
{
	long ns = start.tv_nsec + (long)(round % 100) * ROUND_NS + offset_ns;
	struct timespec when = { start.tv_sec + (time_t)(round / 100) + ns / 1000000000L,
				 ns % 1000000000L };
	call4(SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, (long)&when, 0);
}

static void transfer(long number, int fd)
{
	char byte = 1;
	if (call4(number, fd, (long)&byte, 1, 0) != 1) {
		fprintf(stderr, "offcpu_split: pipe %s failed\n",
			number == SYS_read ? "read" : "write");
		exit(1);
	}
}

__attribute__((noinline)) void sleep_seventy(unsigned long round)
{
	sleep_until(round, 7 * ROUND_NS / 10);
}

__attribute__((noinline)) void wait_thirty(void)
{
	transfer(SYS_read, pipe_fds[0]);
}

__attribute__((noinline)) void spin(unsigned long *state)
{
	for (int i = 0; i < 100000; i++)
		next_random(state);
}

static void *spinner(void *unused)
{
	unsigned long state = 1;

	(void)unused;
	pthread_setname_np(pthread_self(), "spinner");
	/* Not at the process's nice -10: the host keeps a CPU for others. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 0);
	for (;;)
		spin(&state);
	return NULL;
}

__attribute__((noinline)) void block(void)
{
	char byte;

	call4(SYS_read, never_fds[0], (long)&byte, 1, 0);
}

static void *blocked(void *unused)
{
	(void)unused;
	pthread_setname_np(pthread_self(), "blocked");
	for (;;)
		block();
	return NULL;
}

/* The second thread: writes the pipe at the end of every round. */
static void *answer(void *unused)
{
	(void)unused;
	pthread_setname_np(pthread_self(), "answer");
	for (unsigned long round = 0;; round++) {
		sleep_until(round, ROUND_NS);
		transfer(SYS_write, pipe_fds[1]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 5);
	pthread_t thread, spinning, blocking;

	/* Its pace is what the tests compare: at nice -10 (as root, and
	 * inherited by its thread) other load on a shared host moves it less. */
	if (setpriority(PRIO_PROCESS, 0, -10) != 0)
		perror("setpriority");
	clock_gettime(CLOCK_MONOTONIC, &start);
	if (pipe(pipe_fds) || pipe(never_fds) || pthread_create(&thread, NULL, answer, NULL)) {
		perror("offcpu_split");
		return 1;
	}
	if (argc > 2 && strcmp(argv[2], "threads") == 0 &&
	    (pthread_create(&spinning, NULL, spinner, NULL) ||
	     pthread_create(&blocking, NULL, blocked, NULL))) {
		perror("offcpu_split");
		return 1;
	}
	say_ready();
	double end = now_monotonic() + seconds, seventy = 0, thirty = 0;
	for (unsigned long round = 0; now_monotonic() < end; round++) {
		double before = now_monotonic();
		sleep_seventy(round);
		double between = now_monotonic();
		wait_thirty();
		double after = now_monotonic();
		seventy += between - before;
		thirty += after - between;
		printf("round eintr=%ld seventy_share=%.2f\n", eintr,
		       100 * seventy / (seventy + thirty));
		fflush(stdout);
	}
	return 0;
}
