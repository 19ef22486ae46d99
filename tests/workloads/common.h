/* Shared helpers for Stoke's workloads: the end-to-end tests' (beside this
 * file) and the bench's (bench/workloads, built with this directory on
 * their include path).
 *
 * Every test workload takes its run time in seconds as argv[1] and stops on
 * its own, prints "ready" on stdout (and flushes) once it has entered its
 * hot loop, and is built with frame pointers by the test harness. The bench
 * workloads say "ready" once their measured part has begun, and print
 * `key=value` lines with what they measured themselves. */
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

/* argv[index] as a positive number, or dflt when it is missing. Exits with
 * a message when it is present but not a positive number: a typo in the
 * harness must not silently become the default. */
static inline double arg_number(int argc, char **argv, int index, double dflt)
{
	if (argc <= index)
		return dflt;
	char *end;
	double value = strtod(argv[index], &end);
	if (*end != '\0' || !(value > 0)) {
		fprintf(stderr, "%s: argument %d: '%s' is not a positive number\n", argv[0], index,
			argv[index]);
		exit(2);
	}
	return value;
}

static inline void say_ready(void)
{
	printf("ready\n");
	fflush(stdout);
}

/* Sleeps for a (fractional) number of seconds, resuming after signals. */
static inline void sleep_seconds(double seconds)
{
	struct timespec ts = { (time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9) };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* A xorshift step: cheap pseudo-random numbers, the same on every run. */
static inline unsigned long next_random(unsigned long *state)
{
	unsigned long x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *state = x;
}

#endif
