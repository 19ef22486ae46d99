/* The short-lived process of the scale part of `cargo xtask bench`: burns
 * argv[1] milliseconds (default 3) of CPU in short_lived_work(), then exits.
 * Thousands of these are exec'd while recording, to see how many a profiler
 * still names after they are gone. */
#include "common.h"

static volatile unsigned long sink;

__attribute__((noinline)) void short_lived_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + 1442695040888963407UL;
	sink = acc;
}

__attribute__((noinline)) void short_lived_work(double cpu_seconds)
{
	double start = now_thread_cpu();
	do
		short_lived_leaf(2000);
	while (now_thread_cpu() - start < cpu_seconds);
}

int main(int argc, char **argv)
{
	short_lived_work(arg_number(argc, argv, 1, 3) / 1e3);
	return 0;
}
