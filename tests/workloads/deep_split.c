/* A deep call chain built without frame pointers, ending in two hot
 * functions at a 70:30 split of CPU time.
 *
 * The test builds it with -O2 -fomit-frame-pointer: no function keeps a
 * frame pointer, so only unwind tables (.eh_frame) can walk its stacks.
 * main() loops until argv[1] seconds have passed, calling
 * level1() -> level2() -> level3(), which spends 70% of each round in
 * hot_seventy() and 30% in hot_thirty(). As in fp_split.c, a round is a
 * pseudo-random 4 to 16 ms of thread CPU time (never in step with a
 * sampling period), and both hot functions call the leaf spin() in short
 * chunks, checking the thread CPU clock between chunks.
 *
 * Every function on the chain is noipa (GCC: not inlined, not cloned into
 * a `.isra`/`.constprop` copy, so each keeps its own name and frame) and
 * does work after its call (no tail call turns its frame into a jump). The
 * levels keep locals of different sizes, so each frame's CFA is at its own
 * offset from the stack pointer. At exit it prints the split it measured on
 * stderr. */
#include "common.h"

static volatile unsigned long sink;
static double seventy_total, thirty_total;

#define CHUNK 50000UL

/* Leaf; the volatile accumulator keeps the loop from being optimized away
 * and puts it on the stack, so spin() has a frame of its own too. */
__attribute__((noipa)) void spin(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + i;
	sink = acc;
}

/* The body of both hot functions, inlined into each (see fp_split.c). */
static inline __attribute__((always_inline)) double spin_for(double cpu_seconds)
{
	double start = now_thread_cpu(), now;
	do {
		spin(CHUNK);
		now = now_thread_cpu();
	} while (now - start < cpu_seconds);
	return now - start;
}

__attribute__((noipa)) double hot_seventy(double cpu_seconds)
{
	return spin_for(cpu_seconds);
}

__attribute__((noipa)) double hot_thirty(double cpu_seconds)
{
	return spin_for(cpu_seconds);
}

/* Calls both hot functions; adding to the totals after each call keeps
 * both calls real calls. */
__attribute__((noipa)) void level3(double round)
{
	seventy_total += hot_seventy(round * 0.7);
	thirty_total += hot_thirty(round * 0.3);
}

/* A few hundred bytes of locals: level2's CFA is far from its RSP. */
__attribute__((noipa)) unsigned long level2(double round)
{
	volatile unsigned char pad[296];
	pad[0] = (unsigned char)sink;
	level3(round);
	pad[sizeof pad - 1] = pad[0];
	return pad[sizeof pad - 1];
}

__attribute__((noipa)) unsigned long level1(double round)
{
	volatile unsigned long pad[5];
	pad[0] = sink;
	unsigned long r = level2(round);
	pad[4] = pad[0] + r;
	return pad[4];
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 10.0);
	double end = now_monotonic() + seconds;
	unsigned long rng = 88172645463325252UL, checksum = 0;

	say_ready();
	while (now_monotonic() < end) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		checksum += level1(0.004 + (double)(rng % 12000) / 1e6);
	}
	fprintf(stderr,
		"deep_split: hot_seventy %.3f s, hot_thirty %.3f s, share %.2f%% (%lu)\n",
		seventy_total, thirty_total,
		100.0 * seventy_total / (seventy_total + thirty_total), checksum & 1);
	return 0;
}
