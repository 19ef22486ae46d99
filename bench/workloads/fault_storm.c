/* A page-fault storm of fixed size, timed by itself: the workload of the
 * perf-counter row of the events part of `cargo xtask bench`.
 *
 *   fault_storm ROUNDS
 *
 * Each round writes one byte to each of 16 pages, then gives them back
 * (MADV_DONTNEED): 16 page faults a round. At the end it prints
 * "elapsed_s=S faults=N": its elapsed time and its minor faults
 * (getrusage), so that a profiler's cost per fault shows as a longer
 * elapsed time. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "common.h"

#define PAGES 16
#define PAGE 4096

int main(int argc, char **argv)
{
	unsigned long rounds = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
	char *pages = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct rusage before, after;
	if (pages == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	getrusage(RUSAGE_SELF, &before);
	double start = now_monotonic();
	for (unsigned long round = 0; round < rounds; round++) {
		for (int page = 0; page < PAGES; page++)
			((volatile char *)pages)[page * PAGE] = 1;
		madvise(pages, PAGES * PAGE, MADV_DONTNEED);
	}
	double elapsed = now_monotonic() - start;
	getrusage(RUSAGE_SELF, &after);
	printf("elapsed_s=%.6f faults=%ld\n", elapsed, after.ru_minflt - before.ru_minflt);
	return 0;
}
