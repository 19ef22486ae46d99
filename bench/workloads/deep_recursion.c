/* Threads that spin at the bottom of a deep recursion: every sample taken
 * while it runs has a user stack DEPTH frames deeper than usual, which is
 * what the BPF-cost part of `cargo xtask bench` needs to see how the
 * sampler's run time grows with stack depth.
 *
 *   deep_recursion DEPTH SECONDS [THREADS]
 *
 * THREADS (default 2, one per CPU) each call descend() DEPTH times, then
 * spin in spin_leaf() until SECONDS have passed since start. Prints "ready"
 * once every thread has reached the bottom. */
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>

#include "common.h"

static volatile unsigned long sink;
static pthread_barrier_t bottom;
static double end_time;

__attribute__((noinline)) void spin_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* a stack frame, so a frame pointer */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + i;
	sink = acc;
}

__attribute__((noinline)) void spin_at_bottom(void)
{
	pthread_barrier_wait(&bottom);
	while (now_monotonic() < end_time)
		spin_leaf(20000);
}

/* One frame per level. The volatile local and the use of the result after
 * the call keep the compiler from turning the recursion into a loop. */
__attribute__((noinline)) unsigned long descend(unsigned long depth)
{
	volatile unsigned long level = depth;
	if (depth == 0) {
		spin_at_bottom();
		return 0;
	}
	return descend(depth - 1) + level;
}

static void *thread_main(void *arg)
{
	sink += descend((unsigned long)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: deep_recursion DEPTH SECONDS [THREADS]\n");
		return 2;
	}
	unsigned long depth = (unsigned long)arg_number(argc, argv, 1, 1);
	double seconds = arg_number(argc, argv, 2, 1);
	int threads = (int)arg_number(argc, argv, 3, 2);
	pthread_t ids[64];

	if (threads > 64)
		threads = 64;
	end_time = now_monotonic() + seconds;
	pthread_barrier_init(&bottom, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++)
		pthread_create(&ids[i], NULL, thread_main, (void *)depth);
	pthread_barrier_wait(&bottom);
	say_ready();
	for (int i = 0; i < threads; i++)
		pthread_join(ids[i], NULL);
	return 0;
}
