/* A process that names itself, its thread and its code to break profile
 * formats: its comm is "ev;il\nx", its worker thread's "th;r\nead", and it
 * burns CPU for argv[1] seconds in the nameless function of the library
 * argv[2] (whose file name may hold ';' and a line break) that its
 * spinner() gives, from the thread. */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/prctl.h>

#include "common.h"

static double seconds;
static void (*spin)(unsigned long);

static void *worker(void *unused)
{
	(void)unused;
	prctl(PR_SET_NAME, "th;r\nead");
	call_until(now_monotonic() + seconds, spin, 20000);
	return NULL;
}

int main(int argc, char **argv)
{
	seconds = run_seconds(argc, argv, 3.0);
	void *lib = argc > 2 ? dlopen(argv[2], RTLD_NOW) : NULL;
	void (*(*spinner)(void))(unsigned long) =
		lib ? (void (*(*)(void))(unsigned long))dlsym(lib, "spinner") : NULL;
	spin = spinner ? spinner() : NULL;
	if (!spin) {
		fprintf(stderr, "hostile_names: %s\n", dlerror());
		return 2;
	}
	prctl(PR_SET_NAME, "ev;il\nx");
	pthread_t thread;
	if (pthread_create(&thread, NULL, worker, NULL) != 0)
		return 2;
	say_ready();
	pthread_join(thread, NULL);
	return 0;
}
