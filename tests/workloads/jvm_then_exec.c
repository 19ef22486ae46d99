/* A JVM that becomes another program under the same pid.
 *
 *   jvm_then_exec SECONDS LIBJVM CLASSPATH AFTER_SECONDS
 *
 * creates a JVM in this process (JNI_CreateJavaVM from LIBJVM), runs
 * JavaBusy.main(SECONDS, "after-attach") from CLASSPATH on a thread of its
 * own (it prints "ready", then "attached" once Stoke's agent is in, and
 * returns SECONDS later), then exec's itself as
 *
 *   jvm_then_exec --count AFTER_SECONDS
 *
 * which counts the SIGURG signals it receives while burning CPU in
 * after_exec_burn() for AFTER_SECONDS, then prints "sigurg N". Stoke
 * signals JVMs with SIGURG: a program exec'd over one must get none. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "count_signal.h"
#include "java_host.h"

static volatile sig_atomic_t sigurg_count;

static volatile unsigned long sink;

__attribute__((noinline)) void after_exec_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 2862933555777941757UL + i;
	sink = acc;
}

__attribute__((noinline)) void after_exec_burn(double end)
{
	call_until(end, after_exec_leaf, 20000);
}

static int count_signals(double seconds)
{
	if (count_signal(SIGURG, &sigurg_count, "jvm_then_exec") != 0)
		return 2;
	printf("counting\n");
	fflush(stdout);
	after_exec_burn(now_monotonic() + seconds);
	printf("sigurg %d\n", (int)sigurg_count);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--count") == 0)
		return count_signals(atof(argv[2]));
	if (argc != 5) {
		fprintf(stderr, "usage: jvm_then_exec SECONDS LIBJVM CLASSPATH AFTER_SECONDS\n");
		return 2;
	}
	struct java_run run = { .seconds = argv[1] };
	pthread_t thread;
	if (start_java_busy(argv[2], argv[3], &run, &thread, "jvm_then_exec") != 0)
		return 2;
	if (pthread_join(thread, NULL) != 0 || run.failed) {
		fprintf(stderr, "jvm_then_exec: running JavaBusy failed\n");
		return 2;
	}
	fflush(stdout);
	char *again[] = { argv[0], "--count", argv[4], NULL };
	execv("/proc/self/exe", again);
	perror("jvm_then_exec: execv");
	return 1;
}
