/* A process that starts while stoke records, built without frame
 * pointers: the test measures how soon its unwind tables are in.
 *
 * For its first second it burns CPU in main() -> early() -> early_leaf(),
 * then for argv[1] more seconds in main() -> late() -> late_leaf(). The
 * leaf function tells the phase of a sample even when its stack was cut
 * at the leaf (as happens before the tables are loaded): every sample
 * with late_leaf() innermost was taken after the first second, and must
 * reach main(). Built with -O2 -fomit-frame-pointer by the test; every
 * function is noipa and works after its call, so each keeps its frame. */
#include "common.h"

static volatile unsigned long sink;

#define CHUNK 20000UL

__attribute__((noipa)) void early_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + i;
	sink = acc;
}

__attribute__((noipa)) void late_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 2862933555777941757UL + i;
	sink = acc;
}

/* Locals of different sizes: each frame's CFA at its own offset. */
__attribute__((noipa)) unsigned long early(double end)
{
	volatile unsigned long pad[7];
	pad[0] = sink;
	call_until(end, early_leaf, CHUNK);
	pad[6] = pad[0] + 1;
	return pad[6];
}

__attribute__((noipa)) unsigned long late(double end)
{
	volatile unsigned char pad[200];
	pad[0] = (unsigned char)sink;
	call_until(end, late_leaf, CHUNK);
	pad[sizeof pad - 1] = pad[0];
	return pad[sizeof pad - 1];
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 3.0);
	double start = now_monotonic();
	unsigned long checksum = early(start + 1.0);
	say_ready();
	checksum += late(start + 1.0 + seconds);
	return (int)(checksum & 0);
}
