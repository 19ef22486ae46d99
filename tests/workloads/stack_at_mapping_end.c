/* A thread whose stack ends where its mapping ends, with nothing mapped
 * above it, burning CPU for argv[1] seconds, for a build without frame
 * pointers.
 *
 * Threads made by pthreads keep their thread block at the top of their
 * stack, and the main thread has its arguments and environment there: a
 * read running past the outermost frame finds memory. This thread is
 * started with clone() on a stack of its own whose top is the end of its
 * mapping (the page above is unmapped), so its outermost frames lie in the
 * last bytes before a hole, as they may in runtimes that make their own
 * stacks. Its chain: clone's child -> stack_top_entry() -> climb() x4 ->
 * spin(); the functions are noipa and work after their calls (no tail
 * call drops a frame). The child calls nothing in libc (it shares the
 * parent's thread pointer): the main thread tells it when to stop. Prints
 * "tid TID", then "ready", once the child runs. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#include "common.h"

#define STACK_BYTES (64 << 10)
#define CLIMBS 4

static volatile unsigned long sink;
static atomic_int stop;
static atomic_int child_tid;

__attribute__((noipa)) void spin(void)
{
	volatile unsigned long acc = sink;
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		for (int i = 0; i < 100000; i++)
			acc = acc * 6364136223846793005UL + 1442695040888963407UL;
	sink = acc;
}

__attribute__((noipa)) unsigned long climb(int depth)
{
	volatile unsigned long here = depth;
	if (depth == 0)
		spin();
	else
		here += climb(depth - 1);
	return here + 1;
}

__attribute__((noipa)) int stack_top_entry(void *unused)
{
	(void)unused;
	/* gettid without libc: raw syscall instructions are not calls. */
	long tid;
	__asm__ volatile("syscall" : "=a"(tid) : "a"(186L) : "rcx", "r11", "memory");
	atomic_store(&child_tid, (int)tid);
	return (int)climb(CLIMBS);
}

int main(int argc, char **argv)
{
	double end = now_monotonic() + run_seconds(argc, argv, 10);
	long page = sysconf(_SC_PAGESIZE);
	char *region = mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);

	if (region == MAP_FAILED || munmap(region + STACK_BYTES, page) != 0) {
		perror("stack mapping");
		return 1;
	}
	if (clone(stack_top_entry, region + STACK_BYTES,
		  CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
			  CLONE_SYSVSEM,
		  NULL) < 0) {
		perror("clone");
		return 1;
	}
	while (!atomic_load(&child_tid))
		usleep(1000);
	printf("tid %d\nready\n", atomic_load(&child_tid));
	fflush(stdout);
	while (now_monotonic() < end)
		usleep(10000);
	atomic_store(&stop, 1);
	usleep(100000);
	return 0;
}
