/* The library many_libraries loads by the thousand (copies of one build,
 * each given its own build ID by the test): library_hop() burns CPU and
 * returns. Built without frame pointers, so that only its unwind table
 * walks out of it. */
static volatile unsigned long sink;

__attribute__((noinline)) void library_hop(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + 1;
	sink = acc;
}
