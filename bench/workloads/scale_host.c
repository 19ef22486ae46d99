/* A synthetic busy host for the scale part of `cargo xtask bench`: many
 * processes and threads that mostly sleep and now and then burn a little
 * CPU, like the daemons and thread pools of a real server.
 *
 *   scale_host PROCESSES THREADS SECONDS [BURST_US] [PERIOD_MS]
 *
 * Forks PROCESSES children with THREADS threads each (the main thread
 * included). Every thread loops: sleep a pseudo-random 0.5 to 1.5 PERIOD_MS
 * (default 100), then burn BURST_US (default 40) of thread CPU time in
 * scale_burst(). Prints "ready" once every thread of every child runs, and
 * "processes=N threads=N" with what it started; all stop after SECONDS.
 * SIGTERM ends it early: it kills its children and waits for them, so that
 * their CPU time is counted in its own children's usage (the bench reads
 * it). Children also die with the parent (PR_SET_PDEATHSIG), so SIGKILL
 * cleans everything up too. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static volatile unsigned long sink;
static double end_time, burst_seconds, period_seconds;
static volatile sig_atomic_t terminated;

static void on_sigterm(int signal)
{
	(void)signal;
	terminated = 1;
}

__attribute__((noinline)) void burst_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 2862933555777941757UL + 3037000493UL;
	sink = acc;
}

__attribute__((noinline)) void scale_burst(void)
{
	double start = now_thread_cpu();
	do
		burst_leaf(500);
	while (now_thread_cpu() - start < burst_seconds);
}

static void *thread_main(void *arg)
{
	unsigned long random = 0x2545f4914f6cdd1dUL ^ (unsigned long)arg;
	while (now_monotonic() < end_time) {
		double jitter = 0.5 + (double)(next_random(&random) % 1000) / 1000.0;
		sleep_seconds(period_seconds * jitter);
		scale_burst();
	}
	return NULL;
}

/* A child: starts its threads, reports on ready_fd, and runs until the end. */
static int child_main(int index, int threads, int ready_fd)
{
	pthread_attr_t attr;
	pthread_t ids[threads];
	int started = 0;

	signal(SIGTERM, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1; /* the parent is already gone */
	pthread_attr_init(&attr);
	/* 2,000 threads with the default 8 MB stacks would reserve 16 GB. */
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (int i = 1; i < threads; i++)
		if (pthread_create(&ids[started], &attr, thread_main,
				   (void *)(unsigned long)(index * 1000 + i)) == 0)
			started++;
	char count = (char)(started + 1);
	if (write(ready_fd, &count, 1) != 1)
		return 1;
	close(ready_fd);
	thread_main((void *)(unsigned long)(index * 1000));
	for (int i = 0; i < started; i++)
		pthread_join(ids[i], NULL);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: scale_host PROCESSES THREADS SECONDS [BURST_US] [PERIOD_MS]\n");
		return 2;
	}
	int processes = (int)arg_number(argc, argv, 1, 1);
	int threads = (int)arg_number(argc, argv, 2, 1);
	double seconds = arg_number(argc, argv, 3, 1);
	burst_seconds = arg_number(argc, argv, 4, 40) / 1e6;
	period_seconds = arg_number(argc, argv, 5, 100) / 1e3;
	int ready[2];
	int total_threads = 0, started = 0;
	pid_t *children = calloc((size_t)processes, sizeof(*children));
	struct sigaction term = { .sa_handler = on_sigterm };

	if (threads > 120)
		threads = 120; /* the count goes back through one byte */
	if (pipe(ready) != 0) {
		perror("pipe");
		return 1;
	}
	/* No SA_RESTART: the signal must interrupt the wait below. */
	sigaction(SIGTERM, &term, NULL);
	end_time = now_monotonic() + seconds;
	for (int i = 0; i < processes && !terminated; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			close(ready[0]);
			_exit(child_main(i, threads, ready[1]));
		}
		if (pid > 0)
			children[started++] = pid;
	}
	close(ready[1]);
	for (int i = 0; i < started && !terminated; i++) {
		char count;
		if (read(ready[0], &count, 1) != 1)
			break;
		total_threads += count;
	}
	printf("processes=%d threads=%d\n", started, total_threads);
	say_ready();
	while (wait(NULL) > 0 || errno == EINTR) {
		if (terminated) {
			for (int i = 0; i < started; i++)
				kill(children[i], SIGKILL);
			while (wait(NULL) > 0 || errno == EINTR)
				;
			break;
		}
	}
	return 0;
}
