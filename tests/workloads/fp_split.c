/* Two non-leaf hot functions at a 70:30 split of CPU time.
 *
 * main() loops until argv[1] seconds have passed. Each round it picks a
 * pseudo-random round length between 4 and 16 ms of thread CPU time (so the
 * round period never lines up with a sampling period), and spends 70% of it
 * in hot_seventy() and 30% in hot_thirty(). Both call the noinline leaf
 * spin() in short chunks and check the thread CPU clock between chunks.
 * At exit it prints the split it measured on stderr. */
#include "common.h"

static volatile unsigned long sink;

#define CHUNK 50000UL

/* The volatile local accumulator keeps the loop from being optimized away
 * and gives spin() a stack frame: GCC 12 sets up no frame pointer in a leaf
 * function that uses no stack, even with -mno-omit-leaf-frame-pointer. */
__attribute__((noinline)) void spin(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + i;
	sink = acc;
}

/* The body of both hot functions: calls spin() in CHUNKs until cpu_seconds
 * of thread CPU time have passed, and returns the CPU time it took. Always
 * inlined, so hot_seventy() and hot_thirty() each call spin() from their
 * own frame. */
static inline __attribute__((always_inline)) double spin_for(double cpu_seconds)
{
	double start = now_thread_cpu(), now;
	do {
		spin(CHUNK);
		now = now_thread_cpu();
	} while (now - start < cpu_seconds);
	return now - start;
}

__attribute__((noinline)) double hot_seventy(double cpu_seconds)
{
	return spin_for(cpu_seconds);
}

__attribute__((noinline)) double hot_thirty(double cpu_seconds)
{
	return spin_for(cpu_seconds);
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 10.0);
	double end = now_monotonic() + seconds;
	double seventy = 0, thirty = 0;
	unsigned long rng = 88172645463325252UL;

	say_ready();
	while (now_monotonic() < end) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		double round = 0.004 + (double)(rng % 12000) / 1e6;
		seventy += hot_seventy(round * 0.7);
		thirty += hot_thirty(round * 0.3);
	}
	fprintf(stderr, "fp_split: hot_seventy %.3f s, hot_thirty %.3f s, share %.2f%%\n",
		seventy, thirty, 100.0 * seventy / (seventy + thirty));
	return 0;
}
