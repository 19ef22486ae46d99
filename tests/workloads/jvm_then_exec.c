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
#include <dlfcn.h>
#include <jni.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "count_signal.h"

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

struct java_run {
	JavaVM *vm;
	const char *seconds;
	int failed;
};

static void *run_java(void *argument)
{
	struct java_run *run = argument;
	JNIEnv *env;

	if ((*run->vm)->AttachCurrentThread(run->vm, (void **)&env, NULL) != JNI_OK) {
		run->failed = 1;
		return NULL;
	}
	jclass busy = (*env)->FindClass(env, "JavaBusy");
	jclass string = (*env)->FindClass(env, "java/lang/String");
	jmethodID main_method =
		busy ? (*env)->GetStaticMethodID(env, busy, "main", "([Ljava/lang/String;)V") : NULL;
	if (!main_method || !string) {
		run->failed = 1;
		return NULL;
	}
	jobjectArray args = (*env)->NewObjectArray(env, 2, string, NULL);
	(*env)->SetObjectArrayElement(env, args, 0, (*env)->NewStringUTF(env, run->seconds));
	(*env)->SetObjectArrayElement(env, args, 1, (*env)->NewStringUTF(env, "after-attach"));
	(*env)->CallStaticVoidMethod(env, busy, main_method, args);
	run->failed = (*env)->ExceptionCheck(env);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--count") == 0)
		return count_signals(atof(argv[2]));
	if (argc != 5) {
		fprintf(stderr, "usage: jvm_then_exec SECONDS LIBJVM CLASSPATH AFTER_SECONDS\n");
		return 2;
	}
	void *libjvm = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
	jint (*create)(JavaVM **, void **, void *) =
		libjvm ? (jint(*)(JavaVM **, void **, void *))dlsym(libjvm, "JNI_CreateJavaVM") : NULL;
	if (!create) {
		fprintf(stderr, "jvm_then_exec: %s\n", dlerror());
		return 2;
	}
	char classpath[4096];
	snprintf(classpath, sizeof classpath, "-Djava.class.path=%s", argv[3]);
	JavaVMOption options[] = { { .optionString = classpath } };
	JavaVMInitArgs init = {
		.version = JNI_VERSION_1_8,
		.nOptions = 1,
		.options = options,
		.ignoreUnrecognized = JNI_FALSE,
	};
	JavaVM *vm;
	JNIEnv *env;
	if (create(&vm, (void **)&env, &init) != JNI_OK) {
		fprintf(stderr, "jvm_then_exec: JNI_CreateJavaVM failed\n");
		return 2;
	}
	struct java_run run = { .vm = vm, .seconds = argv[1] };
	pthread_t thread;
	if (pthread_create(&thread, NULL, run_java, &run) != 0 || pthread_join(thread, NULL) != 0 ||
	    run.failed) {
		fprintf(stderr, "jvm_then_exec: running JavaBusy failed\n");
		return 2;
	}
	fflush(stdout);
	char *again[] = { argv[0], "--count", argv[4], NULL };
	execv("/proc/self/exe", again);
	perror("jvm_then_exec: execv");
	return 1;
}
