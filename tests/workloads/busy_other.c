/* A second, different CPU burner: main() -> other_work() -> other_spin()
 * until argv[1] seconds have passed. */
#include "common.h"

static volatile unsigned long sink;

__attribute__((noinline)) void other_spin(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = (acc ^ i) * 2862933555777941757UL + 3037000493UL;
	sink = acc;
}

__attribute__((noinline)) void other_work(double end)
{
	call_until(end, other_spin, 20000);
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 10.0);
	say_ready();
	other_work(now_monotonic() + seconds);
	return 0;
}
