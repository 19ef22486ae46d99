/* Burns CPU in early() for argv[1] seconds, then loads the library argv[2]
 * with dlopen and burns argv[3] seconds in its late_work(), called from
 * late(): code a process maps after a profiler first sampled it. */
#include <dlfcn.h>
#include "common.h"

static volatile unsigned long sink;

__attribute__((noinline)) void early_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 3202034522624059733UL + 1;
	sink = acc;
}

__attribute__((noinline)) void early(double end)
{
	call_until(end, early_leaf, 20000);
}

__attribute__((noinline)) void late(void (*work)(double), double end)
{
	work(end);
	sink++; /* not a tail call: late() stays on the stack */
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 1.0);
	if (argc < 4) {
		fprintf(stderr, "usage: dlopen_late SECONDS LIBRARY SECONDS\n");
		return 2;
	}
	say_ready();
	early(now_monotonic() + seconds);
	void *library = dlopen(argv[2], RTLD_NOW);
	void (*work)(double) = library ? (void (*)(double))dlsym(library, "late_work") : NULL;
	if (!work) {
		fprintf(stderr, "dlopen_late: %s\n", dlerror());
		return 1;
	}
	late(work, now_monotonic() + arg_number(argc, argv, 3, 1.0));
	return 0;
}
