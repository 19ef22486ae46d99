/* Two named threads ("worker_a", "worker_b") burning CPU in thread_a_work()
 * and thread_b_work() for argv[1] seconds. Prints "ready" once both threads
 * have named themselves. */
#define _GNU_SOURCE
#include <pthread.h>
#include "common.h"

static volatile unsigned long sink;
static double end_time;
static pthread_barrier_t named;

__attribute__((noinline)) void worker_spin(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
	sink = acc;
}

/* The body of both threads: names the thread, waits until both threads are
 * named, then burns CPU in worker_spin() until end_time. Always inlined, so
 * thread_a_work() and thread_b_work() each call worker_spin() from their
 * own frame. */
static inline __attribute__((always_inline)) void work_as(const char *name)
{
	pthread_setname_np(pthread_self(), name);
	pthread_barrier_wait(&named);
	call_until(end_time, worker_spin, 20000);
}

__attribute__((noinline)) void *thread_a_work(void *arg)
{
	(void)arg;
	work_as("worker_a");
	return NULL;
}

__attribute__((noinline)) void *thread_b_work(void *arg)
{
	(void)arg;
	work_as("worker_b");
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	end_time = now_monotonic() + run_seconds(argc, argv, 10.0);
	pthread_barrier_init(&named, NULL, 3);
	if (pthread_create(&a, NULL, thread_a_work, NULL) ||
	    pthread_create(&b, NULL, thread_b_work, NULL)) {
		perror("pthread_create");
		return 1;
	}
	pthread_barrier_wait(&named);
	say_ready();
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	return 0;
}
