/* Shared helpers for the bench workloads (the C files beside this one).
 *
 * The workloads are built by `cargo xtask bench` with frame pointers, and
 * speak to it on stdout: "ready" once their measured part has begun, and
 * `key=value` lines with what they measured themselves. */
#ifndef STOKE_BENCH_H
#define STOKE_BENCH_H

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
