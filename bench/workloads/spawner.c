/* Execs a short-lived program at a steady rate: the process churn of the
 * scale part of `cargo xtask bench`.
 *
 *   spawner PROGRAM RATE SECONDS [ARG]
 *
 * Starts PROGRAM (with ARG, if given) RATE times a second on a fixed
 * schedule (catching up if it falls behind) for SECONDS, reaping as it goes.
 * Prints "ready" when it starts and, at the end, "spawned=N seconds=S"
 * (N children started and waited for, in S seconds). */
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "common.h"

extern char **environ;

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: spawner PROGRAM RATE SECONDS [ARG]\n");
		return 2;
	}
	char *program = argv[1];
	double rate = arg_number(argc, argv, 2, 1);
	double seconds = arg_number(argc, argv, 3, 1);
	char *child_argv[] = { program, argc > 4 ? argv[4] : NULL, NULL };
	unsigned long spawned = 0, failed = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	say_ready();
	double start = now_monotonic(), end = start + seconds;
	for (;;) {
		double now = now_monotonic();
		if (now >= end)
			break;
		double due = start + (double)spawned / rate;
		if (due > now)
			sleep_seconds(due - now);
		pid_t pid;
		if (posix_spawn(&pid, program, NULL, NULL, child_argv, environ) == 0)
			spawned++;
		else if (++failed > 100)
			break;
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
	}
	while (wait(NULL) > 0)
		;
	printf("spawned=%lu seconds=%.3f failed=%lu\n", spawned, now_monotonic() - start, failed);
	return failed > 100;
}
