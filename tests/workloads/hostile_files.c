/* Maps a hostile file executable, then burns CPU in its own code for
 * argv[1] seconds, printing "tick N" every 100 ms: a process stoke must
 * neither harm nor stall, whose progress the test watches.
 *
 *   hostile_files SECONDS none           nothing mapped (its own binary
 *                                        is the hostile file)
 *   hostile_files SECONDS zero           /dev/zero, readable and executable
 *   hostile_files SECONDS truncate FILE  FILE, whole, readable and
 *                                        executable (never touched), then
 *                                        shrunk to 4 KB and grown back at
 *                                        once (sparse: its bytes past 4 KB
 *                                        are gone) every second */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

static volatile unsigned long sink;

__attribute__((noinline)) void hostile_leaf(unsigned long iterations)
{
	volatile unsigned long acc = sink; /* volatile: see fp_split.c's spin() */
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 3202034522624059733UL + 1;
	sink = acc;
}

static int map_file(const char *path, off_t *size)
{
	int fd = open(path, O_RDWR);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		perror(path);
		exit(1);
	}
	if (mmap(NULL, st.st_size, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0) == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	*size = st.st_size;
	return fd;
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 10.0);
	const char *mode = argc > 2 ? argv[2] : "none";
	int truncating = strcmp(mode, "truncate") == 0;
	int fd = -1;
	off_t size = 0;

	if (strcmp(mode, "zero") == 0) {
		int zero = open("/dev/zero", O_RDONLY);
		if (zero < 0 || mmap(NULL, 1 << 20, PROT_READ | PROT_EXEC, MAP_PRIVATE, zero, 0) == MAP_FAILED) {
			perror("/dev/zero");
			return 1;
		}
	} else if (truncating && argc > 3) {
		fd = map_file(argv[3], &size);
	} else if (strcmp(mode, "none") != 0) {
		fprintf(stderr, "usage: %s SECONDS none|zero|truncate FILE\n", argv[0]);
		return 2;
	}
	say_ready();
	double end = now_monotonic() + seconds;
	unsigned long tick = 0;
	while (now_monotonic() < end) {
		double next = now_monotonic() + 0.1;
		call_until(next, hostile_leaf, 20000);
		if (truncating && tick % 10 == 0 && (ftruncate(fd, 4096) != 0 || ftruncate(fd, size) != 0)) {
			perror("ftruncate");
			return 1;
		}
		printf("tick %lu\n", ++tick);
		fflush(stdout);
	}
	return 0;
}
