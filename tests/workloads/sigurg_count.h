/* Counting the SIGURG signals a workload receives: Stoke signals JVMs whose
 * agent waits with SIGURG, and a process that is no such JVM must get none. */
#ifndef STOKE_WORKLOAD_SIGURG_COUNT_H
#define STOKE_WORKLOAD_SIGURG_COUNT_H

#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t sigurg_count;

static void on_sigurg(int signal)
{
	(void)signal;
	sigurg_count++;
}

/* Counts SIGURGs from now on in sigurg_count (SA_RESTART: a counted signal
 * interrupts no system call). Returns 0, or 2 after saying why not. */
static inline int count_sigurg(const char *program)
{
	struct sigaction action;
	memset(&action, 0, sizeof action);
	action.sa_handler = on_sigurg;
	sigemptyset(&action.sa_mask);
	action.sa_flags = SA_RESTART;
	if (sigaction(SIGURG, &action, NULL) != 0) {
		fprintf(stderr, "%s: sigaction: ", program);
		perror(NULL);
		return 2;
	}
	return 0;
}

#endif
