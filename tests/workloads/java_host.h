/* A JVM created in a C program (JNI_CreateJavaVM from a libjvm.so), for
 * workloads that must act on the process around it: JavaBusy's main runs
 * on a thread of its own, which prints "ready", then "attached" once
 * Stoke's agent is in, and returns SECONDS later. */
#ifndef STOKE_WORKLOAD_JAVA_HOST_H
#define STOKE_WORKLOAD_JAVA_HOST_H

#include <dlfcn.h>
#include <jni.h>
#include <pthread.h>
#include <stdio.h>

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

/* Creates a JVM from `libjvm` with `classpath` and runs JavaBusy.main(
 * seconds, "after-attach") in it on a new thread, into *thread. Returns 0,
 * or 2 after saying why not, with `program` as the message's first word. */
static inline int start_java_busy(const char *libjvm_path, const char *classpath,
				  struct java_run *run, pthread_t *thread, const char *program)
{
	void *libjvm = dlopen(libjvm_path, RTLD_NOW | RTLD_GLOBAL);
	jint (*create)(JavaVM **, void **, void *) =
		libjvm ? (jint(*)(JavaVM **, void **, void *))dlsym(libjvm, "JNI_CreateJavaVM") : NULL;
	if (!create) {
		fprintf(stderr, "%s: %s\n", program, dlerror());
		return 2;
	}
	char option[4096];
	snprintf(option, sizeof option, "-Djava.class.path=%s", classpath);
	JavaVMOption options[] = { { .optionString = option } };
	JavaVMInitArgs init = {
		.version = JNI_VERSION_1_8,
		.nOptions = 1,
		.options = options,
		.ignoreUnrecognized = JNI_FALSE,
	};
	JNIEnv *env;
	if (create(&run->vm, (void **)&env, &init) != JNI_OK) {
		fprintf(stderr, "%s: JNI_CreateJavaVM failed\n", program);
		return 2;
	}
	if (pthread_create(thread, NULL, run_java, run) != 0) {
		fprintf(stderr, "%s: pthread_create failed\n", program);
		return 2;
	}
	return 0;
}

#endif
