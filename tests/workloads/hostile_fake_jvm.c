/* A fake JVM, hostile to stoke: it maps a file named libjvm.so (argv[2],
 * any small library copied under that name) and, in mode "flood", creates
 * a memfd named like Stoke's agent's with a header that looks right (the
 * layout of profiler-common/src/jvm.rs, version 8) and state Ready, and
 * says its agent catches SIGTRAP (a lie: it has no handler, and the signal's
 * default action would end it), then
 * for argv[1] seconds keeps its sample ring full of stacks with future,
 * ancient and current timestamps, random thread ids and random method ids,
 * and its event log full of code loads of one method, random bytes and an
 * out-of-bounds commit count. In mode "plain" it only maps libjvm.so.
 *
 * It counts SIGURG and SIGQUIT (SIGQUIT only with argv[3] "plain-quit",
 * where it handles it; otherwise SIGQUIT keeps its default action and
 * would kill it), prints "ready", and at the end "sigurg N sigquit M" and
 * exits 0. An optional argv[4] overrides the layout version it claims (the
 * tests pass stoke's own, whose layout differs from this one only in the
 * header's tail, which stoke does not read from an agent). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "count_signal.h"

#define VERSION 8
#define MAX_FRAMES 256
#define SAMPLE_SLOTS 1024
#define REQUEST_SLOTS 4096
#define EVENTS_SIZE (48u << 20)
/* The Java event ring (allocations, locks): slots of 2216 bytes. */
#define JAVA_EVENT_SLOTS 2048
#define JAVA_EVENT_SLOT_SIZE 2216

struct header {
	uint64_t magic;
	uint32_t version, state;
	uint64_t total_size;
	uint32_t signal, pid;
	uint64_t samples_written, samples_read, samples_dropped;
	uint64_t requests_written, requests_read;
	uint64_t events_committed, events_dropped;
	uint32_t activity, java_events_wanted, java_events_on;
	uint64_t alloc_interval, lock_threshold_ns;
	uint64_t java_events_written, java_events_read, java_events_dropped;
	uint64_t alloc_samples;
	uint64_t trap_cookie;
	uint64_t trap_handler;
};

struct frame {
	int32_t bci, padding;
	uint64_t method_id;
};

struct slot {
	uint64_t sequence;
	uint32_t tid;
	int32_t frame_count;
	uint64_t time_ns, pc;
	uint32_t flags, reserved;
	struct frame frames[MAX_FRAMES];
};

#define SAMPLES_OFFSET 4096
#define REQUESTS_OFFSET (SAMPLES_OFFSET + SAMPLE_SLOTS * sizeof(struct slot))
#define EVENTS_OFFSET (REQUESTS_OFFSET + REQUEST_SLOTS * 8)
#define JAVA_EVENTS_OFFSET (EVENTS_OFFSET + EVENTS_SIZE)
#define TOTAL_SIZE (JAVA_EVENTS_OFFSET + JAVA_EVENT_SLOTS * JAVA_EVENT_SLOT_SIZE)

static volatile sig_atomic_t sigurg_count, sigquit_count;

/* The state of next_random(), the same forgeries on every run. */
static unsigned long rng = 0x9e3779b97f4a7c15;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned char *create_agent_memory(uint32_t version)
{
	int fd = memfd_create("stoke-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, TOTAL_SIZE) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		perror("hostile_fake_jvm: memfd");
		exit(2);
	}
	unsigned char *base = mmap(NULL, TOTAL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		perror("hostile_fake_jvm: mmap");
		exit(2);
	}
	struct header *header = (struct header *)base;
	header->version = version;
	header->total_size = TOTAL_SIZE;
	header->signal = SIGURG;
	header->pid = (uint32_t)getpid();
	header->state = 1; /* Ready */
	/* Any address: this process has no SIGTRAP handler. */
	header->trap_handler = (uint64_t)(uintptr_t)&create_agent_memory;
	memcpy(&header->magic, "STOKEJVM", 8);
	return base;
}

/* Fills a whole lap of the broadcast ring with forged stacks, from where
 * the producers' position is on. */
static void flood_ring(unsigned char *base)
{
	struct header *header = (struct header *)base;
	uint64_t read = __atomic_load_n(&header->samples_written, __ATOMIC_ACQUIRE);
	uint64_t now = now_ns();
	for (uint64_t position = read; position < read + SAMPLE_SLOTS; position++) {
		struct slot *slot =
			(struct slot *)(base + SAMPLES_OFFSET) + position % SAMPLE_SLOTS;
		uint64_t kind = next_random(&rng) % 4;
		slot->tid = kind == 0 ? (uint32_t)getpid() : (uint32_t)next_random(&rng);
		slot->frame_count = MAX_FRAMES;
		/* Far future, ancient, now, or a little ahead. */
		slot->time_ns = kind == 1   ? now + (1ull << 50)
				: kind == 2 ? now - (now > (10ull << 30) ? 10ull << 30 : now)
				: kind == 3 ? now
					    : now + 5000000;
		slot->pc = next_random(&rng);
		slot->flags = (uint32_t)next_random(&rng);
		for (int i = 0; i < MAX_FRAMES; i++) {
			slot->frames[i].bci = (int32_t)next_random(&rng);
			slot->frames[i].method_id = next_random(&rng);
		}
		/* The seqlock's "written" value of the position. */
		__atomic_store_n(&slot->sequence, 2 * position + 2, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&header->samples_written, read + SAMPLE_SLOTS, __ATOMIC_RELEASE);
}

/* The event log: code loads of one method at ever new addresses, then
 * random bytes, and a commit count past the log. */
static void forge_events(unsigned char *base)
{
	struct header *header = (struct header *)base;
	uint64_t *log = (uint64_t *)(base + EVENTS_OFFSET);
	size_t words = EVENTS_SIZE / 8, used = 0;
	for (uint64_t i = 0; used + 4 <= words * 3 / 4; i++) {
		log[used++] = 32 | (2ull << 32); /* length 32, CodeLoad */
		log[used++] = 0x1234;            /* one method id */
		log[used++] = 0x100000 + i * 16; /* start */
		log[used++] = 16;                /* size */
	}
	for (; used < words; used++)
		log[used] = next_random(&rng);
	__atomic_store_n(&header->events_committed, ~0ull, __ATOMIC_RELEASE);
}

int main(int argc, char **argv)
{
	double seconds = run_seconds(argc, argv, 5.0);
	if (argc < 4) {
		fprintf(stderr, "usage: hostile_fake_jvm SECONDS PATH/libjvm.so flood|plain|plain-quit\n");
		return 2;
	}
	int lib = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (lib < 0 || mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, lib, 0) == MAP_FAILED) {
		perror("hostile_fake_jvm: mapping libjvm.so");
		return 2;
	}
	if (count_signal(SIGURG, &sigurg_count, "hostile_fake_jvm") != 0)
		return 2;
	if (strcmp(argv[3], "plain-quit") == 0 &&
	    count_signal(SIGQUIT, &sigquit_count, "hostile_fake_jvm") != 0)
		return 2;
	unsigned char *base = NULL;
	if (strcmp(argv[3], "flood") == 0) {
		base = create_agent_memory(argc > 4 ? (uint32_t)atoi(argv[4]) : VERSION);
		forge_events(base);
	}
	say_ready();
	double end = now_monotonic() + seconds;
	volatile unsigned long sink = 0;
	while (now_monotonic() < end) {
		if (base)
			flood_ring(base);
		/* Some CPU, so that the sampler sees this process. */
		for (unsigned long i = 0; i < 200000; i++)
			sink = sink * 2862933555777941757UL + i;
	}
	printf("sigurg %d sigquit %d\n", (int)sigurg_count, (int)sigquit_count);
	return 0;
}
