/* Two worker threads ("nofp_a", "nofp_b") burning CPU for argv[1] seconds
 * under call chains of their own, for a build without frame pointers.
 *
 * The test builds it with -O2 -fomit-frame-pointer, so only unwind tables
 * lead from a sample in a worker back to the thread's start in libc
 * (start_thread, clone3). Each worker runs
 * thread_a_entry() -> burn_a() -> mix() (thread_b_entry() -> burn_b() ->
 * mix() for the other); the functions are noipa (not inlined, not cloned
 * under another name) and do work after their calls (no tail call drops a
 * frame). The main thread only waits in pthread_join. Prints "ready" once
 * both threads have named themselves. */
#define _GNU_SOURCE
#include <pthread.h>
#include "common.h"

static volatile unsigned long sink;
static double end_time;
static pthread_barrier_t named;

/* Leaf; the volatile accumulator keeps the loop (see fp_split.c's spin). */
__attribute__((noipa)) void mix(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
	sink = acc;
}

__attribute__((noipa)) unsigned long burn_a(void)
{
	volatile unsigned long rounds[3] = { 0 };
	while (now_monotonic() < end_time) {
		mix(20000);
		rounds[0]++;
	}
	return rounds[0];
}

/* A larger frame than burn_a's: each worker's CFA offsets differ. */
__attribute__((noipa)) unsigned long burn_b(void)
{
	volatile unsigned long rounds[40] = { 0 };
	while (now_monotonic() < end_time) {
		mix(20000);
		rounds[39]++;
	}
	return rounds[39];
}

static void name_and_wait(const char *name)
{
	pthread_setname_np(pthread_self(), name);
	pthread_barrier_wait(&named);
}

__attribute__((noipa)) void *thread_a_entry(void *arg)
{
	name_and_wait("nofp_a");
	sink += burn_a();
	return arg;
}

__attribute__((noipa)) void *thread_b_entry(void *arg)
{
	name_and_wait("nofp_b");
	sink += burn_b();
	return arg;
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	end_time = now_monotonic() + run_seconds(argc, argv, 10.0);
	pthread_barrier_init(&named, NULL, 3);
	if (pthread_create(&a, NULL, thread_a_entry, NULL) ||
	    pthread_create(&b, NULL, thread_b_entry, NULL)) {
		perror("pthread_create");
		return 1;
	}
	pthread_barrier_wait(&named);
	say_ready();
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	return 0;
}
