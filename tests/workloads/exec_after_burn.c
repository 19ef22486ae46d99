/* Burns CPU in burn_before_exec() for argv[1] seconds, then exec's argv[2]
 * with the arguments that follow: a process whose address space is
 * replaced in the middle of a recording, under the same pid. With
 * `--idle` first, sleeps instead of burning: a launcher that takes no
 * sample before its exec. */
#include <string.h>
#include <unistd.h>
#include "common.h"

static volatile unsigned long sink;

__attribute__((noinline)) void burn_before_exec_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 3202034522624059733UL + 1;
	sink = acc;
}

__attribute__((noinline)) void burn_before_exec(double end)
{
	call_until(end, burn_before_exec_leaf, 20000);
}

int main(int argc, char **argv)
{
	int idle = argc > 1 && strcmp(argv[1], "--idle") == 0;
	if (idle) {
		argc--;
		argv++;
	}
	double seconds = run_seconds(argc, argv, 1.0);
	if (argc < 3) {
		fprintf(stderr, "usage: exec_after_burn [--idle] SECONDS PROGRAM [ARG...]\n");
		return 2;
	}
	say_ready();
	if (idle)
		sleep_seconds(seconds);
	else
		burn_before_exec(now_monotonic() + seconds);
	execv(argv[2], argv + 2);
	perror("execv");
	return 1;
}
