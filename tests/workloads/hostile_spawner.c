/* Many short-lived fake JVMs: for argv[1] seconds, starts argv[2] children
 * spread evenly over the time; each maps argv[3] (a file named libjvm.so),
 * burns about 10 ms of CPU and exits 0. Every other child handles SIGQUIT,
 * as a JVM does, so that stoke goes as far into the attach protocol as it
 * will; the others keep its default action, and would die of it.
 *
 * Prints "ready" at the start, and at the end "children N failed F" (F:
 * children that did not exit 0, killed by a signal included), exits 0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static void ignore(int signal)
{
	(void)signal;
}

static void child(const char *libjvm, int handles_quit)
{
	int lib = open(libjvm, O_RDONLY | O_CLOEXEC);
	if (lib < 0 || mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, lib, 0) == MAP_FAILED)
		_exit(3);
	if (handles_quit) {
		struct sigaction action;
		memset(&action, 0, sizeof action);
		action.sa_handler = ignore;
		sigaction(SIGQUIT, &action, NULL);
	}
	volatile unsigned long sink = 0;
	double end = now_monotonic() + 0.01;
	while (now_monotonic() < end)
		for (unsigned long i = 0; i < 10000; i++)
			sink = sink * 2862933555777941757UL + i;
	_exit(0);
}

static int reap(int options, int *failed)
{
	int status, reaped = 0;
	while (waitpid(-1, &status, options) > 0) {
		reaped++;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			(*failed)++;
	}
	return reaped;
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 5.0);
	if (argc < 4) {
		fprintf(stderr, "usage: hostile_spawner SECONDS COUNT PATH/libjvm.so\n");
		return 2;
	}
	int count = atoi(argv[2]), failed = 0, started = 0;
	double start = now_monotonic();
	say_ready();
	for (int i = 0; i < count; i++) {
		double when = start + seconds * i / count;
		while (now_monotonic() < when) {
			reap(WNOHANG, &failed);
			usleep(500);
		}
		pid_t pid = fork();
		if (pid == 0)
			child(argv[3], i % 2);
		if (pid > 0)
			started++;
	}
	reap(0, &failed);
	printf("children %d failed %d\n", started, failed);
	return 0;
}
