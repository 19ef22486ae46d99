/* Starts threads one after another for argv[1] seconds, each burning CPU in
 * churn_work() for about 2 ms before it ends, and prints "threads=N" at
 * the end: a process nearly all of whose CPU time is spent by threads that
 * did not exist when a recording of it began. It takes no SIGTRAP: one
 * would end it, which the harness sees in its exit status. */
#include <pthread.h>
#include "common.h"

static volatile unsigned long sink;

__attribute__((noinline)) void churn_spin(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
	sink = acc;
}

__attribute__((noinline)) void *churn_work(void *arg)
{
	(void)arg;
	call_until(now_monotonic() + 0.002, churn_spin, 2000);
	return NULL;
}

int main(int argc, char **argv)
{
	double end = now_monotonic() + run_seconds(argc, argv, 5.0);
	unsigned long threads = 0;
	say_ready();
	while (now_monotonic() < end) {
		pthread_t thread;
		if (pthread_create(&thread, NULL, churn_work, NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
		pthread_join(thread, NULL);
		threads++;
	}
	printf("threads=%lu\n", threads);
	return 0;
}
