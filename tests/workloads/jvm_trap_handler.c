/* A JVM whose SIGTRAP handler the program replaces while Stoke samples it.
 *
 *   jvm_trap_handler SECONDS LIBJVM CLASSPATH
 *
 * creates a JVM in this process and runs JavaBusy.main(SECONDS,
 * "after-attach") from CLASSPATH on a thread of its own (it prints "ready",
 * then "attached" once Stoke's agent is in, and returns SECONDS later).
 * One second after Stoke's agent memory shows in /proc/self/maps, it
 * installs a SIGTRAP handler of its own, which counts the signals, and
 * prints "replaced"; at the end, "sigtrap N". Stoke's agent takes the
 * SIGTRAP of Stoke's per-thread perf events only while its handler is the
 * process's: the program's own handler must get none of them. */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "count_signal.h"
#include "java_host.h"

static volatile sig_atomic_t sigtrap_count;

/* Whether Stoke's agent memory is mapped in this process. */
static int agent_mapped(void)
{
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[4096];
	int found = 0;
	while (maps && !found && fgets(line, sizeof line, maps))
		found = strstr(line, "memfd:stoke-agent") != NULL;
	if (maps)
		fclose(maps);
	return found;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: jvm_trap_handler SECONDS LIBJVM CLASSPATH\n");
		return 2;
	}
	struct java_run run = { .seconds = argv[1] };
	pthread_t thread;
	if (start_java_busy(argv[2], argv[3], &run, &thread, "jvm_trap_handler") != 0)
		return 2;
	double give_up = now_monotonic() + 60;
	while (!agent_mapped() && now_monotonic() < give_up)
		usleep(20000);
	usleep(1000000);
	if (count_signal(SIGTRAP, &sigtrap_count, "jvm_trap_handler") != 0)
		return 2;
	printf("replaced\n");
	fflush(stdout);
	if (pthread_join(thread, NULL) != 0 || run.failed) {
		fprintf(stderr, "jvm_trap_handler: running JavaBusy failed\n");
		return 2;
	}
	printf("sigtrap %d\n", (int)sigtrap_count);
	return 0;
}
