/* A read()-heavy workload: writes a 64 MiB file (argv[2]) once, so it sits in
 * the page cache, then main() -> read_chunks() -> do_pread() reads it again
 * and again in 64 KiB chunks for argv[1] seconds. do_pread() issues the
 * pread64 system call itself (on x86_64), so the user stack under the kernel
 * frames is this program's own, frame-pointer-unwindable code rather than a
 * libc wrapper built without frame pointers. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "common.h"

#define FILE_SIZE (64L << 20)
#define CHUNK (64L << 10)

static char buffer[CHUNK];

/* The volatile local gives do_pread() a stack frame, and so a frame pointer:
 * GCC 12 sets up none in a leaf function that uses no stack. */
__attribute__((noinline)) long do_pread(int fd, void *buf, size_t len, off_t off)
{
	volatile long frame = 0;
	(void)frame;
#if defined(__x86_64__)
	long ret;
	register long r10 __asm__("r10") = off;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"((long)SYS_pread64), "D"((long)fd), "S"(buf), "d"(len), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
#else
	return pread(fd, buf, len, off);
#endif
}

__attribute__((noinline)) unsigned long read_chunks(int fd, double end)
{
	unsigned long total = 0;
	while (now_monotonic() < end) {
		for (off_t off = 0; off < FILE_SIZE; off += CHUNK) {
			long n = do_pread(fd, buffer, CHUNK, off);
			if (n <= 0) {
				fprintf(stderr, "read_loop: pread failed: %ld\n", n);
				exit(1);
			}
			total += (unsigned long)n;
		}
	}
	return total;
}

static void write_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(path);
		exit(1);
	}
	memset(buffer, 'x', sizeof(buffer));
	for (long off = 0; off < FILE_SIZE; off += CHUNK) {
		if (write(fd, buffer, CHUNK) != CHUNK) {
			perror("write");
			exit(1);
		}
	}
	close(fd);
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 10.0);
	const char *path = argc > 2 ? argv[2] : "read_loop.data";
	write_file(path);
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	/* Warm the page cache before announcing readiness. */
	read_chunks(fd, now_monotonic() + 0.05);
	say_ready();
	unsigned long total = read_chunks(fd, now_monotonic() + seconds);
	fprintf(stderr, "read_loop: read %lu MiB\n", total >> 20);
	close(fd);
	return 0;
}
