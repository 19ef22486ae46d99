/* A context-switch storm of fixed size, timed by itself: the workload of the
 * off-CPU part of `cargo xtask bench`.
 *
 *   switch_storm ROUND_TRIPS
 *
 * Two threads pass one byte back and forth through two pipes, each blocking
 * in read until the other writes, for ROUND_TRIPS round trips; then it
 * prints "elapsed_s=S switches=N": its elapsed time, and the context
 * switches of its threads (getrusage, voluntary and not), which is what a
 * sched_switch hook runs for. Each wait lasts microseconds, so a profiler's
 * cost per switch shows directly as a longer elapsed time.
 *
 * Both threads run on the last CPU: each switch goes straight from one to
 * the other, with no wake-up across CPUs, whose timing swings its pace by
 * a third from run to run; a profiler's own work runs on the other CPUs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"

static int ping[2], pong[2];
static unsigned long round_trips;

static int pass(int from, int to)
{
	char byte;
	return read(from, &byte, 1) == 1 && write(to, &byte, 1) == 1 ? 0 : -1;
}

static void *echo(void *unused)
{
	(void)unused;
	for (unsigned long i = 0; i < round_trips; i++)
		if (pass(ping[0], pong[1]) != 0)
			break;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t thread;
	struct rusage usage;
	char byte = 1;

	round_trips = (unsigned long)arg_number(argc, argv, 1, 100000);
	cpu_set_t cpus;
	CPU_ZERO(&cpus);
	CPU_SET(sysconf(_SC_NPROCESSORS_ONLN) - 1, &cpus);
	if (sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
		perror("switch_storm: sched_setaffinity");
		return 1;
	}
	if (pipe(ping) || pipe(pong) || pthread_create(&thread, NULL, echo, NULL)) {
		perror("switch_storm");
		return 1;
	}
	double start = now_monotonic();
	for (unsigned long i = 0; i < round_trips; i++) {
		if (write(ping[1], &byte, 1) != 1 || read(pong[0], &byte, 1) != 1) {
			perror("switch_storm");
			return 1;
		}
	}
	double elapsed = now_monotonic() - start;
	pthread_join(thread, NULL);
	getrusage(RUSAGE_SELF, &usage);
	printf("elapsed_s=%.6f switches=%ld\n", elapsed,
	       usage.ru_nvcsw + usage.ru_nivcsw);
	return 0;
}
