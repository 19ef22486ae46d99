/* Starts 3,000 threads (argv[2]), each of which, until argv[1] seconds
 * have passed, burns half a millisecond of its own CPU time in
 * light_spin() and sleeps 3 s: half a core in all, spread so thin that no
 * thread runs 2 ms in 10 s. It prints "ready" once every thread runs, and
 * takes no SIGTRAP: one would end it, which the harness sees in its exit
 * status. */
#include <pthread.h>
#include "common.h"

#define BURST_SECONDS 0.0005
#define SLEEP_SECONDS 3.0

static volatile unsigned long sink;
static double end;

__attribute__((noinline)) void light_spin(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
	sink = acc;
}

__attribute__((noinline)) void light_work(void)
{
	double until = now_thread_cpu() + BURST_SECONDS;
	while (now_thread_cpu() < until)
		light_spin(20000);
}

static void *light_thread(void *arg)
{
	/* Staggered starts: the bursts spread evenly over the sleep. */
	sleep_seconds(SLEEP_SECONDS * (double)(unsigned long)arg / 1000003.0);
	while (now_monotonic() < end) {
		light_work();
		sleep_seconds(SLEEP_SECONDS);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned long count = (unsigned long)arg_number(argc, argv, 2, 3000);
	pthread_t *threads = calloc(count, sizeof(*threads));
	pthread_attr_t attr;

	end = now_monotonic() + run_seconds(argc, argv, 10.0);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (unsigned long i = 0; i < count; i++) {
		/* A fraction of the sleep, in millionths, as the argument. */
		void *phase = (void *)(i * 1000003UL / count);
		if (pthread_create(&threads[i], &attr, light_thread, phase) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	say_ready();
	for (unsigned long i = 0; i < count; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
