/* Page faults at a 70:30 split: each round, fault_seven() touches 7 fresh
 * pages and fault_three() 3, then the 10 pages are given back
 * (MADV_DONTNEED), so that the next round faults on them again. Runs for
 * argv[1] seconds and prints "rounds=N" at the end. */
#include <sys/mman.h>
#include "common.h"

#define PAGE 4096

/* Writes the first byte of each of `pages` pages from `at`: one page fault
 * each. The empty asm after the loop keeps the callers from turning their
 * call into a jump, so that they keep their own frames. */
__attribute__((noinline)) void touch_pages(char *at, int pages)
{
	for (int i = 0; i < pages; i++)
		((volatile char *)at)[i * PAGE] = 1;
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void fault_seven(char *at)
{
	touch_pages(at, 7);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void fault_three(char *at)
{
	touch_pages(at, 3);
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	double end = now_monotonic() + run_seconds(argc, argv, 5.0);
	char *pages = mmap(NULL, 10 * PAGE, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned long rounds = 0;
	if (pages == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	say_ready();
	while (now_monotonic() < end) {
		fault_seven(pages);
		fault_three(pages + 7 * PAGE);
		madvise(pages, 10 * PAGE, MADV_DONTNEED);
		rounds++;
	}
	printf("rounds=%lu\n", rounds);
	return 0;
}
