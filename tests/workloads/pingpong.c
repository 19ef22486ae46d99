/* A context-switch storm: two threads pass one byte back and forth through
 * two pipes as fast as they can for argv[1] seconds, each blocking in read
 * until the other writes: two context switches per round trip, or more.
 * Prints "ready" once the threads run, then "tick" every 256 round trips
 * (the tests count them to measure its pace: often enough that a window of
 * seconds holds hundreds, even on a loaded host) with eintr=, the calls a
 * signal interrupted so far (which must stay 0). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>
#include "common.h"

static int ping[2], pong[2];
static volatile int stop;
static volatile long eintr;

static int pass(int from, int to)
{
	char byte = 1;
	for (;;) {
		ssize_t n = read(from, &byte, 1);
		if (n == 1)
			break;
		if (n < 0 && errno == EINTR) {
			eintr++;
			continue;
		}
		return -1;
	}
	return write(to, &byte, 1) == 1 ? 0 : -1;
}

static void *echo(void *unused)
{
	(void)unused;
	while (!stop && pass(ping[0], pong[1]) == 0)
		;
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 5);
	pthread_t thread;
	unsigned long rounds = 0;
	char byte = 1;

	/* Its pace is what the tests compare: at nice -10 (as root, and
	 * inherited by its thread) other load on a shared host moves it less. */
	if (setpriority(PRIO_PROCESS, 0, -10) != 0)
		perror("setpriority");
	if (pipe(ping) || pipe(pong) || pthread_create(&thread, NULL, echo, NULL)) {
		perror("pingpong");
		return 1;
	}
	say_ready();
	double end = now_monotonic() + seconds;
	if (write(ping[1], &byte, 1) != 1)
		return 1;
	while (pass(pong[0], ping[1]) == 0) {
		if (++rounds % 256 == 0) {
			printf("tick eintr=%ld\n", eintr);
			fflush(stdout);
			if (now_monotonic() >= end)
				break;
		}
	}
	stop = 1;
	_exit(0);
}
