/* Counting the signals a workload receives: Stoke signals JVMs whose agent
 * waits with SIGURG, and a process that is no such JVM must get none (nor
 * any SIGQUIT, which would make a real JVM dump its threads). */
#ifndef STOKE_WORKLOAD_COUNT_SIGNAL_H
#define STOKE_WORKLOAD_COUNT_SIGNAL_H

#include <signal.h>
#include <stdio.h>
#include <string.h>

/* The counter of each signal being counted, NULL for the others. */
static volatile sig_atomic_t *signal_counters[NSIG];

static void on_counted_signal(int signal)
{
	if (signal > 0 && signal < NSIG && signal_counters[signal])
		(*signal_counters[signal])++;
}

/* Counts `signal` from now on in *counter (SA_RESTART: a counted signal
 * interrupts no system call). Returns 0, or 2 after saying why not, with
 * `program` as the message's first word. */
static inline int count_signal(int signal, volatile sig_atomic_t *counter, const char *program)
{
	struct sigaction action;
	memset(&action, 0, sizeof action);
	action.sa_handler = on_counted_signal;
	sigemptyset(&action.sa_mask);
	action.sa_flags = SA_RESTART;
	signal_counters[signal] = counter;
	if (sigaction(signal, &action, NULL) != 0) {
		fprintf(stderr, "%s: sigaction: ", program);
		perror(NULL);
		return 2;
	}
	return 0;
}

#endif
