/* A JVMTI agent reduced to its entry point, for java_attach.rs: loaded
 * with the options "mark=PATH" it writes "loaded" into PATH from inside the
 * JVM (as the JVM's user, in the JVM's filesystem); any other options make
 * Agent_OnAttach fail with 42. Built as a shared library. */
#include <stdio.h>
#include <string.h>

int Agent_OnAttach(void *vm, char *options, void *reserved)
{
	(void)vm;
	(void)reserved;
	if (options == NULL || strncmp(options, "mark=", 5) != 0)
		return 42;
	FILE *file = fopen(options + 5, "w");
	if (file == NULL)
		return 43;
	fputs("loaded\n", file);
	return fclose(file) == 0 ? 0 : 44;
}
