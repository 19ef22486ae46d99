/* A process that maps HotSpot's libjvm.so but runs no JVM: it dlopen()s
 * argv[2] (no JNI_CreateJavaVM, so no agent can ever load), counts the
 * SIGURG signals it receives, burns CPU in host_burn() for argv[1] seconds,
 * then prints "sigurg N" on stdout and exits 0.
 *
 * SIGQUIT is deliberately left at its default action: had stoke sent it
 * (the first step of HotSpot's attach protocol), the process would die, and
 * the test would see that. */
#include <dlfcn.h>
#include <signal.h>
#include <string.h>

#include "common.h"
#include "count_signal.h"

static volatile sig_atomic_t sigurg_count;

static volatile unsigned long sink;

__attribute__((noinline)) void host_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 2862933555777941757UL + i;
	sink = acc;
}

__attribute__((noinline)) void host_burn(double end)
{
	call_until(end, host_leaf, 20000);
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 5.0);
	if (argc < 3) {
		fprintf(stderr, "usage: libjvm_host SECONDS PATH/libjvm.so\n");
		return 2;
	}
	if (!dlopen(argv[2], RTLD_LAZY | RTLD_LOCAL)) {
		fprintf(stderr, "libjvm_host: dlopen: %s\n", dlerror());
		return 2;
	}
	if (count_signal(SIGURG, &sigurg_count, "libjvm_host") != 0)
		return 2;
	say_ready();
	host_burn(now_monotonic() + seconds);
	printf("sigurg %d\n", (int)sigurg_count);
	return 0;
}
