/* Two threads blocked when an off-CPU recording ends: stuck_from_start()
 * reads a pipe from the start (before any recording begins), and
 * blocked_later() reads another once it has spun on the CPU for argv[2]
 * seconds. Each read is a syscall made in the function itself (inline
 * `syscall`), so that the one user address a profiler can give a thread
 * it sees only asleep, where it entered the kernel, names the function.
 *
 * Prints "ready" once the first thread waits; after argv[1] seconds, the
 * main thread writes a byte to each pipe and prints "woke stuck=R late=R":
 * what each read returned, 1 unless a profiler interrupted it (-4, EINTR). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "common.h"

static int stuck_pipe[2], late_pipe[2];
static double spin_seconds;
static long stuck_result, late_result;

static inline long read_byte(int fd)
{
	char byte;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"((long)SYS_read), "D"((long)fd), "S"(&byte), "d"(1L)
			 : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) static void stuck_from_start(void)
{
	stuck_result = read_byte(stuck_pipe[0]);
}

__attribute__((noinline)) static void blocked_later(void)
{
	double end = now_monotonic() + spin_seconds;

	while (now_monotonic() < end)
		;
	late_result = read_byte(late_pipe[0]);
}

static void *stuck_thread(void *arg)
{
	(void)arg;
	stuck_from_start();
	return NULL;
}

static void *late_thread(void *arg)
{
	(void)arg;
	blocked_later();
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 10);
	pthread_t stuck, late;

	spin_seconds = arg_number(argc, argv, 2, 1);
	if (pipe(stuck_pipe) || pipe(late_pipe) || pthread_create(&stuck, NULL, stuck_thread, NULL)) {
		perror("blocked_threads");
		return 1;
	}
	sleep_seconds(0.1);
	say_ready();
	if (pthread_create(&late, NULL, late_thread, NULL)) {
		perror("blocked_threads");
		return 1;
	}
	sleep_seconds(seconds);
	if (write(stuck_pipe[1], "x", 1) != 1 || write(late_pipe[1], "x", 1) != 1) {
		perror("blocked_threads: write");
		return 1;
	}
	pthread_join(stuck, NULL);
	pthread_join(late, NULL);
	printf("woke stuck=%ld late=%ld\n", stuck_result, late_result);
	fflush(stdout);
	return 0;
}
