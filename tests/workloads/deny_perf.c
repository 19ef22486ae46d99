/* deny_perf PROGRAM [ARGS...]: runs PROGRAM with a seccomp filter that makes
 * perf_event_open(2) fail with EPERM, as a locked-down container would.
 *
 * Before exec'ing it checks that the filter works: perf_event_open with a
 * NULL attr must fail with EPERM (without the filter the kernel would say
 * EFAULT). Exits 97 if the filter cannot be installed or does not work. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "unsupported architecture"
#endif

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: deny_perf PROGRAM [ARGS...]\n");
		return 97;
	}
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {
		.len = sizeof(filter) / sizeof(filter[0]),
		.filter = filter,
	};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		perror("deny_perf: prctl(PR_SET_NO_NEW_PRIVS)");
		return 97;
	}
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
		perror("deny_perf: seccomp");
		return 97;
	}
	errno = 0;
	long r = syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0);
	if (r != -1 || errno != EPERM) {
		fprintf(stderr, "deny_perf: filter not effective (ret %ld, %s)\n", r, strerror(errno));
		return 97;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "deny_perf: exec %s: %s\n", argv[1], strerror(errno));
	return 97;
}
