/* The library dlopen_late loads once it has run a while: late_work()
 * calls late_leaf() until the time it is given. Built without frame
 * pointers, so that only its unwind table walks out of it. */
#include "common.h"

static volatile unsigned long sink;

__attribute__((noinline)) void late_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + 1;
	sink = acc;
}

__attribute__((noinline)) void late_work(double end)
{
	call_until(end, late_leaf, 20000);
	sink++;
}
