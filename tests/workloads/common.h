/* Shared helpers for Stoke's end-to-end test workloads.
 *
 * Every workload takes its run time in seconds as argv[1] and stops on its
 * own, prints "ready" on stdout (and flushes) once it has entered its hot
 * loop, and is built with frame pointers by the test harness. */
#ifndef STOKE_WORKLOAD_COMMON_H
#define STOKE_WORKLOAD_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now_monotonic(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline double now_thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline double run_seconds(int argc, char **argv, double dflt)
{
	if (argc > 1) {
		double s = atof(argv[1]);
		if (s > 0)
			return s;
	}
	return dflt;
}

/* Calls leaf(chunk) over and over until the monotonic clock reaches end.
 * Always inlined: the (noinline) function using it keeps its own frame and
 * calls leaf() from it directly, so its stacks stay caller;leaf. */
static inline __attribute__((always_inline)) void
call_until(double end, void (*leaf)(unsigned long), unsigned long chunk)
{
	while (now_monotonic() < end)
		leaf(chunk);
}

static inline void say_ready(void)
{
	printf("ready\n");
	fflush(stdout);
}

#endif
