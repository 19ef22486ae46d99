/* Burns CPU in burn_cpu() for argv[1] seconds, then exits: the process that
 * ends in the middle of a recording. */
#include "common.h"

static volatile unsigned long sink;

__attribute__((noinline)) void burn_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 3202034522624059733UL + 1;
	sink = acc;
}

__attribute__((noinline)) void burn_cpu(double end)
{
	call_until(end, burn_leaf, 20000);
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 1.0);
	say_ready();
	burn_cpu(now_monotonic() + seconds);
	return 0;
}
