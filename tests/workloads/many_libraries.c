/* Loads argv[3] libraries, DIR/lib0000.so on (argv[2] is DIR), with
 * dlopen, then for argv[1] seconds calls library_hop() of twenty of them,
 * spread over the load order up to the last, each in turn: a process with
 * thousands of executable mappings whose hot code is in libraries loaded
 * early and late. With argv[4], it also maps the first library that many
 * times more, executable, for more mappings than the unwinder holds. */
#include <dlfcn.h>
#include <sys/mman.h>
#include <fcntl.h>
#include "common.h"

#define HOPS 20

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 1.0);
	if (argc < 4) {
		fprintf(stderr, "usage: many_libraries SECONDS DIR COUNT [EXTRA_MAPPINGS]\n");
		return 2;
	}
	int count = (int)arg_number(argc, argv, 3, 1);
	int extra = argc > 4 ? (int)arg_number(argc, argv, 4, 1) : 0;
	void **libraries = calloc(count, sizeof(*libraries));
	void (*hops[HOPS])(unsigned long);
	char path[4096];
	if (!libraries || count < HOPS) {
		fprintf(stderr, "many_libraries: at least %d libraries\n", HOPS);
		return 2;
	}
	for (int i = 0; i < count; i++) {
		snprintf(path, sizeof(path), "%s/lib%04d.so", argv[2], i);
		libraries[i] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!libraries[i]) {
			fprintf(stderr, "many_libraries: %s\n", dlerror());
			return 1;
		}
	}
	/* Libraries count/20 - 1, 2 * count/20 - 1, ..., count - 1. */
	for (int i = 0; i < HOPS; i++) {
		hops[i] = (void (*)(unsigned long))dlsym(libraries[(i + 1) * count / HOPS - 1],
							 "library_hop");
		if (!hops[i]) {
			fprintf(stderr, "many_libraries: %s\n", dlerror());
			return 1;
		}
	}
	snprintf(path, sizeof(path), "%s/lib0000.so", argv[2]);
	int fd = open(path, O_RDONLY);
	for (int i = 0; i < extra; i++) {
		if (fd < 0 || mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
			perror("many_libraries: mapping the first library");
			return 1;
		}
	}
	say_ready();
	double end = now_monotonic() + seconds;
	/* The call returns here: main() is the caller of every hot frame. */
	while (now_monotonic() < end)
		for (int i = 0; i < HOPS; i++)
			hops[i](20000);
	return 0;
}
